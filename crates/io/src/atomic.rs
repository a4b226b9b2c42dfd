//! Atomic file replacement: write a temporary file next to the target, then rename.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::IoError;

/// Writes `bytes` to `path` so that readers see either the old file or the
/// complete new one, never a partial write.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    let Some(file_name) = path.file_name() else {
        return Err(IoError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
        ));
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let (tmp_path, file) = create_temp(dir, file_name).map_err(|e| IoError::io(path, e))?;
    let result = write_and_sync(file, bytes).and_then(|()| fs::rename(&tmp_path, path));
    if let Err(error) = result {
        let _ = fs::remove_file(&tmp_path);
        return Err(IoError::io(path, error));
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

fn write_and_sync(mut file: File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all(bytes)?;
    file.sync_all()
}
