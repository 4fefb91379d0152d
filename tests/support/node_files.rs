//! Files inside a booted node, read and written from the host.

use super::*;

impl Node {
    /// Where the node's `path` is on the host, all symlinks resolved inside the node.
    pub fn host_path(&self, path: impl AsRef<Path>) -> Result<PathBuf, NodeError> {
        let path = path.as_ref();
        let resolved = self.exec_ok(&[
            OsStr::new("realpath"),
            OsStr::new("-m"),
            OsStr::new("--"),
            path.as_os_str(),
        ])?;
        let resolved = resolved.trim_end_matches('\n');
        Ok(self.root_dir().join(resolved.trim_start_matches('/')))
    }

    /// Write a file inside the node atomically (mode 0644), creating parent directories. Works
    /// for every path, /run included.
    pub fn write_file(&self, path: impl AsRef<Path>, contents: &[u8]) -> Result<(), NodeError> {
        self.write_file_mode(path, contents, 0o644)
    }

    pub fn write_file_mode(
        &self,
        path: impl AsRef<Path>,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), NodeError> {
        let path = path.as_ref();
        let dest = self.host_path(path)?;
        let io = |source| NodeError::Io {
            name: self.name.clone(),
            path: path.to_path_buf(),
            source,
        };
        let dir = dest
            .parent()
            .ok_or_else(|| io(std::io::ErrorKind::InvalidInput.into()))?;
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
        tmp.write_all(contents).map_err(io)?;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(io)?;
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(&dest).map_err(|e| io(e.error))?;
        Ok(())
    }

    /// Read a file inside the node; a missing file is an `Io` error of kind NotFound.
    pub fn read_file(&self, path: impl AsRef<Path>) -> Result<Vec<u8>, NodeError> {
        let path = path.as_ref();
        let src = self.host_path(path)?;
        std::fs::read(&src).map_err(|source| NodeError::Io {
            name: self.name.clone(),
            path: path.to_path_buf(),
            source,
        })
    }

    /// A file's bytes, `None` only when it does not exist (not even as a dangling symlink):
    /// any other error fails the test, so that "no file" is never a read error in disguise.
    pub fn read_if_exists(&self, path: impl AsRef<Path>) -> Option<Vec<u8>> {
        let path = path.as_ref();
        match self.exists(path) {
            Ok(true) => Some(
                self.read_file(path)
                    .unwrap_or_else(|e| panic!("cannot read {}: {e:?}", path.display())),
            ),
            Ok(false) => None,
            Err(e) => panic!("cannot check {}: {e:?}", path.display()),
        }
    }

    /// Whether `path` exists inside the node.
    pub fn exists(&self, path: impl AsRef<Path>) -> Result<bool, NodeError> {
        Ok(self.host_path(path)?.symlink_metadata().is_ok())
    }
}
