//! safetensors files: lazy reading (header first, tensor data on demand) and atomic writing.
//!
//! The header is parsed and validated by the `safetensors` crate's [`Metadata`] (offsets contiguous,
//! sizes consistent with shape and dtype); the data section must end exactly at the end of the file.
//! Tensors are then read one by one with `seek` + `read`, so a multi-gigabyte checkpoint never needs
//! to sit in memory twice.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use ::safetensors::Dtype;
use ::safetensors::tensor::{Metadata, TensorInfo};

use crate::error::Error;
use crate::tensor::{ElementType, TensorF32, numel, try_vec};

/// Largest header accepted (the same limit as the `safetensors` crate).
const MAX_HEADER: u64 = 100_000_000;

/// An open safetensors file whose header has been validated; tensor data is read on demand.
#[derive(Debug)]
pub struct SafetensorsFile {
    path: PathBuf,
    file: File,
    data_start: u64,
    metadata: Metadata,
}

impl SafetensorsFile {
    /// Opens a safetensors file and validates its header against the file size.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let bad = |m: String| Error::format(path, format!("not a valid safetensors file: {m}"));
        if file_len < 8 {
            return Err(bad(format!(
                "only {file_len} bytes, too short for the 8-byte header length"
            )));
        }
        let mut n = [0u8; 8];
        file.read_exact(&mut n).map_err(|e| Error::io(path, e))?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER || n > file_len - 8 {
            return Err(bad(format!(
                "header length {n} does not fit the file ({file_len} bytes)"
            )));
        }
        let mut header = vec![0u8; n as usize];
        file.read_exact(&mut header)
            .map_err(|e| Error::io(path, e))?;
        let header =
            std::str::from_utf8(&header).map_err(|e| bad(format!("header is not UTF-8: {e}")))?;
        let metadata: Metadata =
            serde_json::from_str(header).map_err(|e| bad(format!("invalid header: {e}")))?;
        let data_start = 8 + n;
        let data_len = metadata.data_len() as u64;
        if data_start.checked_add(data_len) != Some(file_len) {
            return Err(bad(format!(
                "header describes {data_len} bytes of tensor data but the file has {} after the header \
                 (truncated or trailing bytes)",
                file_len - data_start
            )));
        }
        Ok(SafetensorsFile {
            path: path.to_path_buf(),
            file,
            data_start,
            metadata,
        })
    }

    /// The file this was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The free-form `__metadata__` string map of the header, if any.
    pub fn metadata(&self) -> Option<&HashMap<String, String>> {
        self.metadata.metadata().as_ref()
    }

    /// Tensor names in data order.
    pub fn tensor_names(&self) -> Vec<String> {
        self.metadata.offset_keys()
    }

    /// Shape of a tensor.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.metadata.info(name).map(|i| i.shape.as_slice())
    }

    /// The safetensors dtype name of a tensor (`F32`, `BF16`, ...).
    pub fn dtype_name(&self, name: &str) -> Option<String> {
        self.metadata.info(name).map(|i| format!("{:?}", i.dtype))
    }

    /// Reads one tensor, converted to `f32`.
    pub fn read_tensor(&mut self, name: &str) -> Result<TensorF32, Error> {
        let Some(info) = self.metadata.info(name) else {
            return Err(Error::tensor(&self.path, name, "not in the file"));
        };
        let Some(dtype) = element_type(info.dtype) else {
            return Err(Error::tensor(
                &self.path,
                name,
                format!("unsupported dtype {:?}", info.dtype),
            ));
        };
        let (start, end) = info.data_offsets;
        let shape = info.shape.clone();
        let n = numel(&shape).ok_or_else(|| Error::tensor(&self.path, name, "shape overflows"))?;
        let len = end - start; // validated by `Metadata`: end >= start and len == n * size
        let mut bytes = try_vec(len).map_err(|m| Error::tensor(&self.path, name, m))?;
        bytes.resize(len, 0);
        self.file
            .seek(SeekFrom::Start(self.data_start + start as u64))
            .and_then(|_| self.file.read_exact(&mut bytes))
            .map_err(|e| Error::io(&self.path, e))?;
        let mut data = try_vec(n).map_err(|m| Error::tensor(&self.path, name, m))?;
        dtype.decode_into(&bytes, true, &mut data);
        if data.len() != n {
            return Err(Error::tensor(
                &self.path,
                name,
                "data size does not match the shape",
            ));
        }
        Ok(TensorF32 { shape, data })
    }
}

fn element_type(d: Dtype) -> Option<ElementType> {
    Some(match d {
        Dtype::F64 => ElementType::F64,
        Dtype::F32 => ElementType::F32,
        Dtype::F16 => ElementType::F16,
        Dtype::BF16 => ElementType::BF16,
        Dtype::I64 => ElementType::I64,
        Dtype::I32 => ElementType::I32,
        Dtype::I16 => ElementType::I16,
        Dtype::I8 => ElementType::I8,
        Dtype::U8 => ElementType::U8,
        Dtype::BOOL => ElementType::Bool,
        _ => return None,
    })
}

/// Writes `tensors` as an `F32` safetensors file with the given `__metadata__`, atomically: the
/// data goes to a temporary file in the same folder, which is synced and then renamed over `path`.
pub fn write_safetensors(
    path: impl AsRef<Path>,
    tensors: &BTreeMap<String, TensorF32>,
    metadata: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let path = path.as_ref();
    let mut infos = Vec::with_capacity(tensors.len());
    let mut offset = 0usize;
    for (name, t) in tensors {
        if numel(&t.shape) != Some(t.data.len()) {
            return Err(Error::tensor(
                path,
                name,
                format!(
                    "shape {:?} does not match its {} values",
                    t.shape,
                    t.data.len()
                ),
            ));
        }
        let len = t.data.len() * 4;
        infos.push((
            name.clone(),
            TensorInfo {
                dtype: Dtype::F32,
                shape: t.shape.clone(),
                data_offsets: (offset, offset + len),
            },
        ));
        offset += len;
    }
    let meta = (!metadata.is_empty()).then(|| {
        metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    });
    let header = Metadata::new(meta, infos)
        .map_err(|e| Error::format(path, format!("cannot build the safetensors header: {e}")))?;
    // Through a `serde_json::Value` (a sorted map) so the header's key order,
    // and with it the file's bytes, do not depend on hash-map iteration order.
    let mut header = serde_json::to_value(&header)
        .and_then(|v| serde_json::to_vec(&v))
        .map_err(|e| {
            Error::format(
                path,
                format!("cannot serialise the safetensors header: {e}"),
            )
        })?;
    header.resize(header.len().next_multiple_of(8), b' ');

    write_atomic(path, |w| {
        w.write_all(&(header.len() as u64).to_le_bytes())?;
        w.write_all(&header)?;
        let mut buf = Vec::with_capacity(1 << 16);
        for t in tensors.values() {
            for chunk in t.data.chunks(1 << 14) {
                buf.clear();
                buf.extend(chunk.iter().flat_map(|x| x.to_le_bytes()));
                w.write_all(&buf)?;
            }
        }
        Ok(())
    })
}

/// Streams `body` into `path` atomically (the `atomic-write-file` crate, as `rust3r-io`'s
/// `atomic::write_atomic_with`): a temporary file beside it (buffered), synced, then renamed over
/// it; on an error the temporary file is removed and `path` is left as it was. A new file gets
/// the permissions of a plain `File::create`.
pub fn write_atomic(
    path: &Path,
    body: impl FnOnce(&mut BufWriter<&File>) -> std::io::Result<()>,
) -> Result<(), Error> {
    let write = || -> std::io::Result<()> {
        let file = atomic_write_file::AtomicWriteFile::open(path)?;
        let mut w = BufWriter::with_capacity(1 << 20, file.as_file());
        body(&mut w)?;
        w.flush()?;
        drop(w);
        file.commit()
    };
    write().map_err(|e| Error::io(path, e))
}
