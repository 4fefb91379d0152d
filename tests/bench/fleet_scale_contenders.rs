//! The contenders (one pacing Agent per simulated node) and the referee that watches the
//! tickets meanwhile.

use super::*;

/// One contender's account of its turn.
pub(super) struct Outcome {
    pub(super) node: String,
    /// When it entered `acquire`, and how long it stayed there.
    pub(super) began: Instant,
    pub(super) waited: Duration,
    /// Its simulated run: from its grant's arrival to the run's end (before its `done`).
    pub(super) ran: (Instant, Instant),
    pub(super) acquire_errors: usize,
    pub(super) release_errors: usize,
    pub(super) released: bool,
    /// The last [`SAID_KEPT`] things its pacing said while it waited (each cut to 300
    /// characters): when (UTC, to compare with the audit log), words.
    pub(super) said: Vec<(String, String)>,
}

#[derive(Default)]
pub(super) struct Progress {
    pub(super) taken: AtomicUsize,
    pub(super) done: AtomicUsize,
    pub(super) errors: AtomicUsize,
    pub(super) said: AtomicUsize,
}

/// What each contender's pacing said, kept for the most passed node's report.
const SAID_KEPT: usize = 40;

/// Errors said by the contenders, printed up to this many (then counted only).
const SAY_MAX: usize = 20;

async fn contend(pacer: Agent, node: String, run: Duration, progress: Arc<Progress>) -> Outcome {
    let errors = Cell::new(0usize);
    let t = Instant::now();
    let said = std::cell::RefCell::new(Vec::new());
    let say = |w: &str| {
        let mut said = said.borrow_mut();
        if said.len() == SAID_KEPT {
            said.remove(0);
        }
        let words: String = w.chars().take(300).collect();
        said.push((k8s_openapi::jiff::Timestamp::now().to_string(), words));
        if w.contains("trying again") {
            errors.set(errors.get() + 1);
            progress.errors.fetch_add(1, Ordering::Relaxed);
            if progress.said.fetch_add(1, Ordering::Relaxed) < SAY_MAX {
                eprintln!("fleet-scale: {node}: {w}");
            }
        }
    };
    pacer.acquire("install", &say).await;
    let waited = t.elapsed();
    progress.taken.fetch_add(1, Ordering::Relaxed);
    let run_start = Instant::now();
    tokio::time::sleep(run).await;
    let ran = (run_start, Instant::now());
    // As the pod's entrypoint does (src/pod/rollout.rs): retried every 5 s.
    let mut release_errors = 0;
    let released = loop {
        match pacer.release().await {
            Ok(s) => break !s.tickets.is_empty(),
            Err(e) => {
                release_errors += 1;
                progress.errors.fetch_add(1, Ordering::Relaxed);
                if progress.said.fetch_add(1, Ordering::Relaxed) < SAY_MAX {
                    eprintln!("fleet-scale: {node}: release: {e}; trying again in 5 s");
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    };
    progress.done.fetch_add(1, Ordering::Relaxed);
    drop(pacer);
    Outcome {
        node,
        began: t,
        waited,
        ran,
        acquire_errors: errors.get(),
        release_errors,
        released,
        said: said.into_inner(),
    }
}

/// Starts the contenders on `threads` OS threads (each a current-thread runtime: an Agent's
/// `acquire` future is not Send), all released at once by the returned barrier's last wait.
pub(super) fn spawn_contenders(
    run: &Run,
    conf: &kube::Config,
    threads: usize,
    progress: &Arc<Progress>,
    tx: &mpsc::Sender<Outcome>,
) -> Arc<Barrier> {
    let go = Arc::new(Barrier::new(threads + 1));
    for t in 0..threads {
        let mine: Vec<usize> = (0..run.nodes).filter(|i| i % threads == t).collect();
        let (conf, go, progress, tx) = (conf.clone(), go.clone(), progress.clone(), tx.clone());
        let run_for = Duration::from_secs_f64(run.run_s);
        std::thread::Builder::new()
            .name(format!("contenders-{t}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime");
                let local = tokio::task::LocalSet::new();
                let pacers: Vec<(String, Agent)> = local.block_on(&rt, async {
                    let mut out = Vec::new();
                    for i in mine {
                        let node = node_name(i);
                        let cfg = AgentConfig {
                            namespace: NS.into(),
                            node: node.clone(),
                            pod: None,
                        };
                        let p = Agent::with_config(conf.clone(), cfg)
                            .unwrap_or_else(|e| panic!("an Agent for {node}: {e}"));
                        out.push((node, p));
                    }
                    out
                });
                go.wait();
                local.block_on(&rt, async {
                    let tasks: Vec<_> = pacers
                        .into_iter()
                        .map(|(node, p)| {
                            tokio::task::spawn_local(contend(p, node, run_for, progress.clone()))
                        })
                        .collect();
                    for t in tasks {
                        let o = t.await.expect("a contender panicked");
                        let _ = tx.send(o);
                    }
                });
            })
            .expect("start a contenders' thread");
    }
    go
}

/// An independent watcher of the tickets (as the admin, on its own thread and connection, not
/// throttled by priority and fairness): when each ticket write's event reached it, by
/// resourceVersion, in seconds since the epoch. Compared with the audit log's time of the
/// write, this is how late the API server's watch fan-out is; a contender's view cannot be
/// fresher than that.
pub(super) fn spawn_referee(
    conf: kube::Config,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<(u64, f64)>> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        rt.block_on(async move {
            let client = kube::Client::try_from(conf).expect("the referee's client");
            let api: Api<Lease> = Api::namespaced(client, NS);
            let sel = format!("{}=true", audit::TICKET_LABEL);
            let list_rv = || async {
                api.list_metadata(&ListParams::default().labels(&sel))
                    .await
                    .expect("the referee lists the tickets")
                    .metadata
                    .resource_version
                    .unwrap_or_default()
            };
            let mut rv = list_rv().await;
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let wp = WatchParams::default().labels(&sel).timeout(60);
                let mut s = match api.watch(&wp, &rv).await {
                    Ok(s) => s.boxed(),
                    Err(e) => {
                        eprintln!("fleet-scale: the referee's watch: {e}; again in 1 s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                loop {
                    let next = tokio::time::timeout(Duration::from_millis(500), s.next()).await;
                    let ev = match next {
                        Err(_) if stop.load(Ordering::Relaxed) => break,
                        Err(_) => continue,
                        Ok(None) => break,
                        Ok(Some(Ok(ev))) => ev,
                        Ok(Some(Err(e))) => {
                            eprintln!("fleet-scale: the referee's watch: {e}");
                            break;
                        }
                    };
                    let at = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64());
                    match ev {
                        WatchEvent::Added(l) | WatchEvent::Modified(l) | WatchEvent::Deleted(l) => {
                            let v = l.metadata.resource_version.unwrap_or_default();
                            if let Ok(n) = v.parse() {
                                seen.push((n, at));
                            }
                            rv = v;
                        }
                        WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                        WatchEvent::Error(e) => {
                            eprintln!("fleet-scale: the referee's watch ended: {}", e.message);
                            rv = list_rv().await;
                            break;
                        }
                    }
                }
            }
            seen
        })
    })
}
