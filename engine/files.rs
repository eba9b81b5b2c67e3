//! Opening files a user names — models, tokenizer inputs, a packet's raw files — so that a path
//! that is not a regular file is refused by its type, before `open` could block on it.
//!
//! `open(2)` of a FIFO blocks until a writer appears, and reading a character device such as
//! `/dev/zero` never ends; a directory maps as "No such device". So a path is `stat`ed first (which
//! never blocks) and anything but a regular file is refused with what it is. The open itself
//! passes `O_NONBLOCK` so that a path swapped for a FIFO between the `stat` and the `open` cannot
//! block either, and the opened file is checked again with `fstat`. Reads of data whose size is
//! known in advance take a cap, so a file that grew (or lies about its size) cannot exhaust
//! memory.

use std::fs::{File, FileType};
use std::io::Read;
use std::path::{Path, PathBuf};

/// What went wrong opening or reading a file; every variant names the path and what the file
/// was for (`role`: "model", "tokenizer input", "raw file", …).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{}: the {role} is {kind}, not a regular file", path.display())]
    NotRegular {
        path: PathBuf,
        role: &'static str,
        kind: &'static str,
    },
    // The cause is part of the message and deliberately not a `source`: `{:#}` would print it twice.
    #[error("{}: cannot read the {role}: {error}", path.display())]
    Io {
        path: PathBuf,
        role: &'static str,
        error: std::io::Error,
    },
    #[error("{}: the {role} is {size} bytes, more than the {cap} {why}", path.display())]
    TooLarge {
        path: PathBuf,
        role: &'static str,
        size: u64,
        cap: u64,
        /// Where the cap comes from ("manifest.json lists", "allowed for a packet", …).
        why: String,
    },
}

/// Opens `path` for reading if it is a regular file (symlinks followed); anything else is
/// refused by its type without being opened in a way that could block.
pub fn open_regular(path: &Path, role: &'static str) -> Result<File, FileError> {
    let io = |error| FileError::Io {
        path: path.to_owned(),
        role,
        error,
    };
    check_type(path, role, std::fs::metadata(path).map_err(io)?.file_type())?;
    let file = open_nonblocking(path).map_err(io)?;
    check_type(path, role, file.metadata().map_err(io)?.file_type())?;
    Ok(file)
}

/// Reads a regular file whole, refusing one larger than `cap` bytes (by its size before the
/// read, and by what the read returns: a file growing meanwhile is refused too).
pub fn read_capped(
    path: &Path,
    role: &'static str,
    cap: u64,
    why: &str,
) -> Result<Vec<u8>, FileError> {
    let too_large = |size| FileError::TooLarge {
        path: path.to_owned(),
        role,
        size,
        cap,
        why: why.to_owned(),
    };
    let file = open_regular(path, role)?;
    let io = |error| FileError::Io {
        path: path.to_owned(),
        role,
        error,
    };
    let size = file.metadata().map_err(io)?.len();
    if size > cap {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > cap {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

fn check_type(path: &Path, role: &'static str, ty: FileType) -> Result<(), FileError> {
    match kind_of(ty) {
        None => Ok(()),
        Some(kind) => Err(FileError::NotRegular {
            path: path.to_owned(),
            role,
            kind,
        }),
    }
}

/// What a file that is not a regular file is, in words; `None` for a regular file.
fn kind_of(ty: FileType) -> Option<&'static str> {
    if ty.is_file() {
        return None;
    }
    if ty.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ty.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if ty.is_char_device() {
            return Some("a character device");
        }
        if ty.is_block_device() {
            return Some("a block device");
        }
        if ty.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK has no effect on the reads of a regular file (POSIX), the only kind kept open.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fak-files-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn directories_and_devices_are_refused_by_type() {
        let dir = scratch("dir");
        let err = open_regular(&dir, "model").unwrap_err().to_string();
        assert!(err.contains("the model is a directory"), "{err}");
        #[cfg(unix)]
        {
            let err = open_regular(Path::new("/dev/null"), "model")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("/dev/null: the model is a character device"),
                "{err}"
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = scratch("fifo");
        let fifo = dir.join("model.gguf");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let err = open_regular(&fifo, "model").unwrap_err().to_string();
        assert!(err.contains("the model is a FIFO (named pipe)"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn reads_over_the_cap_are_refused_and_name_the_cap() {
        let dir = scratch("cap");
        let path = dir.join("raw.json");
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(
            read_capped(&path, "raw file", 10, "").unwrap(),
            b"0123456789"
        );
        let err = read_capped(&path, "raw file", 9, "manifest.json lists")
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with(
                "raw.json: the raw file is 10 bytes, more than the 9 manifest.json lists"
            ),
            "{err}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn missing_files_name_the_path_and_the_role() {
        let err = open_regular(Path::new("/nonexistent/x.gguf"), "model")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("/nonexistent/x.gguf: cannot read the model: "),
            "{err}"
        );
    }
}
