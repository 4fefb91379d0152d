//! An in-process fake of systemd's D-Bus Manager/Unit/Service interfaces, served over a zbus
//! peer-to-peer connection. It exists to test the waiting logic fast and deterministically
//! (signals before replies, foreign jobs, missing signals, unchanged identities); the real
//! behaviour is tested against the node's systemd.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kata_live::systemd::Systemd;
use zbus::object_server::SignalEmitter;
use zbus::{interface, OwnedObjectPath};

/// The state of the one unit the fake knows.
#[derive(Debug, Clone)]
pub struct FakeUnit {
    pub name: String,
    pub load_state: String,
    pub active_state: String,
    pub sub_state: String,
    pub result: String,
    pub invocation: [u8; 16],
    pub main_pid: u32,
    pub n_restarts: u32,
    pub can_reload: bool,
}

impl FakeUnit {
    pub fn running(name: &str, invocation: u8, pid: u32) -> Self {
        FakeUnit {
            name: name.to_string(),
            load_state: "loaded".into(),
            active_state: "active".into(),
            sub_state: "running".into(),
            result: "success".into(),
            invocation: [invocation; 16],
            main_pid: pid,
            n_restarts: 0,
            can_reload: false,
        }
    }
}

/// What the next job does.
#[derive(Debug, Clone)]
pub struct JobScript {
    /// The JobRemoved result; `None`: never send JobRemoved.
    pub result: Option<String>,
    /// The unit's state once the job is done.
    pub after: Option<FakeUnit>,
    /// Emit a JobRemoved of somebody else's job first.
    pub foreign_job_first: bool,
}

#[derive(Debug, Default)]
pub struct FakeState {
    pub units: HashMap<String, FakeUnit>,
    pub script: Option<JobScript>,
    pub calls: Vec<String>,
    next_job: u32,
}

pub type Shared = Arc<Mutex<FakeState>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, FakeState> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

fn unit_path(name: &str) -> String {
    let escaped: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("_{b:02x}")
            }
        })
        .collect();
    format!("/org/freedesktop/systemd1/unit/{escaped}")
}

struct Manager {
    state: Shared,
}

impl Manager {
    async fn job(
        &self,
        call: &str,
        name: String,
        emitter: &SignalEmitter<'_>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        let (id, script) = {
            let mut st = lock(&self.state);
            st.calls.push(format!("{call} {name}"));
            if !st.units.contains_key(&name) {
                return Err(zbus::fdo::Error::Failed(format!("no unit {name}")));
            }
            st.next_job += 2;
            let script = st.script.clone().unwrap_or(JobScript {
                result: Some("done".into()),
                after: None,
                foreign_job_first: false,
            });
            if let Some(after) = &script.after {
                st.units.insert(name.clone(), after.clone());
            }
            (st.next_job, script)
        };
        let job = format!("/org/freedesktop/systemd1/job/{id}");
        let path = OwnedObjectPath::try_from(job.as_str())?;
        if script.foreign_job_first {
            let other =
                OwnedObjectPath::try_from(format!("/org/freedesktop/systemd1/job/{}", id - 1))?;
            Self::job_removed(
                emitter,
                id - 1,
                other,
                "other.service".into(),
                "failed".into(),
            )
            .await?;
        }
        // Like systemd for jobs that finish at once: the signal goes out before the reply.
        if let Some(result) = script.result {
            Self::job_removed(emitter, id, path.clone(), name, result).await?;
        }
        Ok(path)
    }
}

#[interface(name = "org.freedesktop.systemd1.Manager")]
impl Manager {
    async fn subscribe(&self) {}

    async fn load_unit(&self, name: String) -> zbus::fdo::Result<OwnedObjectPath> {
        lock(&self.state).calls.push(format!("LoadUnit {name}"));
        OwnedObjectPath::try_from(unit_path(&name)).map_err(Into::into)
    }

    async fn restart_unit(
        &self,
        name: String,
        _mode: String,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        self.job("RestartUnit", name, &emitter).await
    }

    async fn start_unit(
        &self,
        name: String,
        _mode: String,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        self.job("StartUnit", name, &emitter).await
    }

    async fn stop_unit(
        &self,
        name: String,
        _mode: String,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        self.job("StopUnit", name, &emitter).await
    }

    async fn reload_unit(
        &self,
        name: String,
        _mode: String,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        self.job("ReloadUnit", name, &emitter).await
    }

    #[zbus(signal)]
    async fn job_removed(
        emitter: &SignalEmitter<'_>,
        id: u32,
        job: OwnedObjectPath,
        unit: String,
        result: String,
    ) -> zbus::Result<()>;

    #[zbus(property)]
    fn version(&self) -> String {
        "fake-252".to_string()
    }
}

/// One unit object: its Unit interface.
struct UnitObj {
    state: Shared,
    name: String,
}

impl UnitObj {
    fn get(&self) -> FakeUnit {
        lock(&self.state)
            .units
            .get(&self.name)
            .cloned()
            .unwrap_or_else(|| FakeUnit {
                load_state: "not-found".into(),
                active_state: "inactive".into(),
                sub_state: "dead".into(),
                result: String::new(),
                invocation: [0; 16],
                ..FakeUnit::running(&self.name, 0, 0)
            })
    }
}

#[interface(name = "org.freedesktop.systemd1.Unit")]
impl UnitObj {
    #[zbus(property)]
    fn load_state(&self) -> String {
        self.get().load_state
    }
    #[zbus(property)]
    fn active_state(&self) -> String {
        self.get().active_state
    }
    #[zbus(property)]
    fn sub_state(&self) -> String {
        self.get().sub_state
    }
    #[zbus(property, name = "InvocationID")]
    fn invocation_id(&self) -> Vec<u8> {
        self.get().invocation.to_vec()
    }
    #[zbus(property)]
    fn can_reload(&self) -> bool {
        self.get().can_reload
    }
}

/// The same unit's Service interface.
struct ServiceObj(UnitObj);

#[interface(name = "org.freedesktop.systemd1.Service")]
impl ServiceObj {
    #[zbus(property)]
    fn result(&self) -> String {
        self.0.get().result
    }
    #[zbus(property, name = "MainPID")]
    fn main_pid(&self) -> u32 {
        self.0.get().main_pid
    }
    #[zbus(property, name = "NRestarts")]
    fn n_restarts(&self) -> u32 {
        self.0.get().n_restarts
    }
    #[zbus(property)]
    fn exec_main_start_timestamp(&self) -> u64 {
        1
    }
    #[zbus(property)]
    fn status_text(&self) -> String {
        String::new()
    }
    #[zbus(property)]
    fn exec_main_code(&self) -> i32 {
        0
    }
    #[zbus(property)]
    fn exec_main_status(&self) -> i32 {
        0
    }
}

/// The unit object's `org.freedesktop.DBus.Properties`, in place of zbus's: like sd-bus,
/// `GetAll("")` answers every interface's properties in one reply (kata-live reads a unit's
/// state that way, one moment's state); zbus's own refuses the empty interface name.
struct UnitProps(UnitObj);

impl UnitProps {
    fn unit(&self, u: &FakeUnit) -> Vec<(&'static str, zbus::Variant<'static>)> {
        vec![
            ("LoadState", u.load_state.clone().into()),
            ("ActiveState", u.active_state.clone().into()),
            ("SubState", u.sub_state.clone().into()),
            ("InvocationID", u.invocation.to_vec().into()),
            ("CanReload", u.can_reload.into()),
        ]
    }
    fn service(&self, u: &FakeUnit) -> Vec<(&'static str, zbus::Variant<'static>)> {
        vec![
            ("Result", u.result.clone().into()),
            ("MainPID", u.main_pid.into()),
            ("NRestarts", u.n_restarts.into()),
            ("ExecMainStartTimestamp", 1u64.into()),
            ("StatusText", String::new().into()),
            ("ExecMainCode", 0i32.into()),
            ("ExecMainStatus", 0i32.into()),
        ]
    }
}

#[interface(name = "org.freedesktop.DBus.Properties")]
impl UnitProps {
    async fn get_all(
        &self,
        interface_name: String,
    ) -> zbus::fdo::Result<HashMap<String, zbus::OwnedVariant>> {
        let u = self.0.get();
        let props = match interface_name.as_str() {
            "" => [self.unit(&u), self.service(&u)].concat(),
            "org.freedesktop.systemd1.Unit" => self.unit(&u),
            "org.freedesktop.systemd1.Service" => self.service(&u),
            other => {
                return Err(zbus::fdo::Error::UnknownInterface(format!(
                    "Unknown interface '{other}'"
                )))
            }
        };
        props
            .into_iter()
            .map(|(k, v)| {
                zbus::OwnedVariant::try_from(v)
                    .map(|v| (k.to_string(), v))
                    .map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
            })
            .collect()
    }
}

/// A running fake and a [`Systemd`] client connected to it.
pub struct Fake {
    pub state: Shared,
    pub client: Systemd,
    _server: zbus::Connection,
}

impl Fake {
    /// Serve `unit_names` (their state set through [`Fake::state`]).
    pub async fn start(units: Vec<FakeUnit>) -> Fake {
        let state: Shared = Arc::default();
        {
            let mut st = lock(&state);
            for u in &units {
                st.units.insert(u.name.clone(), u.clone());
            }
        }
        let (s0, s1) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let mut server = zbus::connection::Builder::unix_stream(s0)
            .server(zbus::Guid::generate())
            .p2p()
            .serve_at(
                "/org/freedesktop/systemd1",
                Manager {
                    state: state.clone(),
                },
            );
        let mut names: Vec<String> = units.iter().map(|u| u.name.clone()).collect();
        names.push("missing.service".to_string());
        for name in &names {
            server = server
                .serve_at(
                    unit_path(name),
                    UnitObj {
                        state: state.clone(),
                        name: name.clone(),
                    },
                )
                .serve_at(
                    unit_path(name),
                    ServiceObj(UnitObj {
                        state: state.clone(),
                        name: name.clone(),
                    }),
                );
        }
        let client = zbus::connection::Builder::unix_stream(s1).p2p();
        let (server, client) = tokio::join!(server.build(), client.build());
        let server = server.expect("fake server");
        for name in &names {
            let objects = server.object_server();
            objects
                .remove::<zbus::fdo::Properties, _>(unit_path(name))
                .await
                .expect("drop zbus's Properties");
            objects
                .at(
                    unit_path(name),
                    UnitProps(UnitObj {
                        state: state.clone(),
                        name: name.clone(),
                    }),
                )
                .await
                .expect("serve the unit's Properties");
        }
        Fake {
            state,
            client: Systemd::from_connection(client.expect("fake client"), "fake p2p"),
            _server: server,
        }
    }

    pub fn script(&self, script: JobScript) {
        lock(&self.state).script = Some(script);
    }

    pub fn calls(&self) -> Vec<String> {
        lock(&self.state).calls.clone()
    }
}
