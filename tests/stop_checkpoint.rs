//! A signal that arrives while the single-threaded runtime runs code that never awaits (a
//! file write, say) is taken at the next checkpoint, not one step later (src/stop.rs,
//! `checkpoint`). A real SIGTERM to this process, in its own test binary: the stop state and
//! the signal disposition are process-wide.

use kata_live::stop::{checkpoint, listen, requested};

#[test]
fn a_signal_during_code_that_never_awaits_is_seen_at_the_next_checkpoint() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        listen().expect("listen for SIGTERM");
        assert_eq!(checkpoint().await, None, "no signal yet");
        // Delivered and handled synchronously, while this task runs without awaiting: the
        // listening task has not run yet.
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).expect("raise SIGTERM");
        assert_eq!(requested(), None, "the listening task cannot have run yet");
        assert_eq!(checkpoint().await, Some("SIGTERM"));
        assert_eq!(requested(), Some("SIGTERM"));
    });
}
