//! `kata-live pod ready`, the readiness probe: this node's run proven and the running
//! runtime still agreeing.

use super::outcome::result_word;
use super::{
    resolve_in_root, runtime, Operation, PodError, ReadyArgs, RunOutcome, OUTCOME_FILE,
    WAITING_FILE,
};
use crate::config;
use crate::cri::{CriClient, HandlerPresence};
use crate::exit::ExitCode;
use crate::files;
use crate::host::Host;
use crate::report::{read_status, RunResult, RunStatus, STATUS_PATH};
use std::time::Duration;

/// The readiness verdict (pure): `Ok` when ready, else the reasons.
pub fn judge_ready(
    op: Operation,
    outcome: Option<&RunOutcome>,
    last_run: Option<&RunStatus>,
    runtime: Result<(bool, HandlerPresence), String>,
) -> Result<(), Vec<String>> {
    let mut why = Vec::new();
    match outcome {
        None => why.push("the entrypoint has not yet seen this node's run end".to_string()),
        Some(o) if o.operation != op => why.push(format!(
            "the entrypoint ran {}, this probe asks about {}",
            o.operation.name(),
            op.name()
        )),
        Some(o) if !o.proven() => why.push(o.render()),
        Some(_) => {}
    }
    match last_run {
        None => why.push(format!("no {STATUS_PATH} on the host")),
        Some(s) if s.operation != op.name() || s.result != RunResult::Succeeded => {
            why.push(format!(
                "the host's last run is {} {}{}",
                s.operation,
                result_word(s.result),
                s.error
                    .as_ref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ))
        }
        Some(_) => {}
    }
    match runtime {
        Err(e) => why.push(format!("the runtime cannot be asked: {e}")),
        Ok((ready, presence)) => {
            if !ready {
                why.push("the runtime reports RuntimeReady=false".into());
            }
            match (op, presence) {
                (Operation::Install, HandlerPresence::Listed)
                | (Operation::Uninstall, HandlerPresence::NotListed) => {}
                (Operation::Install, _) => {
                    why.push("the running runtime does not list the handler".into())
                }
                (Operation::Uninstall, HandlerPresence::Listed) => {
                    why.push("the running runtime still lists the handler".into())
                }
                (Operation::Uninstall, HandlerPresence::Unknown) => why.push(
                    "the runtime lists no handlers at all (CRI API before 1.30): cannot tell"
                        .into(),
                ),
            }
        }
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why)
    }
}

pub(super) fn ready(a: &ReadyArgs) -> Result<ExitCode, PodError> {
    let op = a.operation;
    let root = &a.paths.host_root;
    let host = Host::new(root, "/proc");
    let loaded = config::load(&host)?;
    let cfg = &loaded.config;
    // The runtime's socket (CRI-O's or containerd's), decided as a run decides it; a node
    // whose runtime cannot be told (no socket serving) is not ready.
    let socket_in_host = match crate::runtime::resolve(&loaded, &host, None) {
        Ok((kind, _)) => crate::runtime::for_config(cfg, kind).socket().to_path_buf(),
        Err(why) => {
            println!("not ready:\n  - {why}");
            return Ok(ExitCode::NotProven);
        }
    };
    let outcome: Option<RunOutcome> = files::read_nofollow(&a.paths.pod_state.join(OUTCOME_FILE))
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let last = read_status(&host.path(STATUS_PATH));
    let socket = resolve_in_root(root, &socket_in_host)?;
    let name = cfg.handler.name.clone();
    // A probe runs every few seconds: the whole CRI look stays under a second.
    let runtime_seen = runtime()?.block_on(async {
        let t = Duration::from_millis(400);
        let c = CriClient::connect(&socket, t, t)
            .await
            .map_err(|e| e.to_string())?;
        let v = c.runtime_view(&name).await.map_err(|e| e.to_string())?;
        Ok::<_, String>((v.ready, v.handler_presence))
    });
    match judge_ready(op, outcome.as_ref(), last.as_ref(), runtime_seen) {
        Ok(()) => {
            println!("ready: {} proven on this node", op.name());
            Ok(ExitCode::Ok)
        }
        Err(why) => {
            println!("not ready:");
            if outcome.is_none() {
                if let Ok(Some(w)) = files::read_nofollow(&a.paths.pod_state.join(WAITING_FILE)) {
                    println!("  - {}", String::from_utf8_lossy(&w));
                }
            }
            for w in why {
                println!("  - {w}");
            }
            Ok(ExitCode::NotProven)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::RunStatus;

    fn status(op: &str, r: RunResult, err: Option<&str>) -> RunStatus {
        RunStatus {
            schema: 1,
            operation: op.into(),
            handler: "kata-remote".into(),
            pid: 1,
            phase: "done".into(),
            result: r,
            exit_code: Some(0),
            started: String::new(),
            updated: String::new(),
            finished: None,
            steps: vec![],
            evidence: Default::default(),
            error: err.map(str::to_string),
        }
    }

    fn outcome(op: Operation, code: i32, r: RunResult) -> RunOutcome {
        RunOutcome {
            operation: op,
            unit_result: if code == 0 { "success" } else { "exit-code" }.into(),
            exit_code: Some(code),
            run_result: Some(r),
            error: None,
            invocation: String::new(),
            unended: None,
        }
    }

    #[test]
    fn ready_needs_the_entrypoints_outcome_the_record_and_the_runtime() {
        let i = Operation::Install;
        let ok = outcome(i, 0, RunResult::Succeeded);
        let st = status("install", RunResult::Succeeded, None);
        let listed = Ok((true, HandlerPresence::Listed));
        assert_eq!(judge_ready(i, Some(&ok), Some(&st), listed.clone()), Ok(()));
        assert!(judge_ready(i, None, Some(&st), listed.clone()).is_err());
        let gone = Ok((true, HandlerPresence::NotListed));
        let why = judge_ready(i, Some(&ok), Some(&st), gone.clone()).unwrap_err();
        assert!(why[0].contains("does not list"), "{why:?}");
        assert!(judge_ready(i, Some(&ok), Some(&st), Err("refused".into())).is_err());
        assert!(judge_ready(
            i,
            Some(&ok),
            Some(&st),
            Ok((false, HandlerPresence::Listed))
        )
        .is_err());
        // Uninstall: the reverse presence.
        let u = Operation::Uninstall;
        let uok = outcome(u, 0, RunResult::Succeeded);
        let ust = status("uninstall", RunResult::Succeeded, None);
        assert_eq!(judge_ready(u, Some(&uok), Some(&ust), gone), Ok(()));
        assert!(judge_ready(u, Some(&uok), Some(&ust), listed.clone()).is_err());
        assert!(judge_ready(
            u,
            Some(&uok),
            Some(&ust),
            Ok((true, HandlerPresence::Unknown))
        )
        .is_err());
    }

    #[test]
    fn a_rolled_back_node_is_not_ready_and_says_why() {
        let i = Operation::Install;
        let mut o = outcome(i, 13, RunResult::RolledBack);
        o.error = Some("pod shop/web lost".into());
        let st = status("install", RunResult::RolledBack, Some("pod shop/web lost"));
        let why = judge_ready(
            i,
            Some(&o),
            Some(&st),
            Ok((true, HandlerPresence::NotListed)),
        )
        .unwrap_err();
        let all = why.join("\n");
        assert!(all.contains("exit code 13"), "{all}");
        assert!(all.contains("pod shop/web lost"), "{all}");
        assert!(all.contains("rolled-back"), "{all}");
    }
}
