//! Real RPM files for tests: a header with the NEVRA asked for and a payload with the files
//! asked for, built with the `rpm` crate (uncompressed payload, no signature). What
//! `fake-rpm-ostree` and kata-live read from them is what they would read from a real
//! package: the name and epoch:version-release.arch from the header, file digests from the
//! header, contents from the payload.

use std::path::{Path, PathBuf};

/// One package to build.
#[derive(Debug, Clone)]
pub struct TestRpm {
    pub name: String,
    /// 0: no epoch tag (how most packages are built; rpm compares it as 0).
    pub epoch: u32,
    pub version: String,
    pub release: String,
    pub arch: String,
    /// `(absolute path in the package, content, mode bits)`.
    pub files: Vec<(String, Vec<u8>, u32)>,
}

impl TestRpm {
    pub fn new(name: &str, version: &str, release: &str) -> Self {
        TestRpm {
            name: name.into(),
            epoch: 0,
            version: version.into(),
            release: release.into(),
            arch: "x86_64".into(),
            files: Vec::new(),
        }
    }

    pub fn epoch(mut self, epoch: u32) -> Self {
        self.epoch = epoch;
        self
    }

    pub fn file(mut self, path: &str, content: impl Into<Vec<u8>>, mode: u32) -> Self {
        self.files.push((path.into(), content.into(), mode));
        self
    }

    /// `name-[epoch:]version-release.arch`, as rpm-ostree prints a local package.
    pub fn nevra(&self) -> String {
        let epoch = if self.epoch == 0 {
            String::new()
        } else {
            format!("{}:", self.epoch)
        };
        format!(
            "{}-{epoch}{}-{}.{}",
            self.name, self.version, self.release, self.arch
        )
    }

    /// The conventional file name, `name-version-release.arch.rpm`.
    pub fn file_name(&self) -> String {
        format!(
            "{}-{}-{}.{}.rpm",
            self.name, self.version, self.release, self.arch
        )
    }

    /// Writes the package into `dir` under [`TestRpm::file_name`] and returns its path.
    pub fn write_to(&self, dir: &Path) -> Result<PathBuf, rpm::Error> {
        self.write_as(&dir.join(self.file_name()))
    }

    /// Writes the package at `path` (any name: what counts is the header).
    pub fn write_as(&self, path: &Path) -> Result<PathBuf, rpm::Error> {
        let mut b = rpm::PackageBuilder::new(
            &self.name,
            &self.version,
            "Apache-2.0",
            &self.arch,
            "kata-live test package",
        );
        // v4: what RHCOS's rpm reads and writes; no compression: the fake reads the payload
        // without a decompressor.
        b.using_config(rpm::BuildConfig::v4().compression(rpm::CompressionType::None));
        b.release(self.release.clone());
        if self.epoch != 0 {
            b.epoch(self.epoch);
        }
        for (dest, content, mode) in &self.files {
            b.with_file_contents(
                content.clone(),
                rpm::FileOptions::new(dest.clone()).permissions(*mode as u16),
            )?;
        }
        b.build()?.write_file(path)?;
        Ok(path.to_path_buf())
    }
}
