//! Generates the stand-ins' CRI code from the UPSTREAM definition (k8s.io/cri-api's
//! `runtime/v1/api.proto`, Debian package golang-github-kubernetes-cri-api-dev), never from
//! the product's `proto/cri-subset.proto`: a field-number or type slip in the subset then
//! shows up as a decoding failure between kata-live and the stand-ins instead of hiding on
//! both sides. `tests/cri-real/setup.sh` extracts the package; nothing is copied into the tree.
//!
//! Also writes both descriptor sets (upstream and subset) to OUT_DIR, for the test that
//! compares the subset with upstream field by field.

use std::path::PathBuf;

const API_PROTO: &str = "k8s.io/cri-api/pkg/apis/runtime/v1/api.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=KATA_LIVE_CRI_API_DIR");
    println!("cargo:rerun-if-env-changed=KATA_LIVE_CRI_REAL_CACHE");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    // The Go source tree of the extracted packages: <dir>/k8s.io/cri-api/..., <dir>/github.com/gogo/...
    let src = match std::env::var_os("KATA_LIVE_CRI_API_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::var_os("KATA_LIVE_CRI_REAL_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/cache/kata-live/cri-real"))
            .join("cri-api/usr/share/gocode/src"),
    };
    let api = src.join(API_PROTO);
    if !api.is_file() {
        // Plain words on stderr (cargo shows it), not the Debug form of an error.
        eprintln!(
            "\nkata-live-standins: the upstream CRI definition {} is missing.\n\
             Run tests/cri-real/setup.sh (as root; it downloads Debian sid's \
             golang-github-kubernetes-cri-api-dev into /var/cache/kata-live/cri-real/cri-api), \
             or set KATA_LIVE_CRI_API_DIR to a directory holding {API_PROTO} and \
             github.com/gogo/protobuf/gogoproto/gogo.proto.\n",
            api.display()
        );
        std::process::exit(1);
    }
    println!("cargo:rerun-if-changed={}", api.display());
    let out = PathBuf::from(std::env::var("OUT_DIR")?);

    // api.proto imports gogo.proto (Go code-generation options only): it is resolved from the
    // extracted golang-github-gogo-protobuf-dev; the options have no effect on the wire.
    let upstream = protox::compile([API_PROTO], [&src])?;
    std::fs::write(
        out.join("upstream-cri.fds"),
        prost::Message::encode_to_vec(&upstream),
    )?;

    let subset_dir = manifest.join("../../proto");
    let subset = subset_dir.join("cri-subset.proto");
    println!("cargo:rerun-if-changed={}", subset.display());
    let subset = protox::compile(["cri-subset.proto"], [&subset_dir])?;
    std::fs::write(
        out.join("subset-cri.fds"),
        prost::Message::encode_to_vec(&subset),
    )?;

    // Default stubs: RPCs a stand-in does not implement answer Unimplemented.
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .generate_default_stubs(true)
        .compile_fds(upstream)?;
    Ok(())
}
