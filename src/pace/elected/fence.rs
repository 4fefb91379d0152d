//! Leadership: a Lease of the decider's namespace held by kube-lease-manager (acquired once
//! expired, renewed `GRACE` before it expires), and the fence kata-live adds, client-go's
//! renew-deadline rule: the leader writes only while the API server shows it the holder with
//! a renewal younger than [`RENEW_DEADLINE`], shorter than the Lease's duration. A leader
//! stalled or cut off stops writing before a standby may take the Lease: the two never write
//! grants at the same time (up to the clocks' skew, as with client-go).

use super::ElectedError;
use crate::cluster::api::api_error;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use std::time::{Duration, Instant, SystemTime};

/// The Lease's duration: a standby takes it this long after the leader's last renewal.
pub const DURATION: u64 = 15;
/// The leader renews this long before its Lease expires (8 s after the last renewal).
const GRACE: u64 = 7;
/// The leader stops writing once its last renewal is older than this. Each write has
/// [`super::REQUEST_TIMEOUT`] to land, within the Lease's duration.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);

/// The election: whether this replica holds the Lease, as kube-lease-manager last said.
pub struct Election {
    pub leading: tokio::sync::watch::Receiver<bool>,
    leases: Api<Lease>,
    lease: String,
    identity: String,
}

impl Election {
    /// Joins the election on `lease` in `namespace` as `identity`.
    pub async fn join(
        client: kube::Client,
        namespace: &str,
        lease: &str,
        identity: &str,
    ) -> Result<Election, ElectedError> {
        let params = LeaseParams::new(identity, DURATION, GRACE);
        let manager = LeaseManagerBuilder::new(client.clone(), lease)
            .with_namespace(namespace)
            .with_parameters(params)
            .build()
            .await
            .map_err(|e| ElectedError::Election {
                lease: format!("{namespace}/{lease}"),
                detail: e.to_string(),
            })?;
        let (leading, _task) = manager.watch().await;
        Ok(Election {
            leading,
            leases: Api::namespaced(client, namespace),
            lease: lease.to_string(),
            identity: identity.to_string(),
        })
    }

    /// Until when this replica may write: the API server shows it the holder, renewed
    /// within [`RENEW_DEADLINE`] of now. Err: why it may not, in words.
    pub async fn fence(&self) -> Result<Instant, String> {
        let l = self.leases.get(&self.lease).await.map_err(|e| {
            format!(
                "reading the election Lease {}: {}",
                self.lease,
                api_error(&e)
            )
        })?;
        let spec = l.spec.unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Err(format!(
                "the election Lease {} is held by {}",
                self.lease,
                spec.holder_identity.as_deref().unwrap_or("nobody")
            ));
        }
        let renewed = spec
            .renew_time
            .map(|t| SystemTime::from(t.0))
            .ok_or_else(|| format!("the election Lease {} has no renewTime", self.lease))?;
        let left = (renewed + RENEW_DEADLINE)
            .duration_since(SystemTime::now())
            .map_err(|_| {
                format!(
                    "the renew deadline passed without a renewal of the election Lease {}",
                    self.lease
                )
            })?;
        Ok(Instant::now() + left)
    }
}
