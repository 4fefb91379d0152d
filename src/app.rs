//! Dispatch from the command line to the flows, and the mapping of errors to exit codes.

use crate::cli::{Cli, Command};
use crate::config::{self, ConfigError, Loaded};
use crate::exit::ExitCode;
use crate::files::FileError;
use crate::flow::Ctx;
use crate::host::Host;
use crate::rpm_ostree::RpmOstree;
use crate::scriptlets::Tools;
use crate::systemd::{handoff, Systemd, SystemdError};

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Systemd(#[from] SystemdError),
    #[error("cannot start the async runtime: {}", crate::words::io(.0))]
    Runtime(std::io::Error),
    #[error(transparent)]
    Generate(#[from] crate::generate::GenerateError),
}

impl AppError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            AppError::Config(_)
            | AppError::Generate(_)
            | AppError::Systemd(SystemdError::HostBusUnderRoot { .. }) => ExitCode::Usage,
            AppError::Systemd(SystemdError::HandOffBusy { .. }) => ExitCode::LockBusy,
            // Nothing can be observed or changed without systemd: refused, node untouched.
            AppError::Systemd(SystemdError::NoBus { .. }) => ExitCode::PreflightRefused,
            AppError::File(_) | AppError::Systemd(_) | AppError::Runtime(_) => ExitCode::Internal,
        }
    }
}

/// Runs the command and returns the exit code; errors are printed to stderr.
pub fn run(cli: Cli) -> ExitCode {
    let host = Host::new(&cli.global.root, &cli.global.proc_dir);
    match dispatch(&cli, &host) {
        Ok(code) => code,
        Err(e) => {
            let code = e.exit_code();
            eprintln!("kata-live: error: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                eprintln!("  caused by: {s}");
                src = s.source();
            }
            eprintln!("kata-live: exit code {code}: {}", code.describe());
            code
        }
    }
}

fn dispatch(cli: &Cli, host: &Host) -> Result<ExitCode, AppError> {
    // Packaging-time generation (man pages, completions) needs no host and no configuration.
    if let Command::Generate(args) = &cli.command {
        crate::generate::run(args)?;
        return Ok(ExitCode::Ok);
    }
    // The pod works on the host under --host-root, with the host's configuration there.
    if let Command::Pod(args) = &cli.command {
        return Ok(crate::pod::run(args));
    }
    let loaded = config::load(host)?;
    if let Command::Config = cli.command {
        print_config(&loaded, host, cli.global.json);
        return Ok(ExitCode::Ok);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AppError::Runtime)?;
    rt.block_on(dispatch_async(cli, host, loaded))
}

async fn dispatch_async(cli: &Cli, host: &Host, loaded: Loaded) -> Result<ExitCode, AppError> {
    let bus = crate::systemd::choose_bus_address(
        &cli.global.root,
        cli.global.bus_address.as_deref(),
        std::env::var("DBUS_SYSTEM_BUS_ADDRESS").ok().as_deref(),
    )?;
    let systemd = Systemd::at_address(&bus).await?;
    let facts = |u: &str| {
        let systemd = &systemd;
        let u = u.to_string();
        async move {
            let s = systemd.unit_state(&u).await;
            crate::runtime::UnitFacts {
                installed: s.is_ok(),
                active: s.is_ok_and(|s| s.is_running()),
            }
        }
    };
    let units = (
        facts(&loaded.config.units.crio).await,
        facts(&loaded.config.containerd.unit).await,
    );
    // A runtime that cannot be decided is refused by the preflight step (reported as every
    // refusal is); until then the run carries CRI-O's settings, the configuration's default.
    let (kind, rt_why, rt_problem) = match crate::runtime::resolve(&loaded, host, Some(units)) {
        Ok((k, why)) => (k, why, None),
        Err(why) => (
            crate::config::RuntimeKind::Crio,
            String::new(),
            Some(why.to_string()),
        ),
    };
    tracing::debug!(runtime = %kind, "runtime: {rt_why}");
    let ctx = Ctx {
        rt: crate::runtime::for_config(&loaded.config, kind),
        // The set's further handlers: every command acts on the whole set.
        more: crate::runtime::for_set(&loaded.config, kind)
            .into_iter()
            .skip(1)
            .collect(),
        rt_why,
        rt_problem,
        host: host.clone(),
        rpm_ostree: RpmOstree::new(host.path(&loaded.config.package.rpm_ostree)).with_rpmdb(
            crate::rpm_ostree::Rpmdb::new(host.path(&loaded.config.package.rpm), &host.root),
        ),
        cfg: loaded.config,
        dry_run: cli.global.dry_run,
        systemd,
        tools: Tools::default(),
        crio_restarts: Default::default(),
        json: cli.global.json,
        cluster_by_pod: cli.global.cluster_by_pod,
        rollout_namespace: cli.global.rollout_namespace.clone(),
    };
    match &cli.command {
        Command::Install(a) => {
            if let Some(code) = hand_off(&ctx, "install", a.no_detach).await? {
                return Ok(code);
            }
            listen_for_stop()?;
            Ok(crate::install::run(&ctx).await)
        }
        Command::Uninstall(a) => {
            if let Some(code) = hand_off(&ctx, "uninstall", a.run.no_detach).await? {
                return Ok(code);
            }
            listen_for_stop()?;
            Ok(crate::uninstall::run(&ctx, a.force).await)
        }
        Command::Status => Ok(crate::status::status(&ctx, cli.global.json).await),
        Command::Verify => Ok(crate::status::verify(&ctx, cli.global.json).await),
        // Handled before the runtime starts.
        Command::Config | Command::Generate(_) | Command::Pod(_) => Ok(ExitCode::Ok),
    }
}

/// From here on SIGTERM/SIGINT ask the run to stop at a safe point (see [`crate::stop`]).
/// A hand-off starter does not listen: killing it leaves the transient unit's run going.
fn listen_for_stop() -> Result<(), AppError> {
    crate::stop::listen().map_err(AppError::Runtime)
}

/// When this process would die with CRI-O (a debug pod, a container), hands the same
/// command to a transient unit of the host's systemd, follows it, and returns its exit code.
async fn hand_off(ctx: &Ctx, sub: &str, no_detach: bool) -> Result<Option<ExitCode>, AppError> {
    if ctx.dry_run {
        return Ok(None);
    }
    let cgroup = handoff::read_self_cgroup(&ctx.host.proc).unwrap_or_default();
    match handoff::should_hand_off(&cgroup, no_detach, "kata-live") {
        handoff::Placement::RunInPlace(why) => {
            tracing::debug!("running in place: {why}");
            Ok(None)
        }
        handoff::Placement::HandOff(why) => {
            let unit = handoff::handoff_unit_name(sub);
            // Before anything else: the session may drop with the runtime's restart at any
            // moment after the unit starts, and then this is all the operator has read.
            eprint!("{}", crate::report::render_handoff(&why, &unit));
            let exe = std::env::current_exe().map_err(AppError::Runtime)?;
            // The unit's run writes status.json; with --json this process prints it at the
            // end (the unit's own stdout goes to its journal, which is followed here).
            let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--json").collect();
            let argv = handoff::handoff_argv(&exe, &args);
            // Follow the run's journal so the operator sees the same progress lines here, and
            // its end on the same streams as a host run's: the success line on stdout (unless
            // stdout is for the JSON document), everything else on stderr.
            let journalctl = ["journalctl".to_string()];
            let json = ctx.json;
            let mut show = |line: &str| {
                if !json && crate::report::is_success_outcome(sub, line) {
                    println!("{line}");
                } else {
                    eprintln!("{line}");
                }
            };
            let status = handoff::run_transient_following(
                &ctx.systemd,
                &unit,
                &argv,
                ctx.cfg.deadlines.worst_case(),
                Some(&journalctl),
                &mut show,
            )
            .await?;
            eprintln!("kata-live: {unit} finished with exit code {status}; `journalctl -u {unit}` has its log");
            if ctx.json {
                match crate::report::read_status(&ctx.host.path(crate::report::STATUS_PATH)) {
                    Some(run) => {
                        crate::report::print_json(crate::report::Kind::for_operation(sub), run)
                    }
                    None => eprintln!("kata-live: no status file to print as JSON"),
                }
            }
            Ok(Some(exit_from_status(status)))
        }
    }
}

fn exit_from_status(status: i32) -> ExitCode {
    ExitCode::ALL
        .into_iter()
        .find(|c| i32::from(c.code()) == status)
        .unwrap_or(ExitCode::Internal)
}

fn print_config(loaded: &Loaded, host: &Host, json: bool) {
    // Without systemd (config needs no bus): the sockets alone decide a detection.
    let runtime = crate::runtime::resolve(loaded, host, None);
    if json {
        let (kind, source, error) = match &runtime {
            Ok((k, why)) => (Some(k.to_string()), Some(why.clone()), None),
            Err(e) => (None, None, Some(e.to_string())),
        };
        let v = serde_json::json!({
            "config": loaded.config,
            "fragments": loaded.fragments,
            "provenance": loaded.provenance,
            "handlers": loaded.config.handler_set().iter().map(|s| serde_json::json!({
                "name": s.handler.name,
                "table": s.key,
                "crio_drop_in": s.handler.drop_in,
                "containerd_drop_in": s.containerd_drop_in,
            })).collect::<Vec<_>>(),
            "runtime": { "runtime": kind, "source": source, "error": error },
        });
        crate::report::print_json(crate::report::Kind::Config, v);
    } else {
        let text = loaded.render_annotated();
        // The runtime line: the set value is in the text already; a detected one is shown
        // as a comment, so that the output read back as a fragment keeps detecting.
        let line = match (&loaded.config.runtime, &runtime) {
            (Some(_), Ok(_)) => None,
            (None, Ok((k, why))) => Some(format!("# runtime = \"{k}\"  # not set: {why}\n")),
            (_, Err(e)) => Some(format!("# runtime: {e}\n")),
        };
        match (line, text.find("\n\n")) {
            (Some(l), Some(i)) => print!("{}\n{l}{}", &text[..i], &text[i + 1..]),
            (Some(l), None) => print!("{text}{l}"),
            (None, _) => print!("{text}"),
        }
    }
}
