//! The set of handlers a run brings the node to: `[handler]` (the first, as a one-handler
//! fragment has always written it) and each `[handlers.NAME]` table (the others, keyed by
//! their name so that fragments merge them key by key like any other table).
//!
//! A further handler starts from the same built-in tables as `[handler]`; its drop-ins are
//! its own, named after it unless set: CRI-O reads one table per handler from any file of
//! `crio.conf.d/`, and containerd one from any file its `imports` reads, so one file per
//! handler lets one handler's file change (or go) without touching the others'.

use super::*;

/// A further handler of the set: `[handlers.NAME]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HandlerEntry {
    /// Its CRI-O drop-in. Unset: `/etc/crio/crio.conf.d/50-NAME`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drop_in: Option<PathBuf>,
    /// Its containerd drop-in. Unset: `50-NAME.toml` beside `containerd.drop_in`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containerd_drop_in: Option<PathBuf>,
    pub crio: CrioRuntime,
    pub containerd: ContainerdRuntime,
}

/// One handler of the set, resolved: its tables, its drop-ins, and the table of the
/// configuration that declares it (`handler` or `handlers.NAME`, for the operator).
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerSpec {
    pub key: String,
    pub handler: Handler,
    pub containerd_drop_in: PathBuf,
}

impl HandlerSpec {
    /// containerd's settings with this handler's drop-in.
    pub fn containerd_settings(&self, c: &ContainerdSettings) -> ContainerdSettings {
        ContainerdSettings {
            drop_in: self.containerd_drop_in.clone(),
            ..c.clone()
        }
    }
}

impl Config {
    /// Every handler of the set, `[handler]` first, then `[handlers.NAME]` by name.
    pub fn handler_set(&self) -> Vec<HandlerSpec> {
        let first = HandlerSpec {
            key: "handler".into(),
            handler: self.handler.clone(),
            containerd_drop_in: self.containerd.drop_in.clone(),
        };
        let dir = self
            .containerd
            .drop_in
            .parent()
            .unwrap_or(Path::new("/etc/containerd/conf.d"));
        let more = self.handlers.iter().map(|(name, e)| HandlerSpec {
            key: format!("handlers.{name}"),
            handler: Handler {
                name: name.clone(),
                drop_in: e
                    .drop_in
                    .clone()
                    .unwrap_or_else(|| Path::new(CRIO_DROP_IN_DIR).join(format!("50-{name}"))),
                crio: e.crio.clone(),
                containerd: e.containerd.clone(),
            },
            containerd_drop_in: e
                .containerd_drop_in
                .clone()
                .unwrap_or_else(|| dir.join(format!("50-{name}.toml"))),
        });
        std::iter::once(first).chain(more).collect()
    }
}

/// Whether `key` is a further handler's shim options (replaced whole, as
/// `handler.containerd.options` is).
pub(super) fn is_replaced_options(key: &str) -> bool {
    key.strip_prefix("handlers.")
        .and_then(|r| r.strip_suffix(".containerd.options"))
        .is_some_and(|name| !name.is_empty() && !name.contains('.'))
}

impl Loaded {
    /// The fragment that last set anything in table `key` (or the key itself), or any of
    /// `also`.
    pub fn source_of_table(&self, key: &str, also: &[&str]) -> Source {
        let inside = format!("{key}.");
        let mut keys: Vec<&str> = self
            .provenance
            .keys()
            .filter(|k| *k == key || k.starts_with(&inside))
            .map(String::as_str)
            .collect();
        keys.extend(also);
        if keys.is_empty() {
            return Source::Default;
        }
        self.last_set(&keys).1
    }
}

/// Every further handler checked as `[handler]` is, and the set as a whole: names unique,
/// and each handler its own drop-ins.
pub(super) fn check_set(l: &Loaded) -> Result<(), ConfigError> {
    let c = &l.config;
    let set = c.handler_set();
    for spec in &set[1..] {
        let h = &spec.handler;
        let p = &spec.key;
        let err = |key: &str, msg: String| {
            let e = ConfigError::key(&l.source_of_table(key, &[]), key, msg);
            Err(blamed(l, e, p, &h.name))
        };
        if !is_dns1123_label(&h.name) {
            return err(
                p,
                format!(
                    "{:?} is not a DNS-1123 label (lower-case letters, digits and '-', 1 to 63 characters, starting and ending alphanumeric)",
                    h.name
                ),
            );
        }
        if h.name == c.handler.name {
            return Err(ConfigError::key(
                &l.source_of_table(p, &["handler.name"]),
                p,
                format!(
                    "handler {} is declared twice: by [handler] (name from {}) and by [{p}]; a handler's name is unique in the set",
                    h.name,
                    l.source_of("handler.name")
                ),
            ));
        }
        let mut paths: Vec<(String, &Path)> = vec![
            (format!("{p}.drop_in"), &h.drop_in),
            (format!("{p}.containerd_drop_in"), &spec.containerd_drop_in),
            (format!("{p}.crio.runtime_path"), &h.crio.runtime_path),
            (format!("{p}.crio.runtime_root"), &h.crio.runtime_root),
        ];
        if let Some(cp) = &h.crio.runtime_config_path {
            paths.push((format!("{p}.crio.runtime_config_path"), cp));
        }
        for (key, path) in paths {
            if !path.is_absolute() {
                return err(&key, format!("{path:?} must be an absolute path"));
            }
        }
        if let Some(problem) = drop_in_problem(&h.drop_in) {
            return err(&format!("{p}.drop_in"), problem);
        }
        containerd_drop_in_check(
            l,
            &format!("{p}.containerd_drop_in"),
            &spec.containerd_drop_in,
        )
        .map_err(|e| blamed(l, e, p, &h.name))?;
        validate_crio_table(l, p, &h.crio).map_err(|e| blamed(l, e, p, &h.name))?;
        validate_containerd_table(l, p, &h.containerd).map_err(|e| blamed(l, e, p, &h.name))?;
    }
    // Each handler its own files: two tables in one file kata-live owns whole could not be
    // changed or removed one at a time.
    for (i, a) in set.iter().enumerate() {
        for b in &set[i + 1..] {
            for (what, pa, pb, ka, kb) in [
                (
                    "CRI-O drop-in",
                    &a.handler.drop_in,
                    &b.handler.drop_in,
                    format!("{}.drop_in", a.key),
                    format!("{}.drop_in", b.key),
                ),
                (
                    "containerd drop-in",
                    &a.containerd_drop_in,
                    &b.containerd_drop_in,
                    drop_in_key(a, "containerd_drop_in"),
                    drop_in_key(b, "containerd_drop_in"),
                ),
            ] {
                if pa == pb {
                    let src = l.source_of_table(&b.key, &[&ka, &kb]);
                    return Err(ConfigError::key(
                        &src,
                        &kb,
                        format!(
                            "handlers {} and {} have the same {what} {}: each handler needs its own file",
                            a.handler.name,
                            b.handler.name,
                            pa.display()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The configuration key that sets a handler's drop-in (`[handler]`'s containerd drop-in is
/// `containerd.drop_in`).
fn drop_in_key(spec: &HandlerSpec, which: &str) -> String {
    if spec.key == "handler" && which == "containerd_drop_in" {
        "containerd.drop_in".into()
    } else {
        format!("{}.{which}", spec.key)
    }
}

/// A further handler's error, led by its name; a value it left at its default is blamed on
/// the fragment that declared the handler.
fn blamed(l: &Loaded, e: ConfigError, table: &str, name: &str) -> ConfigError {
    match e {
        ConfigError::Key { path, key, message } => ConfigError::Key {
            path: match path {
                Source::Default => l.source_of_table(table, &[]),
                p => p,
            },
            key,
            message: format!("handler {name}: {message}"),
        },
        other => other,
    }
}
