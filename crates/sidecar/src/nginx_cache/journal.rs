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
//! The lines hold raw `Authorization` values, as nginx's own cache files do, so the file is
//! guarded as a secret (and belongs on tmpfs beside nginx's cache):
//! - it is never opened through a symbolic link (`O_NOFOLLOW`): a link at its path is refused;
//! - an existing file that its group or others may read or write, that another user owns, or
//!   that is not a regular file, is refused with an error naming its path and mode (or owner),
//!   never used or "fixed": whoever could read it may have read it already, and the operator
//!   must know;
//! - the replacement (`<path>.new`) is always a file this process creates (`O_EXCL`, mode
//!   0600): one found there (a crash's leftover, or another user's) is unlinked, never opened;
//! - a line's end is clamped to the `latest` the caller gives (what no grant can outlive), so a
//!   far-future or overflowing one cannot make a purge pending forever or a clock overflow.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Lines read from a journal at most: a file longer than this is not one this sidecar wrote
/// under its own bound, and what is past it is ignored (with a log line).
const MAX_LINES_READ: usize = 1 << 22;
/// Dead lines a journal may hold beyond its live ones before it is rewritten.
const SLACK_LINES: usize = 1024;
/// The permission bits a journal may have: read and write by its owner.
const PRIVATE: u32 = 0o600;

/// An append-only file of grants, rewritten from the live ones now and then.
#[derive(Debug)]
pub(super) struct Journal {
    path: PathBuf,
    /// The file at `path`, as this process created it, open to append.
    file: File,
    /// Lines in the file now.
    lines: usize,
}

impl Journal {
    /// Opens the journal at `path`, creating it when there is none, and returns with it the
    /// grants a previous process recorded that are still in force at `now` (unix seconds),
    /// each ending at `latest` at most: the caller must take them back from nginx. The file is
    /// rewritten to hold those alone.
    ///
    /// # Errors
    ///
    /// When `path` is a symbolic link, not a regular file, or readable or writable by others
    /// than its owner (the message names the path and the mode); when the file cannot be read,
    /// written or renamed. Then nothing may be granted.
    pub(super) fn open(
        path: &Path,
        now: u64,
        latest: u64,
    ) -> io::Result<(Journal, Vec<(String, u64)>)> {
        // The replacement first: its owner is this process's user, whom the file must be.
        let fresh = replacement(path);
        let file = create_new_private(&fresh)?;
        let read = (|| {
            let owner = file.metadata()?.uid();
            match open_private(path, owner)? {
                Some(old) => read_in_force(old, now, latest, path),
                None => Ok(Vec::new()),
            }
        })();
        let in_force = read.inspect_err(|_| {
            let _ = std::fs::remove_file(&fresh);
        })?;
        let lines = in_force.iter().map(|(k, u)| (k.as_str(), *u));
        let journal = Journal::write_over(path, &fresh, file, lines)?;
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

    /// A journal at `path` holding `lines` alone: written to a file created anew beside it,
    /// renamed over it, and appended to from then on through the same descriptor (the path is
    /// never opened again).
    fn rewrite<'a>(
        path: &Path,
        lines: impl Iterator<Item = (&'a str, u64)>,
    ) -> io::Result<Journal> {
        let fresh = replacement(path);
        let file = create_new_private(&fresh)?;
        Journal::write_over(path, &fresh, file, lines)
    }

    /// Writes `lines` to `file`, just created at `fresh`, and renames it over `path`; on
    /// failure `fresh` is removed and `path` left as it was.
    fn write_over<'a>(
        path: &Path,
        fresh: &Path,
        file: File,
        lines: impl Iterator<Item = (&'a str, u64)>,
    ) -> io::Result<Journal> {
        let mut written = 0;
        let mut out = io::BufWriter::new(file);
        let file = (|| -> io::Result<File> {
            for (key, until) in lines {
                writeln!(out, "{until} {key}")?;
                written += 1;
            }
            let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
            std::fs::rename(fresh, path)?;
            Ok(file)
        })();
        let file = file.inspect_err(|_| {
            let _ = std::fs::remove_file(fresh);
        })?;
        Ok(Journal {
            path: path.to_owned(),
            file,
            lines: written,
        })
    }
}

/// Where the journal at `path` is rewritten before it is renamed over it: `<path>.new`.
fn replacement(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".new");
    PathBuf::from(name)
}

/// The journal at `path` opened to read, `None` when there is none.
///
/// # Errors
///
/// When it is a symbolic link, not a regular file, not `owner`'s, or open to others than its
/// owner.
fn open_private(path: &Path, owner: u32) -> io::Result<Option<File>> {
    let file = OpenOptions::new()
        .read(true)
        // O_NONBLOCK: a FIFO put there must not hold the start up; no effect on a file.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refused(path, "it is a symbolic link"));
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused(path, "it is not a regular file"));
    }
    if meta.uid() != owner {
        let why = format!(
            "it belongs to user {}, not to this process's user {owner}",
            meta.uid()
        );
        return Err(refused(path, &why));
    }
    let mode = meta.mode() & 0o7777;
    if mode & !PRIVATE != 0 {
        let why = format!(
            "its mode is {mode:04o}: others than its owner may read or write the tokens in it \
             (it must be 0600; check who read it, then chmod 600 it)"
        );
        return Err(refused(path, &why));
    }
    Ok(Some(file))
}

/// Why the journal at `path` is not used, as an error naming it.
fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("the grants file {} is refused: {why}", path.display()),
    )
}

/// A file created at `path` by this call (never one found there: a leftover is unlinked, a
/// symbolic link included, and the creation tried once more), readable by its owner alone,
/// open to append.
fn create_new_private(path: &Path) -> io::Result<File> {
    let create = || {
        OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(PRIVATE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
    };
    let file = match create() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            tracing::warn!(
                path = %path.display(),
                "a file was left where the grants file is rewritten; it is removed, not used"
            );
            std::fs::remove_file(path)?;
            create()?
        }
        file => file?,
    };
    // The umask may only have taken bits away; make sure of the owner's own.
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(PRIVATE))?;
    Ok(file)
}

/// The lines of `file` still in force at `now`, each ending at `latest` at most, the first
/// [`MAX_LINES_READ`] at most; lines that are not a grant (cut short by a crash, or not this
/// sidecar's) are skipped.
pub(crate) fn read_in_force(
    file: impl io::Read,
    now: u64,
    latest: u64,
    path: &Path,
) -> io::Result<Vec<(String, u64)>> {
    let mut in_force = Vec::new();
    let mut clamped = 0usize;
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut whole = false;
    for _ in 0..MAX_LINES_READ {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            whole = true;
            break;
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
            if until > latest {
                clamped += 1;
            }
            in_force.push((key.to_owned(), until.min(latest)));
        }
    }
    if clamped > 0 {
        tracing::warn!(
            path = %path.display(),
            lines = clamped,
            "the nginx grants file holds grants ending later than any this sidecar makes; \
             they are taken back as if they ended at the latest"
        );
    }
    if !whole {
        tracing::warn!(
            path = %path.display(),
            "the nginx grants file is longer than any this sidecar writes; the rest is ignored"
        );
    }
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
        let (mut journal, old) = Journal::open(&path, 1_000, u64::MAX).unwrap();
        assert!(old.is_empty(), "a new journal holds nothing");
        journal.record("Bearer live-1", 1_100).unwrap();
        journal.record("Bearer expired", 1_050).unwrap();
        journal.record("Bearer live-2", 1_200).unwrap();
        // A crash in the middle of a line, and a line that is not a grant.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"garbage without a number\n1300 Bearer cut-sh")
            .unwrap();
        drop((journal, file));

        let (journal, in_force) = Journal::open(&path, 1_060, u64::MAX).unwrap();
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
        let (mut journal, _) = Journal::open(&path, 0, u64::MAX).unwrap();
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

    /// A file at `path` holding `text`, with `mode`.
    fn write_with_mode(path: &Path, text: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_symbolic_link_at_the_path_is_refused_and_its_target_left_alone() {
        let path = journal_path("symlink");
        let target = path.with_file_name("elsewhere");
        let _ = std::fs::remove_file(&path);
        write_with_mode(&target, "1000 Bearer someone-elses\n", 0o600);
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let e = Journal::open(&path, 0, u64::MAX).unwrap_err();
        let message = e.to_string();
        assert!(message.contains("symbolic link"), "{message}");
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "1000 Bearer someone-elses\n",
            "the link's target is neither read back nor rewritten"
        );
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
    }

    #[test]
    fn a_file_others_may_read_is_refused_naming_its_path_and_mode() {
        for mode in [0o644, 0o640, 0o606, 0o620] {
            let path = journal_path("mode");
            write_with_mode(&path, "1000 Bearer t\n", mode);
            let e = Journal::open(&path, 0, u64::MAX).unwrap_err();
            let message = e.to_string();
            assert!(message.contains(&format!("{mode:04o}")), "{message}");
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                "1000 Bearer t\n",
                "a refused file is left as it was"
            );
        }
        let path = journal_path("mode");
        write_with_mode(&path, "1000 Bearer t\n", 0o600);
        assert_eq!(Journal::open(&path, 0, u64::MAX).unwrap().1.len(), 1);
    }

    #[test]
    fn a_file_found_where_the_replacement_is_written_is_not_followed_nor_used() {
        use std::os::unix::fs::PermissionsExt;
        let path = journal_path("replacement");
        let fresh = path.with_file_name("grants.new");
        let victim = path.with_file_name("victim");
        let planted = path.with_file_name("planted");
        for (name, planted_file) in [("a link", false), ("a file", true)] {
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(&fresh);
            let _ = std::fs::remove_file(&planted);
            write_with_mode(&victim, "precious\n", 0o600);
            if planted_file {
                // Another's file, which that other can still read through a second link.
                write_with_mode(&fresh, "", 0o666);
                std::fs::hard_link(&fresh, &planted).unwrap();
            } else {
                std::os::unix::fs::symlink(&victim, &fresh).unwrap();
            }
            let (mut journal, _) = Journal::open(&path, 0, u64::MAX).unwrap();
            journal.record("Bearer secret", 10).unwrap();
            assert_eq!(
                std::fs::read_to_string(&victim).unwrap(),
                "precious\n",
                "{name}: the link at the replacement's path was followed"
            );
            if planted_file {
                assert_eq!(
                    std::fs::read_to_string(&planted).unwrap(),
                    "",
                    "{name}: the planted file was used"
                );
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            assert!(meta.is_file(), "{name}");
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                "10 Bearer secret\n"
            );
        }
    }

    #[test]
    fn a_far_future_end_is_clamped_to_the_latest() {
        let path = journal_path("far-future");
        let text = format!(
            "{} Bearer max\n1000000000000000000 Bearer quintillion\n99999999999999999999999 Bearer past-u64\n150 Bearer near\n",
            u64::MAX
        );
        write_with_mode(&path, &text, 0o600);
        let (_, in_force) = Journal::open(&path, 100, 200).unwrap();
        assert_eq!(
            in_force,
            [
                ("Bearer max".to_owned(), 200),
                ("Bearer quintillion".to_owned(), 200),
                ("Bearer near".to_owned(), 150),
            ]
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "200 Bearer max\n200 Bearer quintillion\n150 Bearer near\n",
            "rewritten clamped"
        );
    }

    #[test]
    fn a_file_of_another_user_is_refused() {
        let path = journal_path("owner");
        write_with_mode(&path, "1000 Bearer t\n", 0o600);
        // Only root may give a file away: elsewhere this case cannot be set up.
        if std::os::unix::fs::chown(&path, Some(65_534), Some(65_534)).is_err() {
            eprintln!("not root: a file of another user cannot be made here");
            return;
        }
        let message = Journal::open(&path, 0, u64::MAX).unwrap_err().to_string();
        assert!(message.contains("belongs to user 65534"), "{message}");
        assert!(
            !replacement(&path).exists(),
            "the replacement is removed with the refusal"
        );
    }
}
