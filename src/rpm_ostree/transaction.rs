//! The wait for a running rpm-ostree transaction: the status read again until none runs.

use std::time::Duration;

use tokio::time::Instant;

use super::cli::RpmOstree;
use super::cli_status::{parse_status, Status};
use super::RpmOstreeError;

/// How often the status is read again while another transaction runs.
const TRANSACTION_POLL: Duration = Duration::from_secs(1);

impl RpmOstree {
    pub(super) async fn status_until(&self, until: Instant) -> Result<Status, RpmOstreeError> {
        let out = self.run(&["status".into(), "--json".into()], until).await?;
        parse_status(&out.stdout)
    }

    /// The status once no transaction runs. One that runs (another client's, or the one of
    /// an earlier run killed mid-transaction, which rpm-ostreed carries on to its end) is
    /// waited for until `until`, reading the status again; then
    /// [`RpmOstreeError::TransactionActive`].
    pub(super) async fn idle_status_until(&self, until: Instant) -> Result<Status, RpmOstreeError> {
        let mut said = false;
        loop {
            let status = self.status_until(until).await?;
            if !status.transaction_active {
                return Ok(status);
            }
            if !said {
                tracing::warn!(
                    "an rpm-ostree transaction is running (another client's, or an earlier \
                     run's that was killed): waiting for it to end before deciding"
                );
                said = true;
            }
            let next = Instant::now() + TRANSACTION_POLL;
            if next >= until {
                return Err(RpmOstreeError::TransactionActive);
            }
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                signal = crate::stop::wait() => {
                    return Err(RpmOstreeError::Interrupted {
                        command: "waiting for the running rpm-ostree transaction".into(),
                        signal,
                    });
                }
            }
        }
    }

    /// `rpm-ostree status --json`, parsed.
    pub async fn status(&self, deadline: Duration) -> Result<Status, RpmOstreeError> {
        self.status_until(Instant::now() + deadline).await
    }
}

/// How long the waits give one status read asked of rpm-ostree.
const WRITING_DEADLINE: Duration = Duration::from_secs(10);

/// For the waits for the runtime files (`crate::visibility`): whether a transaction may
/// still be writing them. No rpm-ostree on the host: none can; a status that cannot be read:
/// cannot tell.
impl crate::visibility::Writers for RpmOstree {
    fn writing(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<bool>> + '_>> {
        Box::pin(async move {
            match self.status(WRITING_DEADLINE).await {
                Ok(s) => Some(s.transaction_active),
                Err(RpmOstreeError::NotFound { .. }) => Some(false),
                Err(_) => None,
            }
        })
    }
}
