pub mod containerd;
pub mod crio_real;
pub mod hold;
pub mod image;
pub mod kata;
pub mod kubelet_node;
pub mod node;
pub mod referee;
