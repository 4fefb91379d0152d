//! fake-rpm-ostree's backend on a node booted from a real ostree deployment (the ostree test
//! node, `/run/ostree-booted` present): what rpm-ostree does with ostree, done with ostree's
//! own CLI. Facts and sources: docs/runtime-facts.md, "rpm-ostree apply-live" and "Booting an
//! ostree deployment under nspawn".
//!
//! - A layered deployment is a real commit: the booted deployment's base commit with the
//!   packages' files on top (`ostree commit --tree=ref=BASE --tree=dir=FILES`, parent BASE,
//!   `rpmostree.clientlayer = true`), staged with `ostree admin deploy --stage` and an origin
//!   as rpm-ostree writes it (`[origin] baserefspec=`, `[packages] requested=` names and
//!   `requested-local=` `SHA256:NEVRA` entries). A file under `/opt/X` goes to
//!   `/usr/lib/opt/X` with the line `L /opt/X - - - - ../../usr/lib/opt/X` (and `/usr/local/X`
//!   to `/usr/lib/X` with `L /usr/local/X - - - - ../../usr/lib/X`) staged in
//!   `/usr/lib/rpm-ostree/tmpfiles.d/PKG.conf` and merged into
//!   `/usr/lib/tmpfiles.d/rpm-ostree-autovar.conf`; `/etc` to `/usr/etc` (rpm-ostree's
//!   relocations, rust/src/importer.rs; `relocate`). On the node `/opt` is a link to `var/opt`,
//!   so the live apply's `--prefix=/run --prefix=/var` does not match the line as written and
//!   the link is made only by the next boot's systemd-tmpfiles-setup, as on the real one.
//!   The packages a commit holds (the stand-in's rpmdb) are its metadata key
//!   `kata-live-test.packages` (JSON, name → NEVRA or name).
//! - `status --json` reads ostree's state: the deployments in boot order from `ostree admin
//!   status` (booted, staged, `unlocked` from ostree's own flag), origins from the deployment's
//!   `.origin` file (a staged one's from the copy kept at staging: ostree writes the file at
//!   finalization), `base-checksum` from a layered commit's parent. `live-replaced` and
//!   `live-inprogress` are the refs `rpmostree/live-apply` and
//!   `rpmostree/live-apply-inprogress`, counted only while the stamp
//!   `/run/ostree/deployment-state/CSUM.SERIAL/rpmostree-is-live.stamp` exists (a reboot
//!   clears `/run`; the refs are then cleared by the next transaction, as rpm-ostreed does at
//!   its start). [rpm-ostree rust/src/live.rs]
//! - The live apply, in rpm-ostree's order: the transient unlock as a transient unit
//!   (`systemd-run --collect --wait --pipe --unit rpm-ostree-unlock -- ostree admin unlock
//!   --transient`) when nothing was applied live yet; `/usr` remounted read-write in this
//!   process's own mount namespace only (ostree mounts it read-only); the package check (the
//!   caller's); the in-progress ref and the stamp; `/usr` filled from the target by
//!   checkouts with union and forced copies (added directories, added files, changed files,
//!   then removed ones deleted), `/etc` from the target's `/usr/etc` for paths not locally
//!   modified, `systemd-tmpfiles --create --prefix=/run --prefix=/var` in a second transient
//!   unit, the live ref set and the in-progress ref cleared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

type Res<T> = Result<T, String>;

/// The marker that makes ostree's sysroot the fake's state.
pub const BOOTED_MARKER: &str = "/run/ostree-booted";
const SYSROOT: &str = "/sysroot";
const LIVE_REF: &str = "rpmostree/live-apply";
const LIVE_REF_INPROGRESS: &str = "rpmostree/live-apply-inprogress";
const RUNSTATE_DIR: &str = "/run/ostree/deployment-state";
const LIVE_STAMP: &str = "rpmostree-is-live.stamp";
/// The commit metadata key holding a commit's packages (the stand-in's rpmdb).
pub const PACKAGES_KEY: &str = "kata-live-test.packages";

/// One deployment as `ostree admin status` lists it.
#[derive(Debug, Clone)]
pub struct Deployment {
    pub osname: String,
    pub checksum: String,
    pub serial: u32,
    pub booted: bool,
    pub staged: bool,
    pub unlocked: String,
}

impl Deployment {
    fn runstate(&self) -> PathBuf {
        Path::new(RUNSTATE_DIR).join(format!("{}.{}", self.checksum, self.serial))
    }
}

/// The live state of the booted deployment: the refs, when the stamp says they are current.
#[derive(Debug, Clone, Default)]
pub struct LiveState {
    pub commit: String,
    pub inprogress: String,
}

/// A file a package brings: its content and mode.
pub struct PkgFile {
    pub path: PathBuf,
    pub content: Vec<u8>,
    pub mode: u32,
}

/// The ostree of the booted node, through its CLI.
pub struct Ostree {
    /// Where the fake keeps what ostree cannot hold (staged origins).
    state_dir: PathBuf,
}

/// Runs `cmd` (stdin closed): its stdout, or its stderr without ostree's `error: ` prefix.
pub fn run(cmd: &mut Command) -> Res<String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{shown}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err
            .trim()
            .strip_prefix("error: ")
            .unwrap_or(err.trim())
            .to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn write_atomic(path: &Path, body: &[u8]) -> Res<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("fake-rpm-ostree-tmp");
    std::fs::write(&tmp, body).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// `[section] key=` of an origin file (rpm-ostree's lists end with `;`).
fn origin_value(origin: &str, section: &str, key: &str) -> Option<String> {
    let mut current = String::new();
    for line in origin.lines().map(str::trim) {
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = s.to_string();
        } else if current == section {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim() == key {
                    return Some(v.trim().to_string());
                }
            }
        }
    }
    None
}

fn origin_list(origin: &str, section: &str, key: &str) -> Vec<String> {
    origin_value(origin, section, key)
        .map(|v| {
            v.split(';')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

impl Ostree {
    /// The backend when the node was booted from an ostree deployment.
    pub fn detect(state_dir: &Path) -> Option<Ostree> {
        Path::new(BOOTED_MARKER).exists().then(|| Ostree {
            state_dir: state_dir.to_path_buf(),
        })
    }

    fn repo(&self) -> PathBuf {
        Path::new(SYSROOT).join("ostree/repo")
    }

    fn ostree(&self) -> Command {
        let mut c = Command::new("ostree");
        c.arg(format!("--repo={}", self.repo().display()));
        c
    }

    /// The deployments in boot order (staged or pending first, then booted, then rollback).
    pub fn deployments(&self) -> Res<Vec<Deployment>> {
        let text = run(Command::new("ostree").args(["admin", "status"]))?;
        let mut out: Vec<Deployment> = Vec::new();
        for line in text.lines() {
            let booted = line.starts_with('*');
            let words: Vec<&str> = line[line.len().min(2)..].split_whitespace().collect();
            if line.starts_with("    ") {
                if let (Some(d), Some(state)) =
                    (out.last_mut(), line.trim().strip_prefix("Unlocked: "))
                {
                    d.unlocked = state.trim().to_string();
                }
                continue;
            }
            let [osname, id, rest @ ..] = words.as_slice() else {
                continue;
            };
            let Some((checksum, serial)) = id.rsplit_once('.') else {
                continue;
            };
            out.push(Deployment {
                osname: osname.to_string(),
                checksum: checksum.to_string(),
                serial: serial.parse().map_err(|_| format!("bad deployment {id}"))?,
                booted,
                staged: rest.contains(&"(staged)"),
                unlocked: "none".into(),
            });
        }
        if !out.iter().any(|d| d.booted) {
            return Err("Not booted into an OSTree system".into());
        }
        Ok(out)
    }

    pub fn booted(&self) -> Res<Deployment> {
        self.deployments()?
            .into_iter()
            .find(|d| d.booted)
            .ok_or_else(|| "Not booted into an OSTree system".into())
    }

    fn origin(&self, d: &Deployment) -> String {
        let file = Path::new(SYSROOT).join(format!(
            "ostree/deploy/{}/deploy/{}.{}.origin",
            d.osname, d.checksum, d.serial
        ));
        std::fs::read_to_string(&file)
            .or_else(|_| {
                std::fs::read_to_string(
                    self.state_dir
                        .join("origins")
                        .join(format!("{}.origin", d.checksum)),
                )
            })
            .unwrap_or_default()
    }

    /// A commit's packages (name → NEVRA or name): empty for a commit without the key.
    pub fn packages(&self, commit: &str) -> BTreeMap<String, String> {
        let Ok(v) = run(self.ostree().args([
            "show",
            &format!("--print-metadata-key={PACKAGES_KEY}"),
            commit,
        ])) else {
            return BTreeMap::new();
        };
        // GVariant text: a single-quoted string.
        let v = v.trim().trim_start_matches('\'').trim_end_matches('\'');
        let v = v.replace("\\'", "'").replace("\\\\", "\\");
        serde_json::from_str(&v).unwrap_or_default()
    }

    /// Whether `commit` is a client layer (rpm-ostree's `rpmostree.clientlayer`). Only the
    /// key's absence says no (ostree show: "No such metadata key"); any other failure is an
    /// error, never a guess: a layered commit taken for a base one reads as an OS update.
    fn is_layered(&self, commit: &str) -> Res<bool> {
        match run(self.ostree().args([
            "show",
            "--print-metadata-key=rpmostree.clientlayer",
            commit,
        ])) {
            Ok(v) => Ok(v.trim() == "true"),
            Err(e) if e.contains("No such metadata key") => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn parent(&self, commit: &str) -> Res<String> {
        Ok(
            run(self.ostree().args(["rev-parse", &format!("{commit}^")]))?
                .trim()
                .to_string(),
        )
    }

    fn read_ref(&self, name: &str) -> String {
        std::fs::read_to_string(self.repo().join("refs/heads").join(name))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }

    fn write_ref(&self, name: &str, commit: &str) -> Res<()> {
        let path = self.repo().join("refs/heads").join(name);
        if commit.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(format!("{}: {e}", path.display()))
                }
                _ => Ok(()),
            };
        }
        write_atomic(&path, format!("{commit}\n").as_bytes())
    }

    /// rpm-ostreed at its start: refs left by an earlier boot (no stamp) are cleared.
    pub fn sync_live_refs(&self) -> Res<()> {
        let booted = self.booted()?;
        if booted.runstate().join(LIVE_STAMP).exists() {
            return Ok(());
        }
        self.write_ref(LIVE_REF, "")?;
        self.write_ref(LIVE_REF_INPROGRESS, "")
    }

    /// The booted deployment's live state: `None` without the stamp (the refs are then
    /// stale, from an earlier boot).
    pub fn live_state(&self, booted: &Deployment) -> Res<Option<LiveState>> {
        if !booted.runstate().join(LIVE_STAMP).exists() {
            return Ok(None);
        }
        Ok(Some(LiveState {
            commit: self.read_ref(LIVE_REF),
            inprogress: self.read_ref(LIVE_REF_INPROGRESS),
        }))
    }

    /// The refs, and the stamp when the deployment's run-state directory exists.
    pub fn write_live_state(&self, booted: &Deployment, state: &LiveState) -> Res<()> {
        self.write_ref(LIVE_REF, &state.commit)?;
        self.write_ref(LIVE_REF_INPROGRESS, &state.inprogress)?;
        let dir = booted.runstate();
        if dir.is_dir() && !(state.commit.is_empty() && state.inprogress.is_empty()) {
            let stamp = dir.join(LIVE_STAMP);
            if !stamp.exists() {
                std::fs::write(&stamp, b"").map_err(|e| format!("{}: {e}", stamp.display()))?;
            }
        }
        Ok(())
    }

    /// `rpm-ostree status --json`'s document, from ostree's state.
    pub fn status(&self) -> Res<Value> {
        let mut deployments = Vec::new();
        for d in self.deployments()? {
            let origin = self.origin(&d);
            let refspec = origin_value(&origin, "origin", "baserefspec")
                .or_else(|| origin_value(&origin, "origin", "refspec"))
                .unwrap_or_default();
            let names = origin_list(&origin, "packages", "requested");
            let local: Vec<String> = origin_list(&origin, "packages", "requested-local")
                .into_iter()
                .map(|e| e.split_once(':').map(|(_, n)| n.to_string()).unwrap_or(e))
                .collect();
            let mut v = json!({
                "id": format!("{}-{}.{}", d.osname, d.checksum, d.serial),
                "osname": d.osname,
                "origin": refspec,
                "checksum": d.checksum,
                "serial": d.serial,
                "booted": d.booted,
                "staged": d.staged,
                "pinned": false,
                "unlocked": d.unlocked,
                "requested-packages": names,
                "packages": names,
                "requested-local-packages": local,
                "requested-local-fileoverride-packages": [],
                "base-removals": [],
                "requested-base-removals": [],
                "base-local-replacements": [],
                "requested-base-local-replacements": [],
                "regenerate-initramfs": false,
                "gpg-enabled": false,
            });
            if self.is_layered(&d.checksum)? {
                v["base-checksum"] = Value::from(self.parent(&d.checksum)?);
            }
            if d.booted {
                if let Some(live) = self.live_state(&d)? {
                    if !live.commit.is_empty() {
                        v["live-replaced"] = Value::from(live.commit);
                    }
                    if !live.inprogress.is_empty() {
                        v["live-inprogress"] = Value::from(live.inprogress);
                    }
                }
            }
            deployments.push(v);
        }
        Ok(json!({
            "deployments": deployments,
            "transaction": null,
            "cached-update": null,
            "update-driver": null,
        }))
    }

    /// Stages the deployment of `base` with `packages` layered (their `files`), or `base`
    /// itself when nothing is layered, with rpm-ostree's origin. Returns its commit.
    pub fn stage(
        &self,
        base: &str,
        refspec: &str,
        names: &[String],
        local: &[(String, String)],
        packages: &BTreeMap<String, String>,
        files: &[(String, PkgFile)],
    ) -> Res<String> {
        let commit = if packages.is_empty() {
            base.to_string()
        } else {
            self.commit_layer(base, packages, files)?
        };
        let mut origin = String::new();
        if names.is_empty() && local.is_empty() {
            origin.push_str(&format!("[origin]\nrefspec={refspec}\n"));
        } else {
            origin.push_str(&format!("[origin]\nbaserefspec={refspec}\n\n[packages]\n"));
            if !names.is_empty() {
                origin.push_str(&format!("requested={};\n", names.join(";")));
            }
            if !local.is_empty() {
                let entries: Vec<String> = local
                    .iter()
                    .map(|(sha, nevra)| format!("{sha}:{nevra}"))
                    .collect();
                origin.push_str(&format!("requested-local={};\n", entries.join(";")));
            }
        }
        let kept = self
            .state_dir
            .join("origins")
            .join(format!("{commit}.origin"));
        write_atomic(&kept, origin.as_bytes())?;
        let os = self.booted()?.osname;
        run(Command::new("ostree").args([
            "admin",
            "deploy",
            "--stage",
            &format!("--os={os}"),
            &format!("--origin-file={}", kept.display()),
            &commit,
        ]))?;
        Ok(commit)
    }

    fn commit_layer(
        &self,
        base: &str,
        packages: &BTreeMap<String, String>,
        files: &[(String, PkgFile)],
    ) -> Res<String> {
        let tree = self.state_dir.join(format!("layer.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tree);
        let mut links: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
        for (pkg, f) in files {
            let (rel, link) = relocate(&f.path);
            if let Some(line) = link {
                links.entry(pkg.clone()).or_default().insert(line);
            }
            let dest = tree.join(rel);
            write_atomic(&dest, &f.content)?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(f.mode))
                .map_err(|e| format!("{}: {e}", dest.display()))?;
        }
        // rpm-ostree stages each package's lines in usr/lib/rpm-ostree/tmpfiles.d/PKG.conf and
        // merges them, with the base's own, into usr/lib/tmpfiles.d/rpm-ostree-autovar.conf
        // (rust/src/tmpfiles.rs): one file for every layered package.
        let mut merged: std::collections::BTreeSet<String> = self
            .cat(base, AUTOVAR)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect();
        for (pkg, lines) in &links {
            let staged = tree.join(format!("usr/lib/rpm-ostree/tmpfiles.d/{pkg}.conf"));
            let body: Vec<&str> = lines.iter().map(String::as_str).collect();
            write_atomic(&staged, format!("{}\n", body.join("\n")).as_bytes())?;
            merged.extend(lines.iter().cloned());
        }
        if !links.is_empty() {
            let mut body = String::from("# This file was generated by rpm-ostree.\n");
            for l in &merged {
                body.push_str(l);
                body.push('\n');
            }
            write_atomic(&tree.join(AUTOVAR.trim_start_matches('/')), body.as_bytes())?;
        }
        std::fs::create_dir_all(&tree).map_err(|e| format!("{}: {e}", tree.display()))?;
        let meta = serde_json::to_string(packages).map_err(|e| e.to_string())?;
        let out = run(self.ostree().args([
            "commit",
            "--orphan",
            "--no-bindings",
            &format!("--parent={base}"),
            &format!("--tree=ref={base}"),
            &format!("--tree=dir={}", tree.display()),
            "--add-metadata=rpmostree.clientlayer=true",
            &format!("--add-metadata-string={PACKAGES_KEY}={meta}"),
            "--subject=fake-rpm-ostree layer",
        ]));
        let _ = std::fs::remove_dir_all(&tree);
        Ok(out?.trim().to_string())
    }

    /// The transient unlock, in a unit of the host's systemd (out of any private mount
    /// namespace of the caller), as rpm-ostreed runs it.
    pub fn unlock_transient(&self) -> Res<()> {
        transient_unit(
            "rpm-ostree-unlock",
            &["ostree", "admin", "unlock", "--transient"],
        )
    }

    /// `/usr` read-write for this process only: its own mount namespace (a slave of the
    /// host's), where the read-only overlay's superblock is remounted.
    pub fn remount_usr_rw(&self) -> Res<()> {
        use nix::mount::{mount, MsFlags};
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
            .map_err(|e| format!("unshare(CLONE_NEWNS): {e}"))?;
        let none: Option<&str> = None;
        mount(none, "/", none, MsFlags::MS_SLAVE | MsFlags::MS_REC, none)
            .map_err(|e| format!("making / a slave: {e}"))?;
        mount(
            none,
            "/usr",
            none,
            MsFlags::MS_REMOUNT | MsFlags::MS_SILENT,
            none,
        )
        .map_err(|e| format!("remounting /usr read-write: {e}"))
    }

    /// `ostree diff SOURCE TARGET` under /usr: `(kind, path)` with kind `A`, `M` or `D`.
    pub fn usr_diff(&self, source: &str, target: &str) -> Res<Vec<(char, String)>> {
        let text = run(self.ostree().args(["diff", source, target]))?;
        Ok(text
            .lines()
            .filter_map(|l| {
                let (kind, path) = l.split_once(char::is_whitespace)?;
                let path = path.trim();
                (path.starts_with("/usr/") && kind.len() == 1)
                    .then(|| (kind.chars().next().unwrap_or('?'), path.to_string()))
            })
            .collect())
    }

    /// Checks out `path` of `commit` over the running `/usr` (union, forced copies).
    pub fn checkout(&self, commit: &str, path: &str, is_dir: bool) -> Res<()> {
        let dest = if is_dir {
            path.to_string()
        } else {
            Path::new(path)
                .parent()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "/".into())
        };
        run(self.ostree().args([
            "checkout",
            "--union",
            "--force-copy",
            &format!("--subpath={path}"),
            commit,
            &dest,
        ]))
        .map(|_| ())
    }

    /// Whether `path` is a directory in `commit`.
    pub fn is_dir_in(&self, commit: &str, path: &str) -> Res<bool> {
        let out = run(self.ostree().args(["ls", "-d", commit, path]))?;
        Ok(out.trim_start().starts_with('d'))
    }

    /// The content of `path` in `commit`, if it holds that file.
    fn cat(&self, commit: &str, path: &str) -> Option<String> {
        run(self.ostree().args(["cat", commit, path])).ok()
    }

    /// `systemd-tmpfiles --create --prefix=/run --prefix=/var` in a transient unit.
    pub fn rerun_tmpfiles(&self) -> Res<()> {
        transient_unit(
            "rpm-ostree-tmpfiles",
            &[
                "systemd-tmpfiles",
                "--create",
                "--prefix=/run",
                "--prefix=/var",
            ],
        )
    }

    /// The heart of the live apply, as rpm-ostree orders it: `/usr` from `target` (added
    /// directories, added files, changed files by checkout, removed ones deleted), `/etc`
    /// from its `/usr/etc` where not locally modified, tmpfiles for /run and /var.
    /// `before_first` runs once the overlay is writable and before anything is copied.
    /// Needs `/usr` writable (`remount_usr_rw`).
    pub fn copy_live(
        &self,
        source: &str,
        target: &str,
        before_first: &mut dyn FnMut() -> Res<()>,
    ) -> Res<()> {
        let diff = self.usr_diff(source, target)?;
        let under = |set: &[&String], p: &str| {
            set.iter().any(|d| {
                p.strip_prefix(d.as_str())
                    .is_some_and(|r| r.starts_with('/'))
            })
        };
        let added: Vec<&String> = diff
            .iter()
            .filter(|(k, _)| *k == 'A')
            .map(|(_, p)| p)
            .collect();
        let removed: Vec<&String> = diff
            .iter()
            .filter(|(k, _)| *k == 'D')
            .map(|(_, p)| p)
            .collect();
        // /etc: what was modified locally is judged before /usr/etc changes.
        let mut etc_plan: Vec<(char, String)> = Vec::new();
        for (kind, path) in &diff {
            let Some(rel) = path.strip_prefix("/usr/etc/") else {
                continue;
            };
            let etc = Path::new("/etc").join(rel);
            let untouched = match kind {
                'A' => !etc.exists() && !etc.is_symlink(),
                _ => std::fs::read(&etc).ok() == std::fs::read(path).ok() && etc.is_file(),
            };
            if untouched {
                etc_plan.push((*kind, rel.to_string()));
            }
        }
        before_first()?;
        let mut dirs = Vec::new();
        let mut files = Vec::new();
        for p in added.iter().copied().filter(|p| !under(&added, p)) {
            if self.is_dir_in(target, p)? {
                dirs.push(p);
            } else {
                files.push(p);
            }
        }
        for p in dirs {
            self.checkout(target, p, true)?;
        }
        for p in files {
            self.checkout(target, p, false)?;
        }
        for (_, p) in diff.iter().filter(|(k, _)| *k == 'M') {
            self.checkout(target, p, false)?;
        }
        for p in removed.iter().copied().filter(|p| !under(&removed, p)) {
            let path = Path::new(p.as_str());
            let gone = if path.is_dir() && !path.is_symlink() {
                std::fs::remove_dir_all(path)
            } else {
                std::fs::remove_file(path)
            };
            if let Err(e) = gone {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(format!("Failed to remove {p}: {e}"));
                }
            }
        }
        for (kind, rel) in etc_plan {
            let (from, to) = (
                Path::new("/usr/etc").join(&rel),
                Path::new("/etc").join(&rel),
            );
            if kind == 'D' {
                let _ = std::fs::remove_file(&to);
            } else if from.is_file() {
                let body = std::fs::read(&from).map_err(|e| format!("{}: {e}", from.display()))?;
                write_atomic(&to, &body)?;
                let mode = std::fs::metadata(&from)
                    .map_err(|e| e.to_string())?
                    .permissions();
                std::fs::set_permissions(&to, mode)
                    .map_err(|e| format!("{}: {e}", to.display()))?;
            } else if from.is_dir() {
                std::fs::create_dir_all(&to).map_err(|e| format!("{}: {e}", to.display()))?;
            }
        }
        self.rerun_tmpfiles()
    }
}

/// rpm-ostree's merged tmpfiles.d file of a layered commit.
const AUTOVAR: &str = "/usr/lib/tmpfiles.d/rpm-ostree-autovar.conf";

/// Where rpm-ostree's importer puts a package's file in the commit, and the tmpfiles line it
/// adds for it (rust/src/importer.rs, `inspect_opt_path`, `tmpfiles_symlink_entries`):
/// `/opt/NAME/...` goes to `usr/lib/opt/NAME/...` with `L /opt/NAME - - - - ../../usr/lib/opt/NAME`;
/// `/etc` to `usr/etc`. `/usr/local/NAME/...` goes to `usr/lib/NAME/...` with
/// `L /usr/local/NAME - - - - ../../usr/lib/NAME` (../shared/NODE-FACTS.md, "/opt and
/// /usr/local"; the importer we read refuses `/usr/local` outright, the facts say it is
/// relocated: this takes the link's path as written under `/usr/local`, the stricter reading,
/// since the live apply's `--prefix=/var` then does not make it either).
pub fn relocate(path: &Path) -> (PathBuf, Option<String>) {
    let rel = path.strip_prefix("/").unwrap_or(path);
    let top = |rest: &Path| {
        rest.components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
    };
    if let Ok(opt) = rel.strip_prefix("opt") {
        let line = top(opt).map(|n| format!("L /opt/{n} - - - - ../../usr/lib/opt/{n}"));
        return (Path::new("usr/lib/opt").join(opt), line);
    }
    if let Ok(local) = rel.strip_prefix("usr/local") {
        let line = top(local).map(|n| format!("L /usr/local/{n} - - - - ../../usr/lib/{n}"));
        return (Path::new("usr/lib").join(local), line);
    }
    if let Ok(etc) = rel.strip_prefix("etc") {
        return (Path::new("usr/etc").join(etc), None);
    }
    (rel.to_path_buf(), None)
}

/// Runs `argv` as the transient unit `unit` of the host's systemd and waits for it, as
/// rpm-ostreed runs its helpers (out of any private mount namespace of the caller).
fn transient_unit(unit: &str, argv: &[&str]) -> Res<()> {
    run(Command::new("systemd-run")
        .args([
            "--collect",
            "--wait",
            "--pipe",
            "--quiet",
            "--unit",
            unit,
            "--",
        ])
        .args(argv))
    .map(|_| ())
}
