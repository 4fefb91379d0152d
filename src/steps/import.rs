//! A runtime that reads a drop-in only through an entry of its main file (containerd's
//! `imports`) gives a hook ([`crate::runtime::Import`]) that makes the edits by its rules;
//! these steps drive it, knowing no runtime. The main file is someone else's: kata-live adds
//! the one entry when none reads the drop-in, keeps the file's previous bytes for the
//! rollback, records that the entry is its own (so that uninstall never removes an import
//! the operator wrote), and removes it again on uninstall unless other files now rely on it.
//! A runtime without the hook (CRI-O reads its drop-in directory itself) has no such step.

use super::*;
use crate::files;
use crate::files::Backup;
use crate::flow::main_file::{recorded, restore_main, set_record};
use crate::flow::Rollback;
use crate::runtime::Edit;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The main file, its text and its mode (kept on rewrite: it is not ours).
struct Main {
    path: PathBuf,
    shown: PathBuf,
    text: String,
    mode: u32,
}

fn read_main(ctx: &Ctx, main: &Path) -> Result<Main, FlowError> {
    let path = ctx.host.path(main);
    let bytes = files::read_nofollow(&path)
        .map_err(|e| FlowError::Refused(format!("containerd's main configuration: {e}")))?
        .ok_or_else(|| {
            FlowError::Refused(format!(
                "containerd's main configuration {} does not exist (containerd runs on its built-in defaults, which import nothing): create it, e.g. `containerd config default > {}`, restart containerd, then re-run",
                main.display(),
                main.display()
            ))
        })?;
    let text = String::from_utf8(bytes)
        .map_err(|_| FlowError::Refused(format!("{} is not UTF-8 text", main.display())))?;
    let mode = std::fs::metadata(&path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644);
    Ok(Main {
        path,
        shown: main.to_path_buf(),
        text,
        mode,
    })
}

/// Atomically, with the file's own mode; first removes what a killed earlier write left
/// beside it.
fn write_main(ctx: &Ctx, m: &Main, text: &str) -> Result<(), FlowError> {
    let err = |e: files::FsError| node_file("writing containerd's main configuration")(&e);
    for name in files::remove_stale_temps(&ctx.host.root, &m.path).map_err(err)? {
        tracing::warn!(path = %m.shown.display(), "removed {name}, left beside it by an interrupted write");
    }
    files::write_atomic(&ctx.host.root, &m.path, text.as_bytes(), m.mode).map_err(err)
}

/// Keeps the main file's bytes before this operation's first edit (a resumed run keeps the
/// killed run's backup: it holds the true previous state).
fn keep_backup(ctx: &Ctx, m: &Main) -> Result<(), FlowError> {
    let store = ctx.main_backups();
    if store
        .load()
        .map_err(|e| node_file("reading the backup of the main file")(&e))?
        .is_none()
    {
        store
            .save(&Backup {
                path: m.shown.clone(),
                existed: true,
                content: Some(m.text.clone().into_bytes()),
            })
            .map_err(|e| node_file("saving the backup of the main file")(&e))?;
    }
    Ok(())
}

/// Install: the main file imports the drop-in.
pub struct EnsureImport;

impl EnsureImport {
    pub fn new() -> Self {
        EnsureImport
    }

    fn edit(ctx: &Ctx) -> Result<(Main, Edit), FlowError> {
        let Some(imp) = ctx.rt.import() else {
            return Err(FlowError::Internal(
                "the import step on a runtime without imports".into(),
            ));
        };
        let m = read_main(ctx, imp.main)?;
        let edit = imp
            .edits
            .ensure(&m.text)
            .map_err(|e| FlowError::Refused(e.to_string()))?;
        Ok((m, edit))
    }
}

impl Default for EnsureImport {
    fn default() -> Self {
        Self::new()
    }
}

impl Step for EnsureImport {
    fn name(&self) -> &'static str {
        "import"
    }
    fn doing(&self, ctx: &Ctx) -> String {
        let main = ctx
            .rt
            .import()
            .map(|i| i.main.display().to_string())
            .unwrap_or_default();
        format!("making {main} import the drop-in")
    }
    fn changes_runtime_config(&self) -> bool {
        true
    }
    fn prepare(&mut self, ctx: &Ctx, _run: &mut Run) -> Result<(), FlowError> {
        let (m, edit) = Self::edit(ctx)?;
        if matches!(edit, Edit::Changed { .. }) {
            keep_backup(ctx, &m)?;
        }
        Ok(())
    }
    /// The main file back as before; the record goes with the import (see [`restore_main`]).
    fn undo(&mut self, ctx: &Ctx, _run: &Run, rep: &mut Reporter) -> Result<(), Rollback> {
        restore_main(ctx, rep)
    }
    fn plan<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        _rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let (m, edit) = Self::edit(ctx)?;
            Ok(Done::skipped(match edit {
                Edit::AlreadyCovered { by } => format!(
                    "dry run: {} already imports the drop-in ({by})",
                    m.shown.display()
                ),
                Edit::Changed { .. } => {
                    run.drop_in_changed = true;
                    format!(
                        "dry run: would add {} to the imports of {}",
                        ctx.rt.import().map(|i| i.glob).unwrap_or_default(),
                        m.shown.display()
                    )
                }
            }))
        })
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        _rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let (m, edit) = Self::edit(ctx)?;
            match edit {
                Edit::AlreadyCovered { by } => Ok(Done::skipped(format!(
                    "{} already imports the drop-in ({by})",
                    m.shown.display()
                ))),
                Edit::Changed { text } => {
                    // The record first: a kill between the two leaves a record of an import
                    // that is not there, which uninstall then finds nothing to remove for.
                    if !recorded(ctx) {
                        set_record(ctx, true)?;
                    }
                    write_main(ctx, &m, &text)?;
                    run.drop_in_changed = true;
                    Ok(Done::ran(format!(
                        "added {} to the imports of {} (one line; the rest of the file is unchanged)",
                        ctx.rt.import().map(|i| i.glob).unwrap_or_default(),
                        m.shown.display()
                    )))
                }
            }
        })
    }
}

/// Uninstall: the import kata-live added is removed, unless it never added it or other
/// files now rely on it.
pub struct RemoveImport {
    removed_now: bool,
}

impl RemoveImport {
    pub fn new() -> Self {
        RemoveImport { removed_now: false }
    }
}

impl Default for RemoveImport {
    fn default() -> Self {
        Self::new()
    }
}

/// Other files the import reads besides the drop-in (tools such as the NVIDIA toolkit put
/// their own drop-ins next to ours once an import exists).
fn others_imported(ctx: &Ctx, glob: &str) -> Vec<PathBuf> {
    let pattern = ctx.host.path(glob);
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
        return Vec::new();
    };
    let ours = ctx.host.path(ctx.rt.drop_in_path());
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| {
                    crate::pathglob::matches(
                        &name.to_string_lossy(),
                        &e.file_name().to_string_lossy(),
                    )
                })
                .map(|e| e.path())
                .filter(|p| *p != ours)
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

impl Step for RemoveImport {
    fn name(&self) -> &'static str {
        "import"
    }
    fn doing(&self, ctx: &Ctx) -> String {
        let main = ctx
            .rt
            .import()
            .map(|i| i.main.display().to_string())
            .unwrap_or_default();
        format!("removing kata-live's import from {main}")
    }
    fn changes_runtime_config(&self) -> bool {
        true
    }
    fn prepare(&mut self, ctx: &Ctx, _run: &mut Run) -> Result<(), FlowError> {
        if let Some(imp) = ctx.rt.import() {
            if recorded(ctx) {
                keep_backup(ctx, &read_main(ctx, imp.main)?)?;
            }
        }
        Ok(())
    }
    fn undo(&mut self, ctx: &Ctx, _run: &Run, rep: &mut Reporter) -> Result<(), Rollback> {
        restore_main(ctx, rep)?;
        if self.removed_now {
            if let Err(e) = set_record(ctx, true) {
                tracing::warn!("the import record could not be written back: {e}");
            }
        }
        Ok(())
    }
    fn plan<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let d = self.decide(ctx, run, rep, false).await?;
            Ok(Done::skipped(format!("dry run: {}", d.detail)))
        })
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(self.decide(ctx, run, rep, true))
    }
}

impl RemoveImport {
    async fn decide(
        &mut self,
        ctx: &Ctx,
        run: &mut Run,
        _rep: &mut Reporter,
        apply: bool,
    ) -> Result<Done, Failure> {
        let Some(imp) = ctx.rt.import() else {
            return Ok(Done::skipped("no import"));
        };
        if !recorded(ctx) {
            return Ok(Done::skipped(format!(
                "the import that reads the drop-in was not added by kata-live: {} is left as it is",
                imp.main.display()
            )));
        }
        let others = others_imported(ctx, imp.glob);
        if !others.is_empty() {
            return Ok(Done::skipped(format!(
                "{} still read(s) {}: the import stays in {} (remove it by hand once nothing needs it)",
                imp.glob,
                others.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
                imp.main.display()
            )));
        }
        let m = read_main(ctx, imp.main)?;
        let new = imp
            .edits
            .remove(&m.text)
            .map_err(|e| FlowError::Refused(e.to_string()))?;
        let Some(text) = new else {
            if apply {
                set_record(ctx, false)?;
            }
            return Ok(Done::skipped(format!(
                "{} no longer holds kata-live's import",
                imp.main.display()
            )));
        };
        if !apply {
            run.drop_in_changed = true;
            return Ok(Done::skipped(format!(
                "would remove {} from the imports of {}",
                imp.glob,
                imp.main.display()
            )));
        }
        write_main(ctx, &m, &text)?;
        set_record(ctx, false)?;
        self.removed_now = true;
        run.drop_in_changed = true;
        Ok(Done::ran(format!(
            "removed {} from the imports of {} (the file is back to its bytes before kata-live)",
            imp.glob,
            imp.main.display()
        )))
    }
}
