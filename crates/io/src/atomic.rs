//! Atomic file replacement: write a temporary file next to the target, sync it,
//! then rename it over the target, so readers see either the old file or the
//! complete new one and a failed write never destroys work already on disk.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::error::IoError;

/// Writes `bytes` to `path` atomically.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    write_atomic_with(path, |w| w.write_all(bytes)).map_err(|e| IoError::io(path, e))
}

/// Streams `body` into a temporary sibling of `path` (buffered; `tempfile`'s
/// `NamedTempFile`), syncs it and renames it over `path`. On any error the temporary file is
/// removed and the target is left as it was. The new file gets the permissions of a plain
/// `File::create` (`0o666` less the umask on Unix). Errors are plain `std::io::Error`s:
/// callers name the file in their own error type.
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
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(file_name);
    prefix.push(".");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let tmp = builder.tempfile_in(dir)?;
    let mut w = BufWriter::with_capacity(1 << 20, tmp.as_file());
    body(&mut w)?;
    w.flush()?;
    drop(w);
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
