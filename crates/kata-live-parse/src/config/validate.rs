//! Validation: every value checked before anything runs, the error naming the fragment
//! and key that set it.

use super::*;

/// A DNS-1123 label, as Kubernetes requires of a RuntimeClass handler.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// CRI-O's `RuntimeTypeVMBinaryPattern`, `containerd-shim-([a-zA-Z0-9\-\+])+-v2`, matched
/// as CRI-O does (`regexp.MatchString`: unanchored) against the binary's file name.
pub fn is_shim_binary_name(name: &str) -> bool {
    let class = |c: &u8| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'+';
    let b = name.as_bytes();
    let pre = b"containerd-shim-";
    (0..b.len()).any(|i| {
        b[i..].starts_with(pre) && {
            let rest = &b[i + pre.len()..];
            let run = rest.iter().take_while(|c| class(c)).count();
            (1..=run).any(|j| rest[j..].starts_with(b"-v2"))
        }
    })
}

/// The directory CRI-O reads drop-ins from (besides crio.conf, it reads nothing else).
pub const CRIO_DROP_IN_DIR: &str = "/etc/crio/crio.conf.d";

/// Why `p` is not a plain file name directly inside [`CRIO_DROP_IN_DIR`], if it is not.
pub fn drop_in_problem(p: &Path) -> Option<String> {
    let text = p.to_string_lossy();
    let Some(name) = text
        .strip_prefix(CRIO_DROP_IN_DIR)
        .and_then(|r| r.strip_prefix('/'))
    else {
        return Some(format!(
            "{text:?} is not in {CRIO_DROP_IN_DIR}/, the only directory CRI-O reads drop-ins from"
        ));
    };
    let plain = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'+'));
    (!plain).then(|| {
        format!(
            "{text:?}: the drop-in must be a plain file name directly in {CRIO_DROP_IN_DIR}/ (letters, digits, '-', '_', '.', '+'; no '/', no leading '.'), e.g. {CRIO_DROP_IN_DIR}/50-kata-remote"
        )
    })
}

/// docker/go-units `RAMInBytes`, which CRI-O applies to `container_min_memory`: a number, an
/// optional space, then an optional unit `b`, `k`, `kb`, `kib` … `p`, `pb`, `pib` in any case,
/// all binary multiples ("12MiB", "12m", "12 mb", "1024"). Stricter than Go on the number
/// only: plain decimal digits with at most one '.' (Go's ParseFloat also takes "1e3").
pub fn parse_ram_size(s: &str) -> Option<u64> {
    let sep = s.rfind(|c: char| c.is_ascii_digit() || c == '.' || c == ' ')?;
    let (num, sfx) = if s.as_bytes()[sep] == b' ' {
        (&s[..sep], &s[sep + 1..])
    } else {
        (&s[..=sep], &s[sep + 1..])
    };
    let decimal = num.bytes().any(|c| c.is_ascii_digit())
        && num.bytes().all(|c| c.is_ascii_digit() || c == b'.')
        && num.bytes().filter(|c| *c == b'.').count() <= 1;
    if !decimal {
        return None;
    }
    let size: f64 = num.parse().ok()?;
    let sfx = sfx.to_ascii_lowercase();
    let mul: f64 = match sfx.as_bytes() {
        [] | [b'b'] => 1.0,
        [u, rest @ ..] => {
            let exp = match u {
                b'k' => 1,
                b'm' => 2,
                b'g' => 3,
                b't' => 4,
                b'p' => 5,
                _ => return None,
            };
            if !matches!(rest, [] | [b'b'] | [b'i', b'b']) {
                return None;
            }
            1024f64.powi(exp)
        }
    };
    let bytes = size * mul;
    (bytes.is_finite() && bytes < 9.2e18).then_some(bytes as u64)
}

/// Why `url` is not plain http to a loopback address, if it is not: the units only allow
/// loopback traffic (`IPAddressAllow=localhost`), so anything else could never be reached.
pub fn loopback_http_problem(url: &str) -> Option<String> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Some(format!("{url:?}: only plain http:// URLs are supported"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Some(format!("{url:?}: no user name or password in the URL"));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((h, p)) => (h, p),
            None => return Some(format!("{url:?}: unterminated [IPv6] address")),
        },
        None => match authority.rfind(':') {
            Some(i) => (&authority[..i], &authority[i..]),
            None => (authority, ""),
        },
    };
    if !port.is_empty() {
        let ok = port
            .strip_prefix(':')
            .filter(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|p| p.parse::<u16>().ok())
            .is_some_and(|p| p > 0);
        if !ok {
            return Some(format!("{url:?}: bad port {port:?}"));
        }
    }
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Some(format!(
            "{url:?}: host {host:?} is not a loopback address (127.0.0.0/8, [::1] or localhost); kata-live's units only allow loopback traffic"
        ));
    }
    if url.parse::<http::Uri>().is_err() {
        return Some(format!("{url:?} is not a valid URL"));
    }
    None
}

/// An SELinux boolean name as policies spell them (`container_use_devices`).
pub fn is_selinux_boolean_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 255 && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// An SELinux module name as `semodule -l` lists it.
pub fn is_selinux_module_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}

const UNIT_SUFFIXES: [&str; 11] = [
    "service",
    "socket",
    "target",
    "timer",
    "path",
    "mount",
    "automount",
    "swap",
    "slice",
    "scope",
    "device",
];

/// A systemd unit name (`NAME.TYPE`, NAME of `[A-Za-z0-9:_.\@-]`, at most 255 bytes).
pub fn is_unit_name(s: &str) -> bool {
    let Some((name, suffix)) = s.rsplit_once('.') else {
        return false;
    };
    !name.is_empty()
        && s.len() <= 255
        && UNIT_SUFFIXES.contains(&suffix)
        && name.bytes().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, b':' | b'_' | b'.' | b'\\' | b'@' | b'-')
        })
}

/// CRI-O's `AllAllowedAnnotations` (pkg/annotations, CRI-O 1.37): an `allowed_annotations`
/// entry outside it makes CRI-O ignore the whole handler ("invalid allowed_annotation").
pub const CRIO_ALLOWED_ANNOTATIONS: [&str; 27] = [
    "io.kubernetes.cri-o.userns-mode",
    "io.kubernetes.cri-o.cgroup2-mount-hierarchy-rw",
    "io.kubernetes.cri-o.UnifiedCgroup",
    "io.kubernetes.cri-o.ShmSize",
    "io.kubernetes.cri-o.Devices",
    "cpu-load-balancing.crio.io",
    "cpu-quota.crio.io",
    "irq-load-balancing.crio.io",
    "io.containers.trace-syscall",
    "io.kubernetes.cri.rdt-class",
    "io.kubernetes.cri-o.TrySkipVolumeSELinuxLabel",
    "cpu-c-states.crio.io",
    "cpu-freq-governor.crio.io",
    "io.kubernetes.cri-o.seccompNotifierAction",
    "io.kubernetes.cri-o.umask",
    "io.kubernetes.cri-o.PodLinuxOverhead",
    "io.kubernetes.cri-o.PodLinuxResources",
    "io.kubernetes.cri-o.LinkLogs",
    "cpu-shared.crio.io",
    "seccomp-profile.kubernetes.cri-o.io",
    "io.kubernetes.cri-o.DisableFIPS",
    "bundle",
    "org.systemd.property.",
    "org.criu.config",
    "module.wasm.image/variant",
    "io.kubernetes.cri.container-type",
    "run.oci.",
];

impl Loaded {
    /// Of `keys`, the one set last (by fragment order) and where: the fragment to blame for
    /// a rule that involves several keys.
    pub(super) fn last_set<'k>(&self, keys: &[&'k str]) -> (&'k str, Source) {
        let rank = |s: &Source| match s {
            Source::Default => None,
            Source::File(p) => self.fragments.iter().position(|f| f == p),
        };
        let mut best = (keys[0], self.source_of(keys[0]));
        for k in &keys[1..] {
            let s = self.source_of(k);
            if rank(&s) > rank(&best.1) {
                best = (k, s);
            }
        }
        best
    }
}

pub(super) fn check(l: &Loaded) -> Result<(), ConfigError> {
    let c = &l.config;
    let err = |key: &str, msg: String| Err(ConfigError::key(&l.source_of(key), key, msg));

    if !is_dns1123_label(&c.handler.name) {
        return err(
            "handler.name",
            format!(
                "{:?} is not a DNS-1123 label (lower-case letters, digits and '-', 1 to 63 characters, starting and ending alphanumeric)",
                c.handler.name
            ),
        );
    }
    // The grace counts within the restart's deadline: at or past it, it could never act.
    if c.activation.stop_grace >= c.deadlines.restart {
        let (key, src) = l.last_set(&["activation.stop_grace", "deadlines.restart"]);
        return Err(ConfigError::key(
            &src,
            key,
            format!(
                "activation.stop_grace {} is at or past deadlines.restart ({}): the runtime's \
                 held stop could never be cut within the restart. Set activation.stop_grace \
                 below deadlines.restart (or raise deadlines.restart)",
                crate::words::secs(c.activation.stop_grace),
                crate::words::secs(c.deadlines.restart)
            ),
        ));
    }
    let mut paths: Vec<(&str, &Path)> = vec![
        ("handler.drop_in", &c.handler.drop_in),
        ("handler.crio.runtime_path", &c.handler.crio.runtime_path),
        ("handler.crio.runtime_root", &c.handler.crio.runtime_root),
        ("package.rpm_ostree", &c.package.rpm_ostree),
        ("package.rpm", &c.package.rpm),
        ("cri.socket", &c.cri.socket),
        ("post_install.selinuxfs", &c.post_install.selinuxfs),
    ];
    if let Some(p) = &c.handler.crio.runtime_config_path {
        paths.push(("handler.crio.runtime_config_path", p));
    }
    if let Some(p) = &c.package.local_rpm_dir {
        paths.push(("package.local_rpm_dir", p));
    }
    if let Some(p) = &c.metrics.textfile_dir {
        paths.push(("metrics.textfile_dir", p));
    }
    for (i, m) in c.post_install.selinux_modules.iter().enumerate() {
        if !is_selinux_module_name(&m.name) {
            return err(
                "post_install.selinux_modules",
                format!(
                    "entry {i}: {:?} is not an SELinux module name (letters, digits, '_', '-', '.')",
                    m.name
                ),
            );
        }
        if !m.path.is_absolute() {
            return err(
                "post_install.selinux_modules",
                format!("entry {i}: path {:?} must be absolute", m.path),
            );
        }
    }
    for name in c.post_install.selinux_booleans.keys() {
        if !is_selinux_boolean_name(name) {
            return err(
                &format!("post_install.selinux_booleans.{name}"),
                format!("{name:?} is not an SELinux boolean name (letters, digits and '_')"),
            );
        }
    }
    for u in &c.post_install.units {
        if !is_unit_name(u) {
            return err(
                "post_install.units",
                format!("{u:?} is not a systemd unit name (e.g. kata-image.service)"),
            );
        }
    }
    for p in &c.post_install.tmpfiles {
        if !p.is_absolute() {
            return err(
                "post_install.tmpfiles",
                format!("{p:?} must be an absolute path"),
            );
        }
    }
    for (key, p) in paths {
        if !p.is_absolute() {
            return err(key, format!("{p:?} must be an absolute path"));
        }
    }
    if let Some(problem) = drop_in_problem(&c.handler.drop_in) {
        return err("handler.drop_in", problem);
    }
    validate_crio_table(l, "handler", &c.handler.crio)?;
    validate_containerd(l)?;
    super::handlers::check_set(l)?;
    if !c.package.skip && c.package.names.is_empty() && c.package.local_rpm_dir.is_none() {
        return err(
            "package.names",
            "no package to install: list names, set local_rpm_dir, or set package.skip = true"
                .into(),
        );
    }
    for (key, unit) in [
        ("units.crio", &c.units.crio),
        ("units.kubelet", &c.units.kubelet),
        ("containerd.unit", &c.containerd.unit),
    ] {
        if !is_unit_name(unit) {
            return err(
                key,
                format!("{unit:?} is not a systemd unit name (e.g. crio.service)"),
            );
        }
    }
    for (key, url) in [
        ("kubelet.healthz_url", &c.kubelet.healthz_url),
        ("kubelet.crio_metrics_url", &c.kubelet.crio_metrics_url),
    ] {
        if let Some(problem) = loopback_http_problem(url) {
            return err(key, problem);
        }
    }
    Ok(())
}

/// containerd's part: where its files are, and a handler table containerd would load.
fn validate_containerd(l: &Loaded) -> Result<(), ConfigError> {
    let c = &l.config;
    let d = &c.containerd;
    let err = |key: &str, msg: String| Err(ConfigError::key(&l.source_of(key), key, msg));
    for (key, p) in [
        ("containerd.config", &d.config),
        ("containerd.drop_in", &d.drop_in),
        ("containerd.socket", &d.socket),
    ] {
        if !p.is_absolute() {
            return err(key, format!("{p:?} must be an absolute path"));
        }
    }
    containerd_drop_in_check(l, "containerd.drop_in", &d.drop_in)?;
    validate_containerd_table(l, "handler", &c.handler.containerd)?;
    if c.runtime == Some(RuntimeKind::Containerd)
        && c.activation.strategy == ActivationStrategy::ReloadWithCanary
    {
        let (key, src) = l.last_set(&["activation.strategy", "runtime"]);
        return Err(ConfigError::key(
            &src,
            key,
            "containerd has no configuration reload (it reads its runtimes only at start): use strategy = \"restart\"",
        ));
    }
    Ok(())
}

/// A containerd drop-in (`key` names it) that containerd reads through the import.
pub(super) fn containerd_drop_in_check(
    l: &Loaded,
    key: &str,
    drop_in: &Path,
) -> Result<(), ConfigError> {
    let d = &l.config.containerd;
    let err = |key: &str, msg: String| Err(ConfigError::key(&l.source_of(key), key, msg));
    let name = drop_in
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let plain = name.ends_with(".toml")
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'+'));
    if !plain || drop_in.components().any(|c| c.as_os_str() == "..") {
        return err(
            key,
            format!("{drop_in:?}: the drop-in must be a plain *.toml file name (letters, digits, '-', '_', '.', '+'), e.g. /etc/containerd/conf.d/50-kata-remote.toml"),
        );
    }
    if drop_in == d.config {
        return err(key, "the drop-in cannot be containerd's main file".into());
    }
    let covers = d.import.starts_with('/')
        && crate::pathglob::matches(&d.import, &drop_in.to_string_lossy());
    if !covers {
        let (key, src) = l.last_set(&["containerd.import", key]);
        return Err(ConfigError::key(
            &src,
            key,
            format!(
                "the import {:?} must be an absolute path or glob that matches the drop-in {:?} (containerd reads a drop-in only through imports)",
                d.import, drop_in
            ),
        ));
    }
    Ok(())
}

/// A containerd runtime table (`prefix`.containerd) containerd would load.
pub(super) fn validate_containerd_table(
    l: &Loaded,
    prefix: &str,
    t: &ContainerdRuntime,
) -> Result<(), ConfigError> {
    let err = |key: &str, msg: String| {
        let key = format!("{prefix}.containerd.{key}");
        Err(ConfigError::key(&l.source_of(&key), &key, msg))
    };
    let shim = t
        .runtime_type
        .strip_prefix("io.containerd.")
        .and_then(|r| r.rsplit_once(".v"))
        .filter(|(n, v)| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'_'))
                && !v.is_empty()
                && v.bytes().all(|b| b.is_ascii_digit())
        });
    if shim.is_none() {
        return err(
            "runtime_type",
            format!(
                "{:?} is not a containerd runtime type io.containerd.NAME.vN (e.g. io.containerd.kata-remote.v2: containerd then runs containerd-shim-kata-remote-v2)",
                t.runtime_type
            ),
        );
    }
    if let Some(p) = &t.runtime_path {
        if !p.starts_with('/') {
            return err("runtime_path", format!("{p:?} must be an absolute path"));
        }
    }
    if let Some(a) = t.pod_annotations.iter().find(|a| a.trim().is_empty()) {
        return err("pod_annotations", format!("{a:?}: an empty pattern"));
    }
    Ok(())
}

/// CRI-O's `RuntimeHandler.Validate` for every key kata-live writes: a table CRI-O would
/// ignore ("Runtime handler … is being ignored") is refused here instead.
pub(super) fn validate_crio_table(
    l: &Loaded,
    prefix: &str,
    t: &CrioRuntime,
) -> Result<(), ConfigError> {
    let k = |key: &str| format!("{prefix}.crio.{key}");
    let err = |key: &str, msg: String| {
        let key = k(key);
        Err(ConfigError::key(&l.source_of(&key), &key, msg))
    };
    let kind = match t.runtime_type {
        RuntimeType::Oci => "oci",
        RuntimeType::Vm => "vm",
        RuntimeType::Pod => "pod",
    };
    if t.runtime_type == RuntimeType::Vm {
        let name = t
            .runtime_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !is_shim_binary_name(&name) {
            let (path, kind) = (k("runtime_path"), k("runtime_type"));
            let (key, src) = l.last_set(&[&path, &kind]);
            return Err(ConfigError::key(
                &src,
                key,
                format!("runtime_type \"vm\" needs a binary named containerd-shim-NAME-v2 (CRI-O's naming rule), got {name:?}"),
            ));
        }
    } else if t.runtime_config_path.is_some() {
        let (_, src) = l.last_set(&[&k("runtime_config_path"), &k("runtime_type")]);
        return Err(ConfigError::key(
            &src,
            &k("runtime_config_path"),
            format!("runtime_config_path can only be used with the 'vm' runtime type, not {kind:?} (CRI-O would ignore the handler); set runtime_config_path = \"\" to leave it out"),
        ));
    }
    for a in &t.allowed_annotations {
        if !CRIO_ALLOWED_ANNOTATIONS.contains(&a.as_str()) {
            return err(
                "allowed_annotations",
                format!("{a:?} is not an annotation CRI-O accepts (CRI-O would ignore the handler: invalid allowed_annotation)"),
            );
        }
    }
    if let Some(m) = &t.container_min_memory {
        if parse_ram_size(m).is_none() {
            return err(
                "container_min_memory",
                format!("{m:?} is not a size CRI-O reads (e.g. \"12MiB\", \"12m\", \"12582912\"); \"\" leaves CRI-O's default"),
            );
        }
    }
    Ok(())
}
