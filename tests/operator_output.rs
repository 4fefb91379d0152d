//! Snapshots of what the operator reads, rendered by the same pure functions the binary
//! prints with: the progress lines and closing lines of a success, a refusal and a rollback,
//! a dry run's plan, and `status`/`verify`. Inputs are constructed, so durations are fixed.
//! A test also fails on any Rust Debug rendering (`{ ok:`, `Some(`, `Evidence {`, ...).

use kata_live::cri::{HandlerPresence, PodRef, PodsOnHandler, RuntimeView};
use kata_live::exit::ExitCode;
use kata_live::kubelet::{Check, Evidence};
use kata_live::proof::Verdict;
use kata_live::report::{
    is_success_outcome, json_document, render_handoff, render_outcome, render_plan,
    render_progress, Kind, Numbering, RunResult, RunStatus, StepOutcome, StepRecord,
};
use kata_live::status::{render, Observation, Observed};
use kata_live::systemd::handoff::{handoff_unit_name, should_hand_off, Placement};
use kata_live::systemd::UnitState;
use std::collections::BTreeMap;
use std::time::Duration;

/// (step name, what it does, outcome, milliseconds, detail)
type Line<'a> = (&'a str, &'a str, StepOutcome, u64, &'a str);

/// Numbers the steps as the Reporter does: `[k/N]`, then `[rollback k/M]`.
fn transcript(total: usize, steps: &[Line], rollback: &[Line]) -> String {
    let mut out = String::new();
    let mut n = Numbering {
        k: 0,
        total: Some(total),
        rollback: false,
    };
    let mut push = |n: &mut Numbering, (_, what, outcome, ms, detail): &Line| {
        n.k += 1;
        out.push_str(&render_progress(
            &n.label(),
            what,
            *outcome,
            Duration::from_millis(*ms),
            detail,
        ));
        out.push('\n');
    };
    for l in steps {
        push(&mut n, l);
    }
    let mut n = Numbering {
        k: 0,
        total: Some(rollback.len()),
        rollback: true,
    };
    for l in rollback {
        push(&mut n, l);
    }
    out
}

fn assert_no_debug(text: &str) {
    for bad in [
        "{ ok:",
        "Some(",
        "None",
        "Evidence {",
        "Check {",
        "\\\"",
        ":?",
    ] {
        assert!(!text.contains(bad), "Debug rendering {bad:?} in:\n{text}");
    }
    for word in [
        "NewlyLive",
        "AlreadyLive",
        "Succeeded",
        "RolledBack",
        "Restart(",
        "Differs",
        "Created",
    ] {
        assert!(!text.contains(word), "enum name {word} in:\n{text}");
    }
}

const RESTART: &str = "the drop-in changed in this run: MainPID 40 -> 58, new InvocationID 5f0c3a";

fn install_steps() -> Vec<Line<'static>> {
    vec![
        (
            "lock",
            "taking the kata-live lock",
            StepOutcome::Ran,
            3,
            "held after 0.0 s",
        ),
        (
            "preflight",
            "checking CRI-O, kubelet and pods",
            StepOutcome::Ran,
            412,
            "CRI-O crio.service ready, kubelet connected, 3 ready sandboxes, handler not listed",
        ),
        (
            "crio-config",
            "reading CRI-O's configuration files in CRI-O's order",
            StepOutcome::Ran,
            2,
            "no other file declares [crio.runtime.runtimes.kata-remote]",
        ),
        (
            "package",
            "installing the package live with rpm-ostree",
            StepOutcome::Ran,
            14_210,
            "package newly live in the running /usr",
        ),
        (
            "post-install",
            "doing the package scriptlets' work",
            StepOutcome::Ran,
            380,
            "4 steps (2 changed the host)",
        ),
        (
            "visibility",
            "waiting until the runtime files are visible to CRI-O",
            StepOutcome::Ran,
            11,
            "runtime files visible to us and in CRI-O's mount namespace",
        ),
        (
            "drop-in",
            "writing the CRI-O drop-in",
            StepOutcome::Ran,
            1,
            "created /etc/crio/crio.conf.d/50-kata-remote",
        ),
        (
            "activate",
            "restarting crio.service",
            StepOutcome::Ran,
            1_840,
            RESTART,
        ),
    ]
}

#[test]
fn a_successful_install() {
    let mut steps = install_steps();
    steps.push((
        "prove",
        "proving through the CRI socket and kubelet's connection",
        StepOutcome::Ran,
        5_130,
        "proven",
    ));
    let mut text = transcript(steps.len(), &steps, &[]);
    text.push_str(&render_outcome(
        "install",
        RunResult::Succeeded,
        ExitCode::Ok,
        "handler kata-remote is served by the running CRI-O and kubelet is reconnected (CRI-O restarted)",
    ));
    assert_no_debug(&text);
    insta::assert_snapshot!(text);
}

/// `kata-live install` in a debug pod's container, before the run goes to the host's
/// systemd: the unit, the two commands that follow it, and that the session may drop.
#[test]
fn a_hand_off_from_a_debug_pod() {
    let cgroup = "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/crio-0123456789ab.scope\n";
    let Placement::HandOff(why) = should_hand_off(cgroup, false, "kata-live") else {
        panic!("a CRI-O container's scope hands off");
    };
    let unit = handoff_unit_name("install");
    let text = render_handoff(&why, &unit);
    assert_no_debug(&text);
    for line in [
        format!("journalctl -fu {unit}\n"),
        "kata-live status\n".to_string(),
        "this session may drop when the container runtime restarts".to_string(),
    ] {
        assert!(text.contains(&line), "{line:?} missing from:\n{text}");
    }
    insta::assert_snapshot!(text);
}

/// The follower of a hand-off prints the run's success line on stdout, as a host run does:
/// it knows that line by the same rendering.
#[test]
fn a_hand_off_knows_the_success_line_by_its_rendering() {
    for op in ["install", "uninstall"] {
        let end = render_outcome(op, RunResult::Succeeded, ExitCode::Ok, "proven");
        assert!(is_success_outcome(op, end.trim_end()), "{end}");
        let failed = render_outcome(op, RunResult::RolledBack, ExitCode::RolledBack, "no");
        for line in failed.lines() {
            assert!(!is_success_outcome(op, line), "{line}");
        }
        // The journal record of the same end is not the closing line.
        assert!(!is_success_outcome(
            op,
            &format!("kata-live {op} succeeded: proven on the running node")
        ));
    }
}

#[test]
fn a_refused_install() {
    let steps = [
        ("lock", "taking the kata-live lock", StepOutcome::Ran, 2, "held after 0.0 s"),
        ("preflight", "checking CRI-O, kubelet and pods", StepOutcome::Failed, 2_004,
         "kubelet (kubelet.service) is not connected to CRI-O: no socket of kubelet is connected to /run/crio/crio.sock; \
          the node is unhealthy before any change: fix kubelet first"),
    ];
    let mut text = transcript(9, &steps, &[]);
    text.push_str(&render_outcome(
        "install",
        RunResult::Refused,
        ExitCode::PreflightRefused,
        "refused, nothing was changed: kubelet (kubelet.service) is not connected to CRI-O",
    ));
    assert_no_debug(&text);
    insta::assert_snapshot!(text);
}

#[test]
fn an_install_rolled_back() {
    let mut steps = install_steps();
    steps.push((
        "prove",
        "proving through the CRI socket and kubelet's connection",
        StepOutcome::Failed,
        30_020,
        "kubelet did not reconnect to the new CRI-O within 30 s",
    ));
    let rollback = [
        (
            "rollback",
            "restoring the previous drop-in",
            StepOutcome::Ran,
            1,
            "previous drop-in restored",
        ),
        (
            "activate",
            "restarting crio.service",
            StepOutcome::Ran,
            1_710,
            "rollback: MainPID 58 -> 71, new InvocationID 9ad1e2",
        ),
        (
            "prove-rollback",
            "proving through the CRI socket and kubelet's connection",
            StepOutcome::Ran,
            5_050,
            "proven",
        ),
    ];
    let mut text = transcript(steps.len(), &steps, &rollback);
    text.push_str(&render_outcome(
        "install",
        RunResult::RolledBack,
        ExitCode::RolledBack,
        "the change is not proven: kubelet did not reconnect to the new CRI-O within 30 s; \
         rolled back: the previous configuration is restored and proven",
    ));
    assert_no_debug(&text);
    insta::assert_snapshot!(text);
}

#[test]
fn a_dry_run_plan() {
    let step = |name: &str, outcome, detail: &str| StepRecord {
        name: name.into(),
        outcome,
        detail: detail.into(),
        duration_ms: 0,
    };
    let text = render_plan(&[
        step("lock", StepOutcome::Ran, "held after 0.0 s"),
        step(
            "preflight",
            StepOutcome::Ran,
            "CRI-O crio.service ready, kubelet connected",
        ),
        step(
            "package",
            StepOutcome::Skipped,
            "dry run: would end package newly live in the running /usr",
        ),
        step(
            "drop-in",
            StepOutcome::Skipped,
            "dry run: drop-in is absent; would write /etc/crio/crio.conf.d/50-kata-remote",
        ),
        step(
            "activate",
            StepOutcome::Skipped,
            "dry run: would restart CRI-O: the drop-in changed in this run",
        ),
    ]);
    assert_no_debug(&text);
    insta::assert_snapshot!(text);
}

fn crio_unit() -> UnitState {
    UnitState {
        name: "crio.service".into(),
        active_state: "active".into(),
        sub_state: "running".into(),
        result: "success".into(),
        invocation_id: "5f0c3a9e2b8d4c6f8a1b2c3d4e5f6a7b".into(),
        main_pid: 58,
        exec_main_start_us: 1_764_590_000_000_000,
        exec_main_start_mono_us: 9_000_000,
        n_restarts: 0,
    }
}

fn runtime(presence: HandlerPresence) -> RuntimeView {
    RuntimeView {
        socket: "/run/crio/crio.sock".into(),
        runtime_name: "cri-o".into(),
        runtime_version: "1.37.0".into(),
        runtime_api_version: "v1".into(),
        ready: true,
        network_ready: true,
        conditions: vec![
            kata_live::cri::view::Condition {
                kind: "RuntimeReady".into(),
                status: true,
                reason: String::new(),
                message: String::new(),
            },
            kata_live::cri::view::Condition {
                kind: "NetworkReady".into(),
                status: true,
                reason: String::new(),
                message: String::new(),
            },
        ],
        handler: "kata-remote".into(),
        handler_presence: presence,
        handlers_listed: vec![
            "".into(),
            "crun".into(),
            "runc".into(),
            "kata-remote".into(),
        ],
    }
}

fn last_run() -> RunStatus {
    RunStatus {
        schema: 1,
        operation: "install".into(),
        handler: "kata-remote".into(),
        pid: 4242,
        phase: "prove".into(),
        result: RunResult::Succeeded,
        exit_code: Some(0),
        started: "2026-12-01T12:00:00.000Z".into(),
        updated: "2026-12-01T12:00:22.000Z".into(),
        finished: Some("2026-12-01T12:00:22.000Z".into()),
        steps: (0..9)
            .map(|i| StepRecord {
                name: format!("s{i}"),
                outcome: StepOutcome::Ran,
                detail: String::new(),
                duration_ms: 1,
            })
            .collect(),
        evidence: BTreeMap::new(),
        error: None,
    }
}

fn observation() -> Observation {
    Observation {
        runtime_name: "CRI-O",
        runtime_words: kata_live::proof::RuntimeWords {
            name: "CRI-O",
            unlisted: "it ignored it (look for `is being ignored` in `journalctl -u crio.service`)"
                .into(),
        },
        runtime_source: "detected: crio.service is active and /run/crio/crio.sock exists".into(),
        handler: "kata-remote".into(),
        package: "kata-containers: live; in the next boot".into(),
        drop_in: kata_live::files::DropInState::Ours.to_string(),
        drop_in_path: "/etc/crio/crio.conf.d/50-kata-remote".into(),
        runtime_unit: Observed::Value(crio_unit()),
        crio_compat: Some(kata_live::status::CrioCompat {
            crio: Observed::Value(crio_unit()),
            crio_newer_than_artifacts: true,
        }),
        runtime: Observed::Value(runtime(HandlerPresence::Listed)),
        pods_on_handler: Observed::Value(PodsOnHandler {
            handler: "kata-remote".into(),
            on_handler: vec![PodRef {
                id: "9f1e".into(),
                namespace: "kata-ns".into(),
                name: "secure-app".into(),
                uid: "u1".into(),
                attempt: 0,
                handler: Some("kata-remote".into()),
                ready: true,
                created_at_ns: 0,
            }],
            undetermined: Vec::new(),
        }),
        package_versions: Vec::new(),
        effective_definition: serde_json::Value::Null,
        definition_problem: None,
        handlers: Vec::new(),
        runtime_newer_than_artifacts: true,
        kubelet: Observed::Value(Evidence {
            unit: Check::ok("kubelet.service active/running, MainPID 71, started after CRI-O"),
            healthz: Check::ok("http://127.0.0.1:10248/healthz answered 200 ok"),
            connection: Check::ok("kubelet (pid 71) holds a connection to /run/crio/crio.sock"),
            relists: None,
        }),
        canary: None,
        last_run: Some(last_run()),
        cluster: None,
    }
}

#[test]
fn status_of_a_healthy_node() {
    let text = render(&observation(), None);
    assert_no_debug(&text);
    insta::assert_snapshot!(text);
}

#[test]
fn verify_of_a_node_whose_crio_has_not_loaded_the_drop_in() {
    let mut o = observation();
    o.runtime_newer_than_artifacts = false;
    o.runtime = Observed::Value(runtime(HandlerPresence::NotListed));
    o.kubelet = Observed::Error {
        error: "cannot read kubelet.service: no such unit".into(),
    };
    let mut run = last_run();
    run.result = RunResult::RolledBack;
    run.exit_code = Some(13);
    run.error = Some("the change is not proven: handler kata-remote is not listed".into());
    o.last_run = Some(run);
    let v = Verdict {
        proven: false,
        missing: vec![
            "the running CRI-O started before the drop-in or the runtime files changed".into(),
            "handler kata-remote is not among the runtime's handlers".into(),
        ],
    };
    let text = render(&o, Some(&v));
    assert_no_debug(&text);
    insta::assert_snapshot!(text);
}

#[test]
fn every_json_document_has_schema_and_kind() {
    let doc = json_document(Kind::Status, observation());
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["kind"], "status");
    // The payload's fields stay where consumers read them.
    assert_eq!(doc["runtime"]["handler_presence"], "listed");
    assert_eq!(doc["kubelet"]["connection"]["ok"], true);

    let doc = json_document(Kind::Install, last_run());
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["kind"], "install");
    assert_eq!(doc["result"], "succeeded");
    assert_eq!(doc["exit_code"], 0);

    // A payload that is not an object goes under "value".
    let doc = json_document(Kind::Config, vec![1, 2]);
    assert_eq!(doc["kind"], "config");
    assert_eq!(doc["value"][1], 2);
}
