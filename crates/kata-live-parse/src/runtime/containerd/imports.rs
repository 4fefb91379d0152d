//! The `imports` edit of containerd's main file, which is someone else's: one element (or one
//! line) added, every other byte kept, and the exact inverse.
//!
//! containerd reads a drop-in only through `imports` (see [`crate::runtime::containerd`]). The edit:
//! - an existing root `imports = [...]` array gets one element, right after its last
//!   element (`, "GLOB"`), after its trailing comma (`"GLOB",`) or, when empty, after `[`;
//! - without one, a line `imports = ["GLOB"]  # added by kata-live ...` is inserted where
//!   TOML allows a root key: after the root `version = N` line, else before the first table
//!   header, else at the end.
//!
//! Each form is recognisable from its surroundings, so [`remove_import`] restores the
//! original byte for byte without being told which form was used. Both functions check
//! their own output by parsing it: the edited document must equal the original plus (or
//! minus) exactly that import, or they refuse.

use std::path::{Component, Path, PathBuf};

/// The comment that marks the line kata-live adds (and only that line).
pub const ADDED_MARK: &str = "# added by kata-live; `kata-live uninstall` removes this line";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("containerd's main configuration is not valid TOML ({0}); containerd would not start with it: fix it first")]
    Parse(String),
    #[error("containerd's main configuration has an `imports` that is not an array of strings; fix it first")]
    NotStrings,
    #[error("cannot edit `imports` in containerd's main configuration ({0}): add {1:?} to its `imports` by hand, then run kata-live again")]
    Unsupported(String, String),
}

use crate::runtime::Edit;

/// `glob` as a TOML string literal, always spelled the same way (insert and remove agree).
fn literal(glob: &str) -> String {
    toml::Value::String(glob.to_string()).to_string()
}

fn added_line(glob: &str) -> String {
    format!("imports = [{}]  {ADDED_MARK}", literal(glob))
}

/// Adds `glob` to the main file's `imports` unless an import already reads `drop_in`.
/// `main_path` is where containerd reads the text (relative imports are relative to its
/// directory).
pub fn ensure_import(
    main_text: &str,
    main_path: &Path,
    glob: &str,
    drop_in: &Path,
) -> Result<Edit, ImportError> {
    let orig = parse(main_text)?;
    let existing = import_list(&orig)?;
    if let Some(by) = covering(&existing, main_path, drop_in) {
        return Ok(Edit::AlreadyCovered { by });
    }
    let layout = scan(main_text).map_err(|why| unsupported(why, glob))?;
    let lit = literal(glob);
    let text = match (&layout.imports, orig.contains_key("imports")) {
        (Some(arr), true) => {
            let (at, ins) = match arr.last {
                Sig::Open => (arr.last_end, lit.clone()),
                Sig::Elem => (arr.last_end, format!(", {lit}")),
                Sig::Comma => (arr.last_end, format!("{lit},")),
            };
            splice(main_text, at, &ins)
        }
        (None, false) => {
            let line = added_line(glob);
            // A `version` line that ends the file without a newline is "the end".
            let at = layout
                .after_version
                .or(layout.first_header)
                .filter(|&at| at < main_text.len() || main_text.ends_with('\n'));
            match at {
                Some(at) => splice(main_text, at, &format!("{line}\n")),
                None if main_text.is_empty() || main_text.ends_with('\n') => {
                    format!("{main_text}{line}\n")
                }
                None => format!("{main_text}\n{line}"),
            }
        }
        _ => {
            return Err(unsupported(
                "`imports` is not a plain root key".into(),
                glob,
            ))
        }
    };
    // The edit must be exactly "the original plus this import".
    let mut expected = orig;
    let mut list: Vec<toml::Value> = existing.into_iter().map(toml::Value::String).collect();
    list.push(toml::Value::String(glob.to_string()));
    expected.insert("imports".into(), toml::Value::Array(list));
    if parse(&text).ok() != Some(expected) {
        return Err(unsupported(
            "the edit would change more than `imports`".into(),
            glob,
        ));
    }
    Ok(Edit::Changed { text })
}

/// Removes what [`ensure_import`] added for `glob`; `None` when the text holds no such
/// addition (nothing to undo). Only call it for an edit kata-live made: an element the
/// operator wrote with the same spelling would be removed too.
pub fn remove_import(text: &str, glob: &str) -> Result<Option<String>, ImportError> {
    let before = parse(text)?;
    let list = import_list(&before)?;
    let layout = scan(text).map_err(|why| unsupported(why, glob))?;
    let Some(arr) = layout.imports else {
        return Ok(None);
    };
    let lit = literal(glob);
    let Some(&(s, e)) = arr.elems.iter().find(|(s, e)| text[*s..*e] == lit) else {
        return Ok(None);
    };
    let line = added_line(glob);
    let line_end = text[arr.line_start..]
        .find('\n')
        .map_or(text.len(), |i| arr.line_start + i);
    let out = if text[arr.line_start..line_end] == line {
        if line_end < text.len() {
            format!("{}{}", &text[..arr.line_start], &text[line_end + 1..])
        } else if arr.line_start > 0 {
            // Added at the end of a file without a final newline: "\n" + line.
            text[..arr.line_start - 1].to_string()
        } else {
            String::new()
        }
    } else {
        let pre = &text[..s];
        let (from, to) = if pre.ends_with('[') {
            (s, e)
        } else if pre.ends_with(',') && text[e..].starts_with(',') {
            (s, e + 1)
        } else if pre.ends_with(", ") {
            (s - 2, e)
        } else {
            return Err(unsupported(
                "the element is not where kata-live puts it".into(),
                glob,
            ));
        };
        format!("{}{}", &text[..from], &text[to..])
    };
    // The result must be exactly "the text minus this import".
    let mut expected = before;
    let rest: Vec<toml::Value> = {
        let mut l = list;
        if let Some(i) = l.iter().rposition(|g| g == glob) {
            l.remove(i);
        }
        l.into_iter().map(toml::Value::String).collect()
    };
    if rest.is_empty() && text[arr.line_start..line_end] == line {
        expected.remove("imports");
    } else {
        expected.insert("imports".into(), toml::Value::Array(rest));
    }
    if parse(&out).ok() != Some(expected) {
        return Err(unsupported(
            "removing it would change more than `imports`".into(),
            glob,
        ));
    }
    Ok(Some(out))
}

/// The import of the main file that reads `drop_in`, if any (containerd's resolution:
/// relative to the main file's directory, then globbed).
pub fn import_covering(
    main_text: &str,
    main_path: &Path,
    drop_in: &Path,
) -> Result<Option<String>, ImportError> {
    let doc = parse(main_text)?;
    Ok(covering(&import_list(&doc)?, main_path, drop_in))
}

fn covering(imports: &[String], main_path: &Path, drop_in: &Path) -> Option<String> {
    let target = clean(drop_in);
    let dir = main_path.parent().unwrap_or(Path::new("/"));
    imports
        .iter()
        .find(|imp| {
            let p = Path::new(imp.as_str());
            let full = clean(&if p.is_absolute() {
                p.to_path_buf()
            } else {
                dir.join(p)
            });
            let full = full.to_string_lossy();
            if full.contains('*') {
                crate::pathglob::matches(&full, &target.to_string_lossy())
            } else {
                *full == *target.to_string_lossy()
            }
        })
        .cloned()
}

/// Go's `filepath.Clean`, lexically (no symlinks resolved).
pub fn clean(p: &Path) -> PathBuf {
    let mut out: Vec<&std::ffi::OsStr> = Vec::new();
    let abs = p.is_absolute();
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            // `..` above the root stays at the root; a relative path keeps it.
            Component::ParentDir => match out.pop() {
                None if !abs => out.push("..".as_ref()),
                _ => {}
            },
            _ => {}
        }
    }
    let mut r = PathBuf::from(if abs { "/" } else { "" });
    r.extend(out);
    r
}

fn parse(text: &str) -> Result<toml::Table, ImportError> {
    toml::from_str(text).map_err(|e| ImportError::Parse(e.message().to_string()))
}

fn import_list(doc: &toml::Table) -> Result<Vec<String>, ImportError> {
    match doc.get("imports") {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or(ImportError::NotStrings)
            })
            .collect(),
        Some(_) => Err(ImportError::NotStrings),
    }
}

fn unsupported(why: String, glob: &str) -> ImportError {
    ImportError::Unsupported(why, glob.to_string())
}

fn splice(text: &str, at: usize, ins: &str) -> String {
    format!("{}{ins}{}", &text[..at], &text[at..])
}

/// The last significant token of an array before its `]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sig {
    Open,
    Elem,
    Comma,
}

#[derive(Debug)]
struct ArrayAt {
    /// Start of the `imports = ` line.
    line_start: usize,
    /// Byte ranges of the elements.
    elems: Vec<(usize, usize)>,
    last: Sig,
    /// Just after the last significant token.
    last_end: usize,
}

#[derive(Debug, Default)]
struct Layout {
    /// Start of the first table header line (`[x]` or `[[x]]`).
    first_header: Option<usize>,
    /// Start of the line after the root `version = ...` statement.
    after_version: Option<usize>,
    imports: Option<ArrayAt>,
}

/// Scans the root section (up to the first table header) of a TOML document that parses.
fn scan(text: &str) -> Result<Layout, String> {
    let b = text.as_bytes();
    let mut out = Layout::default();
    let mut i = 0;
    while i < b.len() {
        let line_start = i;
        i = skip_ws(b, i);
        match b.get(i) {
            None => break,
            Some(b'\n') => i += 1,
            Some(b'\r') => i += 1,
            Some(b'#') => i = line_end(b, i),
            Some(b'[') => {
                out.first_header = Some(line_start);
                break;
            }
            Some(_) => {
                let (key, at) = scan_key(b, i)?;
                i = skip_ws(b, at + 1);
                if key == "imports" && b.get(i) == Some(&b'[') {
                    let mut arr = ArrayAt {
                        line_start,
                        elems: Vec::new(),
                        last: Sig::Open,
                        last_end: i + 1,
                    };
                    i = scan_array(b, i, Some(&mut arr))?;
                    out.imports = Some(arr);
                } else {
                    i = scan_value(b, i)?;
                }
                i = line_end(b, skip_ws(b, i));
                if key == "version" {
                    out.after_version = Some(i);
                }
            }
        }
    }
    Ok(out)
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    i
}

/// Just past the end of the line (its `\n`), skipping a comment.
fn line_end(b: &[u8], i: usize) -> usize {
    match b[i.min(b.len())..].iter().position(|&c| c == b'\n') {
        Some(n) => i + n + 1,
        None => b.len(),
    }
}

/// A key up to its `=`: (the key with quotes removed when it is one quoted part, the
/// index of `=`).
fn scan_key(b: &[u8], mut i: usize) -> Result<(String, usize), String> {
    let start = i;
    while let Some(&c) = b.get(i) {
        match c {
            b'=' => {
                let raw = String::from_utf8_lossy(&b[start..i]).trim().to_string();
                let key = match raw.as_bytes() {
                    [q @ (b'"' | b'\''), .., l]
                        if l == q && !raw[1..raw.len() - 1].contains(['"', '\'', '.']) =>
                    {
                        raw[1..raw.len() - 1].to_string()
                    }
                    _ => raw,
                };
                return Ok((key, i));
            }
            b'"' | b'\'' => i = skip_string(b, i)?,
            b'\n' => return Err("a key without `=`".into()),
            _ => i += 1,
        }
    }
    Err("a key without `=`".into())
}

/// Past a string starting at `i` (basic, literal, or their multi-line forms).
fn skip_string(b: &[u8], i: usize) -> Result<usize, String> {
    let q = b[i];
    let triple = b.get(i..i + 3) == Some(&[q, q, q][..]);
    let mut j = if triple { i + 3 } else { i + 1 };
    while let Some(&c) = b.get(j) {
        if c == b'\\' && q == b'"' {
            j += 2;
        } else if c == q {
            if !triple {
                return Ok(j + 1);
            }
            if b.get(j..j + 3) == Some(&[q, q, q][..]) {
                // Up to two more quotes belong to the content.
                let mut k = j + 3;
                while k < j + 5 && b.get(k) == Some(&q) {
                    k += 1;
                }
                return Ok(k);
            }
            j += 1;
        } else if c == b'\n' && !triple {
            return Err("a string across lines".into());
        } else {
            j += 1;
        }
    }
    Err("an unterminated string".into())
}

/// Past a value starting at `i` on a statement line.
fn scan_value(b: &[u8], i: usize) -> Result<usize, String> {
    match b.get(i) {
        Some(b'"' | b'\'') => skip_string(b, i),
        Some(b'[') => scan_array(b, i, None),
        Some(b'{') => scan_inline_table(b, i),
        _ => {
            let mut j = i;
            while let Some(&c) = b.get(j) {
                if matches!(c, b',' | b']' | b'}' | b'#' | b'\n' | b'\r') {
                    break;
                }
                j += 1;
            }
            Ok(j)
        }
    }
}

fn scan_array(b: &[u8], i: usize, mut rec: Option<&mut ArrayAt>) -> Result<usize, String> {
    let mut j = i + 1;
    loop {
        while matches!(b.get(j), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            j += 1;
        }
        match b.get(j) {
            None => return Err("an unterminated array".into()),
            Some(b'#') => j = line_end(b, j),
            Some(b']') => return Ok(j + 1),
            Some(b',') => {
                j += 1;
                if let Some(r) = rec.as_deref_mut() {
                    r.last = Sig::Comma;
                    r.last_end = j;
                }
            }
            Some(_) => {
                let s = j;
                j = scan_value(b, j)?;
                // A bare value ends before trailing blanks.
                let mut e = j;
                while e > s && matches!(b[e - 1], b' ' | b'\t') {
                    e -= 1;
                }
                if let Some(r) = rec.as_deref_mut() {
                    r.elems.push((s, e));
                    r.last = Sig::Elem;
                    r.last_end = e;
                }
            }
        }
    }
}

fn scan_inline_table(b: &[u8], i: usize) -> Result<usize, String> {
    let mut j = i + 1;
    while let Some(&c) = b.get(j) {
        match c {
            b'}' => return Ok(j + 1),
            b'"' | b'\'' => j = skip_string(b, j)?,
            b'[' => j = scan_array(b, j, None)?,
            b'{' => j = scan_inline_table(b, j)?,
            _ => j += 1,
        }
    }
    Err("an unterminated inline table".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GLOB: &str = "/etc/containerd/conf.d/*.toml";
    const MAIN: &str = "/etc/containerd/config.toml";
    const DROP: &str = "/etc/containerd/conf.d/50-kata-remote.toml";

    fn ensure(text: &str) -> Edit {
        ensure_import(text, Path::new(MAIN), GLOB, Path::new(DROP)).unwrap()
    }

    fn changed(text: &str) -> String {
        match ensure(text) {
            Edit::Changed { text } => text,
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn debian_default_gets_one_line_after_version() {
        // The head of Debian's shipped /etc/containerd/config.toml (version 2, no imports).
        let orig =
            "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"x\"\n";
        let ed = changed(orig);
        assert_eq!(
            ed,
            format!("version = 2\nimports = [\"{GLOB}\"]  {ADDED_MARK}\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"x\"\n")
        );
        assert_eq!(remove_import(&ed, GLOB).unwrap().as_deref(), Some(orig));
    }

    #[test]
    fn existing_arrays_get_one_element() {
        for (orig, want) in [
            (
                "version = 3\nimports = []\n",
                format!("version = 3\nimports = [\"{GLOB}\"]\n"),
            ),
            (
                "imports = [\"/a/*.toml\"]\n",
                format!("imports = [\"/a/*.toml\", \"{GLOB}\"]\n"),
            ),
            (
                "imports = [\n  '/a.toml', # theirs\n]\n[x]\n",
                format!("imports = [\n  '/a.toml',\"{GLOB}\", # theirs\n]\n[x]\n"),
            ),
            (
                "imports = [ # none yet\n]\n",
                format!("imports = [\"{GLOB}\" # none yet\n]\n"),
            ),
        ] {
            let ed = changed(orig);
            assert_eq!(ed, want, "{orig:?}");
            assert_eq!(remove_import(&ed, GLOB).unwrap().as_deref(), Some(orig));
        }
    }

    #[test]
    fn line_goes_before_the_first_table_or_at_the_end() {
        let orig = "# theirs\nroot = \"/var/lib/containerd\"\n[grpc]\naddress = \"/x\"\n";
        let ed = changed(orig);
        assert!(
            ed.starts_with(&format!(
                "# theirs\nroot = \"/var/lib/containerd\"\nimports = [\"{GLOB}\"]"
            )),
            "{ed}"
        );
        assert_eq!(remove_import(&ed, GLOB).unwrap().as_deref(), Some(orig));
        for orig in ["", "root = \"/r\"", "root = \"/r\"\n"] {
            let ed = changed(orig);
            assert_eq!(remove_import(&ed, GLOB).unwrap().as_deref(), Some(orig));
        }
    }

    #[test]
    fn covering_follows_containerd_resolution() {
        let main = Path::new(MAIN);
        let drop = Path::new(DROP);
        let cov =
            |imports: &str| import_covering(&format!("imports = {imports}\n"), main, drop).unwrap();
        assert_eq!(
            cov(r#"["/etc/containerd/conf.d/*.toml"]"#).as_deref(),
            Some(GLOB)
        );
        // Relative to the main file's directory, cleaned.
        assert!(cov(r#"["conf.d/*.toml"]"#).is_some());
        assert!(cov(r#"["./x/../conf.d/50-*"]"#).is_some());
        assert!(cov(r#"["/etc/containerd/conf.d/50-kata-remote.toml"]"#).is_some());
        assert!(cov(r#"["/etc/containerd/conf.d/[0-9]*.toml"]"#).is_some());
        assert!(cov(r#"["/etc/containerd/conf.d/?0-*.tom?"]"#).is_some());
        // containerd globs only a path holding `*`: without one, `?` and `[` are literal.
        assert!(cov(r#"["/etc/containerd/conf.d/?0-kata-remote.toml"]"#).is_none());
        // `*` does not cross `/`; other directories and suffixes do not read it.
        assert!(cov(r#"["/etc/containerd/*.toml"]"#).is_none());
        assert!(cov(r#"["/etc/containerd/*"]"#).is_none());
        assert!(cov(r#"["/etc/containerd/conf.d/*.conf"]"#).is_none());
        assert!(cov(r#"["/etc/containerd/conf.d/[^5]*.toml"]"#).is_none());
        assert!(cov("[]").is_none());
        assert_eq!(
            ensure("imports = [\"conf.d/*.toml\"]\n"),
            Edit::AlreadyCovered {
                by: "conf.d/*.toml".into()
            }
        );
    }

    #[test]
    fn refusals() {
        assert!(matches!(
            ensure_import("imports = \"x\"\n", Path::new(MAIN), GLOB, Path::new(DROP)),
            Err(ImportError::NotStrings)
        ));
        assert!(matches!(
            ensure_import("imports = [\n", Path::new(MAIN), GLOB, Path::new(DROP)),
            Err(ImportError::Parse(_))
        ));
        assert_eq!(remove_import("version = 3\n", GLOB).unwrap(), None);
        assert_eq!(remove_import("imports = ['/a']\n", GLOB).unwrap(), None);
    }

    /// Root statements and tables of a main file, in the shapes operators write.
    fn root_piece() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("# a comment, with [brackets] and \"quotes\"\n".to_string()),
            Just("\n".to_string()),
            Just("root = \"/var/lib/containerd\"\n".to_string()),
            Just("state = '/run/containerd' # trailing\n".to_string()),
            Just("oom_score = -999\n".to_string()),
            Just("disabled_plugins = [\n  \"io.containerd.x.v1.y\", # no\n]\n".to_string()),
            Just("required_plugins = [[1, 2], [\"]\"]]\n".to_string()),
            Just("note = \"\"\"\n[not a table]\nimports = []\n\"\"\"\n".to_string()),
            Just("cgroup = { path = \"/x\", list = [\"]\"] }\n".to_string()),
            Just("\"quoted.key\" = 1\n".to_string()),
            Just("timeouts.\"io.containerd.timeout.shim.cleanup\" = \"5s\"\n".to_string()),
        ]
    }

    fn imports_piece() -> impl Strategy<Value = Option<String>> {
        prop_oneof![
            Just(None),
            Just(Some("imports = []\n".to_string())),
            Just(Some("imports = [ ]\n".to_string())),
            Just(Some("imports = ['/opt/x/*.toml']\n".to_string())),
            Just(Some("imports = [\"/a.toml\",]\n".to_string())),
            Just(Some(
                "imports = [\"/a.toml\" , \"/b.toml\"  ] # theirs\n".to_string()
            )),
            Just(Some(
                "imports = [\n  \"/a.toml\",\n  # more later\n]\n".to_string()
            )),
            Just(Some("\"imports\" = [\"/a.toml\"]\n".to_string())),
            Just(Some("imports=[\"/c/[x]*.toml\"]\n".to_string())),
        ]
    }

    fn table_piece() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("[grpc]\n  address = \"/run/containerd/containerd.sock\"\n".to_string()),
            Just("[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n".to_string()),
            Just("\n# the runtimes\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\nSystemdCgroup = true\n".to_string()),
            Just("[[proxy_plugins.x]]\nimports = [\"not root\"]\n".to_string()),
        ]
    }

    fn main_file() -> impl Strategy<Value = String> {
        (
            any::<bool>(),
            prop::collection::vec(root_piece(), 0..4),
            imports_piece(),
            prop::collection::vec(root_piece(), 0..3),
            prop::collection::vec(table_piece(), 0..3),
            any::<bool>(),
        )
            .prop_map(|(version, pre, imports, post, tables, chop)| {
                let mut s = String::new();
                if version {
                    s.push_str("version = 3\n");
                }
                s.extend(pre);
                s.extend(imports);
                s.extend(post);
                s.extend(tables);
                if chop {
                    s.pop();
                }
                s
            })
            .prop_filter("valid TOML", |s| toml::from_str::<toml::Table>(s).is_ok())
    }

    proptest! {
        #[test]
        fn ensure_adds_exactly_the_import_and_remove_restores(orig in main_file()) {
            let ed = changed(&orig);
            // One contiguous insertion, every other byte kept.
            let pre = orig.bytes().zip(ed.bytes()).take_while(|(a, b)| a == b).count();
            let suf = orig.bytes().rev().zip(ed.bytes().rev()).take_while(|(a, b)| a == b).count();
            prop_assert!(pre + suf >= orig.len(), "not one insertion:\n{orig}\n---\n{ed}");
            // parse(edited) == parse(original) + the import.
            let mut want: toml::Table = toml::from_str(&orig).unwrap();
            let mut list = want.get("imports").and_then(|v| v.as_array()).cloned().unwrap_or_default();
            list.push(GLOB.into());
            want.insert("imports".into(), toml::Value::Array(list));
            prop_assert_eq!(toml::from_str::<toml::Table>(&ed).unwrap(), want);
            // Idempotent: the edited file already covers the drop-in.
            prop_assert_eq!(ensure(&ed), Edit::AlreadyCovered { by: GLOB.into() });
            // remove(ensure(x)) == x, byte for byte.
            prop_assert_eq!(remove_import(&ed, GLOB).unwrap(), Some(orig));
        }
    }
}
