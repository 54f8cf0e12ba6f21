//! What the sidecar let nginx keep, on a file, so that the next process can take it back.
//!
//! The grant table lives in memory: without this, a restart (a deploy, a crash) leaves answers
//! in nginx's cache that no revocation can reach until they expire. With a journal, each grant
//! is appended as a line (`<until, unix seconds> <cache key>`) before nginx is told it may keep
//! the answer, and a starting sidecar reads the lines still in force and owes nginx a purge of
//! each: it cannot know which were revoked while no process was listening, so it takes them all
//! back. The file is rewritten from what is still in force whenever its dead lines outnumber
//! the live ones, through a new file renamed over the old, so that a crash leaves one or the
//! other, never half of one.
//!
//! The lines hold raw `Authorization` values, as nginx's own cache files do: the file is
//! created readable by its owner alone, and belongs on tmpfs beside nginx's cache.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Lines read from a journal at most: a file longer than this is not one this sidecar wrote
/// under its own bound, and what is past it is ignored (with a log line).
const MAX_LINES_READ: usize = 1 << 22;
/// Dead lines a journal may hold beyond its live ones before it is rewritten.
const SLACK_LINES: usize = 1024;

/// An append-only file of grants, rewritten from the live ones now and then.
#[derive(Debug)]
pub(super) struct Journal {
    path: PathBuf,
    file: File,
    /// Lines in the file now.
    lines: usize,
}

impl Journal {
    /// Opens the journal at `path`, creating it when there is none, and returns with it the
    /// grants a previous process recorded that are still in force at `now` (unix seconds): the
    /// caller must take them back from nginx. The file is rewritten to hold those alone.
    ///
    /// # Errors
    ///
    /// When the file cannot be read, written or renamed; then nothing may be granted.
    pub(super) fn open(path: &Path, now: u64) -> io::Result<(Journal, Vec<(String, u64)>)> {
        let in_force = match File::open(path) {
            Ok(file) => read_in_force(file, now, path)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let journal = Journal::rewrite(path, in_force.iter().map(|(k, u)| (k.as_str(), *u)))?;
        Ok((journal, in_force))
    }

    /// Records that nginx may keep the answer under `key` until `until` (unix seconds), in one
    /// write, so that a crash leaves the line whole or absent.
    ///
    /// # Errors
    ///
    /// When the write fails; then the answer must not be granted.
    pub(super) fn record(&mut self, key: &str, until: u64) -> io::Result<()> {
        self.file.write_all(format!("{until} {key}\n").as_bytes())?;
        self.lines += 1;
        Ok(())
    }

    /// Whether the file holds enough dead lines, beside `live` ones, to be rewritten.
    pub(super) fn is_due(&self, live: usize) -> bool {
        self.lines > live.saturating_mul(2).saturating_add(SLACK_LINES)
    }

    /// Rewrites the file with `live` alone (cache keys with their end, unix seconds).
    ///
    /// # Errors
    ///
    /// When the new file cannot be written or renamed; the old one is kept, and appended to.
    pub(super) fn compact<'a>(
        &mut self,
        live: impl Iterator<Item = (&'a str, u64)>,
    ) -> io::Result<()> {
        *self = Journal::rewrite(&self.path, live)?;
        Ok(())
    }

    /// A journal at `path` holding `lines` alone: written beside it, then renamed over it.
    fn rewrite<'a>(
        path: &Path,
        lines: impl Iterator<Item = (&'a str, u64)>,
    ) -> io::Result<Journal> {
        let mut name = path.as_os_str().to_owned();
        name.push(".new");
        let fresh = PathBuf::from(name);
        let mut written = 0;
        {
            let mut out = io::BufWriter::new(create_private(&fresh, true)?);
            for (key, until) in lines {
                writeln!(out, "{until} {key}")?;
                written += 1;
            }
            out.into_inner().map_err(io::IntoInnerError::into_error)?;
        }
        std::fs::rename(&fresh, path)?;
        Ok(Journal {
            path: path.to_owned(),
            file: create_private(path, false)?,
            lines: written,
        })
    }
}

/// `path` opened to append (or, with `truncate`, created empty), readable by its owner alone.
fn create_private(path: &Path, truncate: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).mode(0o600);
    if truncate {
        options.write(true).truncate(true);
    } else {
        options.append(true);
    }
    options.open(path)
}

/// The lines of `file` still in force at `now`, the first [`MAX_LINES_READ`] at most; lines
/// that are not a grant (cut short by a crash, or not this sidecar's) are skipped.
fn read_in_force(file: File, now: u64, path: &Path) -> io::Result<Vec<(String, u64)>> {
    let mut in_force = Vec::new();
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    for _ in 0..MAX_LINES_READ {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(in_force);
        }
        // A line without its end was cut short by a crash: its key is not whole.
        let Some(line) = line.strip_suffix(b"\n") else {
            continue;
        };
        let Some((until, key)) = std::str::from_utf8(line)
            .ok()
            .and_then(|line| line.split_once(' '))
            .and_then(|(until, key)| Some((until.parse::<u64>().ok()?, key)))
        else {
            continue;
        };
        if until > now && is_header_value(key) {
            in_force.push((key.to_owned(), until));
        }
    }
    tracing::warn!(
        path = %path.display(),
        "the nginx grants file is longer than any this sidecar writes; the rest is ignored"
    );
    Ok(in_force)
}

/// Whether `key` could be an `Authorization` header as nginx keys its cache by: visible ASCII
/// and spaces, not empty.
fn is_header_value(key: &str) -> bool {
    !key.is_empty() && key.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal_path(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("grants-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("grants")
    }

    #[test]
    fn a_new_process_reads_back_the_grants_still_in_force_and_nothing_else() {
        let path = journal_path("read-back");
        let _ = std::fs::remove_file(&path);
        let (mut journal, old) = Journal::open(&path, 1_000).unwrap();
        assert!(old.is_empty(), "a new journal holds nothing");
        journal.record("Bearer live-1", 1_100).unwrap();
        journal.record("Bearer expired", 1_050).unwrap();
        journal.record("Bearer live-2", 1_200).unwrap();
        // A crash in the middle of a line, and a line that is not a grant.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"garbage without a number\n1300 Bearer cut-sh")
            .unwrap();
        drop((journal, file));

        let (journal, in_force) = Journal::open(&path, 1_060).unwrap();
        let keys: Vec<&str> = in_force.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["Bearer live-1", "Bearer live-2"]);
        assert_eq!(journal.lines, 2, "rewritten with the live lines alone");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "1100 Bearer live-1\n1200 Bearer live-2\n");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "readable by its owner alone");
    }

    #[test]
    fn a_journal_is_rewritten_from_the_live_grants_once_dead_lines_pile_up() {
        let path = journal_path("compact");
        let _ = std::fs::remove_file(&path);
        let (mut journal, _) = Journal::open(&path, 0).unwrap();
        for i in 0..SLACK_LINES + 4 {
            journal.record(&format!("Bearer t{i}"), 10).unwrap();
        }
        assert!(!journal.is_due(2), "not yet: {} lines", journal.lines);
        journal.record("Bearer last", 10).unwrap();
        assert!(journal.is_due(2));
        journal
            .compact([("Bearer a", 20), ("Bearer b", 30)].into_iter())
            .unwrap();
        journal.record("Bearer c", 40).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "20 Bearer a\n30 Bearer b\n40 Bearer c\n");
        assert!(!journal.is_due(3));
    }
}
