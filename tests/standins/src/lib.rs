pub fn placeholder() {}

pub mod cri_server;
