//! Atomic file replacement: write a temporary file next to the target, sync it,
//! then rename it over the target, so readers see either the old file or the
//! complete new one and a failed write never destroys work already on disk. The mechanics are
//! the `atomic-write-file` crate's (also used by `rust3r-torch-checkpoint`, which does not
//! depend on this crate); this module only gives it the workspace's error types.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::error::IoError;

/// Writes `bytes` to `path` atomically.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    write_atomic_with(path, |w| w.write_all(bytes)).map_err(|e| IoError::io(path, e))
}

/// Streams `body` into a temporary file beside `path` (buffered), syncs it and renames it over
/// `path` ([`atomic_write_file`]: an unnamed `O_TMPFILE` on Linux, a hidden sibling elsewhere;
/// the folder is synced after the rename). On any error the temporary file is removed and the
/// target is left as it was. A new file gets the permissions of a plain `File::create` (`0o666`
/// less the umask on Unix); a replaced one keeps its own. Errors are plain `std::io::Error`s:
/// callers name the file in their own error type.
pub fn write_atomic_with(
    path: &Path,
    body: impl FnOnce(&mut BufWriter<&File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    if path.file_name().is_none() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file path",
        ));
    }
    let file = atomic_write_file::AtomicWriteFile::open(path)?;
    let mut w = BufWriter::with_capacity(1 << 20, file.as_file());
    body(&mut w)?;
    w.flush()?;
    drop(w);
    // Syncs the data, renames, syncs the folder; dropping `file` on an error above discards it.
    file.commit()
}
