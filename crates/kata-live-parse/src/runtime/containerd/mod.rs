//! containerd: [`config`], the handler drop-in for the main file's config version;
//! [`imports`], the `imports` edit of the main file and its exact inverse; [`effective`],
//! the running daemon's definition (CRI `info["config"]`, `containerd config dump`)
//! compared with ours.

pub mod config;
pub mod effective;
pub mod imports;

pub use config::{ConfigVersion, ContainerdHandler, ImportMerge};
pub use effective::{compare_dump, compare_effective};
pub use imports::{ensure_import, import_covering, remove_import, ImportError};
