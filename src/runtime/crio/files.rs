//! CRI-O's files read in its order, and `GET /config` asked of the running CRI-O: the I/O
//! around the pure reading order and comparison of [`super::conf`].

use crate::host::Host;
use kata_live_parse::runtime::crio::conf::{declares_handler, shadowing, DROP_IN_DIR, MAIN_FILE};
use kata_live_parse::runtime::Shadowing;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The `/config` answer is a few tens of KiB; anything past this is not CRI-O.
const MAX_BODY: usize = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CrioConfError {
    #[error(
        "cannot read CRI-O's configuration {path}: {}; fix its permissions or remove it",
        crate::words::io(.source)
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("CRI-O's configuration file {path} is not valid TOML ({message}); CRI-O would not start with it: fix or remove it")]
    Parse { path: PathBuf, message: String },
    #[error("GET /config on {socket}: {reason}")]
    Get { socket: PathBuf, reason: String },
    #[error("GET /config on {socket}: no answer within {:.1} s", .timeout.as_secs_f64())]
    Timeout { socket: PathBuf, timeout: Duration },
}

/// The files CRI-O reads, in its order: the main file if it exists, then the drop-in tree
/// (symlinks are entries like files, as `filepath.Walk`'s Lstat sees them).
pub fn config_files(main: &Path, dir: &Path) -> Result<Vec<PathBuf>, CrioConfError> {
    let mut out = Vec::new();
    if main.exists() {
        out.push(main.to_path_buf());
    }
    if dir.is_dir() {
        walk(dir, &mut out)?;
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), CrioConfError> {
    let read = |source| CrioConfError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut names = std::fs::read_dir(dir)
        .map_err(read)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    names.sort_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
    for name in names {
        let path = dir.join(name);
        let meta = std::fs::symlink_metadata(&path).map_err(|source| CrioConfError::Read {
            path: path.clone(),
            source,
        })?;
        if meta.is_dir() {
            walk(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// Reads CRI-O's files under `host` and tells which others declare `handler`. Paths in the
/// answer are host paths (without the `--root` prefix).
pub fn read_shadowing(host: &Host, ours: &Path, handler: &str) -> Result<Shadowing, CrioConfError> {
    let main = host.path(Path::new(MAIN_FILE));
    let files = config_files(&main, &host.path(Path::new(DROP_IN_DIR)))?;
    let ours_full = host.path(ours);
    let mut seen = Vec::new();
    for f in files {
        if f == ours_full {
            continue;
        }
        let text = std::fs::read_to_string(&f).map_err(|source| CrioConfError::Read {
            path: f.clone(),
            source,
        })?;
        let declares = declares_handler(&text, handler).map_err(|e| CrioConfError::Parse {
            path: f.clone(),
            message: e.message().to_string(),
        })?;
        seen.push((f, declares));
    }
    let unprefix = |p: PathBuf| match p.strip_prefix(&host.root) {
        Ok(rel) => Path::new("/").join(rel),
        Err(_) => p,
    };
    let s = shadowing(&seen, &ours_full, &main);
    Ok(Shadowing {
        before: s.before.into_iter().map(unprefix).collect(),
        after: s.after.into_iter().map(unprefix).collect(),
    })
}

/// `GET /config` over the CRI socket (CRI-O answers plain HTTP/1.1 there, as for
/// `crio status config`), within `timeout`.
pub async fn get_config(socket: &Path, timeout: Duration) -> Result<String, CrioConfError> {
    let fail = |reason: String| CrioConfError::Get {
        socket: socket.to_path_buf(),
        reason,
    };
    let connect = async {
        tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| format!("connect: {}", crate::words::io(&e)))
    };
    let until = tokio::time::Instant::now() + timeout;
    let answer = match crate::http::get(connect, "/config", "localhost", MAX_BODY, until).await {
        Ok(a) => a,
        Err(crate::http::GetError::Timeout) => {
            return Err(CrioConfError::Timeout {
                socket: socket.to_path_buf(),
                timeout,
            })
        }
        Err(e) => return Err(fail(e.to_string())),
    };
    if !answer.status.is_success() {
        return Err(fail(format!("HTTP {}", answer.status)));
    }
    String::from_utf8(answer.body.to_vec()).map_err(|e| fail(format!("body is not UTF-8: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One answer on a unix socket, as CRI-O's HTTP handler on its CRI socket gives it.
    fn serve_once(socket: &Path, reply: &'static str) {
        let l = tokio::net::UnixListener::bind(socket).unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).await.unwrap();
            assert!(buf[..n].starts_with(b"GET /config HTTP/1.1\r\n"));
            s.write_all(reply.as_bytes()).await.unwrap();
        });
    }

    #[tokio::test]
    async fn get_config_reads_the_answer_and_names_the_socket() {
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("crio.sock");
        serve_once(
            &sock,
            "HTTP/1.1 200 OK\r\ncontent-length: 15\r\n\r\n[crio.runtime]\n",
        );
        let t = Duration::from_secs(10);
        assert_eq!(get_config(&sock, t).await.unwrap(), "[crio.runtime]\n");

        let sock = d.path().join("crio2.sock");
        serve_once(
            &sock,
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n",
        );
        let e = get_config(&sock, t).await.unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "GET /config on {}: HTTP 500 Internal Server Error",
                sock.display()
            )
        );

        let e = get_config(&d.path().join("none.sock"), t)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, CrioConfError::Get { reason, .. } if reason.starts_with("connect: ")),
            "{e}"
        );
    }

    #[test]
    fn files_are_walked_in_crio_order() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("crio.conf.d");
        std::fs::create_dir_all(dir.join("10-sub")).unwrap();
        for f in [
            "00-default",
            "10-sub/z.conf",
            "50-kata-remote",
            "99-last.txt",
            "05.toml",
        ] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let main = d.path().join("crio.conf");
        std::fs::write(&main, "").unwrap();
        let files = config_files(&main, &dir).unwrap();
        let rel: Vec<String> = files
            .iter()
            .map(|f| f.strip_prefix(d.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(
            rel,
            [
                "crio.conf",
                "crio.conf.d/00-default",
                "crio.conf.d/05.toml",
                "crio.conf.d/10-sub/z.conf",
                "crio.conf.d/50-kata-remote",
                "crio.conf.d/99-last.txt"
            ]
        );
    }
}
