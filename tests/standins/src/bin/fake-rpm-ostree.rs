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
//!   by a detached background process (under a systemd service, a transient unit started
//!   with `systemd-run`, so that it outlives the service's cgroup as rpm-ostreed's work
//!   does), as a live apply's files reached CRI-O late (without it, the live apply writes
//!   them itself before its transaction ends); with `delay`, `hold-files` existing keeps
//!   that process from creating them until the file is removed (polled every 50 ms), so
//!   that a test acts while they are missing without racing the delay;
//! - fault markers (the file existing switches it on): `fail` (mutating commands exit 1
//!   with an error, starting no transaction), `hang` (a transaction is held at its start,
//!   before it changes anything: the "staging" phase; held for as long as the file exists,
//!   so removing it lets the transaction go on to its end; a cancellation ends it there,
//!   changing nothing, unless `slow-cancel` exists too, which keeps the cancellation from
//!   completing: the transaction then goes on to its end once `hang` is removed),
//!   `hang-live` (a live apply is held once its target is recorded as
//!   `live-inprogress`, before the running tree changes: the "live" phase; a cancellation is
//!   ignored there, as rpm-ostree's live step ignores it, and the apply finishes once the
//!   file is removed), `fail-status`, `hang-status` (`status` fails, or hangs until SIGINT:
//!   `Caught SIGINT, cancelling transaction`, `error: Operation was cancelled`),
//!   `interrupt` (a live apply records `live-inprogress` and exits 1, as an interrupted
//!   apply leaves it);
//! - `hanging`: `CLIENT-PID PHASE` (`staging` or `live`), written by a client once it
//!   catches SIGINT and its transaction is held in that phase, removed when that client
//!   ends (a killed client leaves it). Before the transaction starts, a SIGINT kills the
//!   client, as it kills the real one: a test that needs the cancellation signals only
//!   after this exists. `cancelled`: written (`SIGINT`) when a client caught SIGINT;
//! - `transaction`: the running transaction, `DAEMON-PID TITLE` (the title is the command
//!   line) and its directory `transactions/<client pid>/` (the request, the client's copies
//!   of its local RPMs, the daemon's output, `held`, `cancel`, `result`).
//!
//! Client and daemon: a mutating command (`install`, `uninstall`, `apply-live`) is checked
//! by the client (options, operands, the `fail` marker, its local RPMs opened and copied as
//! the real client hands over their fds), which then starts the transaction, under a lock,
//! in a process of its own process group (`fake-rpm-ostree __daemon DIR`) and relays that
//! process's output until it ends. So, as with rpm-ostreed: a SIGTERM or SIGKILL of the
//! client kills it silently while the transaction goes on to its end, leaving the state as
//! if the client had waited; a SIGINT makes the client print `Caught SIGINT, cancelling
//! transaction`, ask for cancellation (also what `rpm-ostree cancel` does) and wait for the
//! transaction to end, then end `error: Operation was cancelled`, exit 1, whatever the
//! transaction did: cancelled while staging (nothing changed), or run to its end in the live
//! step (the packages live).
//!
//! The CLI surface follows rpm-ostree: `install` (`--idempotent`, `--allow-inactive`,
//! `-A/--apply-live`, `-y/--assumeyes`, `-C/--cache-only`, `--uninstall=PKG`, repeated; no
//! `--allow-replacement`), `uninstall` (`--idempotent`; no `--apply-live`, like the real
//! one), `apply-live` (`--allow-replacement`, `--target`, `--reset`), `status` (`--json`,
//! `--booted`), `cancel`, and `deploy REVISION` (no options: tests stage an OS update with it,
//! as the machine-config daemon does; a new pending deployment on that OS commit keeping the
//! default deployment's packages; the real one pulls REVISION, here it is in the repo). Unknown options are errors (`Unknown option X`), as they are for
//! the real CLI.
//!
//! What it copies from rpm-ostree (docs/runtime-facts.md, "rpm-ostree apply-live"):
//! - A local RPM (an argument ending in `.rpm`) is read as rpm-ostree reads it: its header
//!   gives the NEVRA (`name-[epoch:]version-release.arch`, the epoch left out when 0), never
//!   its file name; `requested-local-packages` lists NEVRAs; local packages never appear in
//!   `packages`. A file that is not an RPM is an error.
//! - Requests are keyed by full NEVRA: the same NEVRA again is `Package
//!   '<sha256>:<nevra>' is already layered`; another NEVRA of a name already layered from a
//!   local RPM fails in depsolve (`conflicting requests`, `cannot install both NEW from
//!   @commandline and OLD from @commandline`), with or without `--idempotent`. By name:
//!   `Package/capability 'foo' is already requested`.
//! - A new deployment (install, uninstall) is built on the default deployment's OS commit, so
//!   an OS update staged stays staged under the new packages.
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
//! Where docs/runtime-facts.md left two possibilities, the stand-in takes the stricter one:
//! - an OS update in the target counts as one changed package, so `install -A` and a plain
//!   `apply-live` over a staged OS update are refused (the real count is the number of base
//!   packages the update changes: always at least one, never zero);
//! - the depsolve failure is raised for any second NEVRA of a name layered from a local RPM,
//!   also when the new one is older (a downgrade conflicts just the same) and under
//!   `--idempotent` (which only skips exact duplicates);
//! - the texts marked "about" in docs/runtime-facts.md (the depsolve problem, an unreadable RPM:
//!   `Failed to read package PATH: ...`) are matched by tests on their stable parts only
//!   (`conflicting requests`, `cannot install both ... from @commandline`).
//!
//! - One transaction at a time, daemon-wide: while one runs (whether its client lives or
//!   not), `status --json` shows `"transaction": [method, sender, object-path]` and any
//!   other mutating command fails with `Transaction in progress: TITLE` and ` You can cancel
//!   the current transaction with `rpm-ostree cancel``; `install` with `-A` or a local RPM
//!   keeps the D-Bus call's prefix (docs/runtime-facts.md: "about"; the fake takes `Updating
//!   deployment: GDBus.Error:org.projectatomic.rpmostreed.Error.Failed: Transaction in
//!   progress: TITLE`). A live apply records its target as `live-inprogress` before it
//!   changes the running tree, so a status read while it runs shows both.
//!
//! Where the stand-in differs from the real daemon, and why:
//! - the "daemon" is one process per transaction, started by its client, not a service:
//!   under a systemd unit it stays in the unit's cgroup, so the unit's final SIGKILL (a
//!   stop with `KillMode=mixed` once the main process is gone, or a kill of the whole
//!   unit) ends the transaction where rpm-ostreed, in its own unit, would go on (the
//!   state is then as a daemon crash leaves it: `live-inprogress` if in the live step).
//!   A client that is only interrupted waits for it, and kata-live waits for its client
//!   (30 s), so this matters only for a transaction held longer than that, or a unit
//!   killed as a whole; the delayed file creator, which runs on after the transaction,
//!   escapes the cgroup (see `delay`);
//! - a cancellation while staging ends the transaction at once (rpm-ostreed checks for one
//!   at points of its own, so a real one may still stage the deployment first);
//! - the same request sent again does not attach (`Attaching to existing transaction`):
//!   it is refused as any other;
//! - no D-Bus: the transaction's sender is always `:1.42`, and its title the command line.
//!
//! On a node booted from an ostree deployment (`/run/ostree-booted`: the ostree test node,
//! `node.sh boot --flavour ostree`), ostree's state is the fake's and its changes are real
//! (`kata_live_standins::rpm_ostree_real`): `status --json` is read from ostree, a layered
//! deployment is a real commit staged with `ostree admin deploy --stage`, the live apply goes
//! through the real transient unlock and copies into ostree's overlay in rpm-ostree's order,
//! and `live-replaced`/`live-inprogress` are rpm-ostree's refs. There `state.json`,
//! `live-packages.json`, `root`, `delay` and `hold-files` are not used; `hold-copy` holds a
//! live apply with the overlay mounted (and writable to the daemon) before anything is
//! copied (`held` says `copy`); `live-timings` gets a line `WHAT EPOCH-SECS` when the
//! unlock's overlay is mounted (`overlay-mounted`), the copy starts (`copy-started`) and
//! `/usr` and `/etc` are filled (`copied`), for benchmarks. The daemon runs as a transient unit of the node's systemd
//! (`rpm-ostreed-fake-<client pid>`), outside the client's unit and its sandbox, as
//! rpm-ostreed runs in a service of its own: killing the client's unit leaves it running.
//! An unlock state other than none, `transient` or `development` (a hotfix) is refused,
//! `apply-live is incompatible with unlock state: STATE` (on both backends).
//! A package's `/opt/NAME` lands in the commit as `/usr/lib/opt/NAME` (`/usr/local/NAME` as
//! `/usr/lib/NAME`) with its link line merged into `/usr/lib/tmpfiles.d/rpm-ostree-autovar.conf`
//! (`rpm_ostree_real::relocate`); the live apply's tmpfiles run has only the prefixes `/run`
//! and `/var`, so the link appears at the next boot, not live (as the real v2025.1:
//! ../shared/rpm-ostree-recorded/opt-package/). On the plain node (no ostree) a package's
//! files are written where it says, `/opt` included: the real rpm-ostree never runs there.
//! Still faked there: the depsolve, RPM scriptlets, the rpmdb (a commit's packages are its
//! metadata key `kata-live-test.packages`), the D-Bus daemon.
//!
//! Not copied: depsolving against repositories (there are none on RHCOS; a name is taken as
//! a package of that name, with no version), `%pre`/`%post` scriptlets (they never run
//! live), the `notice: auto-inferring -y/--assumeyes` line and its 1 s sleep, progress
//! output while a transaction runs.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kata_live_standins::rpm_ostree_real::{run, Ostree};

// Not `mod on_ostree;`: a file of src/bin/ would be a binary target of its own.
#[path = "fake_rpm_ostree/model.rs"]
mod model;
#[path = "fake_rpm_ostree/on_ostree.rs"]
mod on_ostree;
#[path = "fake_rpm_ostree/payload.rs"]
mod payload;
#[path = "fake_rpm_ostree/transaction.rs"]
mod transaction;
use model::{client_opts, deployment, is_local, parse_opts, pkg_map, relay, strs};
use on_ostree::{status_text, Daemon};
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
    /// On a node booted from an ostree deployment: ostree's state is the fake's
    /// (`kata_live_standins::rpm_ostree_real`).
    ostree: Option<Ostree>,
    /// In the daemon: the transaction's directory (`transactions/<client pid>/`).
    tx: Option<PathBuf>,
    /// In the daemon: each local RPM argument → the copy its client handed over.
    rpms: BTreeMap<String, PathBuf>,
}

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = std::env::var_os("FAKE_RPM_OSTREE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/fake-rpm-ostree"));
    let mut fake = Fake {
        ostree: Ostree::detect(&dir),
        dir,
        tx: None,
        rpms: BTreeMap::new(),
    };
    if args.first().map(String::as_str) == Some("__create-files") {
        return fake.create_files_later(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("__status") {
        let status = match &fake.ostree {
            Some(o) => o.status(),
            None => Err("__status is for a node booted from ostree".into()),
        };
        return match status.and_then(|v| serde_json::to_string(&v).map_err(|e| e.to_string())) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        };
    }
    if args.first().map(String::as_str) == Some("__daemon") {
        return match args.get(1) {
            Some(tx) => fake.daemon(Path::new(tx)),
            None => ExitCode::from(2),
        };
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

/// A process that runs (not gone, not a zombie).
fn alive(pid: i32) -> bool {
    pid as u32 != std::process::id()
        && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
}

/// This very binary, to start again: through `/proc/self/exe`, which still opens it when the
/// file was replaced since it started (the test node bind-mounts the build's binary, which
/// a rebuild replaces; its path then reads `... (deleted)`).
fn own_exe() -> PathBuf {
    PathBuf::from("/proc/self/exe")
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
        if let Some(o) = &self.ostree {
            // rpm-ostree's client reads nothing of ostree itself: it asks rpm-ostreed over
            // D-Bus, outside the caller's sandbox. ostree's commands set up a mount namespace
            // on a booted system, which kata-live's unit forbids (RestrictNamespaces=net):
            // read where the daemon would, in a transient unit, unless this is the daemon.
            return if self.tx.is_some() {
                o.status()
            } else {
                self.status_from_a_unit()
            };
        }
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

    /// ostree's state as the daemon reads it: `__status` in a transient unit of the host's
    /// systemd, its JSON on our pipe.
    fn status_from_a_unit(&self) -> Res<Value> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let exe = exe.to_string_lossy();
        let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
        let out = run(std::process::Command::new("systemd-run")
            .args([
                "--quiet",
                "--collect",
                "--wait",
                "--pipe",
                "--no-ask-password",
            ])
            .arg(format!(
                "--unit=rpm-ostreed-fake-status-{}",
                std::process::id()
            ))
            .arg(format!(
                "--setenv=FAKE_RPM_OSTREE_DIR={}",
                self.dir.display()
            ))
            .arg(exe)
            .arg("__status"))?;
        serde_json::from_str(&out).map_err(|e| format!("bad status from the daemon: {e}"))
    }

    fn save(&self, state: &Value) -> Res<()> {
        // On ostree, the state is ostree's: changed by staging and the live apply.
        if self.ostree.is_some() {
            return Ok(());
        }
        let tmp = self.path(&format!(".state.json.{}", std::process::id()));
        let body = serde_json::to_string_pretty(state).map_err(|e| e.to_string())?;
        let mut f = std::fs::File::create(&tmp).map_err(|e| e.to_string())?;
        f.write_all(body.as_bytes()).map_err(|e| e.to_string())?;
        f.sync_all().map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, self.path("state.json")).map_err(|e| e.to_string())
    }

    /// `fail-status` and `hang-status`, for `status` (no transaction: its own process).
    fn status_faults(&self) -> Res<()> {
        if self.marker("hang-status") {
            // Like the real client on Ctrl-C: SIGINT ends the (never-ending) call, which is
            // logged in `cancelled`; SIGTERM keeps its default (the client dies).
            catch_sigint();
            let _ = std::fs::write(self.path("hanging"), format!("{}\n", std::process::id()));
            loop {
                if SIGINT_SEEN.load(Ordering::SeqCst) {
                    eprintln!("Caught SIGINT, cancelling transaction");
                    let _ = std::fs::write(self.path("cancelled"), b"SIGINT\n");
                    return Err("Operation was cancelled".into());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if self.marker("fail-status") {
            return Err("fake failure injected (marker file present)".into());
        }
        Ok(())
    }

    /// The daemon-wide lock: who checks for a running transaction and starts one holds it.
    fn lock(&self) -> Res<nix::fcntl::Flock<std::fs::File>> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.path(".lock"))
            .map_err(|e| format!("lock: {e}"))?;
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| format!("lock: {e}"))
    }

    /// The running transaction: its title and directory. `transaction` holds `DAEMON-PID
    /// TITLE` and the directory on a second line; a daemon gone (or a zombie) ran none.
    fn transaction(&self) -> Option<(String, PathBuf)> {
        let body = std::fs::read_to_string(self.path("transaction")).ok()?;
        let mut lines = body.lines();
        let (pid, title) = lines.next()?.trim().split_once(' ')?;
        let tx = PathBuf::from(lines.next().unwrap_or_default().trim());
        let pid: i32 = pid.parse().ok()?;
        alive(pid).then(|| (title.to_string(), tx))
    }

    fn dispatch(&self, args: &[String]) -> Res<()> {
        let (cmd, rest) = args.split_first().ok_or("No command specified")?;
        match cmd.as_str() {
            "status" => {
                let o = parse_opts(rest, &["--json", "--booted", "-v", "--verbose"], &[])?;
                self.status_faults()?;
                let mut state = self.load()?;
                state["transaction"] = match self.transaction() {
                    Some((title, _)) => json!([
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
                    print!("{}", status_text(&state));
                }
                Ok(())
            }
            "install" | "uninstall" | "apply-live" | "deploy" => {
                let o = client_opts(cmd, rest)?;
                if self.marker("fail") {
                    return Err("fake failure injected (marker file present)".into());
                }
                // What goes through rpm-ostree's deployment-update call (`-A`, or a local
                // RPM) keeps that call's prefix on a D-Bus error.
                let local: Vec<&String> = o
                    .operands
                    .iter()
                    .filter(|a| cmd == "install" && is_local(a))
                    .collect();
                let prefixed =
                    cmd == "install" && (o.flags.contains("--apply-live") || !local.is_empty());
                self.client(args, &local, prefixed)
            }
            "cancel" => {
                if let Some((_, tx)) = self.transaction() {
                    let _ = std::fs::write(tx.join("cancel"), b"cancel\n");
                }
                Ok(())
            }
            other => Err(format!("Unknown command '{other}'")),
        }
    }

    /// The client of a mutating command: hands its request (and its local RPMs, as the real
    /// one hands over their fds) to a daemon process of its own session, then relays the
    /// daemon's output until it finishes. SIGINT asks the daemon to cancel; the client
    /// then waits, and says `Operation was cancelled` whatever the daemon did.
    fn client(&self, args: &[String], local: &[&String], prefixed: bool) -> Res<()> {
        let me = std::process::id();
        let tx = self.path("transactions").join(me.to_string());
        let _ = std::fs::remove_dir_all(&tx);
        std::fs::create_dir_all(&tx).map_err(|e| format!("{}: {e}", tx.display()))?;
        let result = self.client_in(&tx, args, local, prefixed);
        // The daemon is done with it (or never started); a killed client leaves it to the
        // daemon.
        let _ = std::fs::remove_dir_all(&tx);
        result
    }

    fn client_in(&self, tx: &Path, args: &[String], local: &[&String], prefixed: bool) -> Res<()> {
        let mut rpms = serde_json::Map::new();
        for (i, a) in local.iter().enumerate() {
            let src = a.strip_prefix("file://").unwrap_or(a);
            let copy = tx.join(format!("{i}.rpm"));
            std::fs::copy(src, &copy).map_err(|e| format!("Opening {src}: {e}"))?;
            rpms.insert(a.to_string(), Value::from(copy.display().to_string()));
        }
        let request = json!({"args": args, "client": std::process::id(), "rpms": rpms});
        std::fs::write(tx.join("request.json"), request.to_string()).map_err(|e| e.to_string())?;
        let out = std::fs::File::create(tx.join("out")).map_err(|e| e.to_string())?;
        let err = std::fs::File::create(tx.join("err")).map_err(|e| e.to_string())?;
        let lock = self.lock()?;
        if let Some((title, _)) = self.transaction() {
            let prefix = if prefixed {
                "Updating deployment: GDBus.Error:org.projectatomic.rpmostreed.Error.Failed: "
            } else {
                ""
            };
            return Err(format!(
                "{prefix}Transaction in progress: {title}\n You can cancel the current transaction with `rpm-ostree cancel`"
            ));
        }
        let mut daemon = if self.ostree.is_some() {
            drop((out, err));
            self.start_daemon_unit(tx)?
        } else {
            use std::os::unix::process::CommandExt;
            // Its own process group: a signal to the client's group (a terminal's Ctrl-C,
            // `timeout`) does not reach it; only its work ends it.
            Daemon::Child(
                std::process::Command::new(own_exe())
                    .arg0("rpm-ostreed-fake")
                    .arg("__daemon")
                    .arg(tx)
                    .env("FAKE_RPM_OSTREE_DIR", &self.dir)
                    .stdin(std::process::Stdio::null())
                    .stdout(out)
                    .stderr(err)
                    .process_group(0)
                    .spawn()
                    .map_err(|e| format!("starting the transaction: {e}"))?,
            )
        };
        let title = args.join(" ");
        std::fs::write(
            self.path("transaction"),
            format!("{} {title}\n{}\n", daemon.id(), tx.display()),
        )
        .map_err(|e| e.to_string())?;
        drop(lock);
        // From here a SIGINT cancels instead of killing the client.
        catch_sigint();
        let me = std::process::id();
        let mut offsets = (0u64, 0u64);
        let mut cancelling = false;
        let mut reported: Option<String> = None;
        let finished = loop {
            offsets.0 = relay(&tx.join("out"), offsets.0, &mut std::io::stdout());
            offsets.1 = relay(&tx.join("err"), offsets.1, &mut std::io::stderr());
            if SIGINT_SEEN.load(Ordering::SeqCst) && !cancelling {
                eprintln!("Caught SIGINT, cancelling transaction");
                let _ = std::fs::write(self.path("cancelled"), b"SIGINT\n");
                let _ = std::fs::write(tx.join("cancel"), b"SIGINT\n");
                cancelling = true;
            }
            // Held in a phase (the `hang` markers): said in `hanging` once we catch SIGINT.
            if let Ok(phase) = std::fs::read_to_string(tx.join("held")) {
                let phase = phase.trim().to_string();
                if !phase.is_empty() && reported.as_deref() != Some(&phase) {
                    let _ = std::fs::write(self.path("hanging"), format!("{me} {phase}\n"));
                    reported = Some(phase);
                }
            }
            if let Ok(r) = std::fs::read_to_string(tx.join("result")) {
                break Some(r);
            }
            if daemon.exited() {
                break std::fs::read_to_string(tx.join("result")).ok();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        daemon.wait();
        relay(&tx.join("out"), offsets.0, &mut std::io::stdout());
        relay(&tx.join("err"), offsets.1, &mut std::io::stderr());
        if reported.is_some() {
            let _ = std::fs::remove_file(self.path("hanging"));
        }
        if cancelling {
            // The real client ends so even when the daemon finished (the live step ignores
            // cancellation): `status --json` is the only truth afterwards.
            return Err("Operation was cancelled".into());
        }
        match finished {
            Some(r) => match r.split_once('\n') {
                Some(("ok", _)) => Ok(()),
                Some((_, msg)) => Err(msg.to_string()),
                None => Err(format!("bad transaction result: {r}")),
            },
            None => Err("The transaction's daemon exited without a result".into()),
        }
    }

    /// The daemon side of one transaction: runs it to its end whatever becomes of the
    /// client, then writes `result` (`ok\n` or `error\nMESSAGE`) in its directory.
    fn daemon(&mut self, tx: &Path) -> ExitCode {
        // Started as a unit (ostree node), its client learns its pid here.
        let _ = std::fs::write(tx.join("daemon.pid"), std::process::id().to_string());
        let request: Value = std::fs::read_to_string(tx.join("request.json"))
            .ok()
            .and_then(|b| serde_json::from_str(&b).ok())
            .unwrap_or(Value::Null);
        let args = strs(&request["args"]);
        if let Some(m) = request["rpms"].as_object() {
            for (arg, copy) in m {
                if let Some(c) = copy.as_str() {
                    self.rpms.insert(arg.clone(), PathBuf::from(c));
                }
            }
        }
        self.tx = Some(tx.to_path_buf());
        let result = self.execute(&args);
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // Over before its result is out: the client's next command finds the daemon idle.
        if let Ok(lock) = self.lock() {
            let ours = std::fs::read_to_string(self.path("transaction"))
                .is_ok_and(|b| b.starts_with(&format!("{} ", std::process::id())));
            if ours {
                let _ = std::fs::remove_file(self.path("transaction"));
            }
            drop(lock);
        }
        let body = match &result {
            Ok(()) => "ok\n".to_string(),
            Err(e) => format!("error\n{e}"),
        };
        let tmp = tx.join(".result");
        if std::fs::write(&tmp, body).is_ok() {
            let _ = std::fs::rename(&tmp, tx.join("result"));
        }
        // A client killed meanwhile cannot clean up after us.
        let client = request["client"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok());
        if !client.is_some_and(alive) {
            let _ = std::fs::remove_dir_all(tx);
        }
        ExitCode::SUCCESS
    }

    /// The client's copy of a local RPM argument (the argument's own path outside a daemon).
    fn rpm_file(&self, arg: &str) -> PathBuf {
        self.rpms
            .get(arg)
            .cloned()
            .unwrap_or_else(|| PathBuf::from(arg.strip_prefix("file://").unwrap_or(arg)))
    }

    /// Holds the transaction in `phase` while the marker file `marker` exists (said in the
    /// transaction's `held`). A cancellable phase ends at a cancellation request (unless
    /// `slow-cancel` exists), and is checked for one on the way out.
    fn hold(&self, marker: &str, phase: &str, cancellable: bool) -> Res<()> {
        let Some(tx) = &self.tx else { return Ok(()) };
        let cancelled = || tx.join("cancel").exists() && !self.marker("slow-cancel");
        let mut held = false;
        while self.marker(marker) {
            if !held {
                let _ = std::fs::write(tx.join("held"), phase);
                held = true;
            }
            if cancellable && cancelled() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if held {
            let _ = std::fs::remove_file(tx.join("held"));
        }
        if cancellable && cancelled() {
            return Err("Operation was cancelled".into());
        }
        Ok(())
    }

    /// What the daemon does for a mutating command.
    fn execute(&self, args: &[String]) -> Res<()> {
        let (cmd, rest) = args.split_first().ok_or("No command specified")?;
        let o = client_opts(cmd, rest)?;
        if let Some(o) = &self.ostree {
            o.sync_live_refs()?;
        }
        // Before anything changes (an install's staging): cancellable.
        self.hold("hang", "staging", true)?;
        match cmd.as_str() {
            "install" => {
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
                self.stage_real(&mut state)?;
                if o.flags.contains("--apply-live") {
                    self.apply_live(&mut state, None, false)?;
                } else {
                    println!("Run \"systemctl reboot\" to start a reboot");
                }
                Ok(())
            }
            "uninstall" => {
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
                self.stage_real(&mut state)?;
                println!("Run \"systemctl reboot\" to start a reboot");
                Ok(())
            }
            "deploy" => {
                let mut state = self.load()?;
                self.deploy(&mut state, &o.operands[0])?;
                self.save(&state)?;
                self.stage_real(&mut state)?;
                println!("Run \"systemctl reboot\" to start a reboot");
                Ok(())
            }
            "apply-live" => {
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
}
