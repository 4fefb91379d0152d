//! Every relative link of README.md and docs/*.md resolves: the file or folder it names
//! exists, and a `#anchor` (alone or after a `.md` file) names a heading of that file, by
//! GitHub's anchor rules. docs/README.md indexes every file of docs/. Self-contained (std
//! only): the docs are read from the checkout, nothing is built or booted.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md, sorted.
fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The lines of a Markdown text outside fenced code blocks, with their line numbers (1-based).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| t.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// The line with its inline code spans (`` `...` ``) blanked: a link written in code is text.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// GitHub's anchor for a heading: lowercase, punctuation other than `-` and `_` dropped,
/// each space a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's ATX headings; a repeated heading gets `-1`, `-2`, … as
/// on GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let t = line.trim_start();
        let hashes = t.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !t[hashes..].starts_with(' ') {
            continue;
        }
        let title = t[hashes..].trim().trim_end_matches('#').trim();
        let base = slug(title);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The link targets of a Markdown text, with their line numbers: inline links and images
/// (`[text](target "title")`) and reference definitions (`[label]: target`).
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let t = line.trim_start();
        if let Some(target) = reference_definition(t) {
            out.push((n, target));
            continue;
        }
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            // The target runs to the `)` that balances the link's `(`.
            let mut depth = 0usize;
            let mut end = after.len();
            for (j, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = j;
                        break;
                    }
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push((n, target.trim_matches(['<', '>']).to_string()));
            rest = &after[end.min(after.len())..];
        }
    }
    out
}

/// `[label]: target` or `[label]: target "title"` alone on its line: a reference
/// definition (a line that merely starts with `[…]:` and goes on in prose is not one).
fn reference_definition(line: &str) -> Option<String> {
    let rest = line.strip_prefix('[')?;
    let close = rest.find("]:")?;
    if rest[..close].contains(']') {
        return None;
    }
    let mut words = rest[close + 2..].split_whitespace();
    let target = words.next()?;
    match words.next() {
        None => {}
        Some(title) if title.starts_with(['"', '\'', '(']) => {}
        Some(_) => return None,
    }
    Some(target.trim_matches(['<', '>']).to_string())
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// Every broken relative link of `file`, in words: `file:line: target: why`.
fn broken_links(file: &Path, text: &str) -> Vec<String> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut broken = Vec::new();
    for (line, target) in links(text) {
        if is_external(&target) {
            continue;
        }
        let say = |why: String| format!("{}:{line}: {target}: {why}", file.display());
        if target.is_empty() {
            broken.push(say("an empty link".to_string()));
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        // `#anchor` alone is this file's own heading.
        let (dest, dest_text) = if path.is_empty() {
            (file.to_path_buf(), Some(text.to_string()))
        } else {
            (dir.join(path), None)
        };
        if dest_text.is_none() && !dest.exists() {
            broken.push(say(format!("{} does not exist", dest.display())));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if dest.extension().is_none_or(|e| e != "md") {
            broken.push(say("an anchor into a file that is not Markdown".to_string()));
            continue;
        }
        let Some(dest_text) = dest_text.or_else(|| std::fs::read_to_string(&dest).ok()) else {
            broken.push(say(format!("{} cannot be read", dest.display())));
            continue;
        };
        let known = anchors(&dest_text);
        if !known.contains(anchor) {
            broken.push(say(format!(
                "no heading of {} has the anchor #{anchor} (its anchors: {})",
                dest.display(),
                known.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    broken
}

#[test]
fn every_relative_link_of_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).expect("a doc file is readable");
        checked += links(&text).iter().filter(|(_, t)| !is_external(t)).count();
        broken.extend(broken_links(&file, &text));
    }
    assert!(
        checked > 20,
        "only {checked} relative links found: is the parser reading the docs?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_docs_index_lists_every_file_in_docs() {
    let index = repo().join("docs/README.md");
    let text = std::fs::read_to_string(&index).expect("docs/README.md exists");
    let linked: BTreeSet<String> = links(&text)
        .into_iter()
        .map(|(_, t)| t.split('#').next().unwrap_or("").to_string())
        .collect();
    let missing: Vec<String> = doc_files()
        .into_iter()
        .filter(|p| p.parent() == index.parent() && *p != index)
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|name| !linked.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/README.md does not link {missing:?}"
    );
}

#[test]
fn anchors_follow_githubs_rules() {
    assert_eq!(slug("Commands and exit codes"), "commands-and-exit-codes");
    assert_eq!(
        slug("Machine-readable output (`--json`, schema 1)"),
        "machine-readable-output---json-schema-1"
    );
    assert_eq!(
        slug("Scheduling follows the proof: the node's label and Events"),
        "scheduling-follows-the-proof-the-nodes-label-and-events"
    );
    assert_eq!(slug("status.json (schema 1)"), "statusjson-schema-1");
    assert_eq!(slug("The real-CRI-O node"), "the-real-cri-o-node");
    assert_eq!(slug("snake_case kept"), "snake_case-kept");
    let text = "# Title\n## Same\n```sh\n# not a heading\n```\n## Same\n";
    assert_eq!(
        anchors(text).into_iter().collect::<Vec<_>>(),
        ["same", "same-1", "title"]
    );
}

#[test]
fn a_broken_link_is_reported() {
    let dir = repo().join("docs");
    let file = dir.join("a-page-that-is-not-there.md");
    let text = "\
# A page

[fine](#a-page), [fine too](../README.md#commands-and-exit-codes), [web](https://example.org/x).
[missing file](nowhere.md), [missing anchor](../README.md#no-such-section), [self](#no-such).
`[in code](nowhere-either.md)`

```
[in a fence](nowhere-at-all.md)
```

[ref]: ../no-such-dir/
[2.x `status.go`]: a line of prose that starts like a reference definition, not one.
";
    let broken = broken_links(&file, text);
    let targets: Vec<&str> = broken
        .iter()
        .map(|b| b.split(": ").nth(1).unwrap_or(""))
        .collect();
    assert_eq!(
        targets,
        [
            "nowhere.md",
            "../README.md#no-such-section",
            "#no-such",
            "../no-such-dir/"
        ],
        "{broken:#?}"
    );
}
