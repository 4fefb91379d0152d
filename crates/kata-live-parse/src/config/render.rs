//! Rendering: the merged configuration as a fragment, each value with where it came from
//! (`kata-live config`).

use super::*;

impl Loaded {
    /// The merged configuration as TOML, each value annotated with where it came from.
    pub fn render_annotated(&self) -> String {
        let mut out =
            String::from("# kata-live configuration, merged. Fragments read, in order:\n");
        if self.fragments.is_empty() {
            out.push_str("#   (none: built-in defaults only)\n");
        }
        for f in &self.fragments {
            out.push_str(&format!("#   {}\n", f.display()));
        }
        let mut table = match toml::Table::try_from(&self.config) {
            Ok(t) => t,
            Err(e) => return format!("{out}# cannot render: {e}\n"),
        };
        // A default a fragment removed shows as the empty string that removes it, so that
        // the output, read back as a fragment, is this same configuration.
        for spec in self.config.handler_set() {
            if spec.handler.crio.runtime_config_path.is_some() {
                continue;
            }
            let mut at = Some(&mut table);
            for part in spec.key.split('.').chain(["crio"]) {
                at = at
                    .and_then(|t| t.get_mut(part))
                    .and_then(|v| v.as_table_mut());
            }
            if let Some(crio) = at {
                crio.insert(
                    "runtime_config_path".into(),
                    toml::Value::String(String::new()),
                );
            }
        }
        // A set of handlers: which they are, before the tables that declare them.
        let set = self.config.handler_set();
        if set.len() > 1 {
            out.push_str(
                "# handlers of the set, in order (table; CRI-O's and containerd's drop-in):\n",
            );
            for s in &set {
                out.push_str(&format!(
                    "#   {} [{}]; {}, {}\n",
                    s.handler.name,
                    s.key,
                    s.handler.drop_in.display(),
                    s.containerd_drop_in.display()
                ));
            }
        }
        render_table(&mut out, "", &table, &self.provenance);
        out
    }
}

fn render_table(out: &mut String, prefix: &str, t: &toml::Table, prov: &BTreeMap<String, Source>) {
    let mut leaves = toml::Table::new();
    let mut subtables = Vec::new();
    for (k, v) in t {
        match v {
            // An empty table is a value (`selinux_booleans = {}`), not a section.
            toml::Value::Table(sub) if !sub.is_empty() => subtables.push((k, sub)),
            other => {
                leaves.insert(k.clone(), other.clone());
            }
        }
    }
    if !leaves.is_empty() {
        if !prefix.is_empty() {
            out.push_str(&format!("\n[{prefix}]\n"));
        }
        for (k, v) in &leaves {
            let full = join_key(prefix, k);
            let src = prov.get(&full).cloned().unwrap_or(Source::Default);
            let mut one = toml::Table::new();
            one.insert(k.clone(), v.clone());
            let line = if v.as_table().is_some() {
                format!("{k} = {{}}")
            } else {
                toml::to_string(&one).unwrap_or_default()
            };
            out.push_str(&format!("{}  # {src}\n", line.trim_end()));
        }
    }
    for (k, sub) in subtables {
        render_table(out, &join_key(prefix, k), sub, prov);
    }
}
