//! What a waiting pod says, and how often: a thousand waiting pods do not log every hand-off.

use std::time::Duration;
use tokio::time::Instant;

/// How often a waiting pod says again why it waits, when only the figures changed.
const REMIND: Duration = Duration::from_secs(60);

/// Says `words` when they differ from the last said in more than their figures, or when the
/// last was said a minute ago: a thousand waiting pods do not log every hand-off.
pub(super) struct Voice<'a> {
    pub(super) say: &'a dyn Fn(&str),
    pub(super) last: String,
    pub(super) at: Option<Instant>,
}

impl Voice<'_> {
    pub(super) fn say(&mut self, words: &str) {
        let shape: String = words.chars().filter(|c| !c.is_ascii_digit()).collect();
        let due = self.at.is_none_or(|t| t.elapsed() >= REMIND);
        if shape != self.last || due {
            (self.say)(words);
            self.last = shape;
            self.at = Some(Instant::now());
        }
    }
}
