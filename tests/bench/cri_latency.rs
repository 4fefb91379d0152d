//! Prints CRI call latencies: per call (Version, Status, ListPodSandbox, ListContainers)
//! and a whole verify-style read (runtime_view + pod_snapshot), as median/p90/p99 of many
//! runs. Against the scriptable test server by default (with 50 pods of 2 containers), or
//! any CRI socket given as the first argument.
//!
//!   cargo bench --bench cri_latency [-- SOCKET [RUNS]]

use kata_live::cri::CriClient;
use kata_live_standins::cri_server::TestCri;
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

async fn measure<F, Fut, T, E>(name: &str, runs: usize, mut f: F) -> Result<(), E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    // Warm up the connection and allocator.
    for _ in 0..runs.min(50) {
        f().await?;
    }
    let mut us: Vec<f64> = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f().await?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    us.sort_by(f64::total_cmp);
    let q = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
    println!(
        "{name:<34} median {:>8.1} us   p90 {:>8.1} us   p99 {:>8.1} us   min {:>8.1} us   (n={runs})",
        q(0.5),
        q(0.9),
        q(0.99),
        us[0]
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` passes `--bench`: options are not ours, positional arguments are.
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    let socket_arg = args.next().map(PathBuf::from);
    let runs: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(2000);

    let dir = tempfile::tempdir()?;
    let (socket, _server) = match socket_arg {
        Some(s) => (s, None),
        None => {
            let cri = TestCri::start(dir.path())?;
            cri.serve_handler("kata-remote");
            for i in 0..50 {
                cri.add_pod(
                    "bench",
                    &format!("pod-{i}"),
                    &format!("uid-{i}"),
                    if i % 5 == 0 { "kata-remote" } else { "" },
                    &["app", "sidecar"],
                );
            }
            (cri.socket_path().to_path_buf(), Some(cri))
        }
    };
    println!("CRI socket: {}", socket.display());

    let t = Instant::now();
    let c = CriClient::connect(&socket, Duration::from_secs(5), Duration::from_secs(5)).await?;
    println!(
        "connect (first, cold)                {:>8.1} us",
        t.elapsed().as_secs_f64() * 1e6
    );
    let v = c.version().await?;
    println!("runtime: {} {}", v.runtime_name, v.runtime_version);

    measure("connect + Version (new client)", runs.min(500), || async {
        let c = CriClient::connect(&socket, Duration::from_secs(5), Duration::from_secs(5)).await?;
        c.version().await
    })
    .await?;
    measure("Version", runs, || c.version()).await?;
    measure("Status (verbose)", runs, || c.status(true)).await?;
    measure("ListPodSandbox", runs, || c.list_pod_sandboxes(None)).await?;
    measure("ListContainers", runs, || c.list_containers(None)).await?;
    measure("runtime_view (Version+Status)", runs, || {
        c.runtime_view("kata-remote")
    })
    .await?;
    measure("verify read: view + pod_snapshot", runs, || async {
        let view = c.runtime_view("kata-remote").await?;
        let snap = c.pod_snapshot().await?;
        Ok::<_, kata_live::cri::CriError>((view, snap))
    })
    .await?;
    Ok(())
}
