//! TODO(skeleton): rpm_ostree
