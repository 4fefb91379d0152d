//! What rpm-ostree says: `status --json` parsed ([`cli_status`]) and package versions
//! compared and decided on ([`versions`]). kata-live runs the CLI and turns
//! [`BadStatus`] into its own error (`kata_live::rpm_ostree`).

pub mod cli_status;
pub mod versions;

pub use cli_status::{nevra_name, parse_status, Deployment, PackageState, Status};
pub use versions::{decide, evr_cmp, table, Action, Decision, Nevra, Offered, OnNode};

/// `rpm-ostree status --json` that kata-live cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("could not understand `rpm-ostree status --json`: {reason}")]
pub struct BadStatus {
    pub reason: String,
}
