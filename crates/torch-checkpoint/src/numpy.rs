//! Numpy arrays in plain pickle files (`pickle.dump` of a dict holding arrays, as the `asmk`
//! package caches its codebook), read without Python by the same restricted interpreter as the
//! checkpoints: besides the torch allow-list only `numpy.core.multiarray._reconstruct`,
//! `numpy.ndarray`, `numpy.dtype`, `numpy.core.numeric._frombuffer` (and their numpy 2
//! `numpy._core` names) and `_codecs.encode(str, 'latin1')` (protocol 2's bytes) are known, all
//! as data constructors: nothing is imported or run. Protocols 2 to 5 (in-band buffers) are
//! read; numeric dtypes only (`f8 f4 f2 i8 i4 i2 i1 u1 b1`, either byte order, C or Fortran
//! order); anything else is an error that names the file.

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::pickle::{Obj, Pickled, Value, unpickle};
use crate::tensor::{ElementType, try_vec};

/// Largest pickle file accepted (the released 64k x 1024 float32 codebook is 256 MiB).
const MAX_PICKLE_FILE: u64 = 1 << 31;

/// A numpy array converted to `f32`, in C (row-major) order.
#[derive(Debug, Clone, PartialEq)]
pub struct NdArray {
    /// The stored element type.
    pub dtype: ElementType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Values in row-major order.
    pub data: Vec<f32>,
}

/// A parsed pickle file holding numpy arrays.
pub struct PickleFile {
    path: PathBuf,
    input: Vec<u8>,
    pickled: Pickled,
}

impl std::fmt::Debug for PickleFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PickleFile")
            .field("path", &self.path)
            .finish()
    }
}

impl PickleFile {
    /// Reads and runs the pickle at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let len = std::fs::metadata(path)
            .map_err(|e| Error::io(path, e))?
            .len();
        if len > MAX_PICKLE_FILE {
            return Err(Error::format(
                path,
                format!("pickle file of {len} bytes is larger than the 2 GiB accepted"),
            ));
        }
        let input = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let pickled = unpickle(&input).map_err(|source| Error::Pickle {
            path: path.to_path_buf(),
            entry: "pickle".into(),
            source,
        })?;
        Ok(PickleFile {
            path: path.to_path_buf(),
            input,
            pickled,
        })
    }

    /// The value at `keys` (string keys of nested dicts, from the root).
    fn at(&self, keys: &[&str]) -> Result<&Value, Error> {
        let p = &self.pickled;
        let mut v = &p.root;
        for (depth, key) in keys.iter().enumerate() {
            let Some(items) = p.mapping(v) else {
                return Err(Error::format(
                    &self.path,
                    format!(
                        "`{}` is a {}, not a dict",
                        path_name(&keys[..depth]),
                        p.kind(v)
                    ),
                ));
            };
            let found = items
                .iter()
                .rev()
                .find(|(k, _)| matches!(k, Value::Str(s) if &**s == *key));
            let Some((_, next)) = found else {
                let have: Vec<String> = items
                    .iter()
                    .filter_map(|(k, _)| match k {
                        Value::Str(s) => Some(s.to_string()),
                        _ => None,
                    })
                    .collect();
                return Err(Error::format(
                    &self.path,
                    format!(
                        "no key `{}` (keys of `{}`: {have:?})",
                        key,
                        path_name(&keys[..depth])
                    ),
                ));
            };
            v = next;
        }
        Ok(v)
    }

    /// The string at `keys`, `None` when the value there is not a string.
    pub fn string(&self, keys: &[&str]) -> Result<Option<String>, Error> {
        Ok(match self.at(keys)? {
            Value::Str(s) => Some(s.to_string()),
            _ => None,
        })
    }

    /// The integer at `keys`, `None` when the value there is not an integer.
    pub fn int(&self, keys: &[&str]) -> Result<Option<i64>, Error> {
        Ok(match self.at(keys)? {
            Value::Int(i) => Some(*i),
            _ => None,
        })
    }

    /// The numpy array at `keys` (empty: the whole pickle is one array), converted to `f32`.
    pub fn array(&self, keys: &[&str]) -> Result<NdArray, Error> {
        let v = self.at(keys)?;
        let Some(Obj::NdArray(a)) = self.pickled.obj(v) else {
            return Err(Error::format(
                &self.path,
                format!(
                    "`{}` is a {}, not a numpy array",
                    path_name(keys),
                    self.pickled.kind(v)
                ),
            ));
        };
        let bytes = a.data.get(&self.input);
        let n = bytes.len() / a.dtype.elem.size();
        let mut flat = try_vec(n).map_err(|m| Error::format(&self.path, m))?;
        a.dtype
            .elem
            .decode_into(bytes, a.dtype.little_endian, &mut flat);
        let data = if a.fortran && a.shape.len() > 1 {
            // Column-major to row-major.
            let mut out = try_vec(n).map_err(|m| Error::format(&self.path, m))?;
            out.resize(n, 0.0);
            let rank = a.shape.len();
            let mut idx = vec![0usize; rank];
            for &value in &flat {
                // `idx` walks the array in Fortran order (first index fastest).
                let mut off = 0;
                for (d, &i) in idx.iter().enumerate() {
                    off = off * a.shape[d] + i;
                }
                out[off] = value;
                for d in 0..rank {
                    idx[d] += 1;
                    if idx[d] < a.shape[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
            out
        } else {
            flat
        };
        Ok(NdArray {
            dtype: a.dtype.elem,
            shape: a.shape.clone(),
            data,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn path_name(keys: &[&str]) -> String {
    if keys.is_empty() {
        "<root>".into()
    } else {
        keys.join(".")
    }
}
