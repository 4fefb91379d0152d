//! The CRI-O drop-in writer on real filesystems: golden content, idempotence, symlink
//! refusal, atomicity on a read-only and on a full filesystem, byte-exact rollback.
//! The tmpfs tests need root (mount); they fail, not skip, without it.

use kata_live::config::Handler;
use kata_live::files::{Backup, BackupStore, DropIn, Outcome};
use kata_live::runtime::crio::drop_in as crio;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::fs;
use std::path::{Path, PathBuf};

fn drop_in(root: &Path) -> DropIn {
    DropIn::new(root, root.join("etc/crio/crio.conf.d/50-kata-remote"))
}

#[test]
fn golden_default_drop_in() {
    insta::assert_snapshot!(crio::render(&Handler::default()).unwrap());
}

#[test]
fn rendered_drop_in_parses_back_to_the_same_table() {
    let mut h = Handler::default();
    h.crio.container_min_memory = Some("12MiB".into());
    h.crio
        .allowed_annotations
        .push("io.katacontainers.config.hypervisor.machine_type".into());
    let text = crio::render(&h).unwrap();
    let tables = crio::parse_handlers(&text).unwrap();
    assert_eq!(tables.len(), 1, "exactly one handler table");
    assert_eq!(tables["kata-remote"], h.crio);
    // And CRI-O's own reading: a plain TOML document whose only table path is ours.
    let doc: toml::Table = toml::from_str(&text).unwrap();
    let runtimes = doc["crio"]["runtime"]["runtimes"].as_table().unwrap();
    assert_eq!(runtimes.keys().collect::<Vec<_>>(), vec!["kata-remote"]);
}

#[test]
fn create_then_unchanged_then_update_then_remove() {
    let r = tempfile::tempdir().unwrap();
    let d = drop_in(r.path());
    let text = crio::render(&Handler::default()).unwrap();
    let c = d.write(&text).unwrap();
    assert_eq!((c.outcome, c.previous), (Outcome::Created, None));
    let mtime = fs::metadata(d.path()).unwrap().modified().unwrap();
    let c = d.write(&text).unwrap();
    assert_eq!(c.outcome, Outcome::Unchanged);
    assert_eq!(
        fs::metadata(d.path()).unwrap().modified().unwrap(),
        mtime,
        "rewrote an unchanged file"
    );
    let mut h = Handler::default();
    h.crio.runtime_pull_image = false;
    let c = d.write(&crio::render(&h).unwrap()).unwrap();
    assert_eq!(c.outcome, Outcome::Updated);
    assert_eq!(c.previous.as_deref(), Some(text.as_bytes()));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(d.path()).unwrap().permissions().mode() & 0o777,
        0o644
    );
    assert_eq!(d.remove().unwrap().outcome, Outcome::Removed);
    assert_eq!(d.remove().unwrap().outcome, Outcome::Unchanged);
}

#[test]
fn symlinked_file_or_directory_is_refused() {
    let r = tempfile::tempdir().unwrap();
    let elsewhere = r.path().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    fs::create_dir_all(r.path().join("etc/crio")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, r.path().join("etc/crio/crio.conf.d")).unwrap();
    let e = drop_in(r.path()).write("x").unwrap_err().to_string();
    assert!(e.contains("symlink"), "{e}");
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);

    let r = tempfile::tempdir().unwrap();
    let dir = r.path().join("etc/crio/crio.conf.d");
    fs::create_dir_all(&dir).unwrap();
    fs::write(r.path().join("target"), "precious").unwrap();
    std::os::unix::fs::symlink(r.path().join("target"), dir.join("50-kata-remote")).unwrap();
    let e = drop_in(r.path()).write("x").unwrap_err().to_string();
    assert!(e.contains("symlink") && e.contains("50-kata-remote"), "{e}");
    assert_eq!(
        fs::read_to_string(r.path().join("target")).unwrap(),
        "precious"
    );
}

/// A small tmpfs mounted on a temp dir, unmounted on drop.
struct Tmpfs(tempfile::TempDir);
impl Tmpfs {
    fn new(opts: &str) -> Tmpfs {
        let d = tempfile::tempdir().unwrap();
        mount(
            Some("tmpfs"),
            d.path(),
            Some("tmpfs"),
            MsFlags::empty(),
            Some(opts),
        )
        .expect("mounting a tmpfs needs root: run the test suite as root");
        Tmpfs(d)
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
    /// Read-only from now on. The kernel refuses (EBUSY) while anything holds a file of the
    /// filesystem open for writing; seen once in tests/run, under load, right after this
    /// test's own write had returned and closed its file (the holder was not found): asked
    /// again for up to a second before it counts as a failure.
    fn remount_ro(&self) {
        let remount = || {
            mount(
                None::<&str>,
                self.path(),
                None::<&str>,
                MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                None::<&str>,
            )
        };
        let mut last = remount();
        for _ in 0..50 {
            if last != Err(nix::errno::Errno::EBUSY) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            last = remount();
        }
        last.unwrap_or_else(|e| panic!("remounting {} read-only: {e}", self.path().display()));
    }
}
impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = umount2(self.0.path(), MntFlags::MNT_DETACH);
    }
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn read_only_directory_leaves_old_content() {
    let t = Tmpfs::new("size=1m");
    let d = drop_in(t.path());
    d.write("old = 1\n").unwrap();
    t.remount_ro();
    let e = d.write("new = 2\n").unwrap_err().to_string();
    assert!(
        e.contains("50-kata-remote") || e.contains("crio.conf.d"),
        "{e}"
    );
    assert_eq!(fs::read_to_string(d.path()).unwrap(), "old = 1\n");
    assert_eq!(
        entries(d.path().parent().unwrap()),
        vec![d.path().to_path_buf()]
    );
}

#[test]
fn full_disk_leaves_old_content_and_no_temp_file() {
    let t = Tmpfs::new("size=64k");
    let d = drop_in(t.path());
    d.write("old = 1\n").unwrap();
    // Fill the filesystem, then try to write something bigger than what is left.
    let filler = t.path().join("filler");
    let _ = fs::write(&filler, vec![0u8; 64 * 1024]);
    let big = "x".repeat(32 * 1024);
    let e = d.write(&big).unwrap_err().to_string();
    assert!(e.contains("No space left") || e.contains("write"), "{e}");
    assert_eq!(fs::read_to_string(d.path()).unwrap(), "old = 1\n");
    assert_eq!(
        entries(d.path().parent().unwrap()),
        vec![d.path().to_path_buf()],
        "temp file left behind"
    );
}

#[test]
fn backup_restores_byte_for_byte() {
    let r = tempfile::tempdir().unwrap();
    let d = drop_in(r.path());
    // A foreign file with odd bytes: no trailing newline, CRLF, non-UTF-8.
    let foreign: &[u8] = b"[crio.runtime.runtimes.kata-remote]\r\nruntime_path = \"/x\"\xff";
    fs::create_dir_all(d.path().parent().unwrap()).unwrap();
    fs::write(d.path(), foreign).unwrap();
    let store = BackupStore::new(r.path(), &r.path().join("var/lib/kata-live"));
    let change = d
        .write(&crio::render(&Handler::default()).unwrap())
        .unwrap();
    store
        .save(&Backup {
            path: d.path().into(),
            existed: true,
            content: change.previous.clone(),
        })
        .unwrap();
    // A later run (after a crash) reads the backup back and restores.
    let b = store.load().unwrap().unwrap();
    assert_eq!(d.restore(b.content.as_deref()).unwrap(), Outcome::Updated);
    assert_eq!(fs::read(d.path()).unwrap(), foreign);
    store.clear().unwrap();
    assert!(store.load().unwrap().is_none());

    // No file before: restoring removes ours.
    fs::remove_file(d.path()).unwrap();
    let change = d.write("ours = 1\n").unwrap();
    store
        .save(&Backup {
            path: d.path().into(),
            existed: false,
            content: change.previous,
        })
        .unwrap();
    let b = store.load().unwrap().unwrap();
    assert!(!b.existed);
    assert_eq!(d.restore(b.content.as_deref()).unwrap(), Outcome::Removed);
    assert!(!d.path().exists());
}

#[test]
fn a_backup_without_its_content_is_an_error() {
    let r = tempfile::tempdir().unwrap();
    let state = r.path().join("var/lib/kata-live");
    let store = BackupStore::new(r.path(), &state);
    store
        .save(&Backup {
            path: "/etc/crio/crio.conf.d/50-kata-remote".into(),
            existed: true,
            content: Some(b"a".to_vec()),
        })
        .unwrap();
    fs::remove_file(state.join("backup/drop-in.orig")).unwrap();
    let e = store.load().unwrap_err().to_string();
    assert!(e.contains("drop-in.orig"), "{e}");
}
