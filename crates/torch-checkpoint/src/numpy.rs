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

#[cfg(test)]
mod tests {
    use super::*;

    // Written by Python 3.11 / numpy 2.4: `pickle.dumps(np.array([1, 'a'], dtype=object), 4)`,
    // a structured array, an out-of-band protocol 5 buffer, and
    // `np.arange(6, dtype='>i2').reshape(2, 3)` at protocol 2.
    const OBJ: &[u8] = b"\x80\x04\x95\x90\x00\x00\x00\x00\x00\x00\x00\x8c\x16\x6e\x75\x6d\x70\x79\x2e\x5f\x63\x6f\x72\x65\x2e\x6d\x75\x6c\x74\x69\x61\x72\x72\x61\x79\x94\x8c\x0c\x5f\x72\x65\x63\x6f\x6e\x73\x74\x72\x75\x63\x74\x94\x93\x94\x8c\x05\x6e\x75\x6d\x70\x79\x94\x8c\x07\x6e\x64\x61\x72\x72\x61\x79\x94\x93\x94\x4b\x00\x85\x94\x43\x01\x62\x94\x87\x94\x52\x94\x28\x4b\x01\x4b\x02\x85\x94\x68\x03\x8c\x05\x64\x74\x79\x70\x65\x94\x93\x94\x8c\x02\x4f\x38\x94\x89\x88\x87\x94\x52\x94\x28\x4b\x03\x8c\x01\x7c\x94\x4e\x4e\x4e\x4a\xff\xff\xff\xff\x4a\xff\xff\xff\xff\x4b\x3f\x74\x94\x62\x89\x5d\x94\x28\x4b\x01\x8c\x01\x61\x94\x65\x74\x94\x62\x2e";
    const STRUCTURED: &[u8] = b"\x80\x04\x95\xf5\x00\x00\x00\x00\x00\x00\x00\x8c\x16\x6e\x75\x6d\x70\x79\x2e\x5f\x63\x6f\x72\x65\x2e\x6d\x75\x6c\x74\x69\x61\x72\x72\x61\x79\x94\x8c\x0c\x5f\x72\x65\x63\x6f\x6e\x73\x74\x72\x75\x63\x74\x94\x93\x94\x8c\x05\x6e\x75\x6d\x70\x79\x94\x8c\x07\x6e\x64\x61\x72\x72\x61\x79\x94\x93\x94\x4b\x00\x85\x94\x43\x01\x62\x94\x87\x94\x52\x94\x28\x4b\x01\x4b\x02\x85\x94\x68\x03\x8c\x05\x64\x74\x79\x70\x65\x94\x93\x94\x8c\x02\x56\x38\x94\x89\x88\x87\x94\x52\x94\x28\x4b\x03\x8c\x01\x7c\x94\x4e\x8c\x01\x61\x94\x8c\x01\x62\x94\x86\x94\x7d\x94\x28\x68\x11\x68\x0c\x8c\x02\x66\x34\x94\x89\x88\x87\x94\x52\x94\x28\x4b\x03\x8c\x01\x3c\x94\x4e\x4e\x4e\x4a\xff\xff\xff\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x94\x62\x4b\x00\x86\x94\x68\x12\x68\x0c\x8c\x02\x69\x34\x94\x89\x88\x87\x94\x52\x94\x28\x4b\x03\x68\x18\x4e\x4e\x4e\x4a\xff\xff\xff\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x94\x62\x4b\x04\x86\x94\x75\x4b\x08\x4b\x01\x4b\x10\x74\x94\x62\x89\x43\x10\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x94\x74\x94\x62\x2e";
    const OUT_OF_BAND: &[u8] = b"\x80\x05\x95\x6b\x00\x00\x00\x00\x00\x00\x00\x8c\x13\x6e\x75\x6d\x70\x79\x2e\x5f\x63\x6f\x72\x65\x2e\x6e\x75\x6d\x65\x72\x69\x63\x94\x8c\x0b\x5f\x66\x72\x6f\x6d\x62\x75\x66\x66\x65\x72\x94\x93\x94\x28\x97\x8c\x05\x6e\x75\x6d\x70\x79\x94\x8c\x05\x64\x74\x79\x70\x65\x94\x93\x94\x8c\x02\x66\x34\x94\x89\x88\x87\x94\x52\x94\x28\x4b\x03\x8c\x01\x3c\x94\x4e\x4e\x4e\x4a\xff\xff\xff\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x94\x62\x4b\x03\x85\x94\x8c\x01\x43\x94\x74\x94\x52\x94\x2e";
    const I2_BE_P2: &[u8] = b"\x80\x02\x63\x6e\x75\x6d\x70\x79\x2e\x5f\x63\x6f\x72\x65\x2e\x6d\x75\x6c\x74\x69\x61\x72\x72\x61\x79\x0a\x5f\x72\x65\x63\x6f\x6e\x73\x74\x72\x75\x63\x74\x0a\x71\x00\x63\x6e\x75\x6d\x70\x79\x0a\x6e\x64\x61\x72\x72\x61\x79\x0a\x71\x01\x4b\x00\x85\x71\x02\x63\x5f\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x03\x58\x01\x00\x00\x00\x62\x71\x04\x58\x06\x00\x00\x00\x6c\x61\x74\x69\x6e\x31\x71\x05\x86\x71\x06\x52\x71\x07\x87\x71\x08\x52\x71\x09\x28\x4b\x01\x4b\x02\x4b\x03\x86\x71\x0a\x63\x6e\x75\x6d\x70\x79\x0a\x64\x74\x79\x70\x65\x0a\x71\x0b\x58\x02\x00\x00\x00\x69\x32\x71\x0c\x89\x88\x87\x71\x0d\x52\x71\x0e\x28\x4b\x03\x58\x01\x00\x00\x00\x3e\x71\x0f\x4e\x4e\x4e\x4a\xff\xff\xff\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x71\x10\x62\x89\x68\x03\x58\x0c\x00\x00\x00\x00\x00\x00\x01\x00\x02\x00\x03\x00\x04\x00\x05\x71\x11\x68\x05\x86\x71\x12\x52\x71\x13\x74\x71\x14\x62\x2e";
    fn load(bytes: &[u8]) -> Result<NdArray, Error> {
        let dir = std::env::temp_dir().join(format!("rust3r-numpy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{}.pkl", bytes.len()));
        std::fs::write(&p, bytes).unwrap();
        let r = PickleFile::open(&p).and_then(|f| f.array(&[]));
        let _ = std::fs::remove_file(&p);
        r
    }

    #[test]
    fn big_endian_ints_at_protocol_2() {
        let a = load(I2_BE_P2).unwrap();
        assert_eq!(a.shape, vec![2, 3]);
        assert_eq!(a.dtype, ElementType::I16);
        assert_eq!(a.data, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn unsupported_arrays_are_errors_that_say_why() {
        let e = load(OBJ).unwrap_err().to_string();
        assert!(e.contains("dtype 'O8' is not supported"), "{e}");
        let e = load(STRUCTURED).unwrap_err().to_string();
        assert!(e.contains("dtype"), "{e}");
        let e = load(OUT_OF_BAND).unwrap_err().to_string();
        assert!(e.contains("out-of-band"), "{e}");
    }
}
