//! What a test makes and finds on the machine's file system: a directory of its own, removed
//! on drop, and the programs on the PATH that it runs (whose absence [`present`](crate::present)
//! turns into a skip, or a failure under CI).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A directory of its own under the system's temporary one, for one test's files; removed,
/// with everything in it, on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty directory whose name starts with `name`: unique to this process and call,
    /// so that tests running at once never share one.
    pub fn new(name: &str) -> TempDir {
        // Several tests of one binary, and several binaries, make directories at once.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "{name}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The path of `file` in the directory (which may not exist yet).
    pub fn join(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    /// The text of `file` in the directory; fails the test, naming it, when it was not written.
    pub fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.join(file))
            .unwrap_or_else(|e| panic!("{file} was not written: {e}"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where the program `name` is on the PATH, if anywhere: the first directory of the PATH that
/// has a file of that name.
pub fn program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}
