//! PyTorch `.pth` checkpoints (the zip format of `torch.save`, PyTorch >= 1.6), read without Python.
//!
//! The archive holds one root folder (any name) with `data.pkl`, optionally `byteorder`, and one raw
//! blob per storage under `data/<key>`. [`PthFile::open`] runs `data.pkl` through the restricted
//! pickle interpreter (see [`crate::PickleError`]) and records every tensor's metadata; tensor data is
//! read only when asked for ([`PthFile::read_tensor`], [`PthFile::read_tensors`]).
//!
//! The state dict is taken from the top-level `model` entry (`{'model': state_dict, 'args': ...}`, as
//! MASt3R/DUSt3R save it), or is the top-level dict itself when that holds only tensors. The
//! constructor string `args.model` (an `argparse.Namespace` attribute, or a dict entry) is kept.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use zip::ZipArchive;

use crate::error::Error;
use crate::pickle::{Obj, Pickled, Value, unpickle};
use crate::tensor::{ElementType, TensorF32, numel, try_vec};

/// Metadata of one tensor of a `.pth` state dict (its data is not read yet).
#[derive(Clone, Debug, PartialEq)]
pub struct PthTensorInfo {
    /// Element type of the storage.
    pub dtype: ElementType,
    /// Tensor shape.
    pub shape: Vec<usize>,
    /// Strides in elements (PyTorch semantics; not necessarily contiguous).
    pub stride: Vec<usize>,
    /// Offset of element `[0, 0, ...]` in the storage, in elements.
    pub storage_offset: usize,
    /// The storage's key: its data is the archive entry `<root>/data/<key>`.
    pub storage_key: String,
    /// Number of elements the storage declares.
    pub storage_numel: usize,
}

/// An open PyTorch zip checkpoint whose pickle has been parsed; tensor data is read on demand.
pub struct PthFile {
    path: PathBuf,
    archive: ZipArchive<BufReader<File>>,
    /// Size of the archive, bounding every allocation made from header values.
    file_len: u64,
    /// Entry-name prefix, e.g. `tiny_mast3r/`.
    prefix: String,
    little_endian: bool,
    /// State-dict entries in file order.
    tensors: Vec<(String, PthTensorInfo)>,
    index: HashMap<String, usize>,
    model_string: Option<String>,
}

impl std::fmt::Debug for PthFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PthFile")
            .field("path", &self.path)
            .field("prefix", &self.prefix)
            .field("tensors", &self.tensors.len())
            .field("model_string", &self.model_string)
            .finish()
    }
}

/// Largest `data.pkl` accepted (the released MASt3R checkpoint's is well under 1 MiB).
const MAX_PICKLE_BYTES: u64 = 256 << 20;

impl PthFile {
    /// Opens a `.pth` zip checkpoint and parses its pickle (no tensor data is read).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut archive = ZipArchive::new(BufReader::new(file)).map_err(|source| Error::Zip {
            path: path.to_path_buf(),
            source,
        })?;

        let candidates: Vec<String> = archive
            .file_names()
            .filter(|n| {
                n.strip_suffix("data.pkl").is_some_and(|root| {
                    root.is_empty() || (root.ends_with('/') && root.matches('/').count() == 1)
                })
            })
            .map(str::to_string)
            .collect();
        let pkl_name = match candidates.as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(Error::format(
                    path,
                    "zip archive has no `<root>/data.pkl` entry: not a PyTorch checkpoint",
                ));
            }
            many => {
                return Err(Error::format(
                    path,
                    format!(
                        "zip archive has several pickles ({}): ambiguous checkpoint",
                        many.join(", ")
                    ),
                ));
            }
        };
        let prefix = pkl_name
            .strip_suffix("data.pkl")
            .unwrap_or_default()
            .to_string();

        let little_endian = match archive.index_for_name(&format!("{prefix}byteorder")) {
            None => true,
            Some(i) => {
                let name = format!("{prefix}byteorder");
                let bytes = read_entry(path, &mut archive, i, &name, 64, file_len)?;
                match bytes.as_slice() {
                    b"little" => true,
                    b"big" => false,
                    other => {
                        return Err(Error::format(
                            path,
                            format!(
                                "`{name}` says {:?}, expected `little` or `big`",
                                String::from_utf8_lossy(other)
                            ),
                        ));
                    }
                }
            }
        };

        let pkl_index = archive
            .index_for_name(&pkl_name)
            .expect("name listed by the archive");
        let pkl = read_entry(
            path,
            &mut archive,
            pkl_index,
            &pkl_name,
            MAX_PICKLE_BYTES,
            file_len,
        )?;
        let pickled = unpickle(&pkl).map_err(|source| Error::Pickle {
            path: path.to_path_buf(),
            entry: pkl_name.clone(),
            source,
        })?;
        let (tensors, model_string) = interpret(path, &pickled)?;
        let index = tensors
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        Ok(PthFile {
            path: path.to_path_buf(),
            archive,
            file_len,
            prefix,
            little_endian,
            tensors,
            index,
            model_string,
        })
    }

    /// The file this was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `args.model` constructor string (e.g. `AsymmetricMASt3R(...)`), if the checkpoint has one.
    pub fn model_string(&self) -> Option<&str> {
        self.model_string.as_deref()
    }

    /// State-dict tensor names in file order.
    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|(k, _)| k.as_str())
    }

    /// Metadata of one tensor.
    pub fn tensor_info(&self, name: &str) -> Option<&PthTensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i].1)
    }

    /// Reads one tensor, converted to a contiguous `f32` tensor.
    pub fn read_tensor(&mut self, name: &str) -> Result<TensorF32, Error> {
        let mut m = self.read_tensors([name])?;
        Ok(m.remove(name).expect("requested tensor"))
    }

    /// Reads several tensors, converting each to a contiguous `f32` tensor. Every storage is read
    /// once, however many of the requested tensors share it.
    pub fn read_tensors<'n>(
        &mut self,
        names: impl IntoIterator<Item = &'n str>,
    ) -> Result<BTreeMap<String, TensorF32>, Error> {
        let mut by_storage: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for name in names {
            let Some(&i) = self.index.get(name) else {
                return Err(Error::tensor(
                    &self.path,
                    name,
                    "not in the checkpoint's state dict",
                ));
            };
            by_storage
                .entry(self.tensors[i].1.storage_key.clone())
                .or_default()
                .push(i);
        }
        let mut out = BTreeMap::new();
        for (key, users) in by_storage {
            let first = &self.tensors[users[0]];
            let entry = format!("{}data/{}", self.prefix, key);
            let Some(idx) = self.archive.index_for_name(&entry) else {
                return Err(Error::tensor(
                    &self.path,
                    &first.0,
                    format!("storage entry `{entry}` is missing"),
                ));
            };
            let info = &first.1;
            let limit = info.storage_numel.saturating_mul(info.dtype.size()) as u64;
            let bytes = read_entry(
                &self.path,
                &mut self.archive,
                idx,
                &entry,
                limit,
                self.file_len,
            )?;
            for i in users {
                let (name, info) = &self.tensors[i];
                let data = materialise(info, &bytes, self.little_endian)
                    .map_err(|m| Error::tensor(&self.path, name, m))?;
                out.insert(
                    name.clone(),
                    TensorF32 {
                        shape: info.shape.clone(),
                        data,
                    },
                );
            }
        }
        Ok(out)
    }
}

/// Reads a whole stored entry (the CRC is verified by the zip reader at the end of the data).
fn read_entry(
    path: &Path,
    archive: &mut ZipArchive<BufReader<File>>,
    index: usize,
    name: &str,
    limit: u64,
    file_len: u64,
) -> Result<Vec<u8>, Error> {
    let entry_err = |source: std::io::Error| Error::ZipEntry {
        path: path.to_path_buf(),
        entry: name.to_string(),
        source,
    };
    let mut f = archive
        .by_index(index)
        .map_err(|e| entry_err(std::io::Error::other(e)))?;
    if f.size() > limit {
        return Err(Error::format(
            path,
            format!(
                "zip entry `{name}` is {} bytes, more than the {limit} expected",
                f.size()
            ),
        ));
    }
    // `size()` comes from the header and may lie: never reserve more than the archive holds.
    let mut buf = Vec::new();
    let _ = buf.try_reserve_exact(f.size().min(file_len) as usize);
    f.read_to_end(&mut buf).map_err(entry_err)?;
    if buf.len() as u64 != f.size() {
        return Err(entry_err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("read {} bytes, header says {}", buf.len(), f.size()),
        )));
    }
    Ok(buf)
}

/// Finds the state dict and the constructor string in the unpickled object.
type Interpreted = (Vec<(String, PthTensorInfo)>, Option<String>);

fn interpret(path: &Path, p: &Pickled) -> Result<Interpreted, Error> {
    let Some(top) = p.mapping(&p.root) else {
        return Err(Error::format(
            path,
            format!(
                "checkpoint pickle holds a {}, expected a dict",
                p.kind(&p.root)
            ),
        ));
    };
    let state = match p.get(&p.root, "model") {
        Some(m) if p.mapping(m).is_some() => m,
        Some(m) => {
            return Err(Error::format(
                path,
                format!(
                    "checkpoint `model` entry is a {}, expected a state dict",
                    p.kind(m)
                ),
            ));
        }
        None if top
            .iter()
            .all(|(_, v)| matches!(p.obj(v), Some(Obj::Tensor(_)))) =>
        {
            &p.root
        }
        None => {
            let keys: Vec<String> = top
                .iter()
                .take(10)
                .map(|(k, _)| match k {
                    Value::Str(s) => format!("`{s}`"),
                    other => p.kind(other).to_string(),
                })
                .collect();
            return Err(Error::format(
                path,
                format!(
                    "checkpoint has no `model` state dict (top-level keys: {})",
                    keys.join(", ")
                ),
            ));
        }
    };

    let mut tensors: Vec<(String, PthTensorInfo)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (k, v) in p.mapping(state).expect("checked above") {
        let Value::Str(name) = k else {
            return Err(Error::format(
                path,
                format!("state dict has a {} key, expected str", p.kind(k)),
            ));
        };
        let Some(Obj::Tensor(t)) = p.obj(v) else {
            return Err(Error::tensor(
                path,
                name,
                format!("state dict entry is a {}, not a tensor", p.kind(v)),
            ));
        };
        let info = PthTensorInfo {
            dtype: t.storage.dtype,
            shape: t.shape.clone(),
            stride: t.stride.clone(),
            storage_offset: t.offset,
            storage_key: t.storage.key.clone(),
            storage_numel: t.storage.numel,
        };
        // Python dict semantics: a repeated key keeps its first position and takes the last value.
        match index.get(&**name) {
            Some(&i) => tensors[i].1 = info,
            None => {
                index.insert(name.to_string(), tensors.len());
                tensors.push((name.to_string(), info));
            }
        }
    }

    let model_string = p
        .get(&p.root, "args")
        .and_then(|args| match p.get(args, "model") {
            Some(Value::Str(s)) => Some(s.to_string()),
            _ => None,
        });
    Ok((tensors, model_string))
}

/// Gathers a (possibly strided) tensor view out of its storage bytes into contiguous `f32`.
fn materialise(
    info: &PthTensorInfo,
    storage: &[u8],
    little_endian: bool,
) -> Result<Vec<f32>, String> {
    let esize = info.dtype.size();
    let declared = info
        .storage_numel
        .checked_mul(esize)
        .ok_or_else(|| "storage size overflows".to_string())?;
    if storage.len() != declared {
        return Err(format!(
            "storage `{}` holds {} bytes but declares {} {:?} elements ({} bytes)",
            info.storage_key,
            storage.len(),
            info.storage_numel,
            info.dtype,
            declared
        ));
    }
    if info.shape.len() != info.stride.len() {
        return Err("shape and stride have different ranks".into());
    }
    let n = numel(&info.shape).ok_or("element count overflows")?;
    if n == 0 {
        return Ok(Vec::new());
    }
    // Highest storage element the view touches.
    let mut last = info.storage_offset;
    for (&d, &s) in info.shape.iter().zip(&info.stride) {
        last = (d - 1)
            .checked_mul(s)
            .and_then(|x| x.checked_add(last))
            .ok_or("view extent overflows")?;
    }
    if last >= info.storage_numel {
        return Err(format!(
            "view (offset {}, shape {:?}, stride {:?}) reaches element {last} of a storage of {}",
            info.storage_offset, info.shape, info.stride, info.storage_numel
        ));
    }
    if n > info.storage_numel {
        return Err(format!(
            "view of {n} elements is larger than its storage of {} (broadcast views are not supported)",
            info.storage_numel
        ));
    }
    // Decode the touched range once, then gather.
    let first = info.storage_offset;
    let range = &storage[first * esize..(last + 1) * esize];
    let mut flat = try_vec(last + 1 - first)?;
    info.dtype.decode_into(range, little_endian, &mut flat);

    let contiguous = {
        let mut expect = 1usize;
        let mut ok = true;
        for (&d, &s) in info.shape.iter().zip(&info.stride).rev() {
            if d != 1 && s != expect {
                ok = false;
                break;
            }
            expect *= d;
        }
        ok
    };
    if contiguous {
        flat.truncate(n);
        return Ok(flat);
    }
    let mut out = try_vec(n)?;
    let rank = info.shape.len();
    let mut idx = vec![0usize; rank];
    let mut pos = 0usize; // relative to `first`
    for _ in 0..n {
        out.push(flat[pos]);
        // Odometer increment, innermost dimension first.
        for ax in (0..rank).rev() {
            idx[ax] += 1;
            pos += info.stride[ax];
            if idx[ax] < info.shape[ax] {
                break;
            }
            pos -= info.stride[ax] * info.shape[ax];
            idx[ax] = 0;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(shape: &[usize], stride: &[usize], offset: usize, numel: usize) -> PthTensorInfo {
        PthTensorInfo {
            dtype: ElementType::F32,
            shape: shape.to_vec(),
            stride: stride.to_vec(),
            storage_offset: offset,
            storage_key: "0".into(),
            storage_numel: numel,
        }
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn strided_views() {
        let s: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let b = bytes(&s);
        // Contiguous [3, 4].
        assert_eq!(
            materialise(&info(&[3, 4], &[4, 1], 0, 12), &b, true).unwrap(),
            s
        );
        // Transposed [4, 3] of the [3, 4] storage.
        let t = materialise(&info(&[4, 3], &[1, 4], 0, 12), &b, true).unwrap();
        assert_eq!(t, vec![0., 4., 8., 1., 5., 9., 2., 6., 10., 3., 7., 11.]);
        // Column slice with offset: x[:, 1:3].
        let c = materialise(&info(&[3, 2], &[4, 1], 1, 12), &b, true).unwrap();
        assert_eq!(c, vec![1., 2., 5., 6., 9., 10.]);
        // Size-1 dims with odd strides are still contiguous.
        assert_eq!(
            materialise(&info(&[1, 12, 1], &[99, 1, 7], 0, 12), &b, true).unwrap(),
            s
        );
        // Scalar.
        assert_eq!(
            materialise(&info(&[], &[], 5, 12), &b, true).unwrap(),
            vec![5.]
        );
        // Empty.
        assert!(
            materialise(&info(&[0, 4], &[4, 1], 0, 12), &b, true)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn bad_views_are_errors() {
        let b = bytes(&[0.0; 12]);
        assert!(materialise(&info(&[3, 5], &[5, 1], 0, 12), &b, true).is_err()); // past the end
        assert!(materialise(&info(&[100, 100], &[0, 0], 0, 12), &b, true).is_err()); // broadcast
        assert!(materialise(&info(&[usize::MAX, 2], &[1, 1], 0, 12), &b, true).is_err()); // overflow
        assert!(materialise(&info(&[3, 4], &[4, 1], 0, 13), &b, true).is_err()); // size mismatch
    }

    #[test]
    fn half_and_big_endian() {
        let mut i = info(&[2], &[1], 0, 2);
        i.dtype = ElementType::F16;
        let h: Vec<u8> = [half::f16::from_f32(1.5), half::f16::from_f32(-2.0)]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(materialise(&i, &h, true).unwrap(), vec![1.5, -2.0]);
        i.dtype = ElementType::BF16;
        let bf: Vec<u8> = [half::bf16::from_f32(3.0)]
            .iter()
            .flat_map(|x| x.to_be_bytes())
            .chain([0, 0])
            .collect();
        assert_eq!(materialise(&i, &bf, false).unwrap(), vec![3.0, 0.0]);
    }
}
