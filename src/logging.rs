//! TODO(skeleton): logging
