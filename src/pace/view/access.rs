//! Who may scrape the rollout's `/metrics`: the bearer token a scraper sends, authenticated by
//! the API server (a TokenReview) and authorized for `get` on the non-resource URL `/metrics`
//! (a SubjectAccessReview): the check kube-rbac-proxy makes, in the decider's own process, so
//! its Deployment needs no sidecar image. OpenShift's user-workload Prometheus sends its
//! service account's token, and the platform's `cluster-monitoring-view`-style roles grant
//! exactly that non-resource URL. The decider's service account needs `create` on
//! tokenreviews and subjectaccessreviews (the `system:auth-delegator` ClusterRole).
//!
//! Verdicts are kept for a minute per token (by its SHA-256), so a scrape every 30 s costs
//! the API server two reviews per scraper every other scrape, not two every scrape.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a verdict is kept.
const KEEP: Duration = Duration::from_secs(60);
/// Tokens remembered at most (the oldest verdicts go first).
const MAX_KEPT: usize = 256;

/// Whether a scrape may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// No token, or one the API server does not authenticate: 401.
    Unauthenticated(String),
    /// Authenticated, not allowed to `get /metrics`: 403.
    Forbidden(String),
    /// The API server could not be asked: 503, not cached.
    Unknown(String),
}

pub struct Access {
    kube: kube::Client,
    kept: Mutex<HashMap<[u8; 32], (Instant, Verdict)>>,
}

impl Access {
    pub fn new(kube: kube::Client) -> Access {
        Access {
            kube,
            kept: Mutex::new(HashMap::new()),
        }
    }

    pub async fn verdict(&self, token: Option<&str>) -> Verdict {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Verdict::Unauthenticated("a bearer token is required".into());
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some((at, v)) = self.kept().get(&key) {
            if now.duration_since(*at) < KEEP {
                return v.clone();
            }
        }
        let v = self.ask(token).await;
        if !matches!(v, Verdict::Unknown(_)) {
            let mut kept = self.kept();
            kept.retain(|_, (at, _)| now.duration_since(*at) < KEEP);
            if kept.len() >= MAX_KEPT {
                kept.clear();
            }
            kept.insert(key, (now, v.clone()));
        }
        v
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (Instant, Verdict)>> {
        // Poisoned only by a panic while holding it: a map of verdicts is still whole.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn ask(&self, token: &str) -> Verdict {
        let reviews: Api<TokenReview> = Api::all(self.kube.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let who = match reviews.create(&PostParams::default(), &review).await {
            Ok(r) => r.status.unwrap_or_default(),
            Err(e) => return Verdict::Unknown(crate::cluster::api::api_error(&e)),
        };
        let user = match (who.authenticated, who.user) {
            (Some(true), Some(u)) => u,
            _ => {
                return Verdict::Unauthenticated(
                    who.error
                        .unwrap_or_else(|| "the token is not authenticated".into()),
                )
            }
        };
        let name = user.username.clone().unwrap_or_default();
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".into()),
                    verb: Some("get".into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let sars: Api<SubjectAccessReview> = Api::all(self.kube.clone());
        match sars.create(&PostParams::default(), &sar).await {
            Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => Verdict::Allowed,
            Ok(_) => Verdict::Forbidden(format!("{name} may not get /metrics")),
            Err(e) => Verdict::Unknown(crate::cluster::api::api_error(&e)),
        }
    }
}
