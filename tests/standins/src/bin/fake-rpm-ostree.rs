//! A fake `rpm-ostree` for tests and the test node. Never shipped.
//!
//! Everything lives in one directory, `$FAKE_RPM_OSTREE_DIR` (default
//! `/var/lib/fake-rpm-ostree`):
//! - `state.json`: the `rpm-ostree status --json` document it answers with (created with
//!   one booted deployment and no layered package when missing);
//! - `calls.log`: one JSON array of argv per call, appended;
//! - `files`: lines `PACKAGE ABSOLUTE-PATH [SOURCE]`, the files a package brings;
//!   created when the package goes live (a copy of SOURCE when given, else a small
//!   executable placeholder naming the package's NEVRA, so that an upgrade changes it),
//!   removed when it leaves the running tree, re-created when its version changes;
//! - `root`: optional, a directory; the files in a local RPM's payload are written under it
//!   when the package goes live (default: none are written; `/` in the test node);
//! - `pkgcache/`: the local RPMs as imported by `install` (rpm-ostree imports them into its
//!   repo; a live apply later reads the import, not the operator's file);
//! - `live-packages.json`: what the running `/usr` holds once something was applied live,
//!   `{name: NEVRA-or-name}` (like rpm-ostree's `rpmostree/live-apply` ref, kept apart
//!   from the deployment list);
//! - `delay`: seconds (float) before the files of a live apply appear; they are created
//!   by a detached background process, as a live apply's files reached CRI-O late;
//! - fault markers (the file existing switches it on): `fail` (mutating commands exit 1
//!   with an error), `hang` (mutating commands sleep forever; SIGINT cancels, as for the
//!   real client: `Caught SIGINT, cancelling transaction`, then `error: Operation was
//!   cancelled`, exit 1, logged in `cancelled`; with `slow-cancel` as well, the
//!   cancellation never completes), `fail-status`, `hang-status` (the same for `status`),
//!   `interrupt` (a live apply records `live-inprogress` and exits 1, as an interrupted
//!   apply leaves it);
//! - `hanging`: written (the client's pid) once a hanging client catches SIGINT. Before
//!   that a SIGINT kills it, as it kills the real client before its transaction runs: a
//!   test that needs the cancellation signals only after this exists.
//!
//! The CLI surface follows rpm-ostree: `install` (`--idempotent`, `--allow-inactive`,
//! `-A/--apply-live`, `-y/--assumeyes`, `-C/--cache-only`, `--uninstall=PKG`, repeated; no
//! `--allow-replacement`), `uninstall` (`--idempotent`; no `--apply-live`, like the real
//! one), `apply-live` (`--allow-replacement`, `--target`, `--reset`), `status` (`--json`,
//! `--booted`), `cancel`. Unknown options are errors (`Unknown option X`), as they are for
//! the real CLI.
//!
//! What it copies from rpm-ostree (NODE-FACTS.md, "rpm-ostree apply-live"):
//! - A local RPM (an argument ending in `.rpm`) is read as rpm-ostree reads it: its header
//!   gives the NEVRA (`name-[epoch:]version-release.arch`, the epoch left out when 0), never
//!   its file name; `requested-local-packages` lists NEVRAs; local packages never appear in
//!   `packages`. A file that is not an RPM is an error.
//! - Requests are keyed by full NEVRA: the same NEVRA again is `Package
//!   '<sha256>:<nevra>' is already layered`; another NEVRA of a name already layered from a
//!   local RPM fails in depsolve (`conflicting requests`, `cannot install both NEW from
//!   @commandline and OLD from @commandline`), with or without `--idempotent`. By name:
//!   `Package/capability 'foo' is already requested`.
//! - `--uninstall=X` (and `uninstall X`) matches a name or a NEVRA and is applied before
//!   the additions; an unknown one is `Package/capability 'X' is not currently requested`.
//!   `--idempotent` skips both kinds of "already"/"not currently".
//! - Nothing changed: `No change.`, exit 0, and **nothing applied live**, even with `-A` and
//!   a pending deployment the running tree lacks (the `--idempotent` trap).
//! - A live apply checks the package diff between the running tree and the target, by name:
//!   a name gone is "removed", a name whose NEVRA differs is "changed", and an OS commit
//!   that differs counts as one changed (base) package. Without `--allow-replacement`:
//!   `packages would be removed: N, allow replacement to override`, else `packages would
//!   be changed: N, allow replacement to override`. `install -A` cannot pass it (no
//!   `--allow-replacement`): its new deployment stays staged, and `apply-live
//!   --allow-replacement` can apply it afterwards.
//! - The first live apply unlocks `/usr` (`unlocked: "transient"` on the booted deployment)
//!   before that check, so a refused first try leaves it too.
//! - `live-replaced` on the booted deployment: the commit applied live; after `apply-live
//!   --reset` it equals the booted checksum. `live-inprogress`: an interrupted apply's
//!   target; another target is then refused (`Previously interrupted while targeting commit
//!   A, cannot change target to B`). Both keys are absent when empty.
//!
//! Where NODE-FACTS left two possibilities, the stand-in takes the stricter one:
//! - an OS update in the target counts as one changed package, so `install -A` and a plain
//!   `apply-live` over a staged OS update are refused (the real count is the number of base
//!   packages the update changes: always at least one, never zero);
//! - the depsolve failure is raised for any second NEVRA of a name layered from a local RPM,
//!   also when the new one is older (a downgrade conflicts just the same) and under
//!   `--idempotent` (which only skips exact duplicates);
//! - the texts marked "about" in NODE-FACTS (the depsolve problem, an unreadable RPM:
//!   `Failed to read package PATH: ...`) are matched by tests on their stable parts only
//!   (`conflicting requests`, `cannot install both ... from @commandline`).
//!
//! - One transaction at a time, daemon-wide: while a client hangs in one (the `hang`
//!   fault), `status --json` shows `"transaction": [method, sender, object-path]` and any
//!   other mutating command fails with `Transaction in progress: TITLE` and ` You can cancel
//!   the current transaction with `rpm-ostree cancel``. It lasts as long as that client's
//!   process (stricter than the real daemon only in that a killed client ends it; recorded
//!   in `transaction` as `PID TITLE`).
//!
//! Not copied: depsolving against repositories (there are none on RHCOS; a name is taken as
//! a package of that name, with no version), `%pre`/`%post` scriptlets (they never run
//! live), `Transaction in progress`, the daemon outliving a SIGTERM'd client.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{json, Value};
use sha2::Digest;

static SIGINT_SEEN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: nix::libc::c_int) {
    SIGINT_SEEN.store(true, Ordering::SeqCst);
}

fn catch_sigint() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_sigint),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    let _ = unsafe { sigaction(Signal::SIGINT, &action) };
}

const BOOT_CHECKSUM: &str = "3c5b4e4f2d2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c";

struct Fake {
    dir: PathBuf,
}

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = std::env::var_os("FAKE_RPM_OSTREE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/fake-rpm-ostree"));
    let fake = Fake { dir };
    if args.first().map(String::as_str) == Some("__create-files") {
        return fake.create_files_later(&args[1..]);
    }
    if let Err(e) = fake.record(&args) {
        eprintln!("fake-rpm-ostree: cannot record call: {e}");
        return ExitCode::from(1);
    }
    match fake.dispatch(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn checksum_for(seed: &str) -> String {
    // FNV-1a, widened to 64 hex digits: stable and shaped like an ostree checksum.
    let mut out = String::new();
    for round in 0u64..4 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ round;
        for b in seed.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

/// The name in a NEVRA (`name-[epoch:]version-release.arch`).
fn nevra_name(nevra: &str) -> String {
    nevra.rsplitn(3, '-').nth(2).unwrap_or(nevra).to_string()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// What a deployment's tree carries: package name → its NEVRA (local RPMs) or its name
/// (packages by name, which have no version here).
fn pkg_map(d: &Value) -> BTreeMap<String, String> {
    let mut m: BTreeMap<String, String> = strs(&d["packages"])
        .into_iter()
        .chain(strs(&d["requested-packages"]))
        .map(|n| (n.clone(), n))
        .collect();
    for nevra in strs(&d["requested-local-packages"]) {
        m.insert(nevra_name(&nevra), nevra);
    }
    m
}

fn deployment(checksum: &str, booted: bool, staged: bool) -> Value {
    json!({
        "id": format!("rhcos-{checksum}.0"),
        "osname": "rhcos",
        "checksum": checksum,
        "serial": 0,
        "booted": booted,
        "staged": staged,
        "pinned": false,
        "unlocked": "none",
        "version": "416.94.202410211619-0",
        "timestamp": 1_729_527_600u64,
        "requested-packages": [],
        "packages": [],
        "requested-local-packages": [],
        "base-removals": [],
        "requested-base-removals": [],
        "base-local-replacements": [],
        "requested-base-local-replacements": [],
        "initramfs-etc": [],
        "regenerate-initramfs": false,
    })
}

/// A local RPM as rpm-ostree reads it: from its header, never from its file name.
struct LocalRpm {
    nevra: String,
    name: String,
    sha256: String,
}

fn read_local_rpm(arg: &str) -> Res<LocalRpm> {
    let path = arg.strip_prefix("file://").unwrap_or(arg);
    let bytes = std::fs::read(path).map_err(|e| format!("Opening {path}: {e}"))?;
    let meta = rpm::PackageMetadata::parse(&mut std::io::Cursor::new(&bytes))
        .map_err(|e| format!("Failed to read package {path}: {e}"))?;
    let field = |r: Result<&str, rpm::Error>| {
        r.map(str::to_string)
            .map_err(|e| format!("Failed to read package {path}: {e}"))
    };
    let name = field(meta.get_name())?;
    let epoch = match meta.get_epoch() {
        Ok(0) | Err(_) => String::new(),
        Ok(e) => format!("{e}:"),
    };
    let nevra = format!(
        "{name}-{epoch}{}-{}.{}",
        field(meta.get_version())?,
        field(meta.get_release())?,
        field(meta.get_arch())?
    );
    let sha256 = format!("{:x}", sha2::Sha256::digest(&bytes));
    Ok(LocalRpm {
        nevra,
        name,
        sha256,
    })
}

struct Opts {
    flags: BTreeSet<String>,
    values: BTreeMap<String, Vec<String>>,
    operands: Vec<String>,
}

impl Opts {
    fn value(&self, key: &str) -> Option<String> {
        self.values.get(key).and_then(|v| v.last()).cloned()
    }
    fn all(&self, key: &str) -> Vec<String> {
        self.values.get(key).cloned().unwrap_or_default()
    }
}

fn parse_opts(args: &[String], allowed: &[&str], with_value: &[&str]) -> Res<Opts> {
    let mut o = Opts {
        flags: BTreeSet::new(),
        values: BTreeMap::new(),
        operands: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let long = match a.as_str() {
            "-A" => "--apply-live",
            "-y" => "--assumeyes",
            "-C" => "--cache-only",
            s => s,
        };
        if with_value.contains(&long) {
            let v = it
                .next()
                .ok_or(format!("Missing argument for {long}"))?
                .clone();
            o.values.entry(long.to_string()).or_default().push(v);
        } else if let Some((k, v)) = long.split_once('=').filter(|(k, _)| with_value.contains(k)) {
            o.values
                .entry(k.to_string())
                .or_default()
                .push(v.to_string());
        } else if long.starts_with('-') {
            if !allowed.contains(&long) {
                return Err(format!("Unknown option {a}"));
            }
            o.flags.insert(long.to_string());
        } else {
            o.operands.push(a.clone());
        }
    }
    Ok(o)
}

/// The package diff of a live apply, by name.
struct Diff {
    added: Vec<String>,
    removed: Vec<String>,
    /// `(old, new)` identities of a name in both.
    changed: Vec<(String, String)>,
}

fn diff(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Diff {
    Diff {
        added: after
            .iter()
            .filter(|(n, _)| !before.contains_key(*n))
            .map(|(_, v)| v.clone())
            .collect(),
        removed: before
            .iter()
            .filter(|(n, _)| !after.contains_key(*n))
            .map(|(_, v)| v.clone())
            .collect(),
        changed: before
            .iter()
            .filter_map(|(n, old)| {
                after
                    .get(n)
                    .filter(|new| *new != old)
                    .map(|new| (old.clone(), new.clone()))
            })
            .collect(),
    }
}

impl Fake {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn marker(&self, name: &str) -> bool {
        self.path(name).exists()
    }

    fn record(&self, args: &[String]) -> Res<()> {
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("calls.log"))
            .map_err(|e| e.to_string())?;
        writeln!(f, "{}", Value::from(args.to_vec())).map_err(|e| e.to_string())
    }

    fn load(&self) -> Res<Value> {
        match std::fs::read_to_string(self.path("state.json")) {
            Ok(s) => serde_json::from_str(&s).map_err(|e| format!("bad fake state: {e}")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!({
                "deployments": [deployment(BOOT_CHECKSUM, true, false)],
                "transaction": null,
                "cached-update": null,
            })),
            Err(e) => Err(e.to_string()),
        }
    }

    fn save(&self, state: &Value) -> Res<()> {
        let tmp = self.path(&format!(".state.json.{}", std::process::id()));
        let body = serde_json::to_string_pretty(state).map_err(|e| e.to_string())?;
        let mut f = std::fs::File::create(&tmp).map_err(|e| e.to_string())?;
        f.write_all(body.as_bytes()).map_err(|e| e.to_string())?;
        f.sync_all().map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, self.path("state.json")).map_err(|e| e.to_string())
    }

    fn faults(&self, status: bool) -> Res<()> {
        let (fail, hang) = if status {
            ("fail-status", "hang-status")
        } else {
            ("fail", "hang")
        };
        if self.marker(hang) {
            // Like the real client on Ctrl-C: SIGINT cancels the (never-ending) transaction,
            // which is logged in `cancelled`; SIGTERM keeps its default (the client dies).
            // With `slow-cancel` too, the cancellation never completes (the real client then
            // waits for the daemon: `Awaiting transaction cancellation...`).
            catch_sigint();
            let title = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
            let _ = std::fs::write(
                self.path("transaction"),
                format!("{} {title}\n", std::process::id()),
            );
            let _ = std::fs::write(self.path("hanging"), format!("{}\n", std::process::id()));
            let mut said = false;
            loop {
                if SIGINT_SEEN.load(Ordering::SeqCst) && !said {
                    eprintln!("Caught SIGINT, cancelling transaction");
                    let _ = std::fs::write(self.path("cancelled"), b"SIGINT\n");
                    if !self.marker("slow-cancel") {
                        let _ = std::fs::remove_file(self.path("transaction"));
                        return Err("Operation was cancelled".into());
                    }
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if self.marker(fail) {
            return Err("fake failure injected (marker file present)".into());
        }
        Ok(())
    }

    /// The transaction another live client runs: its title.
    fn transaction(&self) -> Option<String> {
        let body = std::fs::read_to_string(self.path("transaction")).ok()?;
        let (pid, title) = body.trim().split_once(' ')?;
        let pid: i32 = pid.parse().ok()?;
        let alive = pid as u32 != std::process::id()
            && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            });
        alive.then(|| title.to_string())
    }

    fn refuse_if_busy(&self) -> Res<()> {
        match self.transaction() {
            Some(title) => Err(format!(
                "Transaction in progress: {title}\n You can cancel the current transaction with `rpm-ostree cancel`"
            )),
            None => Ok(()),
        }
    }

    fn dispatch(&self, args: &[String]) -> Res<()> {
        let (cmd, rest) = args.split_first().ok_or("No command specified")?;
        if matches!(cmd.as_str(), "install" | "uninstall" | "apply-live") {
            self.refuse_if_busy()?;
        }
        match cmd.as_str() {
            "status" => {
                let o = parse_opts(rest, &["--json", "--booted", "-v", "--verbose"], &[])?;
                self.faults(true)?;
                let mut state = self.load()?;
                state["transaction"] = match self.transaction() {
                    Some(title) => json!([
                        title.split(' ').next().unwrap_or_default(),
                        ":1.42",
                        "/org/projectatomic/rpmostree1/rhcos"
                    ]),
                    None => Value::Null,
                };
                if o.flags.contains("--json") {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&state).map_err(|e| e.to_string())?
                    );
                } else {
                    println!("State: idle\nDeployments:");
                    for d in state["deployments"].as_array().into_iter().flatten() {
                        let mark = if d["booted"] == true { "*" } else { " " };
                        let pkgs: Vec<String> = pkg_map(d).into_values().collect();
                        println!("{mark} {} packages: {}", d["checksum"], pkgs.join(" "));
                    }
                }
                Ok(())
            }
            "install" => {
                let o = parse_opts(
                    rest,
                    &[
                        "--idempotent",
                        "--allow-inactive",
                        "--apply-live",
                        "--assumeyes",
                        "--cache-only",
                        "--dry-run",
                    ],
                    &["--uninstall"],
                )?;
                if o.operands.is_empty() {
                    return Err("At least one PACKAGE must be specified".into());
                }
                self.faults(false)?;
                let mut state = self.load()?;
                let changed = self.change(
                    &mut state,
                    &o.operands,
                    &o.all("--uninstall"),
                    o.flags.contains("--idempotent"),
                )?;
                if !changed {
                    // The --idempotent trap: nothing new requested, so nothing is applied
                    // live either, even with -A and a pending deployment not yet live.
                    println!("No change.");
                    return Ok(());
                }
                self.save(&state)?;
                if o.flags.contains("--apply-live") {
                    self.apply_live(&mut state, None, false)?;
                } else {
                    println!("Run \"systemctl reboot\" to start a reboot");
                }
                Ok(())
            }
            "uninstall" => {
                let o = parse_opts(rest, &["--idempotent", "--assumeyes"], &[])?;
                if o.operands.is_empty() {
                    return Err("At least one PACKAGE must be specified".into());
                }
                self.faults(false)?;
                let mut state = self.load()?;
                if !self.change(
                    &mut state,
                    &[],
                    &o.operands,
                    o.flags.contains("--idempotent"),
                )? {
                    println!("No change.");
                    return Ok(());
                }
                self.save(&state)?;
                println!("Run \"systemctl reboot\" to start a reboot");
                Ok(())
            }
            "apply-live" => {
                let o = parse_opts(rest, &["--allow-replacement", "--reset"], &["--target"])?;
                self.faults(false)?;
                let mut state = self.load()?;
                let target = if o.flags.contains("--reset") {
                    Some(
                        self.booted(&state)?["checksum"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    )
                } else {
                    o.value("--target")
                };
                self.apply_live(&mut state, target, o.flags.contains("--allow-replacement"))
            }
            "cancel" => Ok(()),
            other => Err(format!("Unknown command '{other}'")),
        }
    }

    fn booted<'a>(&self, state: &'a Value) -> Res<&'a Value> {
        state["deployments"]
            .as_array()
            .and_then(|a| a.iter().find(|d| d["booted"] == true))
            .ok_or_else(|| "Not booted into an OSTree system".to_string())
    }

    fn booted_idx(&self, state: &Value) -> Res<usize> {
        state["deployments"]
            .as_array()
            .and_then(|a| a.iter().position(|d| d["booted"] == true))
            .ok_or_else(|| "Not booted into an OSTree system".to_string())
    }

    /// Removes, then adds, into a new pending deployment based on the default one.
    /// False when nothing changed.
    fn change(
        &self,
        state: &mut Value,
        add: &[String],
        remove: &[String],
        idempotent: bool,
    ) -> Res<bool> {
        let bi = self.booted_idx(state)?;
        let deps = state["deployments"].as_array().cloned().unwrap_or_default();
        let default = if bi > 0 {
            deps[0].clone()
        } else {
            deps[bi].clone()
        };
        let mut req: Vec<String> = strs(&default["requested-packages"]);
        let mut local: Vec<String> = strs(&default["requested-local-packages"]);
        let mut changed = false;
        // Removals first, as rpm-ostree applies them before the additions.
        for r in remove {
            let before = (req.len(), local.len());
            req.retain(|p| p != r);
            local.retain(|p| p != r && nevra_name(p) != *r);
            if before == (req.len(), local.len()) {
                if !idempotent {
                    return Err(format!(
                        "Package/capability '{r}' is not currently requested"
                    ));
                }
            } else {
                changed = true;
            }
        }
        let mut imports = Vec::new();
        for a in add {
            if a.ends_with(".rpm") || a.starts_with("file://") {
                let rpm = read_local_rpm(a)?;
                if local.contains(&rpm.nevra) {
                    if !idempotent {
                        return Err(format!(
                            "Package '{}:{}' is already layered",
                            rpm.sha256, rpm.nevra
                        ));
                    }
                    continue;
                }
                // Keyed by NEVRA: another version of a layered name is a second request,
                // which libsolv cannot satisfy (not skipped by --idempotent).
                if let Some(old) = local.iter().find(|p| nevra_name(p) == rpm.name) {
                    return Err(format!(
                        "Could not depsolve transaction; 1 problem detected:\n Problem: conflicting requests\n  - cannot install both {} from @commandline and {old} from @commandline",
                        rpm.nevra
                    ));
                }
                local.push(rpm.nevra.clone());
                imports.push((a.clone(), rpm.nevra));
                changed = true;
            } else if req.contains(a) {
                if !idempotent {
                    return Err(format!("Package/capability '{a}' is already requested"));
                }
            } else {
                req.push(a.clone());
                changed = true;
            }
        }
        if !changed {
            return Ok(false);
        }
        // The import: a live apply later reads these, not the operator's files.
        let cache = self.path("pkgcache");
        std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
        for (src, nevra) in imports {
            let src = src.strip_prefix("file://").unwrap_or(&src).to_string();
            std::fs::copy(&src, cache.join(format!("{nevra}.rpm")))
                .map_err(|e| format!("importing {src}: {e}"))?;
        }
        let base = deps[bi]["checksum"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let seed = format!("{base}|{req:?}|{local:?}");
        let mut new = deployment(&checksum_for(&seed), false, true);
        let booted_base = deps[bi]["base-checksum"]
            .as_str()
            .unwrap_or(&base)
            .to_string();
        new["base-checksum"] = Value::from(booted_base);
        new["packages"] = Value::from(req.clone());
        new["requested-packages"] = Value::from(req);
        new["requested-local-packages"] = Value::from(local);
        let mut list = vec![new];
        list.extend(deps[bi..].iter().cloned());
        state["deployments"] = Value::from(list);
        Ok(true)
    }

    fn apply_live(
        &self,
        state: &mut Value,
        target: Option<String>,
        allow_replacement: bool,
    ) -> Res<()> {
        let bi = self.booted_idx(state)?;
        let deps = state["deployments"].as_array().cloned().unwrap_or_default();
        let booted = deps[bi].clone();
        let target = match target {
            Some(t) => t,
            None if bi > 0 => deps[0]["checksum"].as_str().unwrap_or_default().to_string(),
            None => return Err("No target commit specified and no pending deployment".into()),
        };
        if let Some(inprog) = booted["live-inprogress"].as_str() {
            if inprog != target {
                return Err(format!(
                    "Previously interrupted while targeting commit {inprog}, cannot change target to {target}"
                ));
            }
        }
        let find = |c: &str| deps.iter().find(|d| d["checksum"] == c).cloned();
        let target_dep = find(&target).ok_or(format!("Commit {target} not found"))?;
        // The transient unlock comes before the package check: a refused first try
        // leaves `/usr` unlocked all the same.
        if booted["unlocked"] != "transient" {
            state["deployments"][bi]["unlocked"] = Value::from("transient");
            self.save(state)?;
        }
        let before = if booted["live-replaced"].is_string() {
            self.live_packages()?
        } else {
            pkg_map(&booted)
        };
        let after = pkg_map(&target_dep);
        let d = diff(&before, &after);
        let base_of = |dep: &Value| {
            dep["base-checksum"]
                .as_str()
                .or(dep["checksum"].as_str())
                .unwrap_or_default()
                .to_string()
        };
        // An OS update in the target changes base packages: one "changed" here.
        let base_changed = usize::from(base_of(&target_dep) != base_of(&booted));
        if !allow_replacement {
            if !d.removed.is_empty() {
                return Err(format!(
                    "packages would be removed: {}, allow replacement to override",
                    d.removed.len()
                ));
            }
            if !d.changed.is_empty() || base_changed > 0 {
                return Err(format!(
                    "packages would be changed: {}, allow replacement to override",
                    d.changed.len() + base_changed
                ));
            }
        }
        let dep = &mut state["deployments"][bi];
        if self.marker("interrupt") {
            dep["live-inprogress"] = Value::from(target.clone());
            self.save(state)?;
            return Err("Transaction interrupted (fake)".into());
        }
        if let Some(o) = dep.as_object_mut() {
            o.remove("live-inprogress");
            o.insert("live-replaced".into(), Value::from(target.clone()));
        }
        self.save(state)?;
        let live = serde_json::to_string(&after).map_err(|e| e.to_string())?;
        std::fs::write(self.path("live-packages.json"), live).map_err(|e| e.to_string())?;

        let gone: Vec<&String> = d
            .removed
            .iter()
            .chain(d.changed.iter().map(|(old, _)| old))
            .collect();
        let arriving: Vec<&String> = d
            .added
            .iter()
            .chain(d.changed.iter().map(|(_, new)| new))
            .collect();
        let ident_name = |i: &str| {
            after
                .iter()
                .chain(before.iter())
                .find(|(_, v)| v.as_str() == i)
                .map(|(n, _)| n.clone())
                .unwrap_or_else(|| i.to_string())
        };
        let files = self.files()?;
        for ident in &gone {
            let name = ident_name(ident);
            for (_, spec) in files.iter().filter(|(p, _)| *p == name) {
                let path = spec.split_whitespace().next().unwrap_or(spec);
                let _ = std::fs::remove_file(path);
            }
            for path in self.payload_paths(ident)? {
                let _ = std::fs::remove_file(path);
            }
        }
        let mut new_files: Vec<String> = Vec::new();
        for ident in &arriving {
            let name = ident_name(ident);
            for (_, spec) in files.iter().filter(|(p, _)| *p == name) {
                // A placeholder names its NEVRA: an upgrade changes the file's content.
                new_files.push(if spec.split_whitespace().nth(1).is_some() {
                    spec.clone()
                } else {
                    format!("{spec} @{ident}")
                });
            }
            new_files.extend(self.payload_specs(ident)?);
        }
        if !new_files.is_empty() {
            self.spawn_file_creator(&new_files)?;
        }
        let mut out = String::new();
        for (title, list) in [("Added", &d.added), ("Removed", &d.removed)] {
            if !list.is_empty() {
                out.push_str(&format!("{title}:\n"));
                for p in list {
                    out.push_str(&format!("  {p}\n"));
                }
            }
        }
        if !d.changed.is_empty() {
            out.push_str("Changed:\n");
            for (old, new) in &d.changed {
                out.push_str(&format!("  {old} -> {new}\n"));
            }
        }
        print!("{out}");
        println!("Successfully updated running filesystem tree.");
        Ok(())
    }

    fn live_packages(&self) -> Res<BTreeMap<String, String>> {
        let body = std::fs::read_to_string(self.path("live-packages.json"))
            .map_err(|e| format!("live-replaced set but no live-packages.json: {e}"))?;
        let v: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        // A list of names is accepted too (tests write `[]` for "nothing layered live").
        Ok(match v {
            Value::Object(m) => m
                .into_iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k, s.to_string())))
                .collect(),
            other => strs(&other).into_iter().map(|n| (n.clone(), n)).collect(),
        })
    }

    /// The directory a live apply writes local RPMs' payloads under, if any.
    fn payload_root(&self) -> Option<PathBuf> {
        let root = std::fs::read_to_string(self.path("root")).ok()?;
        let root = root.trim();
        (!root.is_empty()).then(|| PathBuf::from(root))
    }

    /// The imported RPM of `nevra`, when it is a local package and a payload root is set.
    fn imported(&self, nevra: &str) -> Option<(PathBuf, PathBuf)> {
        let root = self.payload_root()?;
        let rpm = self.path("pkgcache").join(format!("{nevra}.rpm"));
        rpm.is_file().then_some((root, rpm))
    }

    fn payload_paths(&self, nevra: &str) -> Res<Vec<PathBuf>> {
        let Some((root, rpm)) = self.imported(nevra) else {
            return Ok(Vec::new());
        };
        let meta = rpm::PackageMetadata::open(&rpm).map_err(|e| format!("{nevra}: {e}"))?;
        let entries = meta
            .get_file_entries()
            .map_err(|e| format!("{nevra}: {e}"))?;
        Ok(entries
            .iter()
            .filter(|e| e.mode().file_type() == rpm::FileType::Regular)
            .map(|e| root.join(e.path().strip_prefix("/").unwrap_or(&e.path())))
            .collect())
    }

    /// `PATH =CONTENT-FILE` specs for the background creator: each payload file extracted
    /// into `pkgcache/<nevra>.d/` first (atomically placed later, like the other files).
    fn payload_specs(&self, nevra: &str) -> Res<Vec<String>> {
        let Some((root, rpm)) = self.imported(nevra) else {
            return Ok(Vec::new());
        };
        let pkg = rpm::Package::open(&rpm).map_err(|e| format!("{nevra}: {e}"))?;
        let stage = self.path("pkgcache").join(format!("{nevra}.d"));
        std::fs::create_dir_all(&stage).map_err(|e| format!("{}: {e}", stage.display()))?;
        let mut specs = Vec::new();
        for (i, f) in pkg
            .files()
            .map_err(|e| format!("{nevra}: {e}"))?
            .enumerate()
        {
            let f = f.map_err(|e| format!("{nevra}: {e}"))?;
            let Some(content) = f.content() else { continue };
            if f.metadata.mode().file_type() != rpm::FileType::Regular {
                continue;
            }
            let staged = stage.join(i.to_string());
            std::fs::write(&staged, content).map_err(|e| format!("{}: {e}", staged.display()))?;
            let path = f.metadata.path();
            let dest = root.join(path.strip_prefix("/").unwrap_or(&path));
            specs.push(format!(
                "{} {} {:o}",
                dest.display(),
                staged.display(),
                f.metadata.permissions()
            ));
        }
        Ok(specs)
    }

    /// `(package, "PATH[ SOURCE]")` pairs; the second part is passed as is to the
    /// background creator.
    fn files(&self) -> Res<Vec<(String, String)>> {
        let body = match std::fs::read_to_string(self.path("files")) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.to_string()),
        };
        Ok(body
            .lines()
            .filter_map(|l| l.trim().split_once(char::is_whitespace))
            .map(|(p, f)| (p.to_string(), f.trim().to_string()))
            .collect())
    }

    fn spawn_file_creator(&self, files: &[String]) -> Res<()> {
        let delay = std::fs::read_to_string(self.path("delay")).unwrap_or_default();
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        // Detached, with no inherited pipes: the caller sees us exit right away.
        std::process::Command::new(exe)
            .arg("__create-files")
            .arg(delay.trim())
            .args(files)
            .env("FAKE_RPM_OSTREE_DIR", &self.dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Each spec: `PATH` (a placeholder), `PATH @IDENT` (a placeholder naming IDENT),
    /// `PATH SOURCE` (a copy) or `PATH SOURCE MODE` (a copy with octal MODE).
    fn create_files_later(&self, args: &[String]) -> ExitCode {
        let Some((delay, files)) = args.split_first() else {
            return ExitCode::from(2);
        };
        let secs: f64 = delay.parse().unwrap_or(0.0);
        std::thread::sleep(Duration::from_secs_f64(secs.max(0.0)));
        for spec in files {
            let mut words = spec.split_whitespace();
            let Some(p) = words.next().map(Path::new) else {
                continue;
            };
            if let Some(parent) = p.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            // Atomically, so that a watcher never sees half a file.
            let tmp = p.with_file_name(format!(
                ".{}.fake-rpm-ostree",
                p.file_name().and_then(|n| n.to_str()).unwrap_or("file")
            ));
            let source = words.next();
            let mode = words
                .next()
                .and_then(|m| u32::from_str_radix(m, 8).ok())
                .unwrap_or(0o755);
            let written = match source {
                Some(ident) if ident.starts_with('@') => std::fs::write(
                    &tmp,
                    format!(
                        "#!/bin/sh\n# placeholder from fake-rpm-ostree: {}\n",
                        &ident[1..]
                    ),
                ),
                Some(source) => std::fs::copy(source, &tmp).map(|_| ()),
                None => std::fs::write(&tmp, "#!/bin/sh\n# placeholder from fake-rpm-ostree\n"),
            };
            if written.is_ok() {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode));
                let _ = std::fs::rename(&tmp, p);
            }
        }
        ExitCode::SUCCESS
    }
}
