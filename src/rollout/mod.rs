//! `kubectl-kata_live rollout status`: the rollout as an administrator follows it from their own
//! machine, like kubectl (their kubeconfig, its context, the namespace), or as the kubectl
//! plugin `kubectl kata-live` (the same binary named `kubectl-kata_live`).
//!
//! The pure [`RolloutView`] ([`crate::pace::view`], shared with the decider's `/metrics`)
//! built from the tickets, the pool's Nodes, the DaemonSet and the time; its words
//! ([`render`]); and a thin edge ([`client`]) that reads them: one GET and two LISTs, or
//! kube-runtime's reflectors for `--watch`. Read-only: it needs `get`,
//! `list` and `watch` on Leases and DaemonSets in the namespace and on Nodes
//! (packaging/rbac/kata-live-rollout-viewer.yaml), and writes nothing.

pub mod client;
pub mod render;

use crate::exit::ExitCode;
use crate::pace::view::{self, RolloutView};
use clap::{Args, Subcommand};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("no Kubernetes API configuration from {path}: {detail}")]
    Kubeconfig { path: String, detail: String },
    #[error("{what}: {detail}")]
    Api { what: String, detail: String },
    #[error("cannot start the async runtime: {}", crate::words::io(.0))]
    Runtime(std::io::Error),
}

/// The command line of `kubectl-kata_live`, the administrator's binary (the kubectl plugin
/// `kubectl kata-live`): its own binary, so that the host binary the nodes run never links
/// kube-runtime's watcher and the view (docs/figures.md, "Size").
#[derive(Debug, clap::Parser)]
#[command(
    name = "kubectl-kata_live",
    version,
    about = "kata-live's rollout over the cluster, read from an administrator's machine (as the kubectl plugin: kubectl kata-live)"
)]
pub struct PluginCli {
    /// One JSON document on stdout (schema 1, kind "rollout"; docs/operations.md).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: PluginCommand,
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Follow the rollout over the cluster (like kubectl: --kubeconfig, --context, -n).
    Rollout(RolloutArgs),
    /// Write the man pages (section 1) or shell completions (packaging; src/generate.rs).
    #[command(hide = true)]
    Generate(crate::cli::GenerateArgs),
}

/// `kubectl-kata_live`'s main: parses its command line and runs it.
pub fn plugin_main() -> std::process::ExitCode {
    use clap::{CommandFactory as _, Parser as _};
    let cli = PluginCli::parse();
    match &cli.command {
        PluginCommand::Rollout(a) => run(a, cli.json).into(),
        PluginCommand::Generate(g) => {
            let cmd = PluginCli::command();
            match crate::generate::run_for(cmd, crate::generate::PLUGIN_MAN_SECTION, g) {
                Ok(_) => ExitCode::Ok.into(),
                Err(e) => {
                    eprintln!("kubectl-kata_live: error: {e}");
                    ExitCode::Usage.into()
                }
            }
        }
    }
}

#[derive(Debug, Args)]
pub struct RolloutArgs {
    #[command(subcommand)]
    pub command: RolloutCommand,
}

#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Where the rollout stands: a progress bar, the budget and who holds it since when, the
    /// next nodes, what holds the rollout, and an ETA from the measured runs.
    ///
    /// Run from an administrator's machine, like kubectl: the kubeconfig is --kubeconfig,
    /// else KUBECONFIG, else ~/.kube/config, else the in-cluster service account. Read-only:
    /// get/list/watch on Leases and DaemonSets in the namespace and on Nodes
    /// (packaging/rbac/kata-live-rollout-viewer.yaml). As a kubectl plugin, the same binary
    /// named (or linked as) kubectl-kata_live on the PATH: `kubectl kata-live rollout status`.
    ///
    /// --json prints one document (schema 1, kind "rollout"; docs/operations.md lists its
    /// fields). --watch prints again on every change until every node of the pool is done:
    /// redrawn in place on a terminal, one line per change on a pipe (one JSON document per
    /// line with --json).
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The kubeconfig file (default: KUBECONFIG, else ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// The rollout's namespace (the tickets' and the DaemonSet's).
    #[arg(
        short = 'n',
        long,
        value_name = "NAMESPACE",
        default_value = "kata-live"
    )]
    pub namespace: String,
    /// The pacing's DaemonSet: its pause, its budget and its pool.
    #[arg(long, value_name = "NAME", default_value = "kata-live-install")]
    pub daemonset: String,
    /// Keep watching: print again on every change, until the pool is done.
    #[arg(short, long)]
    pub watch: bool,
}

/// Runs `rollout …` and returns its exit code; errors are printed to stderr.
pub fn run(args: &RolloutArgs, json: bool) -> ExitCode {
    let RolloutCommand::Status(a) = &args.command;
    match status(a, json) {
        Ok(()) => ExitCode::Ok,
        Err(e) => {
            eprintln!("kata-live: error: {e}");
            // A kubeconfig that does not reach the cluster, or credentials without the
            // rights: the command line's or the configuration's to fix.
            ExitCode::Usage
        }
    }
}

fn status(a: &StatusArgs, json: bool) -> Result<(), RolloutError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RolloutError::Runtime)?;
    let target = client::Target {
        kubeconfig: a.kubeconfig.as_deref(),
        context: a.context.as_deref(),
        namespace: &a.namespace,
        daemonset: &a.daemonset,
    };
    rt.block_on(async {
        let kube = client::client(&target).await?;
        if !a.watch {
            let v = client::read(kube, &target).await?;
            if json {
                crate::report::print_json(crate::report::Kind::Rollout, &v);
            } else {
                print!("{}", render::screen(&v, &a.namespace));
            }
            return Ok(());
        }
        let tty = std::io::stdout().is_terminal();
        let mut last = String::new();
        let show = |v: &RolloutView| {
            let mut out = std::io::stdout().lock();
            if json {
                let key = unchanging(v);
                if key != last {
                    let doc = crate::report::json_document(crate::report::Kind::Rollout, v);
                    let _ = writeln!(out, "{doc}");
                    last = key;
                }
            } else if tty {
                // Home, clear the screen, draw: the ages move on every event.
                let _ = write!(out, "\x1b[H\x1b[2J{}", render::screen(v, &a.namespace));
            } else {
                let l = render::line(v);
                if l != last {
                    let _ = writeln!(out, "{} {l}", v.at);
                    last = l;
                }
            }
            let _ = out.flush();
            v.phase != view::Phase::Done
        };
        let error = |e: &str| eprintln!("kata-live: watch: {e} (retrying)");
        client::watch(kube, &target, show, error).await
    })
}

/// The view without what moves with the clock, to tell a change from a tick.
fn unchanging(v: &RolloutView) -> String {
    let mut v = v.clone();
    v.at = String::new();
    for h in &mut v.holders {
        h.for_seconds = None;
    }
    serde_json::to_string(&v).unwrap_or_default()
}
