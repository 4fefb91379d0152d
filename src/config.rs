//! Configuration: TOML fragments layered over built-in defaults (see
//! [`kata_live_parse::config`], which merges, validates and prints them): here the
//! fragments are found, masked, checked for ownership and read.

pub use kata_live_parse::config::*;

use crate::host::Host;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The fragment files, masked and ordered by systemd's rules.
pub fn fragment_paths(host: &Host) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = FRAGMENT_DIRS.iter().map(|d| host.path(d)).collect();
    liboverdrop::scan(&dirs, "", &["toml"], true)
        .into_values()
        .collect()
}

/// Loads built-in defaults, then every fragment; on a real root (`--root /`) refuses
/// fragments that are not owned by root or are writable by group or others.
pub fn load(host: &Host) -> Result<Loaded, ConfigError> {
    let paths = fragment_paths(host);
    let mut texts = Vec::with_capacity(paths.len());
    for p in &paths {
        if host.is_real_root() {
            check_ownership(p)?;
        }
        let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
            path: p.clone(),
            source,
        })?;
        texts.push((p.clone(), text));
    }
    load_fragments(&texts)
}

pub fn check_ownership(p: &Path) -> Result<(), ConfigError> {
    let m = std::fs::metadata(p).map_err(|source| ConfigError::Read {
        path: p.to_path_buf(),
        source,
    })?;
    if m.uid() != 0 {
        return Err(ConfigError::Unsafe {
            path: p.to_path_buf(),
            problem: format!("owned by uid {}, not root", m.uid()),
        });
    }
    if m.mode() & 0o022 != 0 {
        return Err(ConfigError::Unsafe {
            path: p.to_path_buf(),
            problem: format!("writable by group or others (mode {:o})", m.mode() & 0o7777),
        });
    }
    Ok(())
}
