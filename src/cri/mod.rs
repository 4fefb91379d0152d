//! CRI v1 client for CRI-O's socket.

/// Generated from `proto/cri-subset.proto` (client and server).
#[allow(clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("runtime.v1");
}
