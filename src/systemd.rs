//! TODO(skeleton): systemd
