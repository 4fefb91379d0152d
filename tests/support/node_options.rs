//! What a test node boots with: its runtime, files placed before boot, and the harness's
//! locations.

use super::*;

/// A file placed into the node before it boots (so units see it at their first start).
#[derive(Debug, Clone)]
pub struct NodeFile {
    /// Absolute path inside the node. Paths under /run and /tmp are hidden by the tmpfs the
    /// node mounts at boot: write those with [`Node::write_file`] after boot instead.
    pub path: PathBuf,
    pub contents: Vec<u8>,
    pub mode: u32,
}

/// The node's container runtime (`node.sh boot --runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Runtime {
    /// The bookworm node: fake-crio as `crio.service`, fake-kubelet with `Requires=crio.service`.
    #[default]
    Crio,
    /// The sid node of `tests/node/rootfs-sid.sh containerd`: Debian's REAL containerd 2.x
    /// (`containerd.service`) with runc behind the test-only wrapper, fake-kubelet on
    /// containerd's socket (a kubeadm-style unit, no `Requires=`). See tests/node/README.md.
    Containerd,
    /// The sid node of `tests/node/rootfs-sid.sh crio-real`: REAL upstream CRI-O (upstream's
    /// `crio.service`) and a REAL standalone kubelet (`Requires=crio.service`), both built from
    /// the Go module proxy, with Debian's conmon and crun. See tests/node/README.md.
    CrioReal,
}

impl Runtime {
    pub(super) fn arg(self) -> &'static str {
        match self {
            Runtime::Crio => "crio",
            Runtime::Containerd => "containerd",
            Runtime::CrioReal => "crio-real",
        }
    }

    /// The rootfs build: the script and its arguments.
    pub(super) fn rootfs_script(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Runtime::Crio => ("tests/node/rootfs.sh", &[]),
            Runtime::Containerd => ("tests/node/rootfs-sid.sh", &["containerd"]),
            Runtime::CrioReal => ("tests/node/rootfs-sid.sh", &["crio-real"]),
        }
    }
}

#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// Readable part of the node's name; a unique suffix is always added. Default: the test's
    /// name (its thread name).
    pub label: Option<String>,
    /// Units started once the node runs. `None`: crio.service and kubelet.service when
    /// tests/node/units/ has them (containerd node: containerd.service and kubelet.service).
    /// `Some(vec![])`: none.
    pub start_units: Option<Vec<String>>,
    /// Files placed before boot, after the base trees.
    pub files: Vec<NodeFile>,
    /// Copy the base trees `tests/*/node-root/` (e.g. CRI-O's 00-default for fake-crio).
    pub base_trees: bool,
    /// Deadline for booting and for starting `start_units`, each.
    pub boot_timeout: Duration,
    /// The container runtime of the node (default: the CRI-O stand-in).
    pub runtime: Runtime,
    /// Where the node's binaries come from (default: the test binary's own profile dir).
    /// The size bench points it at a directory holding the shipped release kata-live.
    pub bin_dir: Option<PathBuf>,
    /// Plain (the rootfs is the node's /) or booted from an ostree deployment. `None`: the
    /// runtime's default ([`Flavour::of_runtime`]).
    pub flavour: Option<Flavour>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            label: None,
            start_units: None,
            files: Vec::new(),
            base_trees: true,
            boot_timeout: Duration::from_secs(60),
            runtime: Runtime::Crio,
            bin_dir: None,
            flavour: None,
        }
    }
}

impl NodeOptions {
    /// A node that starts no unit of its own (the stand-ins stay stopped).
    pub fn bare() -> Self {
        NodeOptions {
            start_units: Some(Vec::new()),
            ..NodeOptions::default()
        }
    }

    /// The containerd node, containerd.service and kubelet.service started.
    pub fn containerd() -> Self {
        NodeOptions {
            runtime: Runtime::Containerd,
            ..NodeOptions::default()
        }
    }

    /// The real-CRI-O node, crio.service and kubelet.service (both real) started.
    pub fn crio_real() -> Self {
        NodeOptions {
            runtime: Runtime::CrioReal,
            ..NodeOptions::default()
        }
    }

    pub fn file(
        mut self,
        path: impl Into<PathBuf>,
        contents: impl Into<Vec<u8>>,
        mode: u32,
    ) -> Self {
        self.files.push(NodeFile {
            path: path.into(),
            contents: contents.into(),
            mode,
        });
        self
    }
}

/// Locations the harness works with.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The repository (where tests/node/node.sh lives).
    pub repo: PathBuf,
    /// Cargo's profile dir holding the built binaries, e.g. target/debug.
    pub bin_dir: PathBuf,
    /// Where journals of failed tests go: <target>/node-logs.
    pub log_dir: PathBuf,
}

impl Paths {
    pub fn discover() -> Result<Paths, NodeError> {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let exe = std::env::current_exe().map_err(|e| NodeError::TargetDir {
            exe: PathBuf::from("?"),
            reason: e.to_string(),
        })?;
        // Integration tests run as <target>/<profile>/deps/<test>-<hash>.
        let bin_dir = exe
            .parent()
            .filter(|d| d.file_name() == Some(OsStr::new("deps")))
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .ok_or_else(|| NodeError::TargetDir {
                exe: exe.clone(),
                reason: "expected <target>/<profile>/deps/<test binary>".into(),
            })?;
        let target = bin_dir.parent().unwrap_or(&bin_dir).to_path_buf();
        Ok(Paths {
            repo,
            bin_dir,
            log_dir: target.join("node-logs"),
        })
    }

    pub fn script(&self) -> PathBuf {
        self.repo.join("tests/node/node.sh")
    }
}
