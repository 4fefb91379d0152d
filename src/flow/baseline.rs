use super::*;

/// The node as preflight found it: what the proof and the rollback compare against.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    pub crio: UnitState,
    pub kubelet: UnitState,
    pub view: RuntimeView,
    /// The set's further handlers, each as the running runtime listed it at preflight.
    pub more_presence: Vec<(String, HandlerPresence)>,
    pub pods: PodSnapshot,
    pub kubelet_evidence: Evidence,
    /// The runtime files, each with the SHA-256 the host showed (`None`: not visible): what
    /// a rollback of the package puts back.
    #[serde(skip)]
    pub files: Vec<(std::path::PathBuf, Option<String>)>,
}

/// Refuses a node that is already unhealthy, so that a rollout never makes a bad node worse.
/// Returns the baseline and a line that sums it up.
pub async fn preflight(ctx: &Ctx) -> Result<(Baseline, String), FlowError> {
    let b = preflight_inner(ctx).await?;
    let words = format!(
        "{} {} ready, kubelet connected, {} ready sandboxes, handler {}",
        ctx.rt.name(),
        b.view.runtime_version,
        b.pods.ready_sandboxes().count(),
        presence_word(b.view.handler_presence)
    );
    Ok((b, words))
}

fn presence_word(p: HandlerPresence) -> &'static str {
    match p {
        HandlerPresence::Listed => "listed",
        HandlerPresence::NotListed => "not listed",
        HandlerPresence::Unknown => "unknown (runtime does not report handlers)",
    }
}

async fn preflight_inner(ctx: &Ctx) -> Result<Baseline, FlowError> {
    let c = &ctx.cfg;
    let deadline = c.deadlines.preflight;
    let until = Instant::now() + deadline;
    let refuse = |what: &str, e: &dyn std::fmt::Display| FlowError::Refused(format!("{what}: {e}"));
    // A unit still starting (at boot, where kata-live's unit has no After= on CRI-O or
    // kubelet and their start jobs are queued beside its own, or the restart of a run that
    // was killed) is waited for within the preflight deadline, then judged: refusing it
    // would only make the rollout retry.
    let crio = settled(ctx, ctx.rt.unit(), until)
        .await
        .map_err(|e| refuse(ctx.rt.unit(), &e))?;
    if !crio.is_running() {
        return Err(FlowError::Refused(format!(
            "{} is not running: {crio}",
            ctx.rt.name()
        )));
    }
    let kubelet = settled(ctx, &c.units.kubelet, until)
        .await
        .map_err(|e| refuse(&c.units.kubelet, &e))?;
    if !kubelet.is_running() {
        return Err(FlowError::Refused(format!(
            "kubelet is not running: {kubelet}"
        )));
    }
    let cri = ctx
        .cri(deadline)
        .await
        .map_err(|e| refuse(&format!("{}'s socket", ctx.rt.name()), &e))?;
    let view = cri
        .runtime_view(&c.handler.name)
        .await
        .map_err(|e| refuse("CRI Status", &e))?;
    if !(view.ready && view.network_ready) {
        return Err(FlowError::Refused(format!(
            "{} is not ready: {}",
            ctx.rt.name(),
            view.problems().join("; ")
        )));
    }
    let inputs = kubelet::ReconnectInputs::from_config(
        &c.kubelet,
        &c.units.kubelet,
        &ctx.host,
        ctx.rt.socket(),
        crio.main_pid,
        None,
    );
    let kubelet_evidence = kubelet::observe(&inputs, &kubelet, Duration::ZERO).await;
    if let kubelet::Reconnection::Missing(_) = kubelet::verdict(&kubelet_evidence) {
        return Err(FlowError::Refused(format!(
            "kubelet is not healthy and connected to {}: {}",
            ctx.rt.name(),
            kubelet::describe_missing(&kubelet_evidence)
        )));
    }
    // With each sandbox's handler: the uninstall guard needs it.
    let pods = cri
        .pod_snapshot_with_handlers()
        .await
        .map_err(|e| refuse("listing pods", &e))?;
    // Each further handler of the set as the runtime lists it (or not), from one Status.
    let mut more_presence = Vec::new();
    for rt in &ctx.more {
        let v = cri
            .runtime_view(rt.handler_name())
            .await
            .map_err(|e| refuse("CRI Status", &e))?;
        more_presence.push((rt.handler_name().to_string(), v.handler_presence));
    }
    let paths = ctx.runtime_paths();
    Ok(Baseline {
        crio,
        kubelet,
        view,
        more_presence,
        pods,
        kubelet_evidence,
        files: crate::visibility::found(&ctx.host, &paths),
    })
}

/// The unit's state once it is no longer transitional (or at `until`), saying so when that
/// took a wait.
async fn settled(ctx: &Ctx, unit: &str, until: Instant) -> Result<UnitState, SystemdError> {
    let snap = ctx.systemd.snapshot(unit).await?;
    let first = snap.state;
    if !crate::systemd::jobs::is_transitional(&first) && snap.pending_job == 0 {
        return Ok(first);
    }
    let t0 = Instant::now();
    tracing::info!(
        unit = %unit,
        "{unit} is {}/{}{}; waiting up to {:.0} s for it to settle before judging it",
        first.active_state,
        first.sub_state,
        if snap.pending_job != 0 { " with a job queued" } else { "" },
        until.saturating_duration_since(t0).as_secs_f64()
    );
    let now = ctx.systemd.wait_settled(unit, until).await?;
    tracing::info!(
        unit = %unit,
        "{unit} was {}/{}; waited {:.1} s for it to settle: now {}/{}",
        first.active_state,
        first.sub_state,
        t0.elapsed().as_secs_f64(),
        now.active_state,
        now.sub_state
    );
    Ok(now)
}
