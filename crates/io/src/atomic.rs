//! Atomic file replacement: write a temporary file next to the target, sync it,
//! then rename it over the target, so readers see either the old file or the
//! complete new one and a failed write never destroys work already on disk.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::IoError;

/// Writes `bytes` to `path` atomically.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    write_atomic_with(path, |w| w.write_all(bytes)).map_err(|e| IoError::io(path, e))
}

/// Streams `body` into a temporary sibling of `path` (buffered), syncs it and
/// renames it over `path`. On any error the temporary file is removed and the
/// target is left as it was. Errors are plain `std::io::Error`s: callers name
/// the file in their own error type.
pub fn write_atomic_with(
    path: &Path,
    body: impl FnOnce(&mut BufWriter<&File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let Some(file_name) = path.file_name() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file path",
        ));
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let (tmp_path, file) = create_temp(dir, file_name)?;
    let result = (|| {
        let mut w = BufWriter::with_capacity(1 << 20, &file);
        body(&mut w)?;
        w.flush()?;
        drop(w);
        file.sync_all()?;
        fs::rename(&tmp_path, path)
    })();
    if let Err(error) = result {
        let _ = fs::remove_file(&tmp_path);
        return Err(error);
    }
    Ok(())
}

fn create_temp(dir: &Path, file_name: &std::ffi::OsStr) -> std::io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    loop {
        let mut name = std::ffi::OsString::from(".");
        name.push(file_name);
        name.push(format!(
            ".{}.{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp_path = dir.join(name);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp_path)
        {
            Ok(file) => return Ok((tmp_path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}
