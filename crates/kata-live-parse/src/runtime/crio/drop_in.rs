//! CRI-O's form of the handler drop-in: one `[crio.runtime.runtimes.NAME]` table under
//! kata-live's mark.
//!
//! CRI-O reads `crio.conf`, then every regular file of `crio.conf.d/` in lexical order; the
//! last value wins. kata-live owns exactly one file there, holding exactly one
//! `[crio.runtime.runtimes.NAME]` table, marked by [`HEADER`].

use crate::config::{CrioRuntime, Handler};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// CRI-O's drop-in starts with kata-live's mark and nothing else.
pub const HEADER: &str = crate::mark::MARK;

#[derive(Debug, thiserror::Error)]
#[error("cannot render the CRI-O table for handler {handler}: {source}")]
pub struct RenderError {
    handler: String,
    #[source]
    source: toml::ser::Error,
}

// The shape CRI-O reads: crio.runtime.runtimes.NAME.
#[derive(Serialize, Deserialize)]
struct DropInDoc {
    crio: CrioSection,
}
#[derive(Serialize, Deserialize)]
struct CrioSection {
    runtime: RuntimeSection,
}
#[derive(Serialize, Deserialize)]
struct RuntimeSection {
    runtimes: BTreeMap<String, CrioRuntime>,
}

/// Renders the drop-in: the header, then exactly one handler table.
pub fn render(handler: &Handler) -> Result<String, RenderError> {
    let doc = DropInDoc {
        crio: CrioSection {
            runtime: RuntimeSection {
                runtimes: BTreeMap::from([(handler.name.clone(), handler.crio.clone())]),
            },
        },
    };
    let body = toml::to_string(&doc).map_err(|source| RenderError {
        handler: handler.name.clone(),
        source,
    })?;
    Ok(format!("{HEADER}\n{body}"))
}

/// Parses a drop-in back into its handler tables (used by tests and `status`).
pub fn parse_handlers(text: &str) -> Result<BTreeMap<String, CrioRuntime>, toml::de::Error> {
    toml::from_str::<DropInDoc>(text).map(|d| d.crio.runtime.runtimes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mark::{classify, DropInState};

    #[test]
    fn render_parses_back_to_the_same_table() {
        let h = Handler::default();
        let text = render(&h).unwrap();
        assert!(text.starts_with(HEADER));
        let tables = parse_handlers(&text).unwrap();
        assert_eq!(tables.len(), 1);
        assert_eq!(tables.get("kata-remote"), Some(&h.crio));
    }

    #[test]
    fn classify_tells_ours_from_foreign() {
        let desired = render(&Handler::default()).unwrap();
        assert_eq!(classify(None, &desired), DropInState::Absent);
        assert_eq!(
            classify(Some(desired.as_bytes()), &desired),
            DropInState::Ours
        );
        let older = format!("{HEADER}\n[crio.runtime.runtimes.kata-remote]\n");
        assert_eq!(
            classify(Some(older.as_bytes()), &desired),
            DropInState::Differs
        );
        assert_eq!(
            classify(Some(b"[crio.runtime.runtimes.kata-remote]\n"), &desired),
            DropInState::Foreign
        );
    }
}
