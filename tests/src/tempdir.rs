//! A directory of a test's own under the system temp dir, removed on drop (also when the
//! test fails).

use std::{
    fs,
    path::{Path, PathBuf},
};

pub struct TempDir(PathBuf);

impl TempDir {
    /// `<temp>/<kind>-<pid>-<what>`, emptied first.
    pub fn new(kind: &str, what: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("{kind}-{}-{what}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap_or_else(|e| panic!("creating {}: {e}", p.display()));
        TempDir(p)
    }

    pub fn root(&self) -> &Path {
        &self.0
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Replaces a file in one step (write aside, rename), as an operator's deploy tool would:
/// `run` never reads a half-written file.
pub fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp-write");
    fs::write(&tmp, text).unwrap_or_else(|e| panic!("writing {}: {e}", tmp.display()));
    fs::rename(&tmp, path).unwrap_or_else(|e| panic!("renaming onto {}: {e}", path.display()));
}
