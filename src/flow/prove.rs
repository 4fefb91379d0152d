use super::*;
use crate::proof::{self, observe::Newest};

/// What the proof checks besides the handler.
pub struct ProofSpec<'a> {
    pub want_listed: bool,
    pub baseline: &'a Baseline,
    /// kubelet restarted with CRI-O: a new InvocationID is required.
    pub restarted: bool,
    pub newest_artifact_us: u64,
    /// See [`crate::proof::observe::Newest`].
    pub newest_config_us: u64,
    /// Pods expected to go away (uninstall --force): not counted as lost.
    pub expendable: &'a [String],
    pub step: &'a str,
    /// Rollback to a node whose runtime reported no handlers at preflight: an unknown
    /// handler presence is the state it was found in.
    pub unknown_as_found: bool,
    /// See `Goal::definition`.
    pub definition: Option<&'a toml::Table>,
}

/// Proves the state on the running node. Returns the evidence or what is missing.
pub async fn prove(ctx: &Ctx, rep: &mut Reporter, spec: ProofSpec<'_>) -> Result<(), String> {
    let c = &ctx.cfg;
    rep.begin(
        spec.step,
        "proving through the CRI socket and kubelet's connection",
    );
    let started = Instant::now();
    let crio = match ctx.unit(ctx.rt.unit()).await {
        Ok(s) => s,
        Err(e) => {
            let msg = format!("cannot read {}: {e}", ctx.rt.unit());
            rep.end(StepOutcome::Failed, msg.clone());
            return Err(msg);
        }
    };

    // CRI readiness and kubelet's reconnection are awaited at the same time: the verdict
    // comes when the last of them holds, not after the sum of the waits.
    let cri_deadline = c.deadlines.cri_ready;
    let cri = ctx.cri(cri_deadline).await.map_err(|e| e.to_string());
    let (view, (restarts_with_crio, kubelet_proof)) = tokio::join!(
        await_runtime(ctx, &spec, &cri, started, cri_deadline),
        await_kubelet(ctx, &spec, crio.main_pid)
    );
    let seen = proof::observe::has_seen(
        &crio,
        view.as_ref()
            .ok()
            .and_then(|v| v.handler_presence.as_listed()),
        Newest {
            config_us: spec.newest_config_us,
            artifact_us: spec.newest_artifact_us,
        },
        ctx.rt.checks_files_at_start(),
        spec.want_listed,
    );
    let mut inputs =
        proof::observe::runtime_part(spec.want_listed, spec.unknown_as_found, seen, view.as_ref());
    match &view {
        Ok(v) => rep.evidence("runtime", v),
        Err(e) => rep.evidence("runtime", serde_json::json!({ "error": e })),
    }

    // The definition CRI-O took: a later drop-in declaring the handler replaces ours whole,
    // and CRI-O then lists the handler with the foreign definition.
    if let (Some(wrote), Ok(_)) = (spec.definition, &view) {
        let (evidence, problem) = ctx.rt.effective(&ctx.host, wrote).await;
        rep.evidence("effective_definition", &evidence);
        inputs.definition_problem = problem;
    }

    rep.evidence("kubelet_restarts_with_crio", restarts_with_crio);
    match kubelet_proof {
        Ok(ev) => rep.evidence("kubelet", &ev),
        Err(e) => {
            let kubelet::KubeletError::NotReconnected {
                evidence, missing, ..
            } = &e;
            rep.evidence("kubelet", evidence);
            inputs.kubelet_missing = Some(missing.clone());
        }
    }

    // Pods: nothing that ran before is lost. Listed after kubelet settled, so that pods
    // kubelet restarted show as restarts, not losses.
    match &cri {
        Ok(cri) => {
            match cri.pod_snapshot().await {
                Ok(after) => {
                    let diff = cri::diff_pods(&spec.baseline.pods, &after);
                    inputs.pods_lost = diff
                        .lost
                        .iter()
                        .chain(diff.stopped.iter())
                        .filter(|p| ctx.rollout_namespace.as_deref() != Some(&p.pod.namespace))
                        .map(|p| format!("{}/{}", p.pod.namespace, p.pod.name))
                        .filter(|p| !spec.expendable.contains(p))
                        .collect();
                    rep.evidence("pods", &diff);
                }
                Err(e) => inputs.pods_lost = vec![format!("(cannot list pods: {e})")],
            }
            if c.cri.canary {
                let r = cri.run_canary("", c.deadlines.canary).await;
                if let Ok(report) = &r {
                    rep.evidence("canary", report);
                }
                inputs.canary = Some(r.map(|_| ()).map_err(|e| e.to_string()));
            }
        }
        Err(e) => {
            inputs.pods_lost = vec![format!(
                "({} unreachable, pods cannot be checked: {e})",
                ctx.rt.name()
            )]
        }
    }

    let v = proof::verdict(&inputs, &ctx.rt.words());
    rep.evidence("verdict", &v);
    if v.proven {
        rep.end(StepOutcome::Ran, "proven".to_string());
        Ok(())
    } else {
        let missing = v.missing.join("; ");
        rep.end(StepOutcome::Failed, missing.clone());
        Err(missing)
    }
}

/// CRI: ready, and the handler listed (or gone), polled every 100 ms while CRI-O settles,
/// until `cri_deadline` from `started`.
async fn await_runtime(
    ctx: &Ctx,
    spec: &ProofSpec<'_>,
    cri: &Result<CriClient, String>,
    started: Instant,
    cri_deadline: Duration,
) -> Result<RuntimeView, String> {
    let want = if spec.want_listed {
        HandlerPresence::Listed
    } else {
        HandlerPresence::NotListed
    };
    let cri = cri.as_ref().map_err(|e| e.clone())?;
    let wanted = |v: &RuntimeView| {
        v.ready
            && v.network_ready
            && (v.handler_presence == want
                || (spec.unknown_as_found && v.handler_presence == HandlerPresence::Unknown))
    };
    loop {
        let v = cri
            .runtime_view(&ctx.cfg.handler.name)
            .await
            .map_err(|e| e.to_string());
        // A runtime that does not report handlers will not start to: no use waiting.
        let settled = matches!(&v, Ok(v) if wanted(v)
            || (v.ready && v.handler_presence == HandlerPresence::Unknown));
        if settled || started.elapsed() >= cri_deadline {
            return v;
        }
        tokio::time::sleep(kubelet::POLL_INTERVAL).await;
    }
}

/// kubelet: back, stable, and connected to the CRI-O at `crio_pid`. When its unit requires
/// CRI-O's (OpenShift: Requires=crio.service) a CRI-O restart restarts it too, so a new
/// InvocationID is demanded; otherwise the connection to the new CRI-O is the proof.
/// Returns whether kubelet restarts with CRI-O, and the proof.
async fn await_kubelet(
    ctx: &Ctx,
    spec: &ProofSpec<'_>,
    crio_pid: u32,
) -> (bool, Result<Evidence, kubelet::KubeletError>) {
    let c = &ctx.cfg;
    let restarts_with_crio = match ctx.systemd.snapshot(&c.units.kubelet).await {
        Ok(s) => s.restarts_with.iter().any(|u| u == ctx.rt.unit()),
        Err(_) => true,
    };
    let before = (spec.restarted && restarts_with_crio).then_some(&spec.baseline.kubelet);
    let kin = kubelet::ReconnectInputs::from_config(
        &c.kubelet,
        &c.units.kubelet,
        &ctx.host,
        ctx.rt.socket(),
        crio_pid,
        before,
    );
    let read = || async { ctx.unit(&c.units.kubelet).await.map_err(|e| e.to_string()) };
    let proof = kubelet::prove_reconnected(kin, read, c.deadlines.kubelet).await;
    (restarts_with_crio, proof)
}
