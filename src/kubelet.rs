//! TODO(skeleton): kubelet
