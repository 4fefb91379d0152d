//! The proof of a set's further handlers (issue 62), after the first handler's own proof:
//! each listed by the running runtime's CRI Status, its effective table the one written
//! for it, and (with `cri.canary`) a real sandbox on it. Any one missing fails the run,
//! which then rolls every handler back.

use super::*;

/// What one further handler's proof found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HandlerProof {
    pub handler: String,
    pub listed: bool,
    /// The effective table differs from the written one (why), `None`: it is the one.
    pub definition_problem: Option<String>,
    /// `Some(Err)`: the canary sandbox on the handler failed (why).
    pub canary: Option<Result<(), String>>,
}

/// What is missing across the further handlers, in the set's order (empty: all proven).
pub fn set_missing(proofs: &[HandlerProof], runtime: &str) -> Vec<String> {
    let mut missing = Vec::new();
    for p in proofs {
        let h = &p.handler;
        if !p.listed {
            missing.push(format!(
                "handler {h} is not listed by the running {runtime} (CRI Status runtime handlers)"
            ));
            continue;
        }
        if let Some(why) = &p.definition_problem {
            missing.push(format!("handler {h}: {why}"));
        }
        if let Some(Err(why)) = &p.canary {
            missing.push(format!("handler {h}: the canary sandbox failed: {why}"));
        }
    }
    missing
}

/// Proves each further handler on the running runtime; `wrote`: its name and written table.
pub async fn prove_more(
    ctx: &Ctx,
    rep: &mut Reporter,
    wrote: &[(String, Option<toml::Table>)],
) -> Result<(), String> {
    let c = &ctx.cfg;
    rep.begin("prove", "proving each further handler of the set");
    let cri = match ctx.cri(c.deadlines.cri_ready).await {
        Ok(cri) => cri,
        Err(e) => {
            let msg = format!("{} unreachable: {e}", ctx.rt.name());
            rep.end(StepOutcome::Failed, msg.clone());
            return Err(msg);
        }
    };
    let mut proofs = Vec::new();
    for rt in &ctx.more {
        let name = rt.handler_name();
        let started = Instant::now();
        // Polled while the runtime settles, within `deadlines.cri_ready`.
        let listed = loop {
            let listed = matches!(
                cri.runtime_view(name).await,
                Ok(v) if v.handler_presence == HandlerPresence::Listed
            );
            if listed || started.elapsed() >= c.deadlines.cri_ready {
                break listed;
            }
            tokio::time::sleep(kubelet::POLL_INTERVAL).await;
        };
        let mut proof = HandlerProof {
            handler: name.to_string(),
            listed,
            definition_problem: None,
            canary: None,
        };
        if listed {
            if let Some(Some(table)) = wrote.iter().find(|(n, _)| n == name).map(|(_, t)| t) {
                let (evidence, problem) = rt.effective(&ctx.host, table).await;
                rep.evidence(&format!("effective_definition.{name}"), &evidence);
                proof.definition_problem = problem;
            }
            if c.cri.canary {
                let r = cri.run_canary(name, c.deadlines.canary).await;
                if let Ok(report) = &r {
                    rep.evidence(&format!("canary.{name}"), report);
                }
                proof.canary = Some(r.map(|_| ()).map_err(|e| e.to_string()));
            }
        }
        proofs.push(proof);
    }
    rep.evidence("handlers", &proofs);
    let missing = set_missing(&proofs, ctx.rt.name());
    if missing.is_empty() {
        let names: Vec<&str> = proofs.iter().map(|p| p.handler.as_str()).collect();
        rep.end(StepOutcome::Ran, format!("proven: {}", names.join(", ")));
        Ok(())
    } else {
        let missing = missing.join("; ");
        rep.end(StepOutcome::Failed, missing.clone());
        Err(missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(
        h: &str,
        listed: bool,
        def: Option<&str>,
        canary: Option<Result<(), &str>>,
    ) -> HandlerProof {
        HandlerProof {
            handler: h.into(),
            listed,
            definition_problem: def.map(String::from),
            canary: canary.map(|r| r.map_err(String::from)),
        }
    }

    #[test]
    fn every_further_handler_must_hold() {
        assert!(set_missing(&[p("kata", true, None, Some(Ok(())))], "CRI-O").is_empty());
        let m = set_missing(
            &[
                p("kata", false, None, None),
                p("kata-qemu", true, Some("runtime_root differs"), None),
                p("kata-fc", true, None, Some(Err("timed out"))),
                p("kata-clh", true, None, None),
            ],
            "CRI-O",
        );
        assert_eq!(
            m,
            vec![
                "handler kata is not listed by the running CRI-O (CRI Status runtime handlers)",
                "handler kata-qemu: runtime_root differs",
                "handler kata-fc: the canary sandbox failed: timed out",
            ]
        );
    }
}
