//! The runtime's main file (containerd's `config.toml`), which kata-live edits only to add
//! the one `imports` entry that makes the runtime read the drop-in: the record that the entry
//! is kata-live's, and the file put back from its backup by a rollback. The steps that edit
//! it are in [`crate::steps`]; this is what the rollback needs of it.

use super::{Ctx, FlowError, Rollback};
use crate::files;
use crate::report::Reporter;
use crate::state::STATE_DIR;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// The record that the import in the main file was added by kata-live.
const RECORD: &str = "containerd-import-added";

/// Where kata-live records that the import is its own.
pub fn record_path(ctx: &Ctx) -> PathBuf {
    ctx.host.path(STATE_DIR).join(RECORD)
}

pub(crate) fn recorded(ctx: &Ctx) -> bool {
    matches!(files::read_nofollow(&record_path(ctx)), Ok(Some(_)))
}

pub(crate) fn set_record(ctx: &Ctx, on: bool) -> Result<(), FlowError> {
    let p = record_path(ctx);
    let r = if on {
        files::write_atomic(
            &ctx.host.root,
            &p,
            b"kata-live added its import to containerd's main file; uninstall removes it\n",
            0o600,
        )
    } else {
        files::remove_file(&ctx.host.root, &p).map(|_| ())
    };
    r.map_err(|e| crate::flow::node_file("recording the import")(&e))
}

/// Puts containerd's main file back as it was before this operation, byte for byte (no
/// backup: this operation never changed it).
pub fn restore_main(ctx: &Ctx, rep: &mut Reporter) -> Result<(), Rollback> {
    let Some(imp) = ctx.rt.import() else {
        return Ok(());
    };
    let store = ctx.main_backups();
    let backup = match store.load() {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(()),
        Err(e) => {
            return Err(Rollback::Failed(format!(
                "the backup of {} cannot be read: {e}",
                imp.main.display()
            )))
        }
    };
    rep.begin(
        "rollback-main-file",
        &format!("restoring {}", imp.main.display()),
    );
    // Where the backup came from (the run is refused when the configuration names another).
    let file = crate::files::DropIn::new(
        &ctx.host.root,
        ctx.host.path(backup.node_path(&ctx.host.root)),
    );
    let mode = std::fs::metadata(file.path())
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644);
    let r = match &backup.content {
        Some(bytes) => {
            files::write_atomic(&ctx.host.root, file.path(), bytes, mode).map_err(|e| e.to_string())
        }
        None => Err("the backup holds no content".to_string()),
    };
    if let Err(e) = r {
        let msg = format!(
            "{} could not be restored ({e}); its previous content is saved under {}/backup/",
            imp.main.display(),
            ctx.host.path(STATE_DIR).display()
        );
        rep.end(crate::report::StepOutcome::Failed, msg.clone());
        return Err(Rollback::Failed(msg));
    }
    if let Err(e) = store.clear() {
        tracing::warn!(
            "{} restored, but its backup could not be removed: {e}",
            imp.main.display()
        );
    }
    // The record says the import in the file is kata-live's: once the file is back without
    // an import of the drop-in, there is none to claim (a later import may be the operator's).
    let covered = backup
        .content
        .as_deref()
        .and_then(|b| std::str::from_utf8(b).ok())
        .map(|t| imp.edits.covering(t));
    if !matches!(covered, Some(Ok(Some(_)))) {
        if let Err(e) = set_record(ctx, false) {
            tracing::warn!("the import record could not be removed: {e}");
        }
    }
    rep.end(
        crate::report::StepOutcome::Ran,
        format!("previous {} restored", imp.main.display()),
    );
    Ok(())
}
