//! Stop requests: SIGTERM (`systemctl stop`, an MCO action, the hand-off unit stopped) or
//! SIGINT (Ctrl-C) in the middle of an install or uninstall.
//!
//! The first signal does not kill the run: it is recorded here, the flows stop starting new
//! side effects at their next checkpoint, and the node is brought to a proven state (an
//! activation already under way is finished and proven, or what was applied is undone), then
//! kata-live exits with [`crate::exit::ExitCode::Stopped`]. Waits that finish no activation
//! (the package step's rpm-ostree client, the visibility wait, the package part and proof of
//! an upgrade's rollback that CRI-O never read) end at once. A second signal exits
//! at once ([`crate::exit::ExitCode::StoppedAtOnce`]): the state journal, written before each
//! side effect, tells the next run what to resume.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::watch;

static STOP: OnceLock<watch::Sender<Option<&'static str>>> = OnceLock::new();

fn sender() -> &'static watch::Sender<Option<&'static str>> {
    STOP.get_or_init(|| watch::channel(None).0)
}

/// Set by the signal handler itself, before any task runs: a signal has arrived that the
/// listening task may not have seen yet.
static ARRIVED: OnceLock<Arc<AtomicBool>> = OnceLock::new();

fn arrived() -> &'static Arc<AtomicBool> {
    ARRIVED.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Starts listening for SIGTERM and SIGINT (needs the tokio runtime). Without this, a signal
/// has its default effect (the process dies).
pub fn listen() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(arrived()))?;
    }
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            on_signal(name);
        }
    });
    Ok(())
}

fn on_signal(name: &'static str) {
    let first = sender().send_if_modified(|s| {
        if s.is_none() {
            *s = Some(name);
            true
        } else {
            false
        }
    });
    if first {
        tracing::warn!(
            signal = name,
            "{name} received: stopping at the next safe point; the node is brought to a proven \
             state first (a second signal exits at once)"
        );
        crate::notify::status(&format!(
            "{name} received: bringing the node to a proven state before stopping"
        ));
    } else {
        let code = crate::exit::ExitCode::StoppedAtOnce;
        tracing::error!(
            signal = name,
            exit_code = code.code(),
            "second signal ({name}): exiting at once; the state journal \
             (/var/lib/kata-live/state.json) lets the next run resume and converge"
        );
        eprintln!(
            "kata-live: second signal ({name}): exiting at once; run kata-live again to converge"
        );
        std::process::exit(i32::from(code.code()));
    }
}

/// The signal that asked the run to stop, if one did.
pub fn requested() -> Option<&'static str> {
    *sender().borrow()
}

/// A checkpoint between steps: the stop requested so far, counting a signal that arrived
/// while the (single-threaded) runtime ran code that never awaited, such as a file write. The
/// listening task is given the turns it needs to record it (tokio polls this task again
/// before the woken signal task otherwise, and the stop would be seen only after the next
/// step began).
pub async fn checkpoint() -> Option<&'static str> {
    // Bounded: the listening task runs within a couple of turns once the driver saw the
    // signal; the bound only keeps a broken runtime from spinning here.
    for _ in 0..1000 {
        if let Some(s) = requested() {
            return Some(s);
        }
        if !arrived().load(Ordering::SeqCst) {
            return None;
        }
        tokio::task::yield_now().await;
    }
    requested()
}

/// Resolves once a stop is requested (at once if it already was).
pub async fn wait() -> &'static str {
    let mut rx = sender().subscribe();
    loop {
        if let Some(s) = *rx.borrow_and_update() {
            return s;
        }
        if rx.changed().await.is_err() {
            // The sender lives in a static: it is never dropped.
            std::future::pending::<()>().await;
        }
    }
}

/// Runs `f` unless a stop is requested first: `Err(signal)` then, and `f` is dropped. Only
/// for work that changes nothing when cut short.
pub async fn unless_stopped<F: Future>(f: F) -> Result<F::Output, &'static str> {
    tokio::select! {
        biased;
        s = wait() => Err(s),
        out = f => Ok(out),
    }
}

/// For tests: the state as if `signal` had been received once.
#[doc(hidden)]
pub fn request_for_test(signal: &'static str) {
    sender().send_replace(Some(signal));
}
