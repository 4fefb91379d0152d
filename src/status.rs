//! `kata-live status` and `kata-live verify`: look, change nothing.
//!
//! `verify` proves what install proves (handler served by a CRI-O that started after the
//! drop-in and the runtime files, CRI ready, kubelet connected to it), without a restart,
//! and exits 16 when it cannot. `status` shows everything it can see, whatever the state.

use crate::cri::{PodsOnHandler, RuntimeView};
use crate::exit::ExitCode;
use crate::flow::{self, Ctx};
use crate::kubelet::{self, Evidence};
use crate::proof::{self, observe::Newest};
use crate::report::{read_status, RunStatus, STATUS_PATH};
use crate::systemd::UnitState;
use serde::Serialize;
use std::time::Duration;

/// A value seen, or why it could not be: `{...}` or `{"error": "..."}` in JSON.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Observed<T> {
    Value(T),
    Error { error: String },
}

impl<T> From<Result<T, String>> for Observed<T> {
    fn from(r: Result<T, String>) -> Self {
        match r {
            Ok(v) => Observed::Value(v),
            Err(error) => Observed::Error { error },
        }
    }
}

impl<T> Observed<T> {
    pub fn as_result(&self) -> Result<&T, &String> {
        match self {
            Observed::Value(v) => Ok(v),
            Observed::Error { error } => Err(error),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Observation {
    /// "CRI-O" or "containerd".
    pub runtime_name: &'static str,
    /// How the verdict names the runtime.
    #[serde(skip)]
    pub runtime_words: proof::RuntimeWords,
    /// Why that runtime: set by a fragment, or detected (or why none could be decided).
    pub runtime_source: String,
    pub handler: String,
    pub package: String,
    /// With `package.local_rpm_dir`: each package's NEVRA live, in the next boot and
    /// offered, and what an install would do (empty otherwise, or when unreadable: then
    /// `package` says why).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub package_versions: Vec<crate::rpm_ostree::Decision>,
    pub drop_in: String,
    pub drop_in_path: String,
    /// The runtime's unit (CRI-O's or containerd's).
    pub runtime_unit: Observed<UnitState>,
    /// Schema 1's CRI-O-only names of `runtime_unit` and `runtime_newer_than_artifacts`,
    /// kept for readers of earlier versions on CRI-O nodes; absent on containerd nodes.
    #[serde(flatten)]
    pub crio_compat: Option<CrioCompat>,
    pub runtime: Observed<RuntimeView>,
    /// Sandboxes on the handler, and those whose handler cannot be determined.
    pub pods_on_handler: Observed<PodsOnHandler>,
    /// The running runtime's effective definition of the handler against the one kata-live
    /// renders, and what is wrong with it (`None`: ours).
    pub effective_definition: serde_json::Value,
    #[serde(skip)]
    pub definition_problem: Option<String>,
    /// The set's further handlers, each observed as the proof observes it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub handlers: Vec<flow::HandlerProof>,
    /// The running runtime started after the drop-in and the runtime files changed.
    pub runtime_newer_than_artifacts: bool,
    pub kubelet: Observed<Evidence>,
    pub canary: Option<Observed<&'static str>>,
    pub last_run: Option<RunStatus>,
    /// The node's label as the cluster has it (filled by `status` and `verify`).
    pub cluster: Option<ClusterView>,
}

/// The node's handler label on its Node, against the proof.
#[derive(Debug, Serialize)]
pub struct ClusterView {
    pub label_key: String,
    /// The label's value (`null`: absent), or why it could not be read.
    pub label: Observed<Option<String>>,
    /// Whether the label says what the proof says (`null`: the label could not be read).
    pub agrees: Option<bool>,
    /// `verify`: what was done to make the label agree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair: Option<String>,
}

/// Reads the node's label (bounded by deadlines.cluster) and, for `verify`, makes it agree
/// with the proof.
async fn look_at_cluster(ctx: &Ctx, proven: bool, repair: bool) -> ClusterView {
    let mut s = ctx.cluster_session();
    let label = s.read_label().await;
    let agrees = label
        .as_ref()
        .ok()
        .map(|v| crate::cluster::label_agrees(v.as_deref(), proven));
    let repair = if repair && agrees != Some(true) && label.is_ok() {
        Some(s.repair(proven).await)
    } else {
        None
    };
    ClusterView {
        label_key: s.key().to_string(),
        label: label.into(),
        agrees,
        repair,
    }
}

#[derive(Debug, Serialize)]
pub struct CrioCompat {
    pub crio: Observed<UnitState>,
    pub crio_newer_than_artifacts: bool,
}

async fn observe(ctx: &Ctx, canary: bool) -> Observation {
    let c = &ctx.cfg;
    let mut package_versions = Vec::new();
    let package = if c.package.skip {
        "skipped (package.skip)".to_string()
    } else {
        match ctx.rpm_ostree.status(Duration::from_secs(30)).await {
            Ok(s) if c.package.local_rpm_dir.is_some() => {
                let offered = c.package.local_rpm_dir.as_ref().map(|d| {
                    crate::rpm_ostree::list_local_rpms(&ctx.host.path(d))
                        .and_then(|l| crate::rpm_ostree::read_offered(&l))
                });
                match offered {
                    Some(Ok(offered)) => {
                        let until = tokio::time::Instant::now() + Duration::from_secs(30);
                        let on_node = ctx.rpm_ostree.on_node(&s, &offered, until).await;
                        package_versions = crate::rpm_ostree::decide(
                            &offered,
                            &on_node,
                            c.package.allow_downgrade,
                        );
                        "local RPMs (versions below)".to_string()
                    }
                    Some(Err(e)) => format!("offered RPMs unreadable ({e})"),
                    None => String::new(),
                }
            }
            Ok(s) => c
                .package
                .names
                .iter()
                .map(|n| {
                    // After a later deployment replaced the one applied live, the status no
                    // longer lists what the running /usr holds: say so rather than guess.
                    let running = if s.live_tree_known() {
                        s.package_state(n).to_string()
                    } else {
                        "running /usr changed live by a deployment no longer listed".into()
                    };
                    let next = if s.default_deployment().has_package(n) {
                        "in"
                    } else {
                        "not in"
                    };
                    format!("{n}: {running}; {next} the next boot")
                })
                .collect::<Vec<_>>()
                .join(", "),
            Err(e) => format!("unknown ({e})"),
        }
    };
    let crio = ctx.unit(ctx.rt.unit()).await.map_err(|e| e.to_string());
    let cri = ctx
        .cri(Duration::from_secs(5))
        .await
        .map_err(|e| e.to_string());
    let runtime = match &cri {
        Ok(cli) => cli
            .runtime_view(&c.handler.name)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.clone()),
    };
    let crio_newer = crio.as_ref().is_ok_and(|s| {
        proof::observe::has_seen(
            s,
            runtime
                .as_ref()
                .ok()
                .and_then(|v| v.handler_presence.as_listed()),
            Newest {
                config_us: flow::newest_config_us(ctx),
                artifact_us: flow::newest_artifact_us(ctx),
            },
            ctx.rt.checks_files_at_start(),
            // What status shows is whether the running runtime has seen an install.
            true,
        )
    });
    let daemon_version = runtime.as_ref().ok().map(|v| v.runtime_version.as_str());
    let drop_in = match ctx.drop_in_state(daemon_version) {
        Ok(s) => s.to_string(),
        Err(e) => format!("unreadable ({e})"),
    };
    let pods_on_handler = match &cri {
        Ok(cli) => cli
            .sandboxes_for_handler(&c.handler.name)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.clone()),
    };
    let wrote = ctx
        .rt
        .render(&ctx.host, daemon_version)
        .ok()
        .and_then(|t| ctx.rt.written_table(&ctx.host, &t));
    let (effective_definition, definition_problem) = match &wrote {
        Some(w) => ctx.rt.effective(&ctx.host, w).await,
        None => (serde_json::Value::Null, None),
    };
    let mut handlers = Vec::new();
    if let Ok(cli) = &cri {
        for rt in &ctx.more {
            let wrote = rt
                .render(&ctx.host, daemon_version)
                .ok()
                .and_then(|t| rt.written_table(&ctx.host, &t));
            handlers.push(
                flow::observe_handler(ctx, cli, rt.as_ref(), true, wrote.as_ref(), Duration::ZERO)
                    .await,
            );
        }
    }
    let kubelet = match (&crio, ctx.unit(&c.units.kubelet).await) {
        (Ok(cs), Ok(ks)) => {
            let inputs = kubelet::ReconnectInputs::from_config(
                &c.kubelet,
                &c.units.kubelet,
                &ctx.host,
                ctx.rt.socket(),
                cs.main_pid,
                None,
            );
            Ok(kubelet::observe(&inputs, &ks, Duration::from_secs(2)).await)
        }
        (Err(e), _) => Err(format!("{} unit unreadable: {e}", ctx.rt.name())),
        (_, Err(e)) => Err(e.to_string()),
    };
    let canary = match (&cri, canary) {
        (Ok(cli), true) => Some(
            cli.run_canary("", c.deadlines.canary)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
        ),
        _ => None,
    };
    Observation {
        runtime_name: ctx.rt.name(),
        runtime_words: ctx.rt.words(),
        runtime_source: match &ctx.rt_problem {
            Some(p) => format!("UNDECIDED: {p}"),
            None => ctx.rt_why.clone(),
        },
        handler: c.handler.name.clone(),
        package,
        package_versions,
        drop_in,
        drop_in_path: ctx.host.path(ctx.rt.drop_in_path()).display().to_string(),
        crio_compat: (ctx.rt.kind() == crate::config::RuntimeKind::Crio).then(|| CrioCompat {
            crio: crio.clone().into(),
            crio_newer_than_artifacts: crio_newer,
        }),
        runtime_unit: crio.into(),
        runtime: runtime.into(),
        pods_on_handler: pods_on_handler.into(),
        effective_definition,
        definition_problem,
        handlers,
        runtime_newer_than_artifacts: crio_newer,
        kubelet: kubelet.into(),
        canary: canary.map(|c| c.map(|()| "ok").into()),
        last_run: read_status(&ctx.host.path(STATUS_PATH)),
        cluster: None,
    }
}

/// The verdict of `verify` over an observation (pure).
pub fn judge(o: &Observation) -> proof::Verdict {
    // The runtime's part as the proof observes it, from what `status` saw once.
    let mut obs = proof::observe::runtime_part(
        true,
        false,
        o.runtime_newer_than_artifacts,
        o.runtime.as_result(),
    );
    obs.kubelet_missing = proof::observe::kubelet_missing(o.kubelet.as_result());
    obs.canary = o
        .canary
        .as_ref()
        .map(|c| c.as_result().map(|_| ()).map_err(|e| e.clone()));
    obs.definition_problem = o.definition_problem.clone();
    let mut v = proof::verdict(&obs, &o.runtime_words);
    let more = flow::set_missing(&o.handlers, o.runtime_name, true);
    if !more.is_empty() {
        v.proven = false;
        v.missing.extend(more);
    }
    v
}

/// A grouped summary: sections of (key, value) rows, keys aligned across all sections.
#[derive(Default)]
struct Summary {
    sections: Vec<(&'static str, Vec<(String, String)>)>,
}

impl Summary {
    fn section(&mut self, title: &'static str) -> &mut Vec<(String, String)> {
        let i = self.sections.len();
        self.sections.push((title, Vec::new()));
        &mut self.sections[i].1
    }

    fn render(&self) -> String {
        let width = self
            .sections
            .iter()
            .flat_map(|(_, rows)| rows.iter().map(|(k, _)| k.chars().count()))
            .max()
            .unwrap_or(0);
        let mut s = String::new();
        for (i, (title, rows)) in self.sections.iter().enumerate() {
            if i > 0 {
                s.push('\n');
            }
            s.push_str(title);
            s.push('\n');
            for (k, v) in rows {
                // Continuation lines of a value start under its first line.
                let v = v.replace('\n', &format!("\n  {:width$}  ", ""));
                s.push_str(&format!("  {k:<width$}  {v}\n"));
            }
        }
        s
    }
}

fn row(rows: &mut Vec<(String, String)>, k: &str, v: impl Into<String>) {
    rows.push((k.to_string(), v.into()));
}

fn condition_text(v: &RuntimeView, kind: &str) -> String {
    let found: Vec<String> = v
        .conditions
        .iter()
        .filter(|c| c.kind == kind)
        .map(|c| {
            let mut t = format!("{} is {}", c.kind, c.status);
            for extra in [&c.reason, &c.message] {
                if !extra.is_empty() {
                    t.push_str(&format!(", {extra}"));
                }
            }
            t
        })
        .collect();
    if found.is_empty() {
        format!("{kind} not reported")
    } else {
        found.join("; ")
    }
}

fn handler_name(h: &str) -> &str {
    if h.is_empty() {
        "(default)"
    } else {
        h
    }
}

/// The human rendering of `status` (no verdict) and `verify` (with it). Pure.
pub fn render(o: &Observation, verdict: Option<&proof::Verdict>) -> String {
    let mut sum = Summary::default();
    let rows = sum.section("Node");
    row(
        rows,
        "runtime",
        format!("{} ({})", o.runtime_name, o.runtime_source),
    );
    row(rows, "handler", &o.handler);
    row(rows, "package", &o.package);
    for d in &o.package_versions {
        let v =
            |n: Option<&crate::rpm_ostree::Nevra>| n.map(|n| n.to_string()).unwrap_or("-".into());
        row(
            rows,
            &d.name,
            format!(
                "live {}, next boot {}, offered {}: {}",
                if d.on_node.live_unknown {
                    "unknown (changed live by a deployment no longer listed)".into()
                } else {
                    v(d.on_node.live.as_ref())
                },
                v(d.on_node.next_boot.as_ref()),
                v(d.offered.as_ref().map(|o| &o.nevra)),
                d.action
            ),
        );
    }
    row(
        rows,
        "drop-in",
        format!("{} ({})", o.drop_in, o.drop_in_path),
    );

    let rt = o.runtime_name;
    let rows = sum.section(rt);
    match o.runtime_unit.as_result() {
        Ok(u) => {
            row(
                rows,
                "unit",
                format!(
                    "{} {}/{}, MainPID {}, {} restart(s)",
                    u.name, u.active_state, u.sub_state, u.main_pid, u.n_restarts
                ),
            );
            row(
                rows,
                "started",
                if o.runtime_newer_than_artifacts {
                    "after the drop-in and the runtime files changed"
                } else {
                    "BEFORE the drop-in or the runtime files changed: it has not loaded them"
                },
            );
        }
        Err(e) => row(rows, "unit", format!("unreadable: {e}")),
    }
    match o.runtime.as_result() {
        Ok(v) => {
            let yes_no = |b: bool| if b { "yes" } else { "NO" };
            row(
                rows,
                "runtime",
                format!(
                    "{} {} (CRI {}) on {}",
                    v.runtime_name,
                    v.runtime_version,
                    v.runtime_api_version,
                    v.socket.display()
                ),
            );
            row(
                rows,
                "runtime ready",
                format!(
                    "{} ({})",
                    yes_no(v.ready),
                    condition_text(v, "RuntimeReady")
                ),
            );
            row(
                rows,
                "network ready",
                format!(
                    "{} ({})",
                    yes_no(v.network_ready),
                    condition_text(v, "NetworkReady")
                ),
            );
            let presence = match v.handler_presence {
                crate::cri::HandlerPresence::Listed => "listed",
                crate::cri::HandlerPresence::NotListed => "NOT listed",
                crate::cri::HandlerPresence::Unknown => {
                    "UNKNOWN (the runtime reports no handlers: CRI API older than Kubernetes 1.30)"
                }
            };
            let listed: Vec<&str> = v.handlers_listed.iter().map(|h| handler_name(h)).collect();
            row(
                rows,
                "handler",
                format!(
                    "{} {presence} (handlers: {})",
                    handler_name(&v.handler),
                    if listed.is_empty() {
                        "none reported".to_string()
                    } else {
                        listed.join(", ")
                    }
                ),
            );
        }
        Err(e) => row(rows, "runtime", format!("unreachable: {e}")),
    }
    row(
        rows,
        "definition",
        o.definition_problem
            .as_deref()
            .map(str::to_string)
            .unwrap_or(format!(
                "the running {rt}'s effective table is the one kata-live writes"
            )),
    );
    for h in &o.handlers {
        let listed = match (&h.cri_error, h.listed) {
            (Some(e), _) => format!("unknown (CRI Status failed: {e})"),
            (None, Some(true)) => "listed".to_string(),
            (None, Some(false)) => "NOT listed".to_string(),
            (None, None) => "UNKNOWN (the runtime reports no handlers)".to_string(),
        };
        let table = h.definition_problem.clone().unwrap_or_else(|| {
            if h.listed == Some(true) {
                "its effective table is the one kata-live writes".to_string()
            } else {
                "its table not read".to_string()
            }
        });
        row(
            rows,
            &format!("handler {}", h.handler),
            format!("{listed}; {table}"),
        );
    }
    match o.pods_on_handler.as_result() {
        Ok(p) => row(rows, "pods on handler", p.describe()),
        Err(e) => row(rows, "pods on handler", format!("unknown: {e}")),
    }
    if let Some(c) = &o.canary {
        row(
            rows,
            "canary",
            match c.as_result() {
                Ok(_) => "ok: a sandbox ran on the default handler".to_string(),
                Err(e) => format!("FAILED: {e}"),
            },
        );
    }

    let rows = sum.section("kubelet");
    match o.kubelet.as_result() {
        Ok(e) => {
            let mut pieces = vec![
                ("unit", &e.unit),
                ("healthz", &e.healthz),
                ("connection", &e.connection),
            ];
            if let Some(r) = &e.relists {
                pieces.push(("relists", r));
            }
            for (label, c) in pieces {
                row(
                    rows,
                    label,
                    format!("{}: {}", if c.ok { "ok" } else { "MISSING" }, c.detail),
                );
            }
        }
        Err(e) => row(rows, "state", format!("unreadable: {e}")),
    }

    let rows = sum.section("Last run");
    match &o.last_run {
        Some(r) => {
            let code = r
                .exit_code
                .map(|c| format!(" (exit code {c})"))
                .unwrap_or_default();
            row(
                rows,
                "result",
                format!("{} {}{code}", r.operation, r.result),
            );
            row(rows, "started", &r.started);
            match &r.finished {
                Some(f) => row(rows, "finished", f),
                None => row(rows, "finished", format!("not yet (pid {})", r.pid)),
            }
            let count =
                |o: crate::report::StepOutcome| r.steps.iter().filter(|s| s.outcome == o).count();
            row(
                rows,
                "steps",
                format!(
                    "{} done, {} skipped, {} failed; last: {}",
                    count(crate::report::StepOutcome::Ran),
                    count(crate::report::StepOutcome::Skipped),
                    count(crate::report::StepOutcome::Failed),
                    r.phase
                ),
            );
            if let Some(e) = &r.error {
                row(rows, "error", e);
            }
        }
        None => row(rows, "result", "none recorded"),
    }
    if let Some(c) = &o.cluster {
        let rows = sum.section("Cluster");
        let node_state = |agrees: bool| match (agrees, verdict.is_some()) {
            (true, _) => "agrees with the node's state",
            (false, true) => "DISAGREES with the proof",
            (false, false) => "DISAGREES with the node's state: `kata-live verify` repairs it",
        };
        let v = match (c.label.as_result(), c.agrees) {
            (Ok(Some(v)), Some(a)) => format!("{}={v}: {}", c.label_key, node_state(a)),
            (Ok(None), Some(a)) => format!("{} absent: {}", c.label_key, node_state(a)),
            (Ok(_), None) => format!("{}: read, not judged", c.label_key),
            (Err(e), _) => format!("{} unknown: {e}", c.label_key),
        };
        row(rows, "label", v);
        if let Some(r) = &c.repair {
            row(rows, "repair", r);
        }
    }
    if let Some(v) = verdict {
        let rows = sum.section("Verdict");
        if v.proven {
            row(
                rows,
                "verdict",
                format!(
                    "PROVEN: the running {rt} serves the handler and kubelet is connected to it"
                ),
            );
        } else {
            row(rows, "verdict", "NOT PROVEN");
            for m in &v.missing {
                row(rows, "missing", m);
            }
        }
    }
    sum.render()
}

pub async fn status(ctx: &Ctx, json: bool) -> ExitCode {
    let mut o = observe(ctx, false).await;
    o.cluster = Some(look_at_cluster(ctx, judge(&o).proven, false).await);
    if json {
        crate::report::print_json(crate::report::Kind::Status, &o);
    } else {
        print!("{}", render(&o, None));
    }
    ExitCode::Ok
}

pub async fn verify(ctx: &Ctx, json: bool) -> ExitCode {
    let mut o = observe(ctx, ctx.cfg.cri.canary).await;
    let v = judge(&o);
    o.cluster = Some(look_at_cluster(ctx, v.proven, true).await);
    if json {
        let out = serde_json::json!({ "observation": o, "verdict": v });
        crate::report::print_json(crate::report::Kind::Verify, out);
    } else {
        print!("{}", render(&o, Some(&v)));
    }
    if v.proven {
        ExitCode::Ok
    } else {
        ExitCode::NotProven
    }
}
