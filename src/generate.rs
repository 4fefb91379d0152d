//! `kata-live generate man|completions --out-dir DIR` (hidden): the man pages and shell
//! completions are generated from the clap definition in [`crate::cli`], so they cannot
//! drift from the real command line. The RPM build runs it; nothing on a node does.

pub use crate::cli::{Artifact, GenerateArgs};
use crate::files::{self, FsError};
use clap_complete::{Generator, Shell};
use std::path::{Path, PathBuf};

/// Section 8: system administration commands (kata-live runs as root on a node).
pub const MAN_SECTION: &str = "8";
/// Section 1: user commands (`kubectl-kata_live` runs on an administrator's machine).
pub const PLUGIN_MAN_SECTION: &str = "1";

/// The shells whose completions are shipped.
pub const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("cannot render {file}: {}", crate::words::io(.source))]
    Render {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write into {dir} (pass a writable --out-dir): {source}")]
    Write {
        dir: PathBuf,
        #[source]
        source: FsError,
    },
}

/// Renders every page in memory: (file name, content). Hidden subcommands get no page.
pub fn man_pages(cmd: clap::Command) -> Result<Vec<(String, Vec<u8>)>, GenerateError> {
    man_pages_in(cmd, MAN_SECTION)
}

/// [`man_pages`] in manual section `section`.
pub fn man_pages_in(
    cmd: clap::Command,
    section: &'static str,
) -> Result<Vec<(String, Vec<u8>)>, GenerateError> {
    let mut cmd = cmd.disable_help_subcommand(true);
    // Building propagates the global options into the subcommands and names them
    // `kata-live-install` etc., which titles their pages.
    cmd.build();
    let mut out = Vec::new();
    let mut pending = vec![cmd];
    while let Some(c) = pending.pop() {
        pending.extend(c.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        let man = clap_mangen::Man::new(c).section(section);
        let file = man.get_filename();
        let mut buf = Vec::new();
        man.render(&mut buf)
            .map_err(|source| GenerateError::Render {
                file: file.clone(),
                source,
            })?;
        out.push((file, buf));
    }
    out.sort();
    Ok(out)
}

/// The command without its hidden subcommands: clap_complete, unlike clap_mangen, would
/// offer them. Only what completion uses is copied (name, about, version, arguments).
fn without_hidden(cmd: &clap::Command) -> clap::Command {
    let mut c = clap::Command::new(cmd.get_name().to_string())
        .args(cmd.get_arguments().cloned())
        .subcommands(
            cmd.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(without_hidden),
        );
    if let Some(about) = cmd.get_about() {
        c = c.about(about.clone());
    }
    if cmd.get_version().is_some() {
        // Only the top-level command has one (`#[command(version)]`), the crate's.
        c = c.version(env!("CARGO_PKG_VERSION"));
    }
    c
}

/// Renders the completion scripts in memory: (file name, content).
pub fn completions(cmd: clap::Command) -> Vec<(String, Vec<u8>)> {
    let mut cmd = without_hidden(&cmd);
    let bin = cmd.get_name().to_string();
    SHELLS
        .iter()
        .map(|shell| {
            let mut buf = Vec::new();
            clap_complete::generate(*shell, &mut cmd, bin.clone(), &mut buf);
            (shell.file_name(&bin), buf)
        })
        .collect()
}

/// Writes the files atomically into `dir`; returns their paths.
pub fn write_all(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<Vec<PathBuf>, GenerateError> {
    files
        .iter()
        .map(|(name, bytes)| {
            let path = dir.join(name);
            files::write_atomic(dir, &path, bytes, 0o644).map_err(|source| {
                GenerateError::Write {
                    dir: dir.to_path_buf(),
                    source,
                }
            })?;
            Ok(path)
        })
        .collect()
}

/// The subcommand: writes the files and lists them on stdout.
pub fn run(args: &GenerateArgs) -> Result<Vec<PathBuf>, GenerateError> {
    run_for(crate::cli::command(), MAN_SECTION, args)
}

/// The subcommand for the command line `cmd` (kata-live's, or kubectl-kata_live's), its man
/// pages in `section`.
pub fn run_for(
    cmd: clap::Command,
    section: &'static str,
    args: &GenerateArgs,
) -> Result<Vec<PathBuf>, GenerateError> {
    let files = match args.what {
        Artifact::Man => man_pages_in(cmd, section)?,
        Artifact::Completions => completions(cmd),
    };
    let written = write_all(&args.out_dir, &files)?;
    for p in &written {
        println!("{}", p.display());
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(files: &[(String, Vec<u8>)], name: &str) -> String {
        let (_, b) = files
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", names(files)));
        String::from_utf8(b.clone()).unwrap()
    }

    fn names(files: &[(String, Vec<u8>)]) -> Vec<&str> {
        files.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn the_kubectl_plugin_has_its_pages_in_section_1() {
        use clap::CommandFactory as _;
        let pages = man_pages_in(crate::rollout::PluginCli::command(), PLUGIN_MAN_SECTION).unwrap();
        assert_eq!(
            names(&pages),
            [
                "kubectl-kata_live-rollout-status.1",
                "kubectl-kata_live-rollout.1",
                "kubectl-kata_live.1",
            ]
        );
        let top = text(&pages, "kubectl-kata_live.1");
        assert!(top.contains(".TH kubectl-kata_live 1"), "{top:.200}");
        assert!(!top.contains("generate"), "hidden subcommand leaked");
        let status = text(&pages, "kubectl-kata_live-rollout-status.1");
        for opt in [
            "\\-\\-kubeconfig",
            "\\-\\-context",
            "\\-\\-watch",
            "\\-\\-json",
        ] {
            assert!(status.contains(opt), "{opt} not in:\n{status}");
        }
    }

    #[test]
    fn one_page_per_visible_command_and_none_for_generate() {
        let pages = man_pages(crate::cli::command()).unwrap();
        assert_eq!(
            names(&pages),
            [
                "kata-live-config.8",
                "kata-live-install.8",
                "kata-live-status.8",
                "kata-live-uninstall.8",
                "kata-live-verify.8",
                "kata-live.8",
            ]
        );
        let top = text(&pages, "kata-live.8");
        assert!(top.starts_with(".ie"), "not roff: {top:.80}");
        assert!(top.contains(".TH kata-live 8"), "{top:.200}");
        assert!(!top.contains("generate"), "hidden subcommand leaked");
        // The exit-code table (after_help) is part of the page.
        assert!(top.contains("rollback failed"), "no exit codes in page");
        // Global options reach the subcommands' pages.
        let uninstall = text(&pages, "kata-live-uninstall.8");
        assert!(uninstall.contains("\\-\\-force"), "{uninstall}");
        assert!(uninstall.contains("\\-\\-root"), "{uninstall}");
    }

    #[test]
    fn completions_for_three_shells_name_the_commands() {
        let files = completions(crate::cli::command());
        assert_eq!(
            names(&files),
            ["kata-live.bash", "_kata-live", "kata-live.fish"]
        );
        for (name, _) in &files {
            let t = text(&files, name);
            for word in [
                "install",
                "uninstall",
                "verify",
                "no-detach",
                "force",
                "dry-run",
            ] {
                assert!(t.contains(word), "{name} lacks {word}");
            }
            assert!(
                !t.contains("out-dir"),
                "{name} offers the hidden subcommand"
            );
        }
    }

    #[test]
    fn writes_atomically_into_a_new_directory() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("man");
        let written = run(&GenerateArgs {
            what: Artifact::Man,
            out_dir: out.clone(),
        })
        .unwrap();
        assert_eq!(written.len(), 6);
        for p in written {
            assert!(p.starts_with(&out));
            assert!(std::fs::metadata(&p).unwrap().len() > 100);
        }
        // Nothing else (no temp files) is left behind.
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 6);
    }
}
