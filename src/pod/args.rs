//! The `pod` subcommand's arguments, and the operation a DaemonSet performs.

use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct PodArgs {
    #[command(subcommand)]
    pub command: PodCommand,
}

#[derive(Debug, Subcommand)]
pub enum PodCommand {
    /// Copy kata-live and its units onto the host, start kata-live-install.service there,
    /// follow it to its end, print the outcome, and stay alive (the readiness probe decides).
    Install(EntryArgs),
    /// The same, with kata-live-uninstall.service.
    Uninstall(EntryArgs),
    /// Readiness: exit 0 only when this node's last run of OPERATION is proven and the
    /// running runtime still agrees (handler listed after install, not listed after uninstall).
    Ready(ReadyArgs),
}

#[derive(Debug, Args)]
pub struct PodPaths {
    /// Where the host's / is mounted in the pod.
    #[arg(long, value_name = "DIR", default_value = "/host")]
    pub host_root: PathBuf,
    /// The pod's own directory for the entrypoint's outcome (not on the host: a restarted
    /// container starts without it, so the probe waits for the new entrypoint's answer).
    #[arg(long, value_name = "DIR", default_value = "/run/kata-live-pod")]
    pub pod_state: PathBuf,
}

#[derive(Debug, Args)]
pub struct EntryArgs {
    #[command(flatten)]
    pub paths: PodPaths,
    /// A directory of *.rpm files in the image to install instead of package names.
    #[arg(long, value_name = "DIR")]
    pub rpm_dir: Option<PathBuf>,
    /// Exit after printing the outcome instead of staying alive (for a Job or a test).
    #[arg(long)]
    pub exit: bool,
    /// How much longer than the run's worst case (the sum of the node's deadlines) the pod
    /// follows the unit before it reports the run unfinished and, if it cordoned the node,
    /// leaves it cordoned: the unit's own stop (a rollback's restart, its ExecStopPost=) may
    /// still be under way then. The unit's TimeoutStartSec= ends a run that overruns.
    #[arg(
        long,
        value_name = "DURATION",
        env = "KATA_LIVE_POD_FOLLOW_MARGIN",
        default_value = "5min",
        value_parser = humantime::parse_duration
    )]
    pub follow_margin: std::time::Duration,
    #[command(flatten)]
    pub pace: PaceArgs,
}

/// The rollout's pace (src/pace): without `--pace` the pod does not wait for a turn.
#[derive(Debug, Args)]
pub struct PaceArgs {
    /// Ask for this node's turn (its request, the Lease `kata-live-turn-NODE` in --namespace)
    /// and start its run only once the rollout's decider (kata-live-pace) grants it; end the
    /// turn once the node is proven (done), or keep its place marked failed: the rollout
    /// stops there. The decider holds the pool and the budget.
    #[arg(long, env = "KATA_LIVE_PACE")]
    pub pace: bool,
    /// The requests' namespace (the downward API's metadata.namespace).
    #[arg(
        long,
        value_name = "NS",
        env = "POD_NAMESPACE",
        default_value = "kata-live"
    )]
    pub namespace: String,
    /// This pod's node, the request's holder (the downward API's spec.nodeName).
    #[arg(long, value_name = "NODE", env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// This pod's name (the downward API's metadata.name): its readiness gate
    /// (kata-live.io/proven) is set once the node is proven.
    #[arg(long, value_name = "POD", env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// This pod's uid (the downward API's metadata.uid): it owns its node's request while the
    /// request waits, so a deleted pod loses its turn.
    #[arg(long, value_name = "UID", env = "POD_UID")]
    pub pod_uid: Option<String>,
}

#[derive(Debug, Args)]
pub struct ReadyArgs {
    #[command(flatten)]
    pub paths: PodPaths,
    /// The operation the DaemonSet performs.
    #[arg(value_enum)]
    pub operation: Operation,
}

/// install or uninstall: the same as a run's own operation.
pub use crate::state::Operation;
