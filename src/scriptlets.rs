//! The work the package scriptlets would have done: they do not run on a live apply
//! (rpm-ostree applies files, not `%post`). Each step checks first and only changes what
//! is missing, so a second run makes no change.
//!
//! Starting post-install units is not here: the flows do it over systemd D-Bus.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::config::PostInstall;
use crate::host::Host;
use crate::process::{ProcessError, Program};
pub use kata_live_parse::scriptlets::{parse_getsebool, parse_semodule_list};

/// The executables used, injectable for tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tools {
    pub semodule: PathBuf,
    pub setsebool: PathBuf,
    pub getsebool: PathBuf,
    pub systemd_tmpfiles: PathBuf,
}

impl Default for Tools {
    /// Paths on RHCOS.
    fn default() -> Self {
        Tools {
            semodule: "/usr/sbin/semodule".into(),
            setsebool: "/usr/sbin/setsebool".into(),
            getsebool: "/usr/sbin/getsebool".into(),
            systemd_tmpfiles: "/usr/bin/systemd-tmpfiles".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScriptletError {
    #[error("{path} not found: cannot do the package's post-install work without it")]
    ToolMissing { path: PathBuf },
    #[error("could not run {path}: {}", crate::words::io(.source))]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}):\n{output}")]
    Failed {
        command: String,
        status: String,
        output: String,
    },
    #[error(
        "`{command}` did not finish before the post-install deadline ({:.1} s); it was killed",
        .deadline.as_secs_f64()
    )]
    Timeout { command: String, deadline: Duration },
    #[error("SELinux module file {path} (module {module}) does not exist: is the package live?")]
    ModuleFileMissing { module: String, path: PathBuf },
    #[error("could not read `{command}` output: {output:?}")]
    Unparseable { command: String, output: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum ScriptletOutcome {
    Ran,
    /// Ran a command that is idempotent by itself (changes nothing already in place).
    Ensured,
    /// Already in place; `why` says what showed it.
    Skipped {
        why: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Scriptlet {
    /// E.g. `selinux-module kata`, `selinux-boolean container_use_devices=on`.
    pub what: String,
    #[serde(flatten)]
    pub outcome: ScriptletOutcome,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScriptletReport {
    /// What the host's selinuxfs said; `None` when no SELinux step was configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selinux: Option<Selinux>,
    pub steps: Vec<Scriptlet>,
}

/// SELinux on the host, as its selinuxfs says (`enforce`: 1 or 0; no file: not enabled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Selinux {
    Enforcing,
    Permissive,
    /// No selinuxfs mounted: SELinux is disabled or not built in; its tools cannot work.
    NotEnabled,
}

/// Reads `<selinuxfs>/enforce` (a host path, under `host.root`). Only a missing file means
/// "not enabled": any other failure to read it counts as enforcing, so that the SELinux
/// steps run and fail loudly rather than being skipped on a doubt.
pub fn selinux_state(host: &Host, selinuxfs: &Path) -> Selinux {
    match std::fs::read_to_string(host.path(selinuxfs).join("enforce")) {
        Ok(v) if v.trim() == "0" => Selinux::Permissive,
        Ok(_) => Selinux::Enforcing,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Selinux::NotEnabled,
        Err(_) => Selinux::Enforcing,
    }
}

impl ScriptletReport {
    /// True when some step changed the host (an `Ensured` step may have, but is not
    /// counted).
    pub fn changed(&self) -> bool {
        self.steps
            .iter()
            .any(|s| s.outcome == ScriptletOutcome::Ran)
    }
}

struct Runner {
    until: Instant,
    deadline: Duration,
}

impl Runner {
    async fn run(&self, exe: &Path, args: &[String]) -> Result<String, ScriptletError> {
        let command = crate::process::command_line(exe, args);
        tracing::debug!(command = %command, "post-install step");
        let out = Program::new(exe)
            .args(args)
            .output(self.until)
            .await
            .map_err(|e| match e {
                ProcessError::NotFound { path, .. } => ScriptletError::ToolMissing { path },
                ProcessError::Spawn { path, source } => ScriptletError::Spawn { path, source },
                ProcessError::Timeout { .. } | ProcessError::Stopped { .. } => {
                    ScriptletError::Timeout {
                        command: command.clone(),
                        deadline: self.deadline,
                    }
                }
            })?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(ScriptletError::Failed {
                command,
                status: out.status.to_string(),
                output: format!("{stderr}{stdout}"),
            });
        }
        Ok(stdout)
    }
}

fn on_off(v: bool) -> &'static str {
    if v {
        "on"
    } else {
        "off"
    }
}

/// Loads SELinux modules, sets SELinux booleans persistently and creates tmpfiles
/// entries, each only when missing. Module and tmpfiles paths are host paths, mapped
/// under `host.root`.
pub async fn run_scriptlets(
    cfg: &PostInstall,
    host: &Host,
    tools: &Tools,
    deadline: Duration,
) -> Result<ScriptletReport, ScriptletError> {
    let r = Runner {
        until: Instant::now() + deadline,
        deadline,
    };
    let mut report = ScriptletReport::default();

    let selinux_steps = cfg.selinux_modules.len() + cfg.selinux_booleans.len();
    let selinux = (selinux_steps > 0).then(|| selinux_state(host, &cfg.selinuxfs));
    report.selinux = selinux;
    if selinux == Some(Selinux::NotEnabled) {
        let why = format!(
            "SELinux is not enabled on this host (no {}/enforce): skipped {selinux_steps} SELinux step(s) (modules and booleans)",
            cfg.selinuxfs.display()
        );
        tracing::warn!("{why}");
        report.steps.push(Scriptlet {
            what: "selinux".into(),
            outcome: ScriptletOutcome::Skipped { why },
        });
    }
    let selinux_on = selinux.is_some_and(|s| s != Selinux::NotEnabled);

    if selinux_on && !cfg.selinux_modules.is_empty() {
        let loaded = parse_semodule_list(&r.run(&tools.semodule, &["-l".into()]).await?);
        for m in &cfg.selinux_modules {
            let what = format!("selinux-module {}", m.name);
            if loaded.contains(&m.name) {
                report.steps.push(Scriptlet {
                    what,
                    outcome: ScriptletOutcome::Skipped {
                        why: "listed by semodule -l".into(),
                    },
                });
                continue;
            }
            let file = host.path(&m.path);
            if !file.exists() {
                return Err(ScriptletError::ModuleFileMissing {
                    module: m.name.clone(),
                    path: file,
                });
            }
            r.run(
                &tools.semodule,
                &["-i".into(), file.to_string_lossy().into_owned()],
            )
            .await?;
            tracing::info!(module = %m.name, "SELinux module loaded");
            report.steps.push(Scriptlet {
                what,
                outcome: ScriptletOutcome::Ran,
            });
        }
    }

    for (name, want) in cfg.selinux_booleans.iter().filter(|_| selinux_on) {
        let what = format!("selinux-boolean {name}={}", on_off(*want));
        let out = r.run(&tools.getsebool, std::slice::from_ref(name)).await?;
        let have = parse_getsebool(&out, name).ok_or_else(|| ScriptletError::Unparseable {
            command: format!("{} {name}", tools.getsebool.display()),
            output: out.clone(),
        })?;
        if have == *want {
            report.steps.push(Scriptlet {
                what,
                outcome: ScriptletOutcome::Skipped {
                    why: format!("getsebool says {}", on_off(have)),
                },
            });
            continue;
        }
        r.run(
            &tools.setsebool,
            &["-P".into(), name.clone(), on_off(*want).into()],
        )
        .await?;
        tracing::info!(boolean = %name, value = on_off(*want), "SELinux boolean set");
        report.steps.push(Scriptlet {
            what,
            outcome: ScriptletOutcome::Ran,
        });
    }

    if !cfg.tmpfiles.is_empty() {
        // `systemd-tmpfiles --create` only creates what is missing: safe to repeat, and
        // checking every line ourselves would re-implement it.
        let mut args = vec!["--create".to_string()];
        if !host.is_real_root() {
            args.push(format!("--root={}", host.root.display()));
        }
        for f in &cfg.tmpfiles {
            args.push(host.path(f).to_string_lossy().into_owned());
        }
        r.run(&tools.systemd_tmpfiles, &args).await?;
        report.steps.push(Scriptlet {
            what: "systemd-tmpfiles --create".into(),
            outcome: ScriptletOutcome::Ensured,
        });
    }
    Ok(report)
}
