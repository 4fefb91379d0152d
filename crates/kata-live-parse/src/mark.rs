//! kata-live's mark on the one file it owns in the runtime's configuration: the header its
//! drop-ins start with, and what is at the drop-in's path judged by it (kata-live writes
//! and reads the file).

use serde::Serialize;

/// The text of [`MARK`], for a runtime whose header adds lines after it (`concat!`).
macro_rules! mark_text {
    () => {
        "# Managed by kata-live. Do not edit: `kata-live install` rewrites this file and\n\
# `kata-live uninstall` removes it. Configure /etc/kata-live/config.d/ instead.\n"
    };
}
pub(crate) use mark_text;

/// First lines of every drop-in kata-live writes, whatever the runtime; how `status` tells
/// ours from foreign.
pub const MARK: &str = mark_text!();

/// What is at the drop-in path, as `status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DropInState {
    Absent,
    /// Ours and byte-identical to what the current configuration renders.
    Ours,
    /// Ours, but the configuration now renders something else.
    Differs,
    /// Not written by kata-live (for example the operator's own 50-kata-remote).
    Foreign,
}

impl std::fmt::Display for DropInState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DropInState::Absent => "absent",
            DropInState::Ours => "kata-live's, up to date",
            DropInState::Differs => "kata-live's, but differs from what the configuration renders",
            DropInState::Foreign => "foreign (not written by kata-live)",
        })
    }
}

pub fn classify(current: Option<&[u8]>, desired: &str) -> DropInState {
    match current {
        None => DropInState::Absent,
        Some(c) if c == desired.as_bytes() => DropInState::Ours,
        Some(c) if c.starts_with(MARK.as_bytes()) => DropInState::Differs,
        Some(_) => DropInState::Foreign,
    }
}

/// Whether these bytes are a drop-in kata-live wrote (its header), whatever configuration
/// rendered them.
pub fn written_by_kata_live(content: Option<&[u8]>) -> bool {
    content.is_some_and(|c| c.starts_with(MARK.as_bytes()))
}
