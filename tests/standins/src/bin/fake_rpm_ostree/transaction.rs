//! fake-rpm-ostree's changes, as its daemon makes them: a new pending deployment (install,
//! uninstall, deploy), and the live apply in rpm-ostree's order (the unlock, the package check, the
//! in-progress target, the copy, the live state).

use kata_live_standins::rpm_ostree_real::LiveState;
use serde_json::Value;

use super::model::{deployment, diff, diff_output, is_local, pkg_map, read_local_rpm, strs};
use super::{checksum_for, nevra_name, Fake, Res};

impl Fake {
    /// Removes, then adds, into a new pending deployment based on the default one (its OS
    /// commit too: an OS update staged stays in it, as rpm-ostree builds on the merge
    /// deployment). False when nothing changed.
    pub(super) fn change(
        &self,
        state: &mut Value,
        add: &[String],
        remove: &[String],
        idempotent: bool,
    ) -> Res<bool> {
        let bi = self.booted_idx(state)?;
        let deps = state["deployments"].as_array().cloned().unwrap_or_default();
        let default = if bi > 0 {
            deps[0].clone()
        } else {
            deps[bi].clone()
        };
        let mut req: Vec<String> = strs(&default["requested-packages"]);
        let mut local: Vec<String> = strs(&default["requested-local-packages"]);
        let mut changed = false;
        // Removals first, as rpm-ostree applies them before the additions.
        for r in remove {
            let before = (req.len(), local.len());
            req.retain(|p| p != r);
            local.retain(|p| p != r && nevra_name(p) != *r);
            if before == (req.len(), local.len()) {
                if !idempotent {
                    return Err(format!(
                        "Package/capability '{r}' is not currently requested"
                    ));
                }
            } else {
                changed = true;
            }
        }
        let mut imports = Vec::new();
        for a in add {
            if is_local(a) {
                let rpm = read_local_rpm(a, &self.rpm_file(a))?;
                if local.contains(&rpm.nevra) {
                    if !idempotent {
                        return Err(format!(
                            "Package '{}:{}' is already layered",
                            rpm.sha256, rpm.nevra
                        ));
                    }
                    continue;
                }
                // Keyed by NEVRA: another version of a layered name is a second request,
                // which libsolv cannot satisfy (not skipped by --idempotent).
                if let Some(old) = local.iter().find(|p| nevra_name(p) == rpm.name) {
                    return Err(format!(
                        "Could not depsolve transaction; 1 problem detected:\n Problem: conflicting requests\n  - cannot install both {} from @commandline and {old} from @commandline",
                        rpm.nevra
                    ));
                }
                local.push(rpm.nevra.clone());
                imports.push((a.clone(), rpm.nevra));
                changed = true;
            } else if req.contains(a) {
                if !idempotent {
                    return Err(format!("Package/capability '{a}' is already requested"));
                }
            } else {
                req.push(a.clone());
                changed = true;
            }
        }
        if !changed {
            return Ok(false);
        }
        // The import: a live apply later reads these, not the operator's files.
        let cache = self.path("pkgcache");
        std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
        for (src, nevra) in imports {
            std::fs::copy(self.rpm_file(&src), cache.join(format!("{nevra}.rpm")))
                .map_err(|e| format!("importing {src}: {e}"))?;
        }
        let base = default["base-checksum"]
            .as_str()
            .or(default["checksum"].as_str())
            .unwrap_or_default()
            .to_string();
        pend(state, bi, &base, req, local);
        Ok(true)
    }

    /// `deploy REVISION`: a new pending deployment on OS commit `rev`, the default one's
    /// packages kept (what the machine-config daemon's OS update stages). The real one pulls
    /// `rev` from the origin's remote; here it must already be in the repo.
    pub(super) fn deploy(&self, state: &mut Value, rev: &str) -> Res<()> {
        let bi = self.booted_idx(state)?;
        let default = &state["deployments"][if bi > 0 { 0 } else { bi }];
        let (req, local) = (
            strs(&default["requested-packages"]),
            strs(&default["requested-local-packages"]),
        );
        pend(state, bi, rev, req, local);
        Ok(())
    }

    pub(super) fn apply_live(
        &self,
        state: &mut Value,
        target: Option<String>,
        allow_replacement: bool,
    ) -> Res<()> {
        let bi = self.booted_idx(state)?;
        let deps = state["deployments"].as_array().cloned().unwrap_or_default();
        let booted = deps[bi].clone();
        let target = match target {
            Some(t) => t,
            None if bi > 0 => deps[0]["checksum"].as_str().unwrap_or_default().to_string(),
            None => return Err("No target commit specified and no pending deployment".into()),
        };
        if let Some(inprog) = booted["live-inprogress"].as_str() {
            if inprog != target {
                return Err(format!(
                    "Previously interrupted while targeting commit {inprog}, cannot change target to {target}"
                ));
            }
        }
        let find = |c: &str| deps.iter().find(|d| d["checksum"] == c).cloned();
        let target_dep = find(&target).ok_or(format!("Commit {target} not found"))?;
        // The transient unlock comes before the package check: a refused first try
        // leaves `/usr` unlocked all the same. Nothing applied live yet and `/usr` locked:
        // unlock; already unlocked for a live apply or for development: go on; unlocked
        // otherwise (a hotfix): refused [rpm-ostree rust/src/live.rs].
        let applied = booted["live-replaced"].is_string() || booted["live-inprogress"].is_string();
        match booted["unlocked"].as_str().unwrap_or("none") {
            "transient" | "development" => {}
            "none" if !applied => {
                if let Some(o) = &self.ostree {
                    o.unlock_transient()?;
                    self.timing("overlay-mounted");
                } else {
                    state["deployments"][bi]["unlocked"] = Value::from("transient");
                    self.save(state)?;
                }
            }
            "none" => return Err("deployment not unlocked, is in state: none".into()),
            other => {
                return Err(format!(
                    "apply-live is incompatible with unlock state: {other}"
                ))
            }
        }
        if let Some(o) = &self.ostree {
            // rpm-ostreed's own namespace, where ostree's read-only overlay is writable.
            o.remount_usr_rw()?;
        }
        let before = match (&self.ostree, booted["live-replaced"].as_str()) {
            (Some(o), Some(live)) => o.packages(live),
            (None, Some(_)) => self.live_packages()?,
            (_, None) => pkg_map(&booted),
        };
        let after = pkg_map(&target_dep);
        let d = diff(&before, &after);
        let base_of = |dep: &Value| {
            dep["base-checksum"]
                .as_str()
                .or(dep["checksum"].as_str())
                .unwrap_or_default()
                .to_string()
        };
        // An OS update in the target changes base packages: one "changed" here.
        let base_changed = usize::from(base_of(&target_dep) != base_of(&booted));
        if !allow_replacement {
            if !d.removed.is_empty() {
                return Err(format!(
                    "packages would be removed: {}, allow replacement to override",
                    d.removed.len()
                ));
            }
            if !d.changed.is_empty() || base_changed > 0 {
                return Err(format!(
                    "packages would be changed: {}, allow replacement to override",
                    d.changed.len() + base_changed
                ));
            }
        }
        // The target is recorded first: an apply cut off leaves it as `live-inprogress`.
        state["deployments"][bi]["live-inprogress"] = Value::from(target.clone());
        self.save(state)?;
        let real = self.ostree.as_ref().map(|o| -> Res<_> {
            let d = o.booted()?;
            let live = LiveState {
                commit: booted["live-replaced"].as_str().unwrap_or_default().into(),
                inprogress: target.clone(),
            };
            o.write_live_state(&d, &live)?;
            Ok((o, d, live))
        });
        let real = real.transpose()?;
        if self.marker("interrupt") {
            return Err("Transaction interrupted (fake)".into());
        }
        // The live step ignores cancellation: held here, it still runs to its end.
        self.hold("hang-live", "live", false)?;
        if let Some((o, dep, live)) = real {
            let source = if live.commit.is_empty() {
                dep.checksum.clone()
            } else {
                live.commit.clone()
            };
            // A test holds the copy with the overlay mounted and nothing copied yet.
            o.copy_live(&source, &target, &mut || {
                self.hold("hold-copy", "copy", false)?;
                self.timing("copy-started");
                Ok(())
            })?;
            self.timing("copied");
            o.write_live_state(
                &dep,
                &LiveState {
                    commit: target.clone(),
                    inprogress: String::new(),
                },
            )?;
            print!("{}", diff_output(&d));
            println!("Successfully updated running filesystem tree.");
            return Ok(());
        }
        let dep = &mut state["deployments"][bi];
        if let Some(o) = dep.as_object_mut() {
            o.remove("live-inprogress");
            o.insert("live-replaced".into(), Value::from(target.clone()));
        }
        self.save(state)?;
        let live = serde_json::to_string(&after).map_err(|e| e.to_string())?;
        std::fs::write(self.path("live-packages.json"), live).map_err(|e| e.to_string())?;

        let gone: Vec<&String> = d
            .removed
            .iter()
            .chain(d.changed.iter().map(|(old, _)| old))
            .collect();
        let arriving: Vec<&String> = d
            .added
            .iter()
            .chain(d.changed.iter().map(|(_, new)| new))
            .collect();
        let ident_name = |i: &str| {
            after
                .iter()
                .chain(before.iter())
                .find(|(_, v)| v.as_str() == i)
                .map(|(n, _)| n.clone())
                .unwrap_or_else(|| i.to_string())
        };
        let files = self.files()?;
        for ident in &gone {
            let name = ident_name(ident);
            for (_, spec) in files.iter().filter(|(p, _)| *p == name) {
                let path = spec.split_whitespace().next().unwrap_or(spec);
                let _ = std::fs::remove_file(path);
            }
            for path in self.payload_paths(ident)? {
                let _ = std::fs::remove_file(path);
            }
        }
        let mut new_files: Vec<String> = Vec::new();
        for ident in &arriving {
            let name = ident_name(ident);
            for (_, spec) in files.iter().filter(|(p, _)| *p == name) {
                // A placeholder names its NEVRA: an upgrade changes the file's content.
                new_files.push(if spec.split_whitespace().nth(1).is_some() {
                    spec.clone()
                } else {
                    format!("{spec} @{ident}")
                });
            }
            new_files.extend(self.payload_specs(ident)?);
        }
        if !new_files.is_empty() {
            self.spawn_file_creator(&new_files)?;
        }
        print!("{}", diff_output(&d));
        println!("Successfully updated running filesystem tree.");
        Ok(())
    }
}

/// Puts a new pending deployment of OS commit `base` with these requests first, before the
/// booted one (replacing any pending one).
fn pend(state: &mut Value, bi: usize, base: &str, req: Vec<String>, local: Vec<String>) {
    let deps = state["deployments"].as_array().cloned().unwrap_or_default();
    let seed = format!("{base}|{req:?}|{local:?}");
    let mut new = deployment(&checksum_for(&seed), false, true);
    new["base-checksum"] = Value::from(base);
    new["packages"] = Value::from(req.clone());
    new["requested-packages"] = Value::from(req);
    new["requested-local-packages"] = Value::from(local);
    let mut list = vec![new];
    list.extend(deps[bi..].iter().cloned());
    state["deployments"] = Value::from(list);
}
