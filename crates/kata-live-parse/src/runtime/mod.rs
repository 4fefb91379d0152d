//! The runtimes' files and answers (CRI-O in [`crio`], containerd in [`containerd`]), read
//! and edited as text; kata-live's runtime trait drives them (`kata_live::runtime`).

pub mod containerd;
pub mod crio;
pub mod definition;

use std::path::PathBuf;

/// Other files that declare the handler, by where they come against kata-live's drop-in.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Shadowing {
    pub before: Vec<PathBuf>,
    pub after: Vec<PathBuf>,
}

/// What an `ensure` edit of a main file did (containerd's `imports`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// An existing import already reads the drop-in: the text is unchanged.
    AlreadyCovered { by: String },
    /// The new text: one element added to `imports`, or one line.
    Changed { text: String },
}
