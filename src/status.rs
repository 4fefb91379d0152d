//! `kata-live status` and `kata-live verify`: look, change nothing.
//!
//! `verify` proves what install proves (handler served by a CRI-O that started after the
//! drop-in and the runtime files, CRI ready, kubelet connected to it), without a restart,
//! and exits 16 when it cannot. `status` shows everything it can see, whatever the state.

use crate::cri::{PodsOnHandler, RuntimeView};
use crate::exit::ExitCode;
use crate::flow::{self, Ctx};
use crate::kubelet::{self, Evidence};
use crate::plan;
use crate::report::{read_status, RunStatus, STATUS_PATH};
use crate::systemd::UnitState;
use serde::Serialize;
use std::time::Duration;

/// A value seen, or why it could not be: `{...}` or `{"error": "..."}` in JSON.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Seen<T> {
    Value(T),
    Error { error: String },
}

impl<T> From<Result<T, String>> for Seen<T> {
    fn from(r: Result<T, String>) -> Self {
        match r {
            Ok(v) => Seen::Value(v),
            Err(error) => Seen::Error { error },
        }
    }
}

impl<T> Seen<T> {
    pub fn as_result(&self) -> Result<&T, &String> {
        match self {
            Seen::Value(v) => Ok(v),
            Seen::Error { error } => Err(error),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Observation {
    pub handler: String,
    pub package: String,
    pub drop_in: String,
    pub drop_in_path: String,
    pub crio: Seen<UnitState>,
    pub runtime: Seen<RuntimeView>,
    /// Sandboxes on the handler, and those whose handler cannot be determined.
    pub pods_on_handler: Seen<PodsOnHandler>,
    /// The running CRI-O's effective definition of the handler against the one kata-live
    /// renders (`GET /config`), and what is wrong with it (`None`: ours).
    pub effective_definition: serde_json::Value,
    #[serde(skip)]
    pub definition_problem: Option<String>,
    /// The running CRI-O started after the drop-in and the runtime files changed.
    pub crio_newer_than_artifacts: bool,
    pub kubelet: Seen<Evidence>,
    pub canary: Option<Seen<&'static str>>,
    pub last_run: Option<RunStatus>,
}

async fn observe(ctx: &Ctx, canary: bool) -> Observation {
    let c = &ctx.cfg;
    let package = if c.package.skip {
        "skipped (package.skip)".to_string()
    } else {
        match ctx.rpm_ostree.status(Duration::from_secs(30)).await {
            Ok(s) => c
                .package
                .names
                .iter()
                .map(|n| {
                    // After a later deployment replaced the one applied live, the status no
                    // longer lists what the running /usr holds: say so rather than guess.
                    let running = if s.live_tree_known() {
                        format!("{:?}", s.package_state(n)).to_lowercase()
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
    let drop_in = match crate::app::drop_in_state(ctx) {
        Ok(s) => format!("{s:?}").to_lowercase(),
        Err(e) => format!("unreadable ({e})"),
    };
    let crio = ctx.unit(&c.units.crio).await.map_err(|e| e.to_string());
    let newest = flow::newest_artifact_us(ctx);
    let crio_newer = matches!(&crio, Ok(s) if s.is_running() && s.exec_main_start_us > newest);
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
    let pods_on_handler = match &cri {
        Ok(cli) => cli
            .sandboxes_for_handler(&c.handler.name)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.clone()),
    };
    let wrote = crate::crio::render(&c.handler)
        .ok()
        .and_then(|t| crate::crio_conf::written_table(&t, &c.handler.name));
    let (effective_definition, definition_problem) = match &wrote {
        Some(w) => {
            flow::effective_definition(&ctx.host.path(&c.cri.socket), &c.handler.name, w).await
        }
        None => (serde_json::Value::Null, None),
    };
    let kubelet = match (&crio, ctx.unit(&c.units.kubelet).await) {
        (Ok(cs), Ok(ks)) => {
            let inputs = kubelet::ProofInputs::from_config(c, &ctx.host, cs.main_pid, None);
            Ok(kubelet::observe(&inputs, &ks, Duration::from_secs(2)).await)
        }
        (Err(e), _) => Err(format!("CRI-O unit unreadable: {e}")),
        (_, Err(e)) => Err(e.to_string()),
    };
    let canary = match (&cri, canary) {
        (Ok(cli), true) => Some(
            cli.run_canary("", Duration::from_secs_f64(c.deadlines.canary))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
        ),
        _ => None,
    };
    Observation {
        handler: c.handler.name.clone(),
        package,
        drop_in,
        drop_in_path: ctx.host.path(&c.handler.drop_in).display().to_string(),
        crio: crio.into(),
        runtime: runtime.into(),
        pods_on_handler: pods_on_handler.into(),
        effective_definition,
        definition_problem,
        crio_newer_than_artifacts: crio_newer,
        kubelet: kubelet.into(),
        canary: canary.map(|c| c.map(|()| "ok").into()),
        last_run: read_status(&ctx.host.path(STATUS_PATH)),
    }
}

/// The verdict of `verify` over an observation (pure).
pub fn judge(o: &Observation) -> plan::Verdict {
    let (listed, ready, net) = match o.runtime.as_result() {
        Ok(v) => (v.handler_presence.as_listed(), v.ready, v.network_ready),
        Err(_) => (None, false, false),
    };
    let kubelet_missing = match o.kubelet.as_result() {
        Ok(e) => match kubelet::verdict(e) {
            kubelet::Verdict::Reconnected => None,
            kubelet::Verdict::Missing(_) => Some(kubelet::describe_missing(e)),
        },
        Err(e) => Some(e.clone()),
    };
    plan::verdict(&plan::ProofInputs {
        want_listed: true,
        cri_error: o.runtime.as_result().err().cloned(),
        crio_newer_than_artifacts: o.crio_newer_than_artifacts,
        handler_listed: listed,
        runtime_ready: ready,
        network_ready: net,
        kubelet_missing,
        pods_lost: Vec::new(),
        canary: o
            .canary
            .as_ref()
            .map(|c| c.as_result().map(|_| ()).map_err(|e| e.clone())),
        unknown_as_found: false,
        definition_problem: o.definition_problem.clone(),
    })
}

fn render(o: &Observation, verdict: Option<&plan::Verdict>) -> String {
    let mut s = String::new();
    s.push_str(&format!("handler:   {}\n", o.handler));
    s.push_str(&format!("package:   {}\n", o.package));
    s.push_str(&format!("drop-in:   {} ({})\n", o.drop_in, o.drop_in_path));
    match o.crio.as_result() {
        Ok(u) => s.push_str(&format!(
            "crio:      {} (started {} the drop-in and runtime files)\n",
            u.summary(),
            if o.crio_newer_than_artifacts {
                "after"
            } else {
                "BEFORE"
            }
        )),
        Err(e) => s.push_str(&format!("crio:      unreadable: {e}\n")),
    }
    match o.runtime.as_result() {
        Ok(v) => s.push_str(&v.render_human()),
        Err(e) => s.push_str(&format!("runtime:   unreachable: {e}\n")),
    }
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s.push_str(&format!(
        "definition: {}\n",
        o.definition_problem
            .as_deref()
            .unwrap_or("the running CRI-O's effective table is the one kata-live writes")
    ));
    match o.pods_on_handler.as_result() {
        Ok(p) => s.push_str(&format!("pods:      on the handler: {}\n", p.describe())),
        Err(e) => s.push_str(&format!("pods:      unknown: {e}\n")),
    }
    match o.kubelet.as_result() {
        Ok(e) => {
            for (label, c) in e.pieces() {
                s.push_str(&format!(
                    "kubelet {label}: {} {}\n",
                    if c.ok { "ok" } else { "MISSING" },
                    c.detail
                ));
            }
        }
        Err(e) => s.push_str(&format!("kubelet:   unreadable: {e}\n")),
    }
    if let Some(c) = &o.canary {
        s.push_str(&format!(
            "canary:    {}\n",
            match c.as_result() {
                Ok(_) => "ok".to_string(),
                Err(e) => format!("FAILED {e}"),
            }
        ));
    }
    match &o.last_run {
        Some(r) => s.push_str(&format!(
            "last run:  {} {:?} (exit {}) started {}, phase {}{}\n",
            r.operation,
            r.result,
            r.exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
            r.started,
            r.phase,
            r.error
                .as_ref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        )),
        None => s.push_str("last run:  none recorded\n"),
    }
    if let Some(v) = verdict {
        if v.proven {
            s.push_str("verdict:   PROVEN: the running CRI-O serves the handler and kubelet is connected to it\n");
        } else {
            s.push_str("verdict:   NOT PROVEN\n");
            for m in &v.missing {
                s.push_str(&format!("  - {m}\n"));
            }
        }
    }
    s
}

pub async fn status(ctx: &Ctx, json: bool) -> ExitCode {
    let o = observe(ctx, false).await;
    if json {
        println!("{}", serde_json::to_string_pretty(&o).unwrap_or_default());
    } else {
        print!("{}", render(&o, None));
    }
    ExitCode::Ok
}

pub async fn verify(ctx: &Ctx, json: bool) -> ExitCode {
    let o = observe(ctx, ctx.cfg.cri.canary).await;
    let v = judge(&o);
    if json {
        let out = serde_json::json!({ "observation": o, "verdict": v });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        print!("{}", render(&o, Some(&v)));
    }
    if v.proven {
        ExitCode::Ok
    } else {
        ExitCode::NotProven
    }
}
