//! Logging: structured records to the journal (with a MESSAGE_ID per event kind, so that
//! `journalctl MESSAGE_ID=...` and the catalog work), and human lines on stderr. When
//! stderr already is the journal (a unit's output, per JOURNAL_STREAM), only the
//! structured layer is kept, so no line is logged twice.

use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt, EnvFilter, Layer};

/// MESSAGE_IDs, one per event kind. Never change one: operators filter on them, and the
/// catalog (packaging) explains each.
pub mod ids {
    pub const STARTED: &str = "2cdf8cbe46034e34ba73f1725bac0fc3";
    pub const SUCCEEDED: &str = "556da62eebd54ec986eb5c0ecf81f5ad";
    pub const FAILED: &str = "1e51da56e3304f33afd012aff9dc972b";
    pub const ROLLED_BACK: &str = "b51c7b50710f4c7781d8d79d85c6c7d9";
    pub const ROLLBACK_FAILED: &str = "d82c69e6b5c84a218c3941c6b7fff968";
    pub const REFUSED: &str = "3a00b16f49974554a12100a080630147";
    pub const STEP: &str = "cf89fdb183d24ac3b89deb5346c88f56";
    pub const CRIO_RESTARTED: &str = "c1b84c691025410bbd05d7564016bb29";
    pub const STOPPED: &str = "199464fbf0d743828425c5dd1a7e9712";
    pub const CRIO_START_LIMIT_RESET: &str = "c3a374c2f34b4cee96eb974eee3d313a";
    pub const RUNTIME_STOP_CUT: &str = "b9ecc813d5354e91bde5eec852b567ed";

    /// (id, symbolic name) for the catalog and the docs.
    pub const ALL: [(&str, &str); 11] = [
        (STARTED, "STARTED"),
        (SUCCEEDED, "SUCCEEDED"),
        (FAILED, "FAILED"),
        (ROLLED_BACK, "ROLLED_BACK"),
        (ROLLBACK_FAILED, "ROLLBACK_FAILED"),
        (REFUSED, "REFUSED"),
        (STEP, "STEP"),
        (CRIO_RESTARTED, "CRIO_RESTARTED"),
        (STOPPED, "STOPPED"),
        (CRIO_START_LIMIT_RESET, "CRIO_START_LIMIT_RESET"),
        (RUNTIME_STOP_CUT, "RUNTIME_STOP_CUT"),
    ];
}

/// Fields that index journal records and repeat what the message says: kept off stderr.
const JOURNAL_ONLY_FIELDS: [&str; 7] = [
    "message_id",
    "step",
    "outcome",
    "duration",
    "operation",
    "handler",
    "exit_code",
];

pub const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// The tracing target of the journal records whose human line the reporter prints itself
/// (each step's progress line, a run's start and end): the stderr layer leaves it out.
pub const PROGRESS_TARGET: &str = "kata_live::progress";

/// Whether progress lines go to stderr: a log layer writes there and the level shows INFO.
static PROGRESS_ON_STDERR: AtomicBool = AtomicBool::new(false);

/// Prints one progress line on stderr, as it is (no level, no fields), unless stderr is the
/// journal (which gets the structured record) or the run is quiet.
pub fn progress(line: &str) {
    if PROGRESS_ON_STDERR.load(Ordering::Relaxed) {
        eprintln!("{line}");
    }
}

/// `-q` gives -1, each `-v` adds one; -2 (`status`, `verify` without `-v`) only errors.
pub fn level_for(verbosity: i8) -> &'static str {
    match verbosity {
        i8::MIN..=-2 => "error",
        -1 => "warn",
        0 => "info",
        1 => "debug",
        _ => "trace",
    }
}

/// True when fd 2 is the stream systemd set up for the journal (JOURNAL_STREAM="dev:ino").
pub fn stderr_is_journal(journal_stream: Option<&str>) -> bool {
    let Some((dev, ino)) = journal_stream.and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    match nix::sys::stat::fstat(std::io::stderr().as_fd()) {
        Ok(st) => st.st_dev == dev && st.st_ino == ino,
        Err(_) => false,
    }
}

/// Installs the global subscriber. `KATA_LIVE_LOG` (EnvFilter syntax) overrides the level.
pub fn init(verbosity: i8) {
    let filter_at = |v: i8| {
        EnvFilter::try_from_env("KATA_LIVE_LOG")
            .unwrap_or_else(|_| EnvFilter::new(format!("kata_live={}", level_for(v))))
    };
    let filter = || filter_at(verbosity.max(0));
    let journald = if Path::new(JOURNAL_SOCKET).exists() {
        tracing_journald::layer().ok().map(|l| {
            l.with_syslog_identifier("kata-live".into())
                // Without a prefix, `message_id` becomes the journal's own MESSAGE_ID.
                .with_field_prefix(None)
                .with_filter(filter())
        })
    } else {
        None
    };
    let to_journal = journald.is_some();
    // The journal gets every field; stderr gets the message and the fields that add to it,
    // not the ones that only index records (all of them from -v on). No colour codes in logs
    // captured to files or pipes.
    let terse = verbosity < 1;
    let fields =
        tracing_subscriber::fmt::format::debug_fn(move |w, field, value| match field.name() {
            "message" => write!(w, "{value:?}"),
            name if terse && JOURNAL_ONLY_FIELDS.contains(&name) => Ok(()),
            name => write!(w, " {name}={value:?}"),
        });
    let stderr_layer =
        if to_journal && stderr_is_journal(std::env::var("JOURNAL_STREAM").ok().as_deref()) {
            None
        } else {
            PROGRESS_ON_STDERR.store(verbosity >= 0, Ordering::Relaxed);
            // Progress lines are printed by `progress`, without the level prefix.
            // Without -v, stderr shows the progress lines, warnings and errors; the INFO
            // records (rpm-ostree's output, each wait) stay in the journal.
            let stderr_filter = filter_at(if verbosity <= 0 {
                verbosity.min(-1)
            } else {
                verbosity
            });
            let no_progress = match format!("{PROGRESS_TARGET}=off").parse() {
                Ok(d) => stderr_filter.add_directive(d),
                Err(_) => stderr_filter,
            };
            Some(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_target(false)
                    .without_time()
                    .fmt_fields(fields)
                    .with_filter(no_progress),
            )
        };
    // A second init (tests) is harmless: keep the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(journald)
        .with(stderr_layer)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        assert_eq!(level_for(-1), "warn");
        assert_eq!(level_for(0), "info");
        assert_eq!(level_for(2), "trace");
    }

    #[test]
    fn journal_stream_parsing() {
        assert!(!stderr_is_journal(None));
        assert!(!stderr_is_journal(Some("garbage")));
        assert!(!stderr_is_journal(Some("1:2")));
        let st = nix::sys::stat::fstat(std::io::stderr().as_fd()).unwrap();
        let v = format!("{}:{}", st.st_dev, st.st_ino);
        assert!(stderr_is_journal(Some(&v)));
    }

    #[test]
    fn message_ids_are_distinct_128_bit_hex() {
        let mut seen = std::collections::HashSet::new();
        for (id, _) in ids::ALL {
            assert_eq!(id.len(), 32);
            assert!(id
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            assert!(seen.insert(id));
        }
    }
}
