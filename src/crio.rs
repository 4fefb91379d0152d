//! TODO(skeleton): crio
