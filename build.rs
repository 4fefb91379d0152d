//! Generates the CRI v1 client (kata-live serves no CRI: the stand-ins have their own) from `proto/cri-subset.proto`.
//! protox parses the file in-process, so a build needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/cri-subset.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
