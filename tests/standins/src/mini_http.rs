//! A GET-only HTTP/1.1 responder for the stand-ins' tiny endpoints (kubelet's `/healthz`,
//! CRI-O's `/metrics`): one request per connection, `Connection: close`.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// An answer: status line text (e.g. `200 OK`), content type, body.
pub struct Reply {
    pub status: &'static str,
    pub content_type: &'static str,
    pub body: String,
}

impl Reply {
    pub fn not_found() -> Reply {
        Reply {
            status: "404 Not Found",
            content_type: "text/plain; charset=utf-8",
            body: "404 page not found\n".into(),
        }
    }
}

/// The path of a request head (`GET /x?y HTTP/1.1` → `/x`), if any.
pub fn request_path(head: &str) -> Option<&str> {
    let target = head.split_whitespace().nth(1)?;
    Some(target.split('?').next().unwrap_or(target))
}

/// Serves until the task is dropped; `route` maps a path to a reply.
pub async fn serve<F>(listener: TcpListener, route: F)
where
    F: Fn(&str) -> Reply + Send + Sync + 'static,
{
    let route = Arc::new(route);
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let route = route.clone();
        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(512);
            let read = tokio::time::timeout(Duration::from_secs(2), async {
                let mut chunk = [0u8; 512];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            })
            .await;
            if read.is_err() {
                return;
            }
            let head = String::from_utf8_lossy(&buf);
            let reply = request_path(&head).map_or_else(Reply::not_found, |p| route(p));
            let resp = format!(
                "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                reply.status,
                reply.content_type,
                reply.body.len(),
                reply.body
            );
            let _ = stream.write_all(resp.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_of_request_head() {
        assert_eq!(request_path("GET /healthz HTTP/1.1\r\n"), Some("/healthz"));
        assert_eq!(request_path("GET /metrics?x=1 HTTP/1.1"), Some("/metrics"));
        assert_eq!(request_path(""), None);
    }
}
