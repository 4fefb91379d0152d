//! Proof that kubelet is back and talking to the CRI-O that runs now.
//!
//! On OpenShift `kubelet.service` has `Requires=crio.service`: restarting CRI-O restarts
//! kubelet, and the Node's Ready condition can stay True throughout. So kata-live collects
//! its own evidence, each piece reported on its own:
//!
//! * a. `unit`: kubelet's unit is active/running; when it was expected to restart with CRI-O
//!   (a `kubelet_before` snapshot was given) it has a new InvocationID; its MainPID stayed
//!   the same, with NRestarts unchanged, for a whole stable window, counted from the main
//!   process's start per systemd (`ExecMainStartTimestampMonotonic`), so that a kubelet up
//!   for longer than the window when kata-live first looks holds at once.
//! * b. `healthz`: kubelet's healthz answers 200 `ok`.
//! * c. `connection`: kubelet's MainPID holds a live unix stream socket whose peer is held by
//!   the current CRI-O main process and is bound to the CRI socket path (either spelling,
//!   resolved in CRI-O's mount namespace). Found with /proc/PID/fd and `NETLINK_SOCK_DIAG`.
//! * d. `relists` (optional): CRI-O's `ListPodSandbox` counter grows.
//!
//! The decisions ([`UnitWatch`], [`judge_connection`], [`judge_healthz`], [`RelistWatch`],
//! [`verdict`]) are pure; [`prove_reconnected`] and [`observe`] do the I/O around them.
//!
//! Network namespaces: sock_diag and healthz are done from kubelet's / CRI-O's network
//! namespace (see [`netns`]); on a real node that is kata-live's own and costs nothing.

pub mod http;
pub mod netns;
pub mod procfd;
pub mod sockdiag;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::host::Host;
use crate::systemd::{window, UnitState};
use sockdiag::UnixSock;

/// One piece of evidence: whether it holds, and what was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub ok: bool,
    pub detail: String,
}

impl Check {
    pub fn ok(detail: impl Into<String>) -> Self {
        Check {
            ok: true,
            detail: detail.into(),
        }
    }
    pub fn missing(detail: impl Into<String>) -> Self {
        Check {
            ok: false,
            detail: detail.into(),
        }
    }
}

/// Everything one look found; `relists` is `None` when that check is not enabled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evidence {
    pub unit: Check,
    pub healthz: Check,
    pub connection: Check,
    pub relists: Option<Check>,
}

impl Evidence {
    /// Every piece in words: "unit holds: ...; healthz missing: ...".
    pub fn describe(&self) -> String {
        self.pieces()
            .into_iter()
            .map(|(l, c)| {
                format!(
                    "{l} {}: {}",
                    if c.ok { "holds" } else { "missing" },
                    c.detail
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// (label, check) for every piece: unit, healthz, connection, then relists when asked.
    pub fn pieces(&self) -> Vec<(&'static str, &Check)> {
        let mut v = vec![
            ("unit", &self.unit),
            ("healthz", &self.healthz),
            ("connection", &self.connection),
        ];
        if let Some(r) = &self.relists {
            v.push(("relists", r));
        }
        v
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Reconnection {
    Reconnected,
    /// Labels of the pieces of evidence that do not hold.
    Missing(Vec<&'static str>),
}

/// Success only when every piece of evidence present holds (relists only when enabled).
pub fn verdict(e: &Evidence) -> Reconnection {
    let missing: Vec<_> = e
        .pieces()
        .into_iter()
        .filter(|(_, c)| !c.ok)
        .map(|(l, _)| l)
        .collect();
    if missing.is_empty() {
        Reconnection::Reconnected
    } else {
        Reconnection::Missing(missing)
    }
}

/// "connection: what was seen; unit: ..." for each missing piece.
pub fn describe_missing(e: &Evidence) -> String {
    e.pieces()
        .into_iter()
        .filter(|(_, c)| !c.ok)
        .map(|(l, c)| format!("{l}: {}", c.detail))
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error(
        "kubelet ({unit}) did not prove within {:.1} s that it reconnected to the runtime \
         (pid {crio_pid}, socket {socket}); missing {missing}. Check `journalctl -u {unit}` \
         and the runtime's journal; do not move on to another node",
        deadline.as_secs_f64()
    )]
    NotReconnected {
        unit: String,
        crio_pid: u32,
        socket: PathBuf,
        deadline: Duration,
        missing: String,
        evidence: Box<Evidence>,
    },
}

// ---------------------------------------------------------------------------------------
// a. the unit

/// Tracks kubelet's unit across looks: (a) holds once the same running MainPID, with
/// NRestarts and InvocationID unchanged, has run for `window` since its start per systemd.
#[derive(Debug, Clone)]
pub struct UnitWatch {
    before: Option<UnitState>,
    window: Duration,
    since: Option<(Instant, UnitState)>,
}

impl UnitWatch {
    /// `before`: kubelet's state before CRI-O was restarted, when kubelet is expected to
    /// restart with it (`Requires=crio.service`); then a new InvocationID is required.
    pub fn new(before: Option<UnitState>, window: Duration) -> Self {
        UnitWatch {
            before,
            window,
            since: None,
        }
    }

    /// [`Self::observe_at`] without systemd's clock: the window starts at the first look.
    pub fn observe(&mut self, now: Instant, s: &UnitState) -> Check {
        self.observe_at(now, 0, s)
    }

    /// When the window ends (on the clock of the `now` given to `observe_at`), once a
    /// running main process is being watched.
    pub fn window_ends(&self) -> Option<Instant> {
        self.since.as_ref().map(|(t, _)| *t + self.window)
    }

    /// One look at `s` at `now`, which is `now_mono_us` on CLOCK_MONOTONIC (0: unknown).
    /// A main process seen for the first time is counted from its start per systemd
    /// (ExecMainStartTimestampMonotonic, see [`crate::systemd::window`]), so a window that
    /// elapsed before the first look holds at once; any change of MainPID, NRestarts or
    /// InvocationID starts the window over, from the new process's start.
    pub fn observe_at(&mut self, now: Instant, now_mono_us: u64, s: &UnitState) -> Check {
        let anchor = || window::anchor(now, now_mono_us, s.exec_main_start_mono_us);
        if s.active_state != "active" || s.sub_state != "running" {
            self.since = None;
            return Check::missing(format!(
                "{} is {}/{} (result {}), not active/running",
                s.name, s.active_state, s.sub_state, s.result
            ));
        }
        if s.main_pid == 0 {
            self.since = None;
            return Check::missing(format!("{} is active/running without a MainPID", s.name));
        }
        if let Some(b) = &self.before {
            if b.invocation_id == s.invocation_id {
                self.since = None;
                return Check::missing(format!(
                    "{} still has InvocationID {} (MainPID {}) from before the runtime's restart; \
                     it has not restarted with the runtime yet",
                    s.name, s.invocation_id, s.main_pid
                ));
            }
        }
        let mut change = String::new();
        match &self.since {
            Some((_, prev))
                if prev.main_pid == s.main_pid
                    && prev.n_restarts == s.n_restarts
                    && prev.invocation_id == s.invocation_id => {}
            Some((_, prev)) => {
                change = format!(
                    " (was MainPID {}, NRestarts {}, InvocationID {}: restarted, stable window starts over)",
                    prev.main_pid, prev.n_restarts, prev.invocation_id
                );
                self.since = Some((anchor(), s.clone()));
            }
            None => self.since = Some((anchor(), s.clone())),
        }
        let stable_for = self
            .since
            .as_ref()
            .map(|(t, _)| now.saturating_duration_since(*t))
            .unwrap_or_default();
        let what = format!(
            "{} active/running, MainPID {}, InvocationID {}, NRestarts {}",
            s.name, s.main_pid, s.invocation_id, s.n_restarts
        );
        if stable_for >= self.window {
            Check::ok(format!(
                "{what}, unchanged for {:.1}s (window {:.1}s)",
                stable_for.as_secs_f64(),
                self.window.as_secs_f64()
            ))
        } else {
            Check::missing(format!(
                "{what}, unchanged for only {:.1}s of the {:.1}s stable window{change}",
                stable_for.as_secs_f64(),
                self.window.as_secs_f64()
            ))
        }
    }
}

// ---------------------------------------------------------------------------------------
// b. healthz

/// (b) holds on a 200 whose body is `ok`.
pub fn judge_healthz(url: &str, got: &Result<http::Response, String>) -> Check {
    match got {
        Ok(r) if r.status == 200 && r.body.trim() == "ok" => {
            Check::ok(format!("{url} answered ok"))
        }
        Ok(r) => Check::missing(format!(
            "{url} answered {} \"{}\"",
            r.status,
            r.body.chars().take(200).collect::<String>().escape_debug()
        )),
        Err(e) => Check::missing(e.clone()),
    }
}

// ---------------------------------------------------------------------------------------
// c. the connection

/// What /proc and sock_diag showed, for [`judge_connection`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ConnectionObservation {
    pub kubelet_pid: u32,
    pub crio_pid: u32,
    /// Socket inodes in `/proc/<kubelet>/fd`.
    pub kubelet_sockets: BTreeSet<u64>,
    /// Socket inodes in `/proc/<crio>/fd`.
    pub crio_sockets: BTreeSet<u64>,
    /// Established unix sockets of the namespaces involved (merged dumps).
    pub established: Vec<UnixSock>,
    /// The bound names seen in `established` that name the CRI socket (decided at the edge,
    /// where CRI-O's mount namespace can be looked at).
    pub cri_names: BTreeSet<PathBuf>,
}

/// (c) holds when a live stream socket held by CRI-O, bound to the CRI socket, has as peer
/// a live stream socket held by kubelet whose peer is that same CRI-O socket.
pub fn judge_connection(o: &ConnectionObservation) -> Check {
    let by_inode: BTreeMap<u32, &UnixSock> = o.established.iter().map(|s| (s.inode, s)).collect();
    let on_cri = |s: &UnixSock| s.name.as_ref().is_some_and(|n| o.cri_names.contains(n));
    let crio_conns: Vec<&UnixSock> = o
        .established
        .iter()
        .filter(|s| o.crio_sockets.contains(&u64::from(s.inode)) && s.is_live_stream() && on_cri(s))
        .collect();
    for c in &crio_conns {
        let Some(p) = c.peer else { continue };
        if !o.kubelet_sockets.contains(&u64::from(p)) {
            continue;
        }
        let Some(k) = by_inode.get(&p) else { continue };
        if k.is_live_stream() && k.peer == Some(c.inode) {
            return Check::ok(format!(
                "kubelet pid {} socket:[{}] is connected to the runtime's pid {} socket:[{}] on {}",
                o.kubelet_pid,
                p,
                o.crio_pid,
                c.inode,
                c.name.as_deref().unwrap_or(Path::new("?")).display()
            ));
        }
    }
    // Say what kubelet is connected to instead, to tell "old CRI-O" from "nothing".
    let kubelet_peers: Vec<String> = o
        .established
        .iter()
        .filter(|s| o.kubelet_sockets.contains(&u64::from(s.inode)) && s.is_live_stream())
        .filter_map(|s| s.peer)
        .map(|p| match by_inode.get(&p) {
            Some(peer) => format!(
                "socket:[{p}]{}{}",
                peer.name
                    .as_ref()
                    .map(|n| format!(" on {}", n.display()))
                    .unwrap_or_default(),
                if o.crio_sockets.contains(&u64::from(p)) {
                    " (held by the runtime)"
                } else {
                    " (not held by the runtime)"
                }
            ),
            None => format!("socket:[{p}] (not seen in the dump)"),
        })
        .collect();
    Check::missing(format!(
        "no live connection between kubelet pid {} and the runtime's pid {} on the CRI socket: \
         kubelet holds {} sockets, live unix peers [{}]; the runtime holds {} live connections \
         on the CRI socket",
        o.kubelet_pid,
        o.crio_pid,
        o.kubelet_sockets.len(),
        kubelet_peers.join(", "),
        crio_conns.len()
    ))
}

/// Timeout of one sock_diag receive.
const DIAG_TIMEOUT: Duration = Duration::from_secs(2);

/// Reads /proc and sock_diag for kubelet `kubelet_pid` and CRI-O `crio_pid` (blocking I/O;
/// the kernel answers at once). A dump is taken in the network namespace of each of the two
/// processes (entered with setns when it is not ours): unix sockets bound to a path connect
/// across namespaces, and the kernel creates the accepted (CRI-O) side in the namespace of
/// the connecting socket, so the pair lives in kubelet's namespace, not necessarily CRI-O's.
pub fn look_at_connection(
    proc_root: &Path,
    kubelet_pid: u32,
    crio_pid: u32,
    cri_socket: &Path,
) -> Result<ConnectionObservation, String> {
    if kubelet_pid == 0 {
        return Err("kubelet has no MainPID".into());
    }
    if crio_pid == 0 {
        return Err("the runtime has no MainPID".into());
    }
    let kubelet_sockets =
        procfd::socket_inodes(proc_root, kubelet_pid).map_err(|e| e.to_string())?;
    let crio_sockets = procfd::socket_inodes(proc_root, crio_pid).map_err(|e| e.to_string())?;
    let mut namespaces = BTreeMap::new();
    for pid in [crio_pid, kubelet_pid] {
        let id = netns::of_pid(proc_root, pid).map_err(|e| e.to_string())?;
        namespaces.entry((id.dev, id.ino)).or_insert(pid);
    }
    let mut established = Vec::new();
    let mut seen = BTreeSet::new();
    for pid in namespaces.values() {
        let ns = netns::ns_path(proc_root, *pid);
        let dump = netns::run_in(&ns, || sockdiag::dump_established(DIAG_TIMEOUT))
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("sock_diag dump in {}: {e}", ns.display()))?;
        for s in dump {
            if seen.insert(s.inode) {
                established.push(s);
            }
        }
    }
    // Names are resolved in CRI-O's mount namespace, through its root.
    let crio_root = proc_root.join(crio_pid.to_string()).join("root");
    let names: BTreeSet<&PathBuf> = established
        .iter()
        .filter(|s| crio_sockets.contains(&u64::from(s.inode)))
        .filter_map(|s| s.name.as_ref())
        .collect();
    let cri_names = names
        .into_iter()
        .filter(|n| procfd::names_cri_socket(Some(&crio_root), cri_socket, n))
        .cloned()
        .collect();
    Ok(ConnectionObservation {
        kubelet_pid,
        crio_pid,
        kubelet_sockets,
        crio_sockets,
        established,
        cri_names,
    })
}

// ---------------------------------------------------------------------------------------
// d. relists

/// Tracks CRI-O's ListPodSandbox counter: (d) holds once it grew between two looks.
#[derive(Debug, Clone, Default)]
pub struct RelistWatch {
    baseline: Option<f64>,
}

impl RelistWatch {
    pub fn observe(&mut self, sample: &Result<Option<f64>, String>) -> Check {
        let v = match sample {
            Err(e) => return Check::missing(format!("CRI-O metrics unreadable: {e}")),
            Ok(None) => {
                return Check::missing(
                    "CRI-O metrics have no ListPodSandbox operations counter \
                     (is enable_metrics on?)",
                )
            }
            Ok(Some(v)) => *v,
        };
        match self.baseline {
            None => {
                self.baseline = Some(v);
                Check::missing(format!("ListPodSandbox count {v}, waiting to see it grow"))
            }
            Some(b) if v > b => Check::ok(format!("ListPodSandbox count grew from {b} to {v}")),
            Some(b) if v < b => {
                self.baseline = Some(v);
                Check::missing(format!(
                    "ListPodSandbox count went back from {b} to {v} (CRI-O restarted); waiting to see it grow"
                ))
            }
            Some(b) => Check::missing(format!(
                "ListPodSandbox count still {b}: kubelet is not relisting"
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------
// I/O: the looks

/// Pause between two looks of the proof (≤ 100 ms: a condition that comes true is seen
/// within this, plus the look itself).
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// What the proof looks at.
#[derive(Debug, Clone)]
pub struct ReconnectInputs<'a> {
    pub host: &'a Host,
    pub kubelet_unit: &'a str,
    /// MainPID of the CRI-O that runs now (after the restart).
    pub crio_main_pid: u32,
    pub cri_socket: &'a Path,
    pub healthz_url: &'a str,
    pub stable_window: Duration,
    /// CRI-O's metrics URL when the relist check (d) is enabled.
    pub metrics_url: Option<&'a str>,
    /// kubelet's state before CRI-O was restarted, when kubelet must restart with it.
    pub kubelet_before: Option<&'a UnitState>,
    /// Pause between looks.
    pub poll_interval: Duration,
    /// Bound on each healthz / metrics request.
    pub request_timeout: Duration,
}

impl<'a> ReconnectInputs<'a> {
    /// `cri_socket`: the runtime's (CRI-O's or containerd's), whose new process kubelet
    /// must be connected to.
    pub fn from_config(
        cfg: &'a crate::config::Kubelet,
        kubelet_unit: &'a str,
        host: &'a Host,
        cri_socket: &'a std::path::Path,
        crio_main_pid: u32,
        kubelet_before: Option<&'a UnitState>,
    ) -> Self {
        ReconnectInputs {
            host,
            kubelet_unit,
            crio_main_pid,
            cri_socket,
            healthz_url: &cfg.healthz_url,
            stable_window: cfg.stable_window,
            metrics_url: cfg.check_relists.then_some(cfg.crio_metrics_url.as_str()),
            kubelet_before,
            poll_interval: POLL_INTERVAL,
            request_timeout: Duration::from_secs(2),
        }
    }
}

async fn look_healthz(inputs: &ReconnectInputs<'_>, kubelet_pid: Option<u32>) -> Check {
    let ns = kubelet_pid.map(|p| netns::ns_path(&inputs.host.proc, p));
    let got = http::get(inputs.healthz_url, ns.as_deref(), inputs.request_timeout)
        .await
        .map_err(|e| e.to_string());
    judge_healthz(inputs.healthz_url, &got)
}

async fn look_relists(inputs: &ReconnectInputs<'_>, url: &str) -> Result<Option<f64>, String> {
    // CRI-O's metrics listen in CRI-O's network namespace.
    let ns = netns::ns_path(&inputs.host.proc, inputs.crio_main_pid);
    let r = http::get(url, Some(&ns), inputs.request_timeout)
        .await
        .map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(format!("GET {url}: status {}", r.status));
    }
    Ok(http::list_pod_sandbox_count(&r.body))
}

async fn look_connection(inputs: &ReconnectInputs<'_>, kubelet_pid: Option<u32>) -> Check {
    let Some(kpid) = kubelet_pid else {
        return Check::missing("kubelet's MainPID unknown (unit not read or not running)");
    };
    let proc_root = inputs.host.proc.clone();
    let crio = inputs.crio_main_pid;
    let sock = inputs.cri_socket.to_owned();
    let task =
        tokio::task::spawn_blocking(move || look_at_connection(&proc_root, kpid, crio, &sock));
    // Each dump receive is bounded by DIAG_TIMEOUT; this bounds the whole look.
    match tokio::time::timeout(DIAG_TIMEOUT * 4, task).await {
        Ok(Ok(Ok(o))) => judge_connection(&o),
        Ok(Ok(Err(e))) => Check::missing(e),
        Ok(Err(e)) => Check::missing(format!("connection look failed: {e}")),
        Err(_) => Check::missing("connection look did not finish in time"),
    }
}

/// The pause before the next look: the poll interval, shortened so that the look after the
/// stable window's end comes right at its end, and never past the deadline.
pub fn next_pause(
    poll: Duration,
    window_ends: Option<Instant>,
    now: Instant,
    remaining: Duration,
) -> Duration {
    let until_window = window_ends
        .map(|t| t.saturating_duration_since(now))
        .filter(|d| !d.is_zero())
        .unwrap_or(poll);
    poll.min(until_window).min(remaining)
}

/// Waits until kubelet proves it reconnected to the CRI-O at `inputs.crio_main_pid` (a-c, and
/// d when `metrics_url` is set), reading kubelet's unit fresh with `read_unit` at each look.
/// On `deadline`, the error names every missing piece and what was seen instead.
pub async fn prove_reconnected<F, Fut>(
    inputs: ReconnectInputs<'_>,
    mut read_unit: F,
    deadline: Duration,
) -> Result<Evidence, KubeletError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<UnitState, String>>,
{
    let start = Instant::now();
    let mut units = UnitWatch::new(inputs.kubelet_before.cloned(), inputs.stable_window);
    let mut relists = RelistWatch::default();
    loop {
        // The look at the deadline gets a whole request's time: its evidence is what the
        // error reports, and a read cut short would only say "did not finish".
        let remaining = deadline.saturating_sub(start.elapsed());
        let unit =
            match tokio::time::timeout(remaining.max(inputs.request_timeout), read_unit()).await {
                Ok(Ok(s)) => Ok(s),
                Ok(Err(e)) => Err(format!("cannot read {}: {e}", inputs.kubelet_unit)),
                Err(_) => Err(format!(
                    "reading {} did not finish in time",
                    inputs.kubelet_unit
                )),
            };
        let (unit_check, kubelet_pid) = match &unit {
            Ok(s) => (
                units.observe_at(Instant::now(), window::monotonic_now_us(), s),
                (s.main_pid != 0).then_some(s.main_pid),
            ),
            Err(e) => (Check::missing(e.clone()), None),
        };
        let healthz = look_healthz(&inputs, kubelet_pid).await;
        let connection = look_connection(&inputs, kubelet_pid).await;
        let relist = match inputs.metrics_url {
            Some(url) => Some(relists.observe(&look_relists(&inputs, url).await)),
            None => None,
        };
        let evidence = Evidence {
            unit: unit_check,
            healthz,
            connection,
            relists: relist,
        };
        match verdict(&evidence) {
            Reconnection::Reconnected => {
                tracing::info!(
                    unit = %evidence.unit.detail,
                    healthz = %evidence.healthz.detail,
                    connection = %evidence.connection.detail,
                    "kubelet reconnected to the runtime: {}",
                    evidence.describe()
                );
                return Ok(evidence);
            }
            Reconnection::Missing(m) => {
                tracing::debug!(
                    missing = %m.join(", "),
                    "kubelet not proven reconnected yet: {}",
                    describe_missing(&evidence)
                );
            }
        }
        if start.elapsed() >= deadline {
            return Err(KubeletError::NotReconnected {
                unit: inputs.kubelet_unit.into(),
                crio_pid: inputs.crio_main_pid,
                socket: inputs.cri_socket.to_owned(),
                deadline,
                missing: describe_missing(&evidence),
                evidence: Box::new(evidence),
            });
        }
        let pause = next_pause(
            inputs.poll_interval,
            units.window_ends(),
            Instant::now(),
            deadline.saturating_sub(start.elapsed()),
        );
        tokio::time::sleep(pause).await;
    }
}

/// One look, for `verify`/`status`: no stable window is waited for (the unit check reports
/// the state seen, and `kubelet_before` is honoured), healthz and the connection are looked
/// at once; relists (when enabled) are sampled twice, `relist_window` apart.
pub async fn observe(
    inputs: &ReconnectInputs<'_>,
    kubelet: &UnitState,
    relist_window: Duration,
) -> Evidence {
    let mut units = UnitWatch::new(inputs.kubelet_before.cloned(), Duration::ZERO);
    let unit = units.observe(Instant::now(), kubelet);
    let kpid = (kubelet.main_pid != 0).then_some(kubelet.main_pid);
    let healthz = look_healthz(inputs, kpid).await;
    let connection = look_connection(inputs, kpid).await;
    let relists = match inputs.metrics_url {
        Some(url) => {
            let mut w = RelistWatch::default();
            w.observe(&look_relists(inputs, url).await);
            tokio::time::sleep(relist_window).await;
            Some(w.observe(&look_relists(inputs, url).await))
        }
        None => None,
    };
    Evidence {
        unit,
        healthz,
        connection,
        relists,
    }
}

#[cfg(test)]
mod tests;
