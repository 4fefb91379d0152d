//! TODO(skeleton): cli
