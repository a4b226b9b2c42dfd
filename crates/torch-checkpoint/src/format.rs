//! Format detection and [`TensorFile`], one reader for every supported tensor file.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::Error;
use crate::pth::PthFile;
use crate::safetensors::SafetensorsFile;
use crate::tensor::TensorF32;

/// The container format of a tensor file, decided from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointFormat {
    /// A PyTorch zip archive (`torch.save`, PyTorch >= 1.6).
    PyTorchZip,
    /// PyTorch's legacy format (`torch.save` before 1.6, or `_use_new_zipfile_serialization=False`):
    /// pickles followed by raw storages.
    PyTorchLegacy,
    /// Anything else is read as safetensors.
    Safetensors,
}

/// Whether `head` (the first bytes of a file) starts like a legacy `torch.save` file: a pickle
/// (`PROTO 2..=5`, with the `FRAME` protocol 4 adds) whose first opcode is a 10-byte `LONG1` (the
/// magic number, whose value the reader checks). A file shorter than that pattern counts when it
/// is a prefix of it (a truncated legacy file).
pub(crate) fn is_legacy_pth(head: &[u8]) -> bool {
    // Compares the bytes both have: `head` starts with `pat`, or is a prefix of it.
    let like = |pat: &[Option<u8>]| {
        !head.is_empty() && head.iter().zip(pat).all(|(h, p)| p.is_none_or(|p| *h == p))
    };
    let (long1, frame) = (
        [Some(0x8a), Some(0x0a)],
        [Some(0x95)].into_iter().chain([None; 8]),
    );
    (2..=5u8).any(|proto| {
        let mut pat = vec![Some(0x80), Some(proto)];
        if proto >= 4 {
            pat.extend(frame.clone());
        }
        pat.extend(long1);
        like(&pat)
    })
}

/// Whether `head` starts like a zip archive.
pub(crate) fn is_zip(head: &[u8]) -> bool {
    head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06")
}

/// Decides the format from the file's content: zip magic means a PyTorch zip archive, a pickle
/// starting with the magic number the legacy PyTorch format, anything else safetensors. PyTorch's
/// oldest format, a tar archive (before 0.1.10), is recognised and reported as unsupported.
pub fn detect_format(path: impl AsRef<Path>) -> Result<CheckpointFormat, Error> {
    let path = path.as_ref();
    let mut head = [0u8; 262];
    let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    let head = &head[..n];
    if is_zip(head) {
        Ok(CheckpointFormat::PyTorchZip)
    } else if is_legacy_pth(head) {
        Ok(CheckpointFormat::PyTorchLegacy)
    } else if head.len() == 262 && &head[257..262] == b"ustar" {
        Err(Error::format(
            path,
            "a tar archive: PyTorch's tar checkpoint format (before 0.1.10) is not supported; \
             re-save it with a recent torch.save",
        ))
    } else {
        Ok(CheckpointFormat::Safetensors)
    }
}

/// A `.pth` (zip or legacy) or safetensors file whose header has been read; tensors are read on
/// demand and converted to `f32`.
#[derive(Debug)]
pub enum TensorFile {
    /// A PyTorch checkpoint.
    Pth(PthFile),
    /// A safetensors file.
    Safetensors(SafetensorsFile),
}

impl TensorFile {
    /// Opens `path`, choosing the reader with [`detect_format`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        Ok(match detect_format(path)? {
            CheckpointFormat::PyTorchZip | CheckpointFormat::PyTorchLegacy => {
                TensorFile::Pth(PthFile::open(path)?)
            }
            CheckpointFormat::Safetensors => TensorFile::Safetensors(SafetensorsFile::open(path)?),
        })
    }

    /// The file this was opened from.
    pub fn path(&self) -> &Path {
        match self {
            TensorFile::Pth(f) => f.path(),
            TensorFile::Safetensors(f) => f.path(),
        }
    }

    /// The container format.
    pub fn format(&self) -> CheckpointFormat {
        match self {
            TensorFile::Pth(f) => match f.format() {
                crate::pth::PthFormat::Zip => CheckpointFormat::PyTorchZip,
                crate::pth::PthFormat::Legacy => CheckpointFormat::PyTorchLegacy,
            },
            TensorFile::Safetensors(_) => CheckpointFormat::Safetensors,
        }
    }

    /// Tensor names (state-dict order for `.pth`, data order for safetensors).
    pub fn tensor_names(&self) -> Vec<String> {
        match self {
            TensorFile::Pth(f) => f.tensor_names().map(str::to_string).collect(),
            TensorFile::Safetensors(f) => f.tensor_names(),
        }
    }

    /// Shape of a tensor, `None` when the file has no tensor of that name.
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        match self {
            TensorFile::Pth(f) => f.tensor_info(name).map(|i| i.shape.clone()),
            TensorFile::Safetensors(f) => f.shape(name).map(<[usize]>::to_vec),
        }
    }

    /// Reads one tensor as contiguous `f32`.
    pub fn read_tensor(&mut self, name: &str) -> Result<TensorF32, Error> {
        match self {
            TensorFile::Pth(f) => f.read_tensor(name),
            TensorFile::Safetensors(f) => f.read_tensor(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_files_are_told_from_safetensors() {
        let magic = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
        let mut v2 = vec![0x80, 2, 0x8a, 0x0a];
        v2.extend(magic);
        assert!(is_legacy_pth(&v2));
        // Truncated legacy files are still legacy files.
        for n in 1..v2.len() {
            assert!(is_legacy_pth(&v2[..n]), "{n}");
        }
        let mut v4 = vec![0x80, 4, 0x95, 15, 0, 0, 0, 0, 0, 0, 0, 0x8a, 0x0a];
        v4.extend(magic);
        assert!(is_legacy_pth(&v4));
        assert!(!is_legacy_pth(b""));
        // A safetensors header length whose low byte is 0x80.
        let st = [0x80, 0x02, 0, 0, 0, 0, 0, 0, b'{', b'"'];
        assert!(!is_legacy_pth(&st));
        assert!(!is_legacy_pth(&[0x80, 0x02, 0x8a, 0x08]));
        assert!(!is_legacy_pth(&[0x80, 0x06, 0x8a, 0x0a]));
        assert!(is_zip(b"PK\x03\x04rest"));
    }
}
