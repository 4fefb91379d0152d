//! TODO(skeleton): fsutil
