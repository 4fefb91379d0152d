//! Plain-HTTP GETs for kubelet's healthz and CRI-O's metrics (both loopback, no TLS).

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use hyper::Uri;

use super::netns;

pub use kata_live_parse::kubelet::metrics::list_pod_sandbox_count;

/// Largest body we read: healthz says "ok", CRI-O's metrics are a few hundred KiB.
const MAX_BODY: usize = 8 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{url} is not a plain http:// URL with a host: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("GET {url}: {reason}")]
    Get { url: String, reason: String },
    #[error("GET {url}: no answer within {:.1} s", timeout.as_secs_f64())]
    Timeout { url: String, timeout: Duration },
}

/// Status and body of a GET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

fn target(url: &str) -> Result<(Uri, SocketAddr), HttpError> {
    let bad = |reason: &str| HttpError::BadUrl {
        url: url.into(),
        reason: reason.into(),
    };
    let uri: Uri = url
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| bad(&e.to_string()))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad("only http:// is supported"));
    }
    let host = uri.host().ok_or_else(|| bad("no host"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(80);
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| bad(&e.to_string()))?
        .next()
        .ok_or_else(|| bad("host resolves to no address"))?;
    Ok((uri, addr))
}

/// GET `url`, connecting from the network namespace `ns` (a `/proc/<pid>/ns/net` path; see
/// [`netns`]) or from ours when `None`. The whole exchange is bounded by `timeout`.
pub async fn get(url: &str, ns: Option<&Path>, timeout: Duration) -> Result<Response, HttpError> {
    let until = tokio::time::Instant::now() + timeout;
    let (uri, addr) = target(url)?;
    let connect = async {
        match ns {
            None => tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connect {addr}: {}", crate::words::io(&e))),
            Some(ns) => {
                let ns = ns.to_owned();
                let std_stream = tokio::task::spawn_blocking(move || {
                    netns::run_in(&ns, || {
                        let s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
                        s.set_nonblocking(true)?;
                        Ok(s)
                    })
                })
                .await
                .map_err(|e| format!("connect task failed: {e}"))?
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("connect {addr}: {}", crate::words::io(&e)))?;
                tokio::net::TcpStream::from_std(std_stream)
                    .map_err(|e| crate::words::io(&e).to_string())
            }
        }
    };
    let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    match crate::http::get(connect, path, &authority, MAX_BODY, until).await {
        Ok(answer) => Ok(Response {
            status: answer.status.as_u16(),
            body: String::from_utf8_lossy(&answer.body).into_owned(),
        }),
        Err(crate::http::GetError::Timeout) => Err(HttpError::Timeout {
            url: url.into(),
            timeout,
        }),
        Err(e) => Err(HttpError::Get {
            url: url.into(),
            reason: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert!(target("http://127.0.0.1:10248/healthz").is_ok());
        assert!(matches!(
            target("https://127.0.0.1/x"),
            Err(HttpError::BadUrl { .. })
        ));
        assert!(matches!(target("not a url"), Err(HttpError::BadUrl { .. })));
    }
}
