//! The command line (clap derive). The man page and shell completions are generated from
//! [`Cli::command`], so this file is their single source.

use crate::exit::ExitCode;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::sync::OnceLock;

fn after_help() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{}\nConfiguration: TOML fragments in /usr/lib/kata-live/config.d/ and /etc/kata-live/config.d/\n\
             (see `kata-live config`). Two handlers, installed in one run with one restart:\n\n\
             \x20   [handler]\n\
             \x20   name = \"kata-remote\"\n\
             \x20   [handler.crio]\n\
             \x20   runtime_config_path = \"/opt/kata/configuration-remote.toml\"\n\
             \x20   [handlers.kata.crio]\n\
             \x20   runtime_config_path = \"/opt/kata/configuration.toml\"\n\n\
             Logs go to the journal: journalctl -t kata-live",
            ExitCode::help_table()
        )
    })
}

#[derive(Debug, Parser)]
#[command(
    name = "kata-live",
    version,
    about = "Turn the Kata runtime handler on or off on a live CRI-O or containerd node, with proof, without a reboot",
    long_about = None,
    after_help = after_help(),
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// Prefix for every host file path (config, drop-in, state, sockets).
    #[arg(long, global = true, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// The D-Bus address of the system bus systemd answers on. Default: DBUS_SYSTEM_BUS_ADDRESS,
    /// else the host's standard socket, which a --root other than / refuses (it would restart
    /// the real host's units): give the bus of the system under --root.
    #[arg(long, global = true, value_name = "ADDRESS")]
    pub bus_address: Option<String>,
    /// The procfs to read processes from (not under --root).
    #[arg(
        long = "proc",
        global = true,
        value_name = "DIR",
        default_value = "/proc"
    )]
    pub proc_dir: PathBuf,
    /// Print the plan from the observed state and change nothing.
    #[arg(long, global = true)]
    pub dry_run: bool,
    /// Machine-readable output: one JSON document on stdout (status, verify, config, and at
    /// the end of install/uninstall).
    ///
    /// Every document is an object with "schema" (1, the
    /// version, raised only on incompatible changes), "kind" ("status", "verify", "config",
    /// "install" or "uninstall") and the payload's fields: status: the observation;
    /// verify: "observation" and "verdict"; config: "config", "fragments", "provenance";
    /// install/uninstall: the /run/kata-live/status.json document (operation, result,
    /// exit_code, steps, evidence, error). (kubectl-kata_live's "rollout": docs/operations.md.)
    #[arg(long, global = true)]
    pub json: bool,
    /// More detail on stderr (-v: every log record, debug included; -vv trace). Without it,
    /// install/uninstall print one line per step, warnings and errors; status/verify only
    /// their summary.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Only warnings and errors (no progress lines).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Set by the units the DaemonSet pod writes: the pod, not this run, tells the cluster
    /// (the node's label and Events) with its service account.
    #[arg(long, global = true, hide = true, env = "KATA_LIVE_CLUSTER_BY_POD")]
    pub cluster_by_pod: bool,
    /// Set by the units the DaemonSet pod writes: the namespace of the rollout's own pods.
    /// Their sandboxes are not counted as pods lost: a pod deleted while its node activates
    /// goes by its DaemonSet's will, and its replacement adopts the run.
    #[arg(
        long,
        global = true,
        hide = true,
        value_name = "NAMESPACE",
        env = "KATA_LIVE_ROLLOUT_NAMESPACE"
    )]
    pub rollout_namespace: Option<String>,
}

impl Cli {
    /// The log level's verbosity: `status` and `verify` print their summary and no log
    /// lines (errors aside) unless `-v`.
    pub fn log_verbosity(&self) -> i8 {
        match self.command {
            Command::Status | Command::Verify if self.global.verbose == 0 => -2,
            _ => self.global.verbosity(),
        }
    }
}

impl Global {
    pub fn verbosity(&self) -> i8 {
        if self.quiet {
            -1
        } else {
            self.verbose.min(3) as i8
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Install the package live, declare the handler, restart CRI-O, and prove it.
    ///
    /// With a set of handlers (`[handler]` and each `[handlers.NAME]`): every handler's drop-in,
    /// one restart for the set (none when nothing changed), each handler proven.
    ///
    /// Before anything changes: CRI-O's configuration files are read in CRI-O's order
    /// (crio.conf, then every regular file of crio.conf.d, recursively, lexical, any name).
    /// A later file that declares [crio.runtime.runtimes.NAME] would replace kata-live's
    /// table whole, so the install is refused (exit 10) naming it; an earlier one is replaced
    /// by kata-live's, and the run says so. The runtime files must be regular files (after
    /// symlinks) and runtime_path executable, as seen here and inside CRI-O's mount
    /// namespace (else exit 11, naming the path and its mode).
    ///
    /// The proof also reads the running CRI-O's effective configuration (GET /config on the
    /// CRI socket, what `crio status config` prints): every key kata-live wrote must have the
    /// value it wrote (keys it leaves out may hold CRI-O's defaults). A mismatch names the
    /// keys and rolls back (exit 13).
    Install(RunArgs),
    /// Remove the handler (refused while pods use it), restart CRI-O, prove, remove the package.
    ///
    /// With a set of handlers: every handler of the set, refused while pods run under any.
    ///
    /// Pods on the handler: CRI-O leaves PodSandbox.runtime_handler empty, so the handler of
    /// each sandbox (any state) is taken from runtime_handler when the runtime fills it
    /// (containerd), else from the verbose PodSandboxStatus info (CRI-O's
    /// io.kubernetes.cri-o.RuntimeHandler annotation). A sandbox whose handler cannot be
    /// determined counts as possibly on the handler. Either refuses the uninstall (exit 10,
    /// naming the pods) unless --force; `status` shows the same answer. Another file of
    /// CRI-O's configuration that declares [crio.runtime.runtimes.NAME] would keep the
    /// handler served: refused too (exit 10, naming the file).
    Uninstall(UninstallArgs),
    /// Show package, drop-in, handler, kubelet connection and the last run's result.
    Status,
    /// Prove (without changing anything) that the running CRI-O serves the handler.
    Verify,
    /// Print the merged configuration and which file set each value.
    Config,
    /// Write the man pages or shell completions (packaging; see src/generate.rs).
    #[command(hide = true)]
    Generate(GenerateArgs),
    /// The DaemonSet pod's entrypoint and readiness probe (see src/pod/, docs/operations.md).
    #[command(hide = true)]
    Pod(Box<crate::pod::PodArgs>),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Run in this process even when it would die with CRI-O (no hand-off to a transient unit).
    #[arg(long)]
    pub no_detach: bool,
}

#[derive(Debug, Args)]
pub struct UninstallArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Uninstall even while pods run (or may run) under the handler (they will fail).
    #[arg(long)]
    pub force: bool,
}

/// The clap command, for the man page and completions.
pub fn command() -> clap::Command {
    Cli::command()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn help_documents_the_json_schema() {
        let help = Cli::command().render_long_help().to_string();
        for word in ["\"schema\"", "\"kind\"", "status.json"] {
            assert!(help.contains(word), "missing {word} in --help");
        }
    }

    #[test]
    fn help_lists_every_exit_code() {
        let help = Cli::command().render_long_help().to_string();
        for c in ExitCode::ALL {
            assert!(help.contains(c.describe()), "missing {c:?} in --help");
        }
    }
}

/// What `kata-live generate` writes (see src/generate.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Artifact {
    /// One page per command: kata-live.8, kata-live-install.8, ...
    Man,
    /// bash (kata-live.bash), zsh (_kata-live) and fish (kata-live.fish).
    Completions,
}

#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// What to write.
    #[arg(value_enum)]
    pub what: Artifact,
    /// Directory to write into (created when missing; not under --root).
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,
}
