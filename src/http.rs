//! One plain HTTP/1.1 GET (hyper) over a stream the caller connects: CRI-O's `GET /config`
//! on its unix socket, kubelet's healthz and CRI-O's metrics over loopback TCP. The caller
//! names the socket or URL in its own error; this one says what failed.

use std::future::Future;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

/// Status and body of a GET, whatever the status.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// The caller's connect failed; its words.
    #[error("{0}")]
    Connect(String),
    #[error("handshake: {0}")]
    Handshake(#[source] hyper::Error),
    #[error("{0}")]
    Request(#[source] hyper::http::Error),
    #[error("{0}")]
    Send(#[source] hyper::Error),
    /// Also a body longer than the caller's limit.
    #[error("reading body: {0}")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// `until` passed, connecting included.
    #[error("no answer in time")]
    Timeout,
}

/// GET `path` with `Host: host` over the stream `connect` yields, reading at most
/// `max_body` bytes of body, the whole exchange (connecting included) before `until`.
pub async fn get<S>(
    connect: impl Future<Output = Result<S, String>>,
    path: &str,
    host: &str,
    max_body: usize,
    until: Instant,
) -> Result<Answer, GetError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let exchange = async {
        let stream = connect.await.map_err(GetError::Connect)?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(GetError::Handshake)?;
        let driver = tokio::spawn(conn);
        let req = hyper::Request::get(path)
            .header(hyper::header::HOST, host)
            .body(Empty::<Bytes>::new())
            .map_err(GetError::Request)?;
        let resp = sender.send_request(req).await.map_err(GetError::Send)?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), max_body)
            .collect()
            .await
            .map_err(GetError::Body)?
            .to_bytes();
        driver.abort();
        Ok(Answer { status, body })
    };
    tokio::time::timeout_at(until, exchange)
        .await
        .unwrap_or(Err(GetError::Timeout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that reads the request and answers `reply` (or nothing, when `None`).
    async fn serve(reply: Option<&'static str>) -> std::net::SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).await.unwrap();
            assert!(buf[..n].starts_with(b"GET /x HTTP/1.1\r\n"));
            assert!(String::from_utf8_lossy(&buf[..n]).contains("host: h\r\n"));
            match reply {
                Some(r) => s.write_all(r.as_bytes()).await.unwrap(),
                None => tokio::time::sleep(Duration::from_secs(30)).await,
            }
        });
        addr
    }

    async fn tcp(addr: std::net::SocketAddr) -> Result<tokio::net::TcpStream, String> {
        tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn answer_limit_and_deadline() {
        let later = || Instant::now() + Duration::from_secs(10);
        let addr = serve(Some(
            "HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\nno",
        ))
        .await;
        let a = get(tcp(addr), "/x", "h", 100, later()).await.unwrap();
        assert_eq!((a.status.as_u16(), &a.body[..]), (404, &b"no"[..]));

        let addr = serve(Some("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")).await;
        let e = get(tcp(addr), "/x", "h", 4, later()).await.unwrap_err();
        assert!(matches!(e, GetError::Body(_)), "{e}");

        let addr = serve(None).await;
        let soon = Instant::now() + Duration::from_millis(200);
        let e = get(tcp(addr), "/x", "h", 100, soon).await.unwrap_err();
        assert!(matches!(e, GetError::Timeout), "{e}");

        let refused = async { Err::<tokio::net::TcpStream, _>("connect: refused".to_string()) };
        let e = get(refused, "/x", "h", 100, later()).await.unwrap_err();
        assert_eq!(e.to_string(), "connect: refused");
    }
}
