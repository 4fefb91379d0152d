//! Waiting until the runtime files are visible to us and in CRI-O's mount namespace,
//! with a fake procfs (`{proc}/<pid>/root` a symlink to a directory).

use std::path::Path;
use std::time::Duration;

use kata_live::host::Host;
use kata_live::visibility::{check_visible, wait_visible, NoWriters, Viewpoint, VisibilityError};

const SHIM: &str = "/usr/bin/containerd-shim-kata-v2";
const CONF: &str = "/opt/kata/configuration-remote.toml";

struct Tree {
    _tmp: tempfile::TempDir,
    host: Host,
    /// What CRI-O's mount namespace shows (its `/proc/<pid>/root`).
    ns: std::path::PathBuf,
}

fn tree() -> Tree {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let ns = tmp.path().join("crio-ns");
    let proc_dir = tmp.path().join("proc");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&ns).unwrap();
    std::fs::create_dir_all(proc_dir.join("4242")).unwrap();
    std::os::unix::fs::symlink(&ns, proc_dir.join("4242/root")).unwrap();
    Tree {
        host: Host::new(root, proc_dir),
        ns,
        _tmp: tmp,
    }
}

fn put(base: &Path, p: &str) {
    let f = base.join(p.trim_start_matches('/'));
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(f, "x").unwrap();
}

#[tokio::test]
async fn files_appearing_later_are_waited_for() {
    let t = tree();
    let (root, ns) = (t.host.root.clone(), t.ns.clone());
    // Host first, CRI-O's namespace later: the order seen in the field.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        put(&root, SHIM);
        put(&root, CONF);
        tokio::time::sleep(Duration::from_millis(300)).await;
        put(&ns, SHIM);
        put(&ns, CONF);
    });
    wait_visible(
        &t.host,
        &[Path::new(SHIM), Path::new(CONF)],
        Some(4242),
        Duration::from_secs(20),
        &NoWriters,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn deadline_error_names_the_path_and_where() {
    let t = tree();
    put(&t.host.root, SHIM);
    put(&t.host.root, CONF);
    put(&t.ns, CONF);
    let err = wait_visible(
        &t.host,
        &[Path::new(SHIM), Path::new(CONF)],
        Some(4242),
        Duration::from_millis(300),
        &NoWriters,
    )
    .await
    .unwrap_err();
    let VisibilityError::NotVisible { missing, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0].path, Path::new(SHIM));
    assert_eq!(missing[0].seen, Viewpoint::RuntimeMountNs { pid: 4242 });
    let msg = err.to_string();
    assert!(
        msg.contains(SHIM) && msg.contains("the runtime's mount namespace"),
        "{msg}"
    );
}

#[tokio::test]
async fn missing_on_the_host_is_named_too() {
    let t = tree();
    let missing = check_visible(&t.host, &[Path::new(CONF)], None).unwrap();
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0].seen, Viewpoint::Host);
    assert_eq!(
        missing[0].checked,
        t.host.root.join("opt/kata/configuration-remote.toml")
    );
    // Without a pid, only our view counts.
    put(&t.host.root, CONF);
    assert!(check_visible(&t.host, &[Path::new(CONF)], None)
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn vanished_crio_is_its_own_error() {
    let t = tree();
    let err = wait_visible(
        &t.host,
        &[Path::new(SHIM)],
        Some(999_999),
        Duration::from_secs(5),
        &NoWriters,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, VisibilityError::CrioGone { pid: 999_999, .. }),
        "{err:?}"
    );
}
