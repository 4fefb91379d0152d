//! kata-live's parsers of outside input, pure: text and bytes in, values or refusals in the
//! operator's words out. kata-live reads the files, runs the tools and asks the sockets
//! (its modules of the same names re-export these); the fuzz targets (fuzz/) build this
//! crate alone, without the Kubernetes, gRPC, D-Bus and async stacks kata-live links.

pub mod config;
pub mod cri;
pub mod kubelet;
pub mod mark;
pub mod pathglob;
pub mod rpm_ostree;
pub mod runtime;
pub mod scriptlets;
pub mod words;

#[cfg(test)]
mod tests {
    /// The fuzz targets' lock (kept current by .ci/locks) names none of kata-live's I/O
    /// stacks: the sanitizer build compiles the parsers, not them.
    #[test]
    fn the_fuzz_build_holds_no_io_stack() {
        let lock = include_str!("../../../fuzz/Cargo.lock");
        let names: Vec<&str> = lock
            .lines()
            .filter_map(|l| l.strip_prefix("name = \"")?.strip_suffix('"'))
            .collect();
        assert!(names.contains(&"kata-live-parse"), "{names:?}");
        for stack in [
            "kata-live",
            "kube",
            "kube-runtime",
            "k8s-openapi",
            "tonic",
            "prost",
            "tokio",
            "hyper",
            "zbus",
            "rustls",
        ] {
            assert!(!names.contains(&stack), "fuzz/Cargo.lock holds {stack}");
        }
    }
}
