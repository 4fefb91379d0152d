//! The proof of a set's further handlers (issue 62), after the first handler's own proof:
//! each listed (install) or gone (uninstall) in the running runtime's CRI Status, and on
//! install its effective table the one written for it. Any one missing fails the run, which
//! then rolls every handler back. `status` and `verify` observe each handler the same way.

use super::*;

/// What one further handler's proof found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HandlerProof {
    pub handler: String,
    /// Listed by the running runtime's CRI Status (`None`: it does not report handlers).
    pub listed: Option<bool>,
    /// The CRI Status call failed (why): nothing is known of the handler.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cri_error: Option<String>,
    /// The running runtime's effective definition of the handler (`null`: not read).
    pub effective_definition: serde_json::Value,
    /// The effective table differs from the written one (why); `None`: it is the one.
    pub definition_problem: Option<String>,
}

/// What is missing across the further handlers, in the set's order (empty: all proven).
/// `want_listed`: install (each served) or uninstall (each gone).
pub fn set_missing(proofs: &[HandlerProof], runtime: &str, want_listed: bool) -> Vec<String> {
    let mut missing = Vec::new();
    for p in proofs {
        let h = &p.handler;
        if let Some(e) = &p.cri_error {
            missing.push(format!("handler {h}: {runtime}'s CRI Status failed: {e}"));
            continue;
        }
        match (want_listed, p.listed) {
            (true, Some(false)) => missing.push(format!(
                "handler {h} is not listed by the running {runtime} (CRI Status runtime handlers)"
            )),
            (false, Some(true)) => missing.push(format!(
                "handler {h} is still listed by the running {runtime} after its drop-in was removed"
            )),
            _ => {}
        }
        if let Some(why) = &p.definition_problem {
            missing.push(format!("handler {h}: {why}"));
        }
    }
    missing
}

/// Observes one further handler on the running runtime: its presence, polled within
/// `settle` until it is the wanted one, then (`wrote`) its effective table against it.
pub async fn observe_handler(
    ctx: &Ctx,
    cri: &CriClient,
    rt: &dyn crate::runtime::Runtime,
    want_listed: bool,
    wrote: Option<&toml::Table>,
    settle: Duration,
) -> HandlerProof {
    let name = rt.handler_name();
    let started = Instant::now();
    let (listed, cri_error) = loop {
        let (listed, error) = match cri.runtime_view(name).await {
            Ok(v) => (v.handler_presence.as_listed(), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let settled = error.is_none() && listed.is_none_or(|l| l == want_listed);
        if settled || started.elapsed() >= settle {
            break (listed, error);
        }
        tokio::time::sleep(kubelet::POLL_INTERVAL).await;
    };
    let (effective_definition, definition_problem) = match wrote {
        Some(table) if cri_error.is_none() && listed != Some(false) => {
            rt.effective(&ctx.host, table).await
        }
        _ => (serde_json::Value::Null, None),
    };
    HandlerProof {
        handler: name.to_string(),
        listed,
        cri_error,
        effective_definition,
        definition_problem,
    }
}

/// The runtime's CRI client for a proof of the set, or the step ended with why.
async fn connect(
    ctx: &Ctx,
    rep: &mut Reporter,
    step: &str,
    doing: &str,
) -> Result<CriClient, String> {
    rep.begin(step, doing);
    ctx.cri(ctx.cfg.deadlines.cri_ready).await.map_err(|e| {
        let msg = format!("{} unreachable: {e}", ctx.rt.name());
        rep.end(StepOutcome::Failed, msg.clone());
        msg
    })
}

/// Ends the step with what the proofs found: `proven` when nothing is missing.
fn conclude(
    rep: &mut Reporter,
    key: &str,
    proofs: &[HandlerProof],
    missing: Vec<String>,
    proven: String,
) -> Result<(), String> {
    rep.evidence(key, proofs);
    if missing.is_empty() {
        rep.end(StepOutcome::Ran, proven);
        Ok(())
    } else {
        let missing = missing.join("; ");
        rep.end(StepOutcome::Failed, missing.clone());
        Err(missing)
    }
}

/// Proves each further handler on the running runtime, served (`want_listed`) with the
/// table written for it (`wrote`: name and table), or gone.
pub async fn prove_more(
    ctx: &Ctx,
    rep: &mut Reporter,
    want_listed: bool,
    wrote: &[(String, Option<toml::Table>)],
) -> Result<(), String> {
    let c = &ctx.cfg;
    let cri = connect(ctx, rep, "prove", "proving each further handler of the set").await?;
    let mut proofs = Vec::new();
    for rt in &ctx.more {
        let table = wrote
            .iter()
            .find(|(n, _)| n == rt.handler_name())
            .and_then(|(_, t)| t.as_ref())
            .filter(|_| want_listed);
        proofs.push(
            observe_handler(
                ctx,
                &cri,
                rt.as_ref(),
                want_listed,
                table,
                c.deadlines.cri_ready,
            )
            .await,
        );
    }
    let missing = set_missing(&proofs, ctx.rt.name(), want_listed);
    let names: Vec<&str> = proofs.iter().map(|p| p.handler.as_str()).collect();
    let how = if want_listed { "served" } else { "gone" };
    let proven = format!("proven {how}: {}", names.join(", "));
    conclude(rep, "handlers", &proofs, missing, proven)
}

/// The rollback's proof of the further handlers: each as preflight found it, listed or not
/// (one the runtime did not report then is not judged).
pub async fn prove_more_back(
    ctx: &Ctx,
    rep: &mut Reporter,
    baseline: &Baseline,
) -> Result<(), String> {
    if ctx.more.is_empty() {
        return Ok(());
    }
    let c = &ctx.cfg;
    let doing = "proving each further handler of the set as preflight found it";
    let cri = connect(ctx, rep, "prove-rollback", doing).await?;
    let mut proofs = Vec::new();
    let mut missing = Vec::new();
    for rt in &ctx.more {
        let found = baseline
            .more_presence
            .iter()
            .find(|(n, _)| n == rt.handler_name())
            .map(|(_, p)| *p);
        let Some(want) = found.and_then(|p| p.as_listed()) else {
            continue;
        };
        let p = observe_handler(ctx, &cri, rt.as_ref(), want, None, c.deadlines.cri_ready).await;
        missing.extend(set_missing(std::slice::from_ref(&p), ctx.rt.name(), want));
        proofs.push(p);
    }
    let proven = "each further handler as preflight found it".to_string();
    conclude(rep, "handlers_back", &proofs, missing, proven)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(h: &str, listed: Option<bool>, def: Option<&str>) -> HandlerProof {
        HandlerProof {
            handler: h.into(),
            listed,
            cri_error: None,
            effective_definition: serde_json::Value::Null,
            definition_problem: def.map(String::from),
        }
    }

    #[test]
    fn every_further_handler_must_be_served_with_its_table() {
        assert!(set_missing(&[p("kata", Some(true), None)], "CRI-O", true).is_empty());
        let m = set_missing(
            &[
                p("kata", Some(false), None),
                p("kata-qemu", Some(true), Some("runtime_root differs")),
                p("kata-clh", Some(true), None),
                p("kata-fc", None, None),
            ],
            "CRI-O",
            true,
        );
        assert_eq!(
            m,
            vec![
                "handler kata is not listed by the running CRI-O (CRI Status runtime handlers)",
                "handler kata-qemu: runtime_root differs",
            ]
        );
    }

    #[test]
    fn every_further_handler_must_be_gone_after_an_uninstall() {
        assert!(set_missing(&[p("kata", Some(false), None)], "containerd", false).is_empty());
        assert_eq!(
            set_missing(&[p("kata", Some(true), None)], "containerd", false),
            vec!["handler kata is still listed by the running containerd after its drop-in was removed"]
        );
    }
}
