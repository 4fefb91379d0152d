//! fake-crio's persistent sandboxes and containers.
//!
//! Real CRI-O keeps running containers across its own restarts (conmon holds them) and
//! restores them at start. The stand-in keeps them in one JSON file, `state.json`, in its
//! state directory. The file is the source of truth: every RPC reads it and every change
//! rewrites it atomically, under an exclusive `flock` on `state.lock`. So `fake-crio seed`
//! (or a test writing the file) changes what a running fake-crio reports at once.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

pub const STATE_FILE: &str = "state.json";
const LOCK_FILE: &str = "state.lock";
const LOCK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot create state directory {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error(
        "cannot lock {path} within 5 s: {source}; another fake-crio or `fake-crio seed` holds it"
    )]
    Lock { path: PathBuf, source: io::Error },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path} is not valid fake-crio state ({source}); fix or delete it")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("cannot write {path} atomically: {source}")]
    Write { path: PathBuf, source: io::Error },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    Ready,
    NotReady,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sandbox {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub attempt: u32,
    pub state: SandboxState,
    /// Nanoseconds since the epoch, as CRI reports it.
    #[serde(default)]
    pub created_at: i64,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// The handler the pod runs under; empty means the default runtime. Like CRI-O, it is
    /// never put in `PodSandbox.runtime_handler`: only in the verbose `PodSandboxStatus` info.
    #[serde(default)]
    pub runtime_handler: String,
    /// Test switch: the verbose `PodSandboxStatus` info of this sandbox lacks the
    /// `io.kubernetes.cri-o.RuntimeHandler` annotation, so its handler cannot be determined.
    #[serde(default)]
    pub no_handler_annotation: bool,
    /// The handler's definition the sandbox was run with (TOML of its effective table, as
    /// `crio status config` shows it), recorded by RunPodSandbox; empty for seeded pods.
    #[serde(default)]
    pub definition: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    pub id: String,
    pub pod_sandbox_id: String,
    pub name: String,
    #[serde(default)]
    pub attempt: u32,
    #[serde(default)]
    pub image: String,
    pub state: ContainerState,
    #[serde(default)]
    pub created_at: i64,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    #[serde(default)]
    pub sandboxes: Vec<Sandbox>,
    #[serde(default)]
    pub containers: Vec<Container>,
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct StateStore {
    dir: PathBuf,
}

impl StateStore {
    pub fn open(dir: &Path) -> Result<Self, StateError> {
        std::fs::create_dir_all(dir).map_err(|source| StateError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> Result<Flock<File>, StateError> {
        let path = self.dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| StateError::Lock {
                path: path.clone(),
                source,
            })?;
        // Holders keep the lock for one read-modify-write; give up after LOCK_DEADLINE.
        let start = std::time::Instant::now();
        let mut file = file;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(lock),
                Err((f, nix::errno::Errno::EWOULDBLOCK)) if start.elapsed() < LOCK_DEADLINE => {
                    file = f;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err((_, errno)) => {
                    return Err(StateError::Lock {
                        path,
                        source: io::Error::from(errno),
                    })
                }
            }
        }
    }

    fn read_unlocked(&self) -> Result<State, StateError> {
        let path = self.dir.join(STATE_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|source| StateError::Parse { path, source })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(State::default()),
            Err(source) => Err(StateError::Read { path, source }),
        }
    }

    fn write_unlocked(&self, state: &State) -> Result<(), StateError> {
        let path = self.dir.join(STATE_FILE);
        let err = |source: io::Error| StateError::Write {
            path: path.clone(),
            source,
        };
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir).map_err(err)?;
        let bytes = serde_json::to_vec_pretty(state).map_err(|e| err(io::Error::other(e)))?;
        tmp.write_all(&bytes).map_err(err)?;
        tmp.as_file().sync_all().map_err(err)?;
        tmp.persist(&path).map_err(|e| err(e.error))?;
        // Make the rename durable too.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(err)?;
        Ok(())
    }

    /// A consistent snapshot.
    pub fn read(&self) -> Result<State, StateError> {
        let _guard = self.lock()?;
        self.read_unlocked()
    }

    /// Read-modify-write under the lock; `f`'s result is returned after the write.
    pub fn update<T>(&self, f: impl FnOnce(&mut State) -> T) -> Result<T, StateError> {
        let _guard = self.lock()?;
        let mut state = self.read_unlocked()?;
        let out = f(&mut state);
        self.write_unlocked(&state)?;
        Ok(out)
    }
}

/// A 64-hex-digit id like CRI-O's.
pub fn new_id() -> String {
    let mut buf = [0u8; 32];
    let filled = File::open("/dev/urandom")
        .and_then(|mut f| io::Read::read_exact(&mut f, &mut buf))
        .is_ok();
    if !filled {
        // No /dev/urandom: fall back to time and pid, still unique enough for a test double.
        let seed = now_nanos() as u128 ^ ((std::process::id() as u128) << 64);
        buf[..16].copy_from_slice(&seed.to_le_bytes());
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// A running pod to seed: one ready sandbox with `containers` running containers.
#[derive(Debug, Clone)]
pub struct SeedPod {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub runtime_handler: String,
    pub containers: u32,
    pub ready: bool,
    /// See [`Sandbox::no_handler_annotation`].
    pub no_handler_annotation: bool,
}

/// Adds the pod; returns the sandbox id.
pub fn seed(store: &StateStore, pod: &SeedPod) -> Result<String, StateError> {
    let id = new_id();
    let now = now_nanos();
    let sandbox = Sandbox {
        id: id.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        namespace: pod.namespace.clone(),
        attempt: 0,
        state: if pod.ready {
            SandboxState::Ready
        } else {
            SandboxState::NotReady
        },
        created_at: now,
        labels: BTreeMap::from([
            ("io.kubernetes.pod.name".to_string(), pod.name.clone()),
            (
                "io.kubernetes.pod.namespace".to_string(),
                pod.namespace.clone(),
            ),
            ("io.kubernetes.pod.uid".to_string(), pod.uid.clone()),
        ]),
        annotations: BTreeMap::new(),
        runtime_handler: pod.runtime_handler.clone(),
        no_handler_annotation: pod.no_handler_annotation,
        definition: String::new(),
    };
    let containers: Vec<Container> = (0..pod.containers)
        .map(|i| Container {
            id: new_id(),
            pod_sandbox_id: id.clone(),
            name: format!("{}-c{i}", pod.name),
            attempt: 0,
            image: "registry.example/fake:latest".into(),
            state: if pod.ready {
                ContainerState::Running
            } else {
                ContainerState::Exited
            },
            created_at: now,
            labels: BTreeMap::from([
                (
                    "io.kubernetes.container.name".to_string(),
                    format!("{}-c{i}", pod.name),
                ),
                ("io.kubernetes.pod.name".to_string(), pod.name.clone()),
            ]),
            annotations: BTreeMap::new(),
        })
        .collect();
    store.update(|s| {
        s.sandboxes.push(sandbox);
        s.containers.extend(containers);
    })?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_persists_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        assert_eq!(store.read().unwrap(), State::default());
        let id = seed(
            &store,
            &SeedPod {
                name: "p".into(),
                namespace: "ns".into(),
                uid: "u".into(),
                runtime_handler: "kata-remote".into(),
                containers: 2,
                ready: true,
                no_handler_annotation: false,
            },
        )
        .unwrap();
        assert_eq!(id.len(), 64);
        let again = StateStore::open(dir.path()).unwrap().read().unwrap();
        assert_eq!(again.sandboxes.len(), 1);
        assert_eq!(again.sandboxes[0].runtime_handler, "kata-remote");
        assert_eq!(again.containers.len(), 2);
        assert!(again.containers.iter().all(|c| c.pod_sandbox_id == id));
    }

    #[test]
    fn corrupt_state_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(STATE_FILE), "{not json").unwrap();
        let err = StateStore::open(dir.path()).unwrap().read().unwrap_err();
        assert!(err.to_string().contains("state.json"), "{err}");
    }
}
