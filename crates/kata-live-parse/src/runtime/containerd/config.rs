//! The handler drop-in kata-live owns, rendered for the root file's config version.

use serde::Serialize;
use std::collections::BTreeMap;

/// First lines of every drop-in kata-live writes; how `status` tells ours from foreign.
pub const HEADER: &str = concat!(
    crate::mark::mark_text!(),
    "# No `version` key on purpose: containerd takes the main file's (see kata-live's docs).\n"
);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MainFileError {
    #[error("containerd's main configuration {what} is not valid TOML ({message}); containerd would not start with it: fix it first")]
    Parse { what: String, message: String },
    #[error("containerd's main configuration has `version = {found}`; kata-live handles version 2 (containerd 1.7, or 2.x migrating it) and version 3 (containerd 2.x): migrate it with `containerd config migrate`")]
    Version { found: String },
    #[error("cannot render the containerd table for handler {handler}: {message}")]
    Render { handler: String, message: String },
}

/// The root file's `version`, which names the CRI runtime plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConfigVersion {
    /// containerd 1.7 (2.x migrates it at start).
    V2,
    /// containerd 2.x.
    V3,
}

impl ConfigVersion {
    /// The plugin whose `containerd.runtimes.NAME` tables declare handlers.
    pub fn cri_runtime_plugin(self) -> &'static str {
        match self {
            ConfigVersion::V2 => "io.containerd.grpc.v1.cri",
            ConfigVersion::V3 => "io.containerd.cri.v1.runtime",
        }
    }

    pub fn number(self) -> i64 {
        match self {
            ConfigVersion::V2 => 2,
            ConfigVersion::V3 => 3,
        }
    }

    /// The TOML path of the handler's table, as an operator writes it.
    pub fn table_path(self, handler: &str) -> String {
        format!(
            "plugins.\"{}\".containerd.runtimes.{handler}",
            self.cri_runtime_plugin()
        )
    }
}

/// Reads the root file's `version`. No key is version 1, which containerd 2.x no longer
/// reads and kata-live does not edit.
pub fn main_version(main_text: &str) -> Result<ConfigVersion, MainFileError> {
    let doc: toml::Table = toml::from_str(main_text).map_err(|e| MainFileError::Parse {
        what: "file".into(),
        message: e.message().to_string(),
    })?;
    match doc.get("version") {
        Some(toml::Value::Integer(2)) => Ok(ConfigVersion::V2),
        Some(toml::Value::Integer(3)) => Ok(ConfigVersion::V3),
        Some(v) => Err(MainFileError::Version {
            found: v.to_string(),
        }),
        None => Err(MainFileError::Version {
            found: "(none, i.e. 1)".into(),
        }),
    }
}

/// How an imported file combines with what was read before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImportMerge {
    /// containerd 2.x: every key at any depth, later file wins per key.
    KeyByKey,
    /// containerd 1.7 (and older): a `plugins."ID"` section of a later file replaces the
    /// whole section; a drop-in declaring only the handler wipes the CRI plugin's settings.
    ReplacesPluginSection,
}

/// The merge rule of a daemon, from its version (`containerd --version`'s third field or
/// CRI `Version.runtime_version`, e.g. "2.1.9+unknown", "v2.0.0", "1.7.24~ds1").
pub fn import_merge(daemon_version: &str) -> Option<ImportMerge> {
    let v = daemon_version.trim().trim_start_matches('v');
    let major: u32 = v.split(['.', '~', '+', '-']).next()?.parse().ok()?;
    Some(if major >= 2 {
        ImportMerge::KeyByKey
    } else {
        ImportMerge::ReplacesPluginSection
    })
}

/// A runtime handler as containerd's CRI plugin declares it. Only the keys kata-live sets;
/// containerd fills the others with its defaults.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerdHandler {
    /// The handler name pods name in their RuntimeClass.
    pub name: String,
    /// e.g. `io.containerd.kata-remote.v2` (shim `containerd-shim-kata-remote-v2`) or
    /// `io.containerd.runc.v2`.
    pub runtime_type: String,
    /// The shim binary, when not found from `runtime_type` on PATH.
    pub runtime_path: Option<String>,
    /// The shim's options table, e.g. `ConfigPath` for Kata, `BinaryName` for runc.
    pub options: BTreeMap<String, toml::Value>,
    pub privileged_without_host_devices: bool,
    pub pod_annotations: Vec<String>,
    pub snapshotter: Option<String>,
}

impl Default for ContainerdHandler {
    /// kata-deploy's kata-remote handler for containerd (the configuration's defaults).
    fn default() -> Self {
        Self::from_config(&crate::config::Handler::default())
    }
}

impl ContainerdHandler {
    /// The handler as the configuration declares it.
    pub fn from_config(h: &crate::config::Handler) -> Self {
        let t = &h.containerd;
        ContainerdHandler {
            name: h.name.clone(),
            runtime_type: t.runtime_type.clone(),
            runtime_path: t.runtime_path.clone(),
            options: t.options.clone(),
            privileged_without_host_devices: t.privileged_without_host_devices,
            pod_annotations: t.pod_annotations.clone(),
            snapshotter: t.snapshotter.clone(),
        }
    }

    /// The handler's table as kata-live writes it (and as the proof compares it).
    pub fn table(&self) -> toml::Table {
        let mut t = toml::Table::new();
        t.insert("runtime_type".into(), self.runtime_type.clone().into());
        if let Some(p) = &self.runtime_path {
            t.insert("runtime_path".into(), p.clone().into());
        }
        t.insert(
            "privileged_without_host_devices".into(),
            self.privileged_without_host_devices.into(),
        );
        t.insert(
            "pod_annotations".into(),
            toml::Value::Array(
                self.pod_annotations
                    .iter()
                    .map(|a| a.clone().into())
                    .collect(),
            ),
        );
        if let Some(s) = &self.snapshotter {
            t.insert("snapshotter".into(), s.clone().into());
        }
        if !self.options.is_empty() {
            let opts: toml::Table = self
                .options
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            t.insert("options".into(), toml::Value::Table(opts));
        }
        t
    }
}

/// `{plugins: {PLUGIN: {containerd: {runtimes: {NAME: table}}}}}`.
fn nest(version: ConfigVersion, name: &str, table: toml::Table) -> toml::Table {
    let wrap = |k: &str, v: toml::Table| toml::Table::from_iter([(k.to_string(), v.into())]);
    wrap(
        "plugins",
        wrap(
            version.cri_runtime_plugin(),
            wrap("containerd", wrap("runtimes", wrap(name, table))),
        ),
    )
}

/// Renders the drop-in: the header, then exactly one handler table under the CRI plugin
/// of `version`, and no `version` key (see the module docs of [`crate::runtime::containerd`]).
pub fn render(
    handler: &ContainerdHandler,
    version: ConfigVersion,
) -> Result<String, MainFileError> {
    let doc = nest(version, &handler.name, handler.table());
    let body = toml::to_string(&doc).map_err(|e| MainFileError::Render {
        handler: handler.name.clone(),
        message: e.to_string(),
    })?;
    Ok(format!("{HEADER}\n{body}"))
}

/// containerd 1.7 ([`ImportMerge::ReplacesPluginSection`]): a drop-in's CRI section replaces
/// the main file's whole, so the drop-in must carry the main file's CRI section with our
/// handler added. Measured on 1.7.24: a handler-only drop-in leaves the CRI plugin unable to
/// load (`no corresponding runtime configured in containerd.runtimes for containerd
/// default_runtime_name = "runc"`; every CRI call then answers Unimplemented). The copy
/// shadows later edits of the main file's CRI section until kata-live renders it again.
pub fn render_whole_section(
    main_text: &str,
    handler: &ContainerdHandler,
) -> Result<String, MainFileError> {
    let v = ConfigVersion::V2;
    let main: toml::Table = toml::from_str(main_text).map_err(|e| MainFileError::Parse {
        what: "file".into(),
        message: e.message().to_string(),
    })?;
    let mut section = main
        .get("plugins")
        .and_then(|p| p.get(v.cri_runtime_plugin()))
        .and_then(|c| c.as_table())
        .cloned()
        .unwrap_or_default();
    let runtimes = section
        .entry("containerd")
        .or_insert_with(|| toml::Table::new().into())
        .as_table_mut()
        .and_then(|c| {
            c.entry("runtimes")
                .or_insert_with(|| toml::Table::new().into())
                .as_table_mut()
        })
        .ok_or_else(|| MainFileError::Render {
            handler: handler.name.clone(),
            message: "the main file's containerd.runtimes is not a table".into(),
        })?;
    runtimes.insert(handler.name.clone(), handler.table().into());
    let doc = toml::Table::from_iter([(
        "plugins".to_string(),
        toml::Value::Table(toml::Table::from_iter([(
            v.cri_runtime_plugin().to_string(),
            toml::Value::Table(section),
        )])),
    )]);
    let body = toml::to_string(&doc).map_err(|e| MainFileError::Render {
        handler: handler.name.clone(),
        message: e.to_string(),
    })?;
    Ok(format!(
        "{HEADER}# containerd 1.7 replaces a plugin section whole: this is the main file's\n# [plugins.\"{}\"] section with the handler added.\n\n{body}",
        v.cri_runtime_plugin()
    ))
}

/// The drop-in for this node: the form its daemon's merge rule needs, under the plugin
/// name of its main file's version. `daemon_version` as [`import_merge`] reads it.
pub fn drop_in_for(
    daemon_version: &str,
    main_text: &str,
    handler: &ContainerdHandler,
) -> Result<String, MainFileError> {
    let v = main_version(main_text)?;
    match import_merge(daemon_version) {
        Some(ImportMerge::KeyByKey) => render(handler, v),
        Some(ImportMerge::ReplacesPluginSection) if v == ConfigVersion::V2 => {
            render_whole_section(main_text, handler)
        }
        Some(ImportMerge::ReplacesPluginSection) => Err(MainFileError::Version {
            found: format!(
                "{} (containerd {daemon_version} reads only version 2)",
                v.number()
            ),
        }),
        None => Err(MainFileError::Render {
            handler: handler.name.clone(),
            message: format!(
                "containerd's version {daemon_version:?} is not one kata-live can read"
            ),
        }),
    }
}

/// The handler's table in a containerd TOML document (a drop-in, a main file or a
/// `config dump`), under the CRI plugin of `version`.
pub fn handler_table(doc: &toml::Table, version: ConfigVersion, name: &str) -> Option<toml::Table> {
    doc.get("plugins")?
        .get(version.cri_runtime_plugin())?
        .get("containerd")?
        .get("runtimes")?
        .get(name)?
        .as_table()
        .cloned()
}

/// The handler table of a drop-in text (what the proof compares with).
pub fn written_table(
    drop_in_text: &str,
    version: ConfigVersion,
    name: &str,
) -> Option<toml::Table> {
    let doc: toml::Table = toml::from_str(drop_in_text).ok()?;
    handler_table(&doc, version, name)
}

/// Whether a file's TOML declares the handler under either plugin name (a foreign
/// declaration merges into ours on 2.x, whichever version it is written for).
pub fn declares_handler(text: &str, name: &str) -> Result<bool, toml::de::Error> {
    let doc: toml::Table = toml::from_str(text)?;
    Ok([ConfigVersion::V2, ConfigVersion::V3]
        .iter()
        .any(|v| handler_table(&doc, *v, name).is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_the_plugin() {
        assert_eq!(
            main_version("version = 3\n").unwrap().cri_runtime_plugin(),
            "io.containerd.cri.v1.runtime"
        );
        assert_eq!(
            main_version("version = 2\n[grpc]\naddress = \"/x\"\n")
                .unwrap()
                .cri_runtime_plugin(),
            "io.containerd.grpc.v1.cri"
        );
        assert!(matches!(
            main_version("root = \"/x\"\n"),
            Err(MainFileError::Version { .. })
        ));
        assert!(matches!(
            main_version("version = 4\n"),
            Err(MainFileError::Version { .. })
        ));
        assert!(matches!(
            main_version("version = \n"),
            Err(MainFileError::Parse { .. })
        ));
    }

    #[test]
    fn merge_rule_follows_the_daemon_version() {
        assert_eq!(import_merge("2.1.9+unknown"), Some(ImportMerge::KeyByKey));
        assert_eq!(import_merge("v2.0.0"), Some(ImportMerge::KeyByKey));
        assert_eq!(
            import_merge("1.7.24~ds1"),
            Some(ImportMerge::ReplacesPluginSection)
        );
        assert_eq!(
            import_merge("1.6.20~ds1"),
            Some(ImportMerge::ReplacesPluginSection)
        );
        assert_eq!(import_merge(""), None);
        assert_eq!(import_merge("unknown"), None);
    }

    #[test]
    fn the_drop_in_form_follows_daemon_and_main_file() {
        let h = ContainerdHandler::default();
        let v2 = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nsandbox_image = \"p\"\n";
        let v3 = "version = 3\n";
        // 2.x: the handler table only, under the main file's plugin name.
        assert_eq!(
            drop_in_for("2.1.9", v3, &h).unwrap(),
            render(&h, ConfigVersion::V3).unwrap()
        );
        assert_eq!(
            drop_in_for("2.1.9", v2, &h).unwrap(),
            render(&h, ConfigVersion::V2).unwrap()
        );
        // 1.7: the main file's CRI section comes along.
        let whole = drop_in_for("1.7.24~ds1", v2, &h).unwrap();
        let doc: toml::Table = toml::from_str(&whole).unwrap();
        let cri = &doc["plugins"]["io.containerd.grpc.v1.cri"];
        assert_eq!(cri["sandbox_image"].as_str(), Some("p"));
        assert_eq!(
            handler_table(&doc, ConfigVersion::V2, "kata-remote"),
            Some(h.table())
        );
        assert!(matches!(
            drop_in_for("1.7.24", v3, &h),
            Err(MainFileError::Version { .. })
        ));
        assert!(matches!(
            drop_in_for("?", v3, &h),
            Err(MainFileError::Render { .. })
        ));
    }

    #[test]
    fn render_has_no_version_and_one_table() {
        let h = ContainerdHandler {
            runtime_path: Some("/opt/kata/bin/containerd-shim-kata-v2".into()),
            snapshotter: Some("nydus".into()),
            ..ContainerdHandler::default()
        };
        for v in [ConfigVersion::V2, ConfigVersion::V3] {
            let text = render(&h, v).unwrap();
            assert!(text.starts_with(HEADER), "{text}");
            let doc: toml::Table = toml::from_str(&text).unwrap();
            assert!(doc.get("version").is_none(), "{text}");
            assert_eq!(doc.len(), 1, "{text}");
            let plugins = doc["plugins"].as_table().unwrap();
            assert_eq!(
                plugins.keys().collect::<Vec<_>>(),
                [v.cri_runtime_plugin()],
                "{text}"
            );
            let t = written_table(&text, v, "kata-remote").unwrap();
            assert_eq!(t, h.table());
            assert_eq!(
                t["runtime_type"].as_str(),
                Some("io.containerd.kata-remote.v2")
            );
            assert_eq!(
                t["options"]["ConfigPath"].as_str(),
                Some("/opt/kata/share/defaults/kata-containers/configuration-remote.toml")
            );
            assert!(declares_handler(&text, "kata-remote").unwrap());
            assert!(!declares_handler(&text, "runc").unwrap());
        }
        // Optional keys left out are not written (containerd's defaults apply).
        let runc = ContainerdHandler {
            name: "kata-test".into(),
            runtime_type: "io.containerd.runc.v2".into(),
            options: BTreeMap::new(),
            pod_annotations: vec![],
            privileged_without_host_devices: false,
            ..ContainerdHandler::default()
        };
        let t = runc.table();
        assert_eq!(
            t.keys().collect::<Vec<_>>(),
            [
                "pod_annotations",
                "privileged_without_host_devices",
                "runtime_type"
            ]
        );
    }
}
