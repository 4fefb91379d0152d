//! A booted node's journal: read, waited on and saved.

use super::*;

impl Node {
    /// The node's journal of this boot (`journalctl -b -o short-precise`).
    pub fn journal(&self) -> String {
        self.journal_args(&[])
    }

    /// The journal of one unit this boot.
    pub fn journal_unit(&self, unit: &str) -> String {
        self.journal_args(&["-u", unit])
    }

    /// The journal of several units, interleaved in time order.
    pub fn journal_units(&self, units: &[&str]) -> String {
        let args: Vec<&str> = units.iter().flat_map(|u| ["-u", *u]).collect();
        self.journal_args(&args)
    }

    /// Waits until journald has written every record sent to it before this call: records
    /// reach journald over a datagram socket and are written when it gets to them, so a
    /// count read right after a run may miss the run's last records (seen: a run's
    /// SUCCEEDED record counted 0 under load). `journalctl --sync` returns once journald
    /// has processed what was queued before it.
    pub fn sync_journal(&self) {
        let out = self.exec_timeout(&["journalctl", "--sync"], Duration::from_secs(30));
        assert!(
            out.status.success(),
            "journalctl --sync failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The journal of one unit this boot, for counting: a journalctl that fails fails the
    /// test (a count from its empty output would pass a "no restart" check). Every record
    /// sent before the call is in it ([`Self::sync_journal`]).
    pub fn journal_unit_strict(&self, unit: &str) -> String {
        self.sync_journal();
        let out = self.exec_timeout(
            &[
                "journalctl",
                "-b",
                "--no-pager",
                "-o",
                "short-precise",
                "-u",
                unit,
            ],
            Duration::from_secs(30),
        );
        assert!(
            out.status.success(),
            "journalctl -u {unit} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn journal_args(&self, extra: &[&str]) -> String {
        let mut argv = vec!["journalctl", "-b", "--no-pager", "-o", "short-precise"];
        argv.extend_from_slice(extra);
        let out = self.exec_timeout(&argv, Duration::from_secs(30));
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            s.push_str(&format!(
                "\n[journalctl failed ({}): {}]\n",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        s
    }

    /// Poll `cond` every 50 ms until it holds; the time it took, or `Deadline` naming `what`.
    pub fn wait_for(
        &self,
        what: &str,
        deadline: Duration,
        mut cond: impl FnMut(&Node) -> bool,
    ) -> Result<Duration, NodeError> {
        let start = Instant::now();
        loop {
            if cond(self) {
                return Ok(start.elapsed());
            }
            if start.elapsed() >= deadline {
                return Err(NodeError::Deadline {
                    name: self.name.clone(),
                    what: what.into(),
                    waited: start.elapsed(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Save the journal (and nspawn's console log) under <target>/node-logs/; the journal path.
    pub fn save_journal(&self) -> Result<PathBuf, NodeError> {
        let io = |path: &Path, source| NodeError::Io {
            name: self.name.clone(),
            path: path.to_path_buf(),
            source,
        };
        let dir = &self.paths.log_dir;
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let journal = dir.join(format!("{}.journal", self.name));
        std::fs::write(&journal, self.journal()).map_err(|e| io(&journal, e))?;
        let console = dir.join(format!("{}.console", self.name));
        // Best effort: the console log only helps when boot itself misbehaved.
        let _ = std::fs::copy(self.dir.join("console.log"), &console);
        Ok(journal)
    }
}
