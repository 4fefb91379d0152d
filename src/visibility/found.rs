//! The runtime files as preflight found them (which were visible on the host, and by what
//! content): the target of a rollback of the package, and the differences it could not undo.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::host::Host;

/// Each runtime file with the SHA-256 of what the host showed (`None`: not visible), in the
/// runtime's order. Hashed once, at preflight.
pub fn found(host: &Host, paths: &[PathBuf]) -> Vec<(PathBuf, Option<String>)> {
    paths
        .iter()
        .map(|p| {
            let digest = std::fs::File::open(host.path(p))
                .ok()
                .and_then(super::sha256_of_file);
            (p.clone(), digest)
        })
        .collect()
}

/// What the rollback waits for: each file preflight found visible, with the content it found,
/// where the previous package brings that content back. A file preflight did not find is
/// never waited for; one the previous package does not bring back as found is named after
/// the wait (see [`differences`]). Pure.
pub fn rollback_target(
    found: &[(PathBuf, Option<String>)],
    previous: &[(PathBuf, String)],
) -> Vec<(PathBuf, String)> {
    found
        .iter()
        .filter_map(|(p, then)| {
            let then = then.as_ref()?;
            previous
                .iter()
                .any(|(q, d)| q == p && d == then)
                .then(|| (p.clone(), then.clone()))
        })
        .collect()
}

/// A runtime file that is not as preflight found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Difference {
    Appeared {
        path: PathBuf,
        now: String,
    },
    Gone {
        path: PathBuf,
        then: String,
    },
    Changed {
        path: PathBuf,
        then: String,
        now: String,
    },
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Difference::Appeared { path, now } => write!(
                f,
                "{} was not visible at preflight and is now (sha256 {now})",
                path.display()
            ),
            Difference::Gone { path, then } => write!(
                f,
                "{} was visible at preflight (sha256 {then}) and is not now",
                path.display()
            ),
            Difference::Changed { path, then, now } => write!(
                f,
                "{} held sha256 {then} at preflight and holds sha256 {now} now",
                path.display()
            ),
        }
    }
}

/// How `now` differs from what preflight found (`then`), path by path. Pure.
pub fn differences(
    then: &[(PathBuf, Option<String>)],
    now: &[(PathBuf, Option<String>)],
) -> Vec<Difference> {
    let at = |p: &Path| {
        now.iter()
            .find(|(q, _)| q == p)
            .and_then(|(_, d)| d.clone())
    };
    then.iter()
        .filter_map(|(p, then)| {
            let path = p.clone();
            match (then.clone(), at(p)) {
                (None, None) => None,
                (None, Some(now)) => Some(Difference::Appeared { path, now }),
                (Some(then), None) => Some(Difference::Gone { path, then }),
                (Some(then), Some(now)) if then == now => None,
                (Some(then), Some(now)) => Some(Difference::Changed { path, then, now }),
            }
        })
        .collect()
}

/// The rollback's words on the runtime files: back as preflight found them (naming those
/// not visible then either), or each difference it could not undo. Pure.
pub fn as_found(then: &[(PathBuf, Option<String>)], diffs: &[Difference]) -> String {
    if !diffs.is_empty() {
        return format!(
            "the runtime files are not all as preflight found them (the previous package does \
             not bring this back): {}",
            super::list(diffs)
        );
    }
    let absent: Vec<String> = then
        .iter()
        .filter(|(_, d)| d.is_none())
        .map(|(p, _)| p.display().to_string())
        .collect();
    if absent.is_empty() {
        "the runtime files are as preflight found them".into()
    } else {
        format!(
            "the runtime files are as preflight found them ({} not visible then either)",
            absent.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn the_rollback_waits_only_for_what_preflight_found_and_the_package_brings_back() {
        let found = [
            (p("/shim"), Some("a".to_string())),
            (p("/conf"), None),
            (p("/edited"), Some("mine".to_string())),
        ];
        let previous = [
            (p("/shim"), "a".to_string()),
            (p("/conf"), "c".to_string()),
            (p("/edited"), "pkg".to_string()),
        ];
        assert_eq!(
            rollback_target(&found, &previous),
            [(p("/shim"), "a".to_string())]
        );
    }

    #[test]
    fn differences_and_their_words() {
        let then = [
            (p("/shim"), Some("a".to_string())),
            (p("/conf"), None),
            (p("/other"), Some("o".to_string())),
        ];
        assert_eq!(
            as_found(&then, &differences(&then, &then)),
            "the runtime files are as preflight found them (/conf not visible then either)"
        );
        let now = [
            (p("/shim"), Some("b".to_string())),
            (p("/conf"), Some("c".to_string())),
            (p("/other"), None),
        ];
        let d = differences(&then, &now);
        assert_eq!(d.len(), 3);
        let words = as_found(&then, &d);
        for w in [
            "/shim held sha256 a at preflight and holds sha256 b now",
            "/conf was not visible at preflight and is now (sha256 c)",
            "/other was visible at preflight (sha256 o) and is not now",
        ] {
            assert!(words.contains(w), "{words}");
        }
    }
}
