//! `kata-live pod install|uninstall`: the DaemonSet pod's entrypoint.

use super::follow::start_and_follow;
use super::rollout::mark_pod;
use super::{artifact, runtime, say, EntryArgs, Operation, PodError, OUTCOME_FILE};
use crate::cluster::{Credentials, Session};
use crate::config;
use crate::exit::ExitCode;
use crate::files;
use crate::host::Host;
use crate::pace::{Agent, AgentConfig, PaceError, PodRef};

pub(super) fn entry(op: Operation, a: &EntryArgs) -> Result<ExitCode, PodError> {
    let root = &a.paths.host_root;
    let host = Host::new(root, "/proc");
    let cfg = config::load(&host)?.config;
    let arts = artifact::artifacts(a.rpm_dir.as_deref(), &a.pace.namespace)?;
    let state = &a.paths.pod_state;
    let outcome = runtime()?.block_on(async {
        let pacer = match (a.pace.pace, &a.pace.node_name) {
            (false, _) => None,
            (true, None) => return Err(PaceError::NoNodeName.into()),
            (true, Some(node)) => Some(Agent::connect(agent_config(&a.pace, node)).await?),
        };
        let mut cluster = cluster_session(a, &cfg);
        if op == Operation::Uninstall {
            say(&cluster.unschedule().await);
        }
        let o = start_and_follow(
            op,
            &host,
            &cfg.deadlines,
            a.follow_margin,
            &arts,
            pacer.as_ref(),
            state,
        )
        .await?;
        for words in cluster
            .after_run(op, o.exit(), &o.render(), &o.invocation)
            .await
        {
            say(&words);
        }
        if let (Some(p), Some(pod)) = (pacer.as_ref(), a.pace.pod_name.as_deref()) {
            mark_pod(p, pod, &o).await;
        }
        Ok::<_, PodError>(o)
    })?;
    say(&outcome.render());
    let bytes = serde_json::to_vec_pretty(&outcome).unwrap_or_default();
    files::write_atomic(state, &state.join(OUTCOME_FILE), &bytes, 0o644)?;
    if a.exit {
        return Ok(if outcome.proven() {
            ExitCode::Ok
        } else {
            ExitCode::NotProven
        });
    }
    say("staying alive; the readiness probe (`kata-live pod ready`) tells the rollout");
    runtime()?.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(PodError::Runtime)?;
        let mut int = signal(SignalKind::interrupt()).map_err(PodError::Runtime)?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        Ok::<(), PodError>(())
    })?;
    say("stopped by a signal; the host unit's result stays on the node");
    Ok(ExitCode::Ok)
}

fn agent_config(a: &super::args::PaceArgs, node: &str) -> AgentConfig {
    AgentConfig {
        namespace: a.namespace.clone(),
        node: node.to_string(),
        pod: match (&a.pod_name, &a.pod_uid) {
            (Some(name), Some(uid)) => Some(PodRef {
                name: name.clone(),
                uid: uid.clone(),
            }),
            _ => None,
        },
    }
}

/// The pod tells the cluster with its service account, as the node its pod runs on (the
/// downward API's spec.nodeName); the host run it starts does not ([`super::units`]).
fn cluster_session(a: &EntryArgs, cfg: &config::Config) -> Session {
    let handler = &cfg.handler.name;
    match &a.pace.node_name {
        None => Session::off(
            handler,
            "this pod's node name is unknown (--node-name or NODE_NAME from the downward API's \
             spec.nodeName)",
        ),
        Some(node) => Session::new(
            handler,
            Credentials::ServiceAccount,
            Some(node.clone()),
            None,
            cfg.deadlines.cluster,
        ),
    }
}
