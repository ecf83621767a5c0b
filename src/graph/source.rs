//! Reading graph and prompt files without trusting what a path names.
//!
//! A graph or prompt directory is edited by hand and by tools, so an entry
//! with the right extension may be a directory, a FIFO (opening one blocks
//! until a writer comes), a device (`/dev/zero` never ends) or a symlink to
//! any of these. [`read_capped`] reads only regular files (after following
//! symlinks) and never more than its limit plus one byte, so `check`, a
//! server start and the reloader finish whatever the directory holds.

use std::fs::{File, FileType, Metadata};
use std::io::Read;
use std::path::Path;

/// Why a source file was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The path (after following symlinks) is not a regular file; the text
    /// says what it is instead, e.g. "a directory".
    #[error("is {0}, not a regular file")]
    NotAFile(&'static str),
    /// The file holds more than `limit` bytes; it was not read further.
    #[error("{}", too_large(*size, *limit))]
    TooLarge {
        /// Its size, if known before reading (it may grow while read).
        size: Option<u64>,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The file could not be opened or read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl ReadError {
    /// The diagnostic code for this problem.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Self::NotAFile(_) => "not-a-file",
            Self::TooLarge { .. } => "file-too-large",
            Self::Io(_) => "io",
        }
    }
}

/// Reads the regular file at `path` (symlinks followed), holding at most
/// `limit` bytes.
///
/// The file's type is checked before it is opened (so a FIFO is never
/// opened for a blocking read) and again on the opened handle (the path may
/// have been replaced in between; on Unix the open is non-blocking, so even
/// a FIFO swapped in at that moment cannot hang it). Reading stops one byte
/// past `limit`, so a file that grows while it is read is still cut off.
///
/// # Errors
/// [`ReadError::NotAFile`] for directories, FIFOs, sockets and devices,
/// [`ReadError::TooLarge`] past `limit`, [`ReadError::Io`] otherwise.
pub(crate) fn read_capped(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let len = regular(&std::fs::metadata(path)?)?;
    if len > limit {
        return Err(ReadError::TooLarge {
            size: Some(len),
            limit,
        });
    }
    let file = open(path)?;
    regular(&file.metadata()?)?;
    let mut bytes = Vec::with_capacity(usize::try_from(len.min(limit)).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { size: None, limit });
    }
    Ok(bytes)
}

/// "is 10.5 MB; the limit is 1024 KB", or without the size when unknown.
pub(crate) fn too_large(size: Option<u64>, limit: u64) -> String {
    match size {
        Some(size) => format!(
            "is {:.1} MB; the limit is {} KB",
            size as f64 / 1e6,
            limit / 1024
        ),
        None => format!("is larger than the limit of {} KB", limit / 1024),
    }
}

/// The length of a regular file, or what else it is.
fn regular(meta: &Metadata) -> Result<u64, ReadError> {
    if meta.is_file() {
        Ok(meta.len())
    } else {
        Err(ReadError::NotAFile(describe(meta.file_type())))
    }
}

fn describe(t: FileType) -> &'static str {
    if t.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "a special file"
}

#[cfg(unix)]
fn open(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read_and_never_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, b"12345").unwrap();
        assert_eq!(read_capped(&file, 5).unwrap(), b"12345");
        let err = read_capped(&file, 4).unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::TooLarge {
                    size: Some(5),
                    limit: 4
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.code(), "file-too-large");
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_capped(&link, 5).unwrap(), b"12345");

        let sub = dir.path().join("sub.yaml");
        std::fs::create_dir(&sub).unwrap();
        let err = read_capped(&sub, 5).unwrap_err();
        assert_eq!(
            (err.code(), err.to_string().as_str()),
            ("not-a-file", "is a directory, not a regular file")
        );
        // `/dev/zero` has length 0 and never ends; it is refused unread.
        let zero = dir.path().join("zero.yaml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let err = read_capped(&zero, 5).unwrap_err();
        assert_eq!(err.to_string(), "is a device, not a regular file");
        let missing = read_capped(&dir.path().join("none.yaml"), 5).unwrap_err();
        assert_eq!(missing.code(), "io");
    }
}
