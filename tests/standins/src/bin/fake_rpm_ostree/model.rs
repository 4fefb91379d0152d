//! fake-rpm-ostree's pieces of data: the command line's options as each client checks them,
//! deployments and package maps as `status --json` holds them, local RPMs read from their
//! header, and the package diff a live apply prints.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;

use serde_json::{json, Value};
use sha2::Digest;

use super::{nevra_name, Res};

pub(super) fn is_local(arg: &str) -> bool {
    arg.ends_with(".rpm") || arg.starts_with("file://")
}

/// The options of a mutating command, as its client checks them.
pub(super) fn client_opts(cmd: &str, rest: &[String]) -> Res<Opts> {
    let o = match cmd {
        "install" => parse_opts(
            rest,
            &[
                "--idempotent",
                "--allow-inactive",
                "--apply-live",
                "--assumeyes",
                "--cache-only",
                "--dry-run",
            ],
            &["--uninstall"],
        )?,
        "uninstall" => parse_opts(rest, &["--idempotent", "--assumeyes"], &[])?,
        // The stand-in's words: the real client's texts for a bad REVISION are not recorded.
        "deploy" => {
            let o = parse_opts(rest, &[], &[])?;
            if o.operands.len() != 1 {
                return Err("deploy takes one REVISION (an OS commit of the repo)".into());
            }
            return Ok(o);
        }
        _ => parse_opts(rest, &["--allow-replacement", "--reset"], &["--target"])?,
    };
    if cmd != "apply-live" && o.operands.is_empty() {
        return Err("At least one PACKAGE must be specified".into());
    }
    Ok(o)
}

/// Copies what `file` gained since `from` to `to`; returns the new offset.
pub(super) fn relay(file: &Path, from: u64, to: &mut dyn Write) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(file) else {
        return from;
    };
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_err() || f.read_to_end(&mut buf).is_err() {
        return from;
    }
    let _ = to.write_all(&buf);
    let _ = to.flush();
    from + buf.len() as u64
}

pub(super) fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// What a deployment's tree carries: package name → its NEVRA (local RPMs) or its name
/// (packages by name, which have no version here).
pub(super) fn pkg_map(d: &Value) -> BTreeMap<String, String> {
    let mut m: BTreeMap<String, String> = strs(&d["packages"])
        .into_iter()
        .chain(strs(&d["requested-packages"]))
        .map(|n| (n.clone(), n))
        .collect();
    for nevra in strs(&d["requested-local-packages"]) {
        m.insert(nevra_name(&nevra), nevra);
    }
    m
}

pub(super) fn deployment(checksum: &str, booted: bool, staged: bool) -> Value {
    json!({
        "id": format!("rhcos-{checksum}.0"),
        "osname": "rhcos",
        "checksum": checksum,
        "serial": 0,
        "booted": booted,
        "staged": staged,
        "pinned": false,
        "unlocked": "none",
        "version": "416.94.202410211619-0",
        "timestamp": 1_729_527_600u64,
        "requested-packages": [],
        "packages": [],
        "requested-local-packages": [],
        "base-removals": [],
        "requested-base-removals": [],
        "base-local-replacements": [],
        "requested-base-local-replacements": [],
        "initramfs-etc": [],
        "regenerate-initramfs": false,
    })
}

/// A local RPM as rpm-ostree reads it: from its header, never from its file name.
pub(super) struct LocalRpm {
    pub(super) nevra: String,
    pub(super) name: String,
    pub(super) sha256: String,
}

/// `arg` as given on the command line (for the words), read from `file` (the client's copy).
pub(super) fn read_local_rpm(arg: &str, file: &Path) -> Res<LocalRpm> {
    let path = arg.strip_prefix("file://").unwrap_or(arg);
    let bytes = std::fs::read(file).map_err(|e| format!("Opening {path}: {e}"))?;
    let meta = rpm::PackageMetadata::parse(&mut std::io::Cursor::new(&bytes))
        .map_err(|e| format!("Failed to read package {path}: {e}"))?;
    let field = |r: Result<&str, rpm::Error>| {
        r.map(str::to_string)
            .map_err(|e| format!("Failed to read package {path}: {e}"))
    };
    let name = field(meta.get_name())?;
    let epoch = match meta.get_epoch() {
        Ok(0) | Err(_) => String::new(),
        Ok(e) => format!("{e}:"),
    };
    let nevra = format!(
        "{name}-{epoch}{}-{}.{}",
        field(meta.get_version())?,
        field(meta.get_release())?,
        field(meta.get_arch())?
    );
    let sha256 = format!("{:x}", sha2::Sha256::digest(&bytes));
    Ok(LocalRpm {
        nevra,
        name,
        sha256,
    })
}

pub(super) struct Opts {
    pub(super) flags: BTreeSet<String>,
    pub(super) values: BTreeMap<String, Vec<String>>,
    pub(super) operands: Vec<String>,
}

impl Opts {
    pub(super) fn value(&self, key: &str) -> Option<String> {
        self.values.get(key).and_then(|v| v.last()).cloned()
    }
    pub(super) fn all(&self, key: &str) -> Vec<String> {
        self.values.get(key).cloned().unwrap_or_default()
    }
}

pub(super) fn parse_opts(args: &[String], allowed: &[&str], with_value: &[&str]) -> Res<Opts> {
    let mut o = Opts {
        flags: BTreeSet::new(),
        values: BTreeMap::new(),
        operands: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let long = match a.as_str() {
            "-A" => "--apply-live",
            "-y" => "--assumeyes",
            "-C" => "--cache-only",
            s => s,
        };
        if with_value.contains(&long) {
            let v = it
                .next()
                .ok_or(format!("Missing argument for {long}"))?
                .clone();
            o.values.entry(long.to_string()).or_default().push(v);
        } else if let Some((k, v)) = long.split_once('=').filter(|(k, _)| with_value.contains(k)) {
            o.values
                .entry(k.to_string())
                .or_default()
                .push(v.to_string());
        } else if long.starts_with('-') {
            if !allowed.contains(&long) {
                return Err(format!("Unknown option {a}"));
            }
            o.flags.insert(long.to_string());
        } else {
            o.operands.push(a.clone());
        }
    }
    Ok(o)
}

/// The package diff of a live apply, by name.
pub(super) struct Diff {
    pub(super) added: Vec<String>,
    pub(super) removed: Vec<String>,
    /// `(old, new)` identities of a name in both.
    pub(super) changed: Vec<(String, String)>,
}

pub(super) fn diff(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Diff {
    Diff {
        added: after
            .iter()
            .filter(|(n, _)| !before.contains_key(*n))
            .map(|(_, v)| v.clone())
            .collect(),
        removed: before
            .iter()
            .filter(|(n, _)| !after.contains_key(*n))
            .map(|(_, v)| v.clone())
            .collect(),
        changed: before
            .iter()
            .filter_map(|(n, old)| {
                after
                    .get(n)
                    .filter(|new| *new != old)
                    .map(|new| (old.clone(), new.clone()))
            })
            .collect(),
    }
}

/// The package diff as the live apply prints it.
pub(super) fn diff_output(d: &Diff) -> String {
    let mut out = String::new();
    for (title, list) in [("Added", &d.added), ("Removed", &d.removed)] {
        if !list.is_empty() {
            out.push_str(&format!("{title}:\n"));
            for p in list {
                out.push_str(&format!("  {p}\n"));
            }
        }
    }
    if !d.changed.is_empty() {
        out.push_str("Changed:\n");
        for (old, new) in &d.changed {
            out.push_str(&format!("  {old} -> {new}\n"));
        }
    }
    out
}
