pub fn placeholder() {}

pub mod crio_config;
pub mod crio_daemon;
pub mod crio_server;
pub mod crio_state;
pub mod kubelet_standin;
pub mod mini_http;
