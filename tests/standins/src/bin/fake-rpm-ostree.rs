//! A fake `rpm-ostree` for tests and the test node. Never shipped.
//!
//! Everything lives in one directory, `$FAKE_RPM_OSTREE_DIR` (default
//! `/var/lib/fake-rpm-ostree`):
//! - `state.json`: the `rpm-ostree status --json` document it answers with (created with
//!   one booted deployment and no layered package when missing);
//! - `calls.log`: one JSON array of argv per call, appended;
//! - `files`: lines `PACKAGE ABSOLUTE-PATH [SOURCE]`, the files a package brings;
//!   created when the package goes live (a copy of SOURCE when given, else a small
//!   executable placeholder), removed when it leaves the running tree;
//! - `delay`: seconds (float) before the files of a live apply appear; they are created
//!   by a detached background process, as a live apply's files reached CRI-O late;
//! - fault markers (the file existing switches it on): `fail` (mutating commands exit 1
//!   with an error), `hang` (mutating commands sleep forever; SIGINT cancels, as for the
//!   real client: `Caught SIGINT, cancelling transaction`, exit 1, logged in `cancelled`;
//!   with `slow-cancel` as well, the cancellation never completes), `fail-status`,
//!   `hang-status` (the same for `status`), `interrupt` (a live apply records
//!   `live-inprogress` and exits 1, as an interrupted apply leaves it);
//! - `hanging`: written (the client's pid) once a hanging client catches SIGINT. Before
//!   that a SIGINT kills it, as it kills the real client before its transaction runs: a
//!   test that needs the cancellation signals only after this exists.
//!
//! The CLI surface follows rpm-ostree: `install` (`--idempotent`, `--allow-inactive`,
//! `-A/--apply-live`, `-y/--assumeyes`, `-C/--cache-only`), `uninstall` (`--idempotent`;
//! no `--apply-live`, like the real one), `apply-live` (`--allow-replacement`,
//! `--target`, `--reset`), `status` (`--json`, `--booted`), `cancel`. Unknown options
//! are errors, as they are for the real CLI.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

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

fn nevra_name(nevra: &str) -> String {
    let s = nevra.strip_suffix(".rpm").unwrap_or(nevra);
    let s = Path::new(s)
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or(s);
    s.rsplitn(3, '-').nth(2).unwrap_or(s).to_string()
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

/// Package names a deployment carries.
fn pkg_names(d: &Value) -> BTreeSet<String> {
    let mut s: BTreeSet<String> = strs(&d["packages"]).into_iter().collect();
    s.extend(strs(&d["requested-packages"]));
    s.extend(
        strs(&d["requested-local-packages"])
            .iter()
            .map(|n| nevra_name(n)),
    );
    s
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

struct Opts {
    flags: BTreeSet<String>,
    target: Option<String>,
    operands: Vec<String>,
}

fn parse_opts(args: &[String], allowed: &[&str], with_value: &[&str]) -> Res<Opts> {
    let mut o = Opts {
        flags: BTreeSet::new(),
        target: None,
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
            o.target = Some(
                it.next()
                    .ok_or(format!("Missing argument for {long}"))?
                    .clone(),
            );
        } else if let Some((_, v)) = long.split_once('=').filter(|(k, _)| with_value.contains(k)) {
            o.target = Some(v.to_string());
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
            let _ = std::fs::write(self.path("hanging"), format!("{}\n", std::process::id()));
            let mut said = false;
            loop {
                if SIGINT_SEEN.load(Ordering::SeqCst) && !said {
                    eprintln!("Caught SIGINT, cancelling transaction");
                    let _ = std::fs::write(self.path("cancelled"), b"SIGINT\n");
                    if !self.marker("slow-cancel") {
                        return Err("Transaction cancelled".into());
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

    fn dispatch(&self, args: &[String]) -> Res<()> {
        let (cmd, rest) = args.split_first().ok_or("No command specified")?;
        match cmd.as_str() {
            "status" => {
                let o = parse_opts(rest, &["--json", "--booted", "-v", "--verbose"], &[])?;
                self.faults(true)?;
                let state = self.load()?;
                if o.flags.contains("--json") {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&state).map_err(|e| e.to_string())?
                    );
                } else {
                    println!("State: idle\nDeployments:");
                    for d in state["deployments"].as_array().into_iter().flatten() {
                        let mark = if d["booted"] == true { "*" } else { " " };
                        println!("{mark} {} packages: {:?}", d["checksum"], pkg_names(d));
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
                    &[],
                )?;
                if o.operands.is_empty() {
                    return Err("At least one PACKAGE must be specified".into());
                }
                self.faults(false)?;
                let mut state = self.load()?;
                let changed = self.change(
                    &mut state,
                    &o.operands,
                    &[],
                    o.flags.contains("--idempotent"),
                )?;
                if !changed {
                    println!("No change.");
                }
                self.save(&state)?;
                let has_pending = self.booted_idx(&state)? > 0;
                if o.flags.contains("--apply-live") && (changed || has_pending) {
                    self.apply_live(&mut state, None, false)?;
                } else if changed {
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
                }
                self.save(&state)
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
                    o.target
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

    /// Layers/unlayers into a new pending deployment based on the default one.
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
        for a in add {
            let (list, item) = if a.ends_with(".rpm") {
                let file = Path::new(a)
                    .file_name()
                    .and_then(|f| f.to_str())
                    .unwrap_or(a);
                (&mut local, file.trim_end_matches(".rpm").to_string())
            } else {
                (&mut req, a.clone())
            };
            if list.contains(&item) {
                if !idempotent {
                    return Err(format!("Package/capability '{a}' is already requested"));
                }
            } else {
                list.push(item);
                changed = true;
            }
        }
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
        if !changed {
            return Ok(false);
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
        // What is live: like the real `rpmostree/live-apply` ref, kept apart from the
        // deployment list (a later install/uninstall replaces the pending deployment).
        let before: BTreeSet<String> = if booted["live-replaced"].is_string() {
            self.live_packages()?
        } else {
            pkg_names(&booted)
        };
        let after = pkg_names(&target_dep);
        let removed: Vec<&String> = before.difference(&after).collect();
        let added: Vec<String> = after.difference(&before).cloned().collect();
        if !removed.is_empty() && !allow_replacement {
            return Err(format!(
                "packages would be removed: {removed:?}; use --allow-replacement"
            ));
        }
        let d = &mut state["deployments"][bi];
        if self.marker("interrupt") {
            d["live-inprogress"] = Value::from(target.clone());
            self.save(state)?;
            return Err("Transaction interrupted (fake)".into());
        }
        if let Some(o) = d.as_object_mut() {
            o.remove("live-inprogress");
            if target == booted["checksum"] {
                o.remove("live-replaced");
            } else {
                o.insert("live-replaced".into(), Value::from(target.clone()));
            }
        }
        self.save(state)?;
        let live = serde_json::to_string(&after).map_err(|e| e.to_string())?;
        std::fs::write(self.path("live-packages.json"), live).map_err(|e| e.to_string())?;
        let files = self.files()?;
        for (pkg, spec) in &files {
            if removed.contains(&pkg) {
                let path = spec.split_whitespace().next().unwrap_or(spec);
                let _ = std::fs::remove_file(path);
            }
        }
        let new_files: Vec<String> = files
            .iter()
            .filter(|(p, _)| added.contains(p))
            .map(|(_, f)| f.clone())
            .collect();
        if !new_files.is_empty() {
            self.spawn_file_creator(&new_files)?;
        }
        println!("Added: {added:?}\nRemoved: {removed:?}");
        println!("Successfully updated running filesystem tree.");
        Ok(())
    }

    fn live_packages(&self) -> Res<BTreeSet<String>> {
        let body = std::fs::read_to_string(self.path("live-packages.json"))
            .map_err(|e| format!("live-replaced set but no live-packages.json: {e}"))?;
        serde_json::from_str(&body).map_err(|e| e.to_string())
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
            let written = match words.next() {
                Some(source) => std::fs::copy(source, &tmp).map(|_| ()),
                None => std::fs::write(&tmp, "#!/bin/sh\n# placeholder from fake-rpm-ostree\n"),
            };
            if written.is_ok() {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755));
                let _ = std::fs::rename(&tmp, p);
            }
        }
        ExitCode::SUCCESS
    }
}
