//! The [`Systemd`] connection: which system bus, connecting to it, and the Manager proxy
//! that every call goes through.

use std::time::Duration;

use zbus::proxy::CacheProperties;
use zbus::Connection;
use zbus_systemd::systemd1::ManagerProxy;

use super::{jobs, SystemdError};

/// Where the system bus lives when `DBUS_SYSTEM_BUS_ADDRESS` is not set.
pub const DEFAULT_SYSTEM_BUS_ADDRESS: &str = "unix:path=/run/dbus/system_bus_socket";

/// systemd's bus name.
pub(super) const SYSTEMD_DEST: &str = "org.freedesktop.systemd1";

/// A connection to systemd. Cheap to clone (the connection is shared).
#[derive(Clone, Debug)]
pub struct Systemd {
    pub(super) conn: Connection,
    addr: String,
}

/// Which bus to reach systemd at. `--bus-address` always wins. Then a non-empty
/// `DBUS_SYSTEM_BUS_ADDRESS`, then the host's standard socket, but under a `root` that is not
/// the host's `/` neither may name the host's own bus: every file path moves with the root
/// and that bus would not, so a run meant for `root` would restart the real host's CRI-O. An
/// inherited variable is not a decision the operator made for this run (a debug shell
/// exports the host's address), so it is refused there too.
pub fn choose_bus_address(
    root: &std::path::Path,
    option: Option<&str>,
    env: Option<&str>,
) -> Result<String, SystemdError> {
    if let Some(addr) = option.filter(|a| !a.is_empty()) {
        return Ok(addr.to_string());
    }
    let env = env.filter(|a| !a.is_empty());
    // `/host` may be a symlink to `/`: that is the host's own root.
    let resolved = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    if resolved == std::path::Path::new("/") {
        return Ok(env.unwrap_or(DEFAULT_SYSTEM_BUS_ADDRESS).to_string());
    }
    match env {
        Some(addr) if !names_host_bus(addr) => Ok(addr.to_string()),
        Some(addr) => Err(SystemdError::HostBusUnderRoot {
            root: root.to_path_buf(),
            given: format!(
                "DBUS_SYSTEM_BUS_ADDRESS={addr} (inherited) names the host's own bus, which \
                 --root does not move (only --bus-address overrides this)"
            ),
        }),
        None => Err(SystemdError::HostBusUnderRoot {
            root: root.to_path_buf(),
            given: "no bus address was given".to_string(),
        }),
    }
}

/// Whether a D-Bus address is the host's standard system bus socket (`/var/run` is `/run`).
fn names_host_bus(addr: &str) -> bool {
    addr.split(';').any(|one| {
        one.strip_prefix("unix:").is_some_and(|kv| {
            kv.split(',').any(|p| {
                matches!(
                    p.strip_prefix("path="),
                    Some("/run/dbus/system_bus_socket" | "/var/run/dbus/system_bus_socket")
                )
            })
        })
    })
}

impl Systemd {
    /// Connect to the system bus: `DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket.
    pub async fn system() -> Result<Self, SystemdError> {
        let addr = std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
            .ok()
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| DEFAULT_SYSTEM_BUS_ADDRESS.to_string());
        Self::at_address(&addr).await
    }

    /// Connect to the bus at `addr` and check that systemd answers there.
    pub async fn at_address(addr: &str) -> Result<Self, SystemdError> {
        let no_bus = |source| SystemdError::NoBus {
            addr: addr.to_string(),
            source,
        };
        let conn = zbus::connection::Builder::address(addr)
            .method_timeout(Duration::from_secs(30))
            .build()
            .await
            .map_err(no_bus)?;
        let sd = Systemd {
            conn,
            addr: addr.to_string(),
        };
        sd.version().await.map_err(|e| match e {
            SystemdError::Dbus { source, .. } => no_bus(source),
            other => other,
        })?;
        Ok(sd)
    }

    /// Wrap an existing connection (a peer-to-peer connection to a test double, for example).
    pub fn from_connection(conn: Connection, label: &str) -> Self {
        Systemd {
            conn,
            addr: label.to_string(),
        }
    }

    /// The bus address we talk to.
    pub fn address(&self) -> &str {
        &self.addr
    }

    /// systemd's version string (the Manager's `Version` property, read afresh: the proxy
    /// caches nothing). Through the Manager proxy, so that the connection needs nothing of
    /// the property reads built on it (`properties.rs`).
    pub async fn version(&self) -> Result<String, SystemdError> {
        self.manager()
            .await?
            .version()
            .await
            .map_err(|e| jobs::map_call_error("", "Version", e))
    }

    pub(crate) async fn manager(&self) -> Result<ManagerProxy<'static>, SystemdError> {
        ManagerProxy::builder(&self.conn)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|source| SystemdError::Dbus {
                unit: String::new(),
                call: "ManagerProxy",
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn host_root_uses_the_standard_bus_unless_told_otherwise() {
        let d = choose_bus_address(Path::new("/"), None, None).unwrap();
        assert_eq!(d, DEFAULT_SYSTEM_BUS_ADDRESS);
        let e = choose_bus_address(Path::new("/"), None, Some("unix:path=/x")).unwrap();
        assert_eq!(e, "unix:path=/x");
        let o = choose_bus_address(Path::new("/"), Some("unix:path=/o"), Some("unix:path=/x"));
        assert_eq!(o.unwrap(), "unix:path=/o");
    }

    #[test]
    fn another_root_refuses_the_host_bus_without_an_explicit_address() {
        let r = tempfile::tempdir().unwrap();
        let err = choose_bus_address(r.path(), None, None).unwrap_err();
        assert!(
            matches!(err, SystemdError::HostBusUnderRoot { .. }),
            "{err}"
        );
        let msg = err.to_string();
        assert!(msg.contains("--bus-address"), "{msg}");
        assert!(msg.contains("DBUS_SYSTEM_BUS_ADDRESS"), "{msg}");
        // An empty variable is no address.
        assert!(choose_bus_address(r.path(), None, Some("")).is_err());
        // An inherited variable naming the host's own bus is refused under another root;
        // --bus-address can still say so on purpose.
        for host in [
            DEFAULT_SYSTEM_BUS_ADDRESS,
            "unix:path=/var/run/dbus/system_bus_socket",
            "unix:guid=x,path=/run/dbus/system_bus_socket",
        ] {
            let e = choose_bus_address(r.path(), None, Some(host)).unwrap_err();
            assert!(e.to_string().contains("(inherited)"), "{e}");
            assert_eq!(
                choose_bus_address(r.path(), Some(host), None).unwrap(),
                host
            );
            assert_eq!(
                choose_bus_address(Path::new("/"), None, Some(host)).unwrap(),
                host
            );
        }
        assert!(choose_bus_address(r.path(), Some(""), None).is_err());
        let ok = choose_bus_address(r.path(), None, Some("unix:path=/n")).unwrap();
        assert_eq!(ok, "unix:path=/n");
        assert_eq!(
            choose_bus_address(r.path(), Some("unix:path=/o"), None).unwrap(),
            "unix:path=/o"
        );
    }

    #[test]
    fn a_symlink_to_the_host_root_is_the_host_root() {
        let r = tempfile::tempdir().unwrap();
        let link = r.path().join("host");
        std::os::unix::fs::symlink("/", &link).unwrap();
        assert_eq!(
            choose_bus_address(&link, None, None).unwrap(),
            DEFAULT_SYSTEM_BUS_ADDRESS
        );
    }
}
