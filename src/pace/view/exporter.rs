//! The rollout's `/metrics` over HTTP(S): the text of [`super::metrics`] for the newest
//! [`RolloutView`] a `tokio::sync::watch` holds, kept fresh by its feeder (the decider's
//! stores; `rollout status --watch`'s reflectors in src/rollout/client.rs's `feed`). For the
//! decider (`kata-live-pace`) to serve: it binds, gives the cert/key pair the platform mounts,
//! and calls [`serve`].
//!
//! TLS from a PEM cert/key pair on disk (OpenShift's service CA writes them into the Secret
//! the Service's `service.beta.openshift.io/serving-cert-secret-name` names, and rotates
//! them): the files are checked on every connection and read again when they changed, so a
//! rotated certificate is served without a restart; a pair that does not load keeps the last
//! good one, said in the log. Plain HTTP only when the caller asks (no [`Tls`]).
//!
//! Who may scrape: with an [`Access`], the bearer token Prometheus sends must be one the API
//! server authenticates (TokenReview) and authorizes for `get` on the non-resource URL
//! `/metrics` (SubjectAccessReview), the rule kube-rbac-proxy applies, in-process.

use super::access::{Access, Verdict};
use super::RolloutView;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{header, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The content type of the Prometheus text format 0.0.4.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    #[error("TLS pair {cert} / {key}: {detail}")]
    Tls {
        cert: PathBuf,
        key: PathBuf,
        detail: String,
    },
    #[error("accepting a connection on {addr}: {}", crate::words::io(.source))]
    Accept {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

/// The serving certificate and key, PEM files (`tls.crt`, `tls.key` of the service CA's
/// Secret).
#[derive(Debug, Clone)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What identifies a file's content cheaply: a rotation replaces the file (a new inode) or
/// rewrites it (a new mtime or length).
type Stamp = Option<(u64, i64, i64, u64)>;

fn stamp(p: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(p).ok()?;
    Some((m.ino(), m.mtime(), m.mtime_nsec(), m.size()))
}

/// The TLS acceptor, read again from its files when they change.
struct Reloading {
    files: Tls,
    current: Mutex<(Stamp, Stamp, tokio_rustls::TlsAcceptor)>,
}

fn load(files: &Tls) -> Result<tokio_rustls::TlsAcceptor, ExporterError> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let err = |detail: String| ExporterError::Tls {
        cert: files.cert.clone(),
        key: files.key.clone(),
        detail,
    };
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| err(format!("the certificate: {e}")))?;
    if certs.is_empty() {
        return Err(err("no certificate in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| err(format!("the key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| err(e.to_string()))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Whether the pair loads: for a server to refuse to start on a pair it could never serve.
pub fn check(files: &Tls) -> Result<(), ExporterError> {
    load(files).map(|_| ())
}

impl Reloading {
    fn new(files: Tls) -> Result<Reloading, ExporterError> {
        let stamps = (stamp(&files.cert), stamp(&files.key));
        let acceptor = load(&files)?;
        Ok(Reloading {
            current: Mutex::new((stamps.0, stamps.1, acceptor)),
            files,
        })
    }

    /// The acceptor for the files as they are now: read again if either changed; the last
    /// good one if they do not load (a rotation caught half-written is read again on the
    /// next connection).
    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let now = (stamp(&self.files.cert), stamp(&self.files.key));
        // Poisoned only by a panic while holding it: the pair it holds is still whole.
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if (cur.0, cur.1) != now {
            match load(&self.files) {
                Ok(a) => {
                    tracing::info!(cert = %self.files.cert.display(), "the serving certificate changed: read again");
                    *cur = (now.0, now.1, a);
                }
                Err(e) => tracing::warn!("{e}; the previous certificate is served"),
            }
        }
        cur.2.clone()
    }
}

/// What each request is answered from.
struct Shared {
    view: watch::Receiver<Option<RolloutView>>,
    access: Option<Access>,
}

/// The answer to one request: `/metrics` only, GET (or HEAD), once allowed; 503 until the
/// first view is built (the reflectors' first lists).
async fn answer(s: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r
    };
    if req.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, "only /metrics is served\n".into());
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics\n".into());
    }
    if let Some(access) = &s.access {
        let token = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match access.verdict(token).await {
            Verdict::Allowed => {}
            Verdict::Unauthenticated(why) => {
                return reply(StatusCode::UNAUTHORIZED, format!("{why}\n"))
            }
            Verdict::Forbidden(why) => return reply(StatusCode::FORBIDDEN, format!("{why}\n")),
            Verdict::Unknown(why) => {
                tracing::warn!("a scrape's token could not be checked: {why}");
                return reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the token could not be checked\n".into(),
                );
            }
        }
    }
    let text = s.view.borrow().as_ref().map(super::metrics::render);
    match text {
        None => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "the rollout is not read yet\n".into(),
        ),
        Some(t) => {
            let mut r = reply(StatusCode::OK, t);
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(TEXT_FORMAT),
            );
            r
        }
    }
}

/// Serves `/metrics` on `listener` until the task is dropped: over TLS from `tls` (None: plain
/// HTTP, only when asked), each scrape allowed by `access` (None: anyone who connects). Returns
/// only on an error the listener cannot go on after, or a TLS pair that does not load at start.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Tls>,
    access: Option<Access>,
    view: watch::Receiver<Option<RolloutView>>,
) -> Result<(), ExporterError> {
    let tls = tls.map(Reloading::new).transpose()?.map(Arc::new);
    let shared = Arc::new(Shared { view, access });
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            // Out of file descriptors and the like: say it, and accept again after a pause.
            Err(e) if is_transient(&e) => {
                tracing::warn!("accepting a scrape on {addr}: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
            Err(source) => {
                return Err(ExporterError::Accept {
                    addr: addr.clone(),
                    source,
                })
            }
        };
        let acceptor = tls.as_ref().map(|t| t.acceptor());
        let shared = shared.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let shared = shared.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&shared, &req).await) }
            });
            let http = hyper::server::conn::http1::Builder::new();
            let served = match acceptor {
                Some(a) => match a.accept(stream).await {
                    Ok(s) => http.serve_connection(TokioIo::new(s), svc).await,
                    Err(e) => {
                        tracing::debug!(%peer, "TLS handshake: {e}");
                        return;
                    }
                },
                None => http.serve_connection(TokioIo::new(stream), svc).await,
            };
            if let Err(e) = served {
                tracing::debug!(%peer, "a scrape's connection: {e}");
            }
        });
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted)
        // ENFILE, EMFILE: descriptors free again once scrapes end.
        || matches!(e.raw_os_error(), Some(23 | 24))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pace::view::Seen;

    async fn get(addr: std::net::SocketAddr, path: &str) -> crate::http::Answer {
        let connect = async move {
            tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| e.to_string())
        };
        let until = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        crate::http::get(connect, path, "localhost", 1 << 20, until)
            .await
            .unwrap()
    }

    fn a_view() -> RolloutView {
        let mut n = k8s_openapi::api::core::v1::Node::default();
        n.metadata.name = Some("w1".into());
        RolloutView::build(&Seen {
            tickets: &[],
            nodes: &[n],
            pacing: None,
            now: "2026-12-06T12:00:00Z".parse().unwrap(),
        })
    }

    #[tokio::test]
    async fn plain_http_when_asked_503_until_the_first_view_then_its_text() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = watch::channel(None);
        let server = tokio::spawn(serve(listener, None, None, rx));
        assert_eq!(get(addr, "/metrics").await.status, 503);
        assert_eq!(get(addr, "/").await.status, 404);
        tx.send_replace(Some(a_view()));
        let a = get(addr, "/metrics").await;
        assert_eq!(a.status, 200);
        let text = String::from_utf8(a.body.to_vec()).unwrap();
        assert!(
            text.contains("kata_live_rollout_nodes{state=\"not-queued\"} 1.0"),
            "{text}"
        );
        server.abort();
    }

    #[tokio::test]
    async fn a_tls_pair_that_does_not_load_is_said_with_its_paths() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("tls.crt"), "not a certificate").unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (_tx, rx) = watch::channel(None);
        let tls = Tls {
            cert: d.path().join("tls.crt"),
            key: d.path().join("tls.key"),
        };
        let e = serve(listener, Some(tls), None, rx).await.unwrap_err();
        let words = e.to_string();
        assert!(
            words.contains("tls.crt") && words.contains("tls.key"),
            "{words}"
        );
    }
}
