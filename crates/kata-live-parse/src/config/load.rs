//! Loading: fragments merged table by table with the file that set each key recorded, then
//! validated (kata-live finds them, with masking, and checks their ownership).

use super::*;

/// Directories scanned for fragments, lowest priority first (relative to the root).
pub const FRAGMENT_DIRS: [&str; 2] = ["usr/lib/kata-live/config.d", "etc/kata-live/config.d"];

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Source {
    Default,
    File(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("built-in default"),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {}", crate::words::io(.source))]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}: key `{key}`: {message}")]
    Key {
        path: Source,
        key: String,
        message: String,
    },
    #[error(
        "{path}: refusing a config file {problem}; fix with `chown root:root` and `chmod go-w`"
    )]
    Unsafe { path: PathBuf, problem: String },
}

impl ConfigError {
    pub(super) fn key(source: &Source, key: &str, message: impl Into<String>) -> Self {
        ConfigError::Key {
            path: source.clone(),
            key: key.to_string(),
            message: message.into(),
        }
    }
}

/// The merged configuration, the fragments it came from and, per leaf key (dotted path),
/// which one set it.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub fragments: Vec<PathBuf>,
    pub provenance: BTreeMap<String, Source>,
}

impl Loaded {
    pub fn source_of(&self, key: &str) -> Source {
        self.provenance.get(key).cloned().unwrap_or(Source::Default)
    }
}

/// Merges fragments (path, TOML text), in the given order, over the defaults, and
/// validates the result. Pure: the unit of the property tests.
pub fn load_fragments(fragments: &[(PathBuf, String)]) -> Result<Loaded, ConfigError> {
    let mut merged = toml::Table::try_from(Config::default())
        .map_err(|e| ConfigError::key(&Source::Default, "", e.to_string()))?;
    let mut provenance = BTreeMap::new();
    for (path, text) in fragments {
        let src = Source::File(path.clone());
        let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.clone(),
            message: e.to_string(),
        })?;
        merge(&mut merged, table, "", &src, &mut provenance);
        // Deserialize after each fragment: the first failure is this fragment's fault.
        to_config(&merged, &src)?;
    }
    let config = to_config(&merged, &Source::Default)?;
    let loaded = Loaded {
        config,
        fragments: fragments.iter().map(|(p, _)| p.clone()).collect(),
        provenance,
    };
    check(&loaded)?;
    Ok(loaded)
}

/// Tables whose keys are free names (not settings): a fragment's table replaces the whole
/// map, and an empty one clears it.
pub const REPLACED_MAPS: [&str; 2] = [
    "post_install.selinux_booleans",
    "handler.containerd.options",
];

fn merge(
    into: &mut toml::Table,
    from: toml::Table,
    prefix: &str,
    src: &Source,
    prov: &mut BTreeMap<String, Source>,
) {
    for (k, v) in from {
        let key = join_key(prefix, &k);
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(_)), toml::Value::Table(t))
                if REPLACED_MAPS.contains(&key.as_str())
                    || super::handlers::is_replaced_options(&key) =>
            {
                let inside = format!("{key}.");
                prov.retain(|p, _| !p.starts_with(&inside));
                if t.is_empty() {
                    prov.insert(key, src.clone());
                } else {
                    prov.remove(&key);
                    record_leaves(&key, &toml::Value::Table(t.clone()), src, &mut *prov);
                }
                into.insert(k, toml::Value::Table(t));
            }
            (Some(toml::Value::Table(dst)), toml::Value::Table(t)) => {
                merge(dst, t, &key, src, prov);
            }
            (_, v) => {
                record_leaves(&key, &v, src, prov);
                into.insert(k, v);
            }
        }
    }
}

fn record_leaves(key: &str, v: &toml::Value, src: &Source, prov: &mut BTreeMap<String, Source>) {
    match v {
        // A table declared empty (`[handlers.kata]` alone) is still set by its fragment.
        toml::Value::Table(t) if t.is_empty() => {
            prov.insert(key.to_string(), src.clone());
        }
        toml::Value::Table(t) => {
            for (k, v) in t {
                record_leaves(&join_key(key, k), v, src, prov);
            }
        }
        _ => {
            prov.insert(key.to_string(), src.clone());
        }
    }
}

fn to_config(merged: &toml::Table, src: &Source) -> Result<Config, ConfigError> {
    let de = toml::Value::Table(merged.clone());
    serde_path_to_error::deserialize::<_, Config>(de).map_err(|e| {
        let key = e.path().to_string();
        ConfigError::key(src, &key, e.into_inner().to_string())
    })
}

pub(super) fn join_key(prefix: &str, k: &str) -> String {
    if prefix.is_empty() {
        k.to_string()
    } else {
        format!("{prefix}.{k}")
    }
}
