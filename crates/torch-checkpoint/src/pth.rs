//! PyTorch `.pth` checkpoints, read without Python: both container formats of `torch.save`.
//!
//! **Zip** (PyTorch >= 1.6): the archive holds one root folder (any name) with `data.pkl`,
//! optionally `byteorder`, and one raw blob per storage under `data/<key>`.
//!
//! **Legacy** (before 1.6, `_use_new_zipfile_serialization=False`; torchvision's and lpips's
//! weight files): five pickles one after the other (the magic number `0x1950a86a20f9469cfc6c`,
//! the protocol version 1001, a `sys_info` dict, the object itself, and the list of storage keys),
//! then for each key of that list, in order, an int64 little-endian element count and the
//! storage's raw little-endian data.
//!
//! [`PthFile::open`] runs the pickles through the restricted pickle interpreter (see
//! [`crate::PickleError`]), records every tensor's metadata and, for the legacy format, where each
//! storage's data lies (every count is checked against the storage's declared size and the file's
//! length before anything is allocated); tensor data is read only when asked for
//! ([`PthFile::read_tensor`], [`PthFile::read_tensors`]).
//!
//! The state dict is taken from the top-level `model` entry (`{'model': state_dict, 'args': ...}`, as
//! MASt3R/DUSt3R save it), or is the top-level dict itself when that holds only tensors. The
//! constructor string `args.model` (an `argparse.Namespace` attribute, or a dict entry) is kept.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use zip::ZipArchive;

use crate::error::{Error, PickleErrorKind};
use crate::pickle::{Obj, Pickled, Value, unpickle, unpickle_prefix};
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
    /// The storage's key: its data is the archive entry `<root>/data/<key>` (zip), or the record
    /// of that key after the pickles (legacy).
    pub storage_key: String,
    /// Number of elements the storage declares.
    pub storage_numel: usize,
}

/// Which of `torch.save`'s two container formats a [`PthFile`] has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PthFormat {
    /// The zip archive of PyTorch >= 1.6.
    Zip,
    /// The sequence of pickles followed by raw storages of PyTorch before 1.6.
    Legacy,
}

/// Where the storages' bytes come from.
enum Storages {
    Zip {
        archive: ZipArchive<BufReader<File>>,
        /// Entry-name prefix, e.g. `tiny_mast3r/`.
        prefix: String,
    },
    Legacy {
        file: File,
        /// Byte offset of each storage's data (after its count), checked to lie inside the file.
        offsets: HashMap<String, u64>,
    },
}

/// An open PyTorch checkpoint (zip or legacy) whose pickle has been parsed; tensor data is read
/// on demand.
pub struct PthFile {
    path: PathBuf,
    storages: Storages,
    /// Size of the file, bounding every allocation made from header values.
    file_len: u64,
    little_endian: bool,
    /// State-dict entries in file order.
    tensors: Vec<(String, PthTensorInfo)>,
    index: HashMap<String, usize>,
    model_string: Option<String>,
    args: Vec<(String, ArgValue)>,
}

/// A scalar attribute of a checkpoint's `args` (training options such as `nfeat`, `hdims`).
#[derive(Debug, Clone, PartialEq)]
pub enum ArgValue {
    /// `None`.
    None,
    /// A bool.
    Bool(bool),
    /// An int.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
}

impl std::fmt::Debug for PthFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PthFile")
            .field("path", &self.path)
            .field("format", &self.format())
            .field("tensors", &self.tensors.len())
            .field("model_string", &self.model_string)
            .finish()
    }
}

/// Largest pickle accepted (the released MASt3R checkpoint's is well under 1 MiB; a legacy file's
/// five pickles together count as one).
const MAX_PICKLE_BYTES: u64 = 256 << 20;

/// The legacy format's magic number `0x1950a86a20f9469cfc6c`, little-endian (as `LONG1` holds it).
const LEGACY_MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
/// The only legacy protocol version there is.
const LEGACY_PROTOCOL_VERSION: i64 = 1001;
/// What each pickle of a legacy file holds.
const LEGACY_PICKLES: [&str; 5] = [
    "the magic number",
    "the protocol version",
    "sys_info",
    "the state dict",
    "the storage keys",
];

/// A `Format` error about a legacy file; the message says which format it is.
fn legacy_err(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::format(
        path,
        format!("legacy PyTorch file (torch.save before 1.6): {message}"),
    )
}

/// The five pickles of a legacy file and the file offset right after them.
struct LegacyHeader {
    little_endian: bool,
    state: Pickled,
    keys: Vec<String>,
    end: u64,
}

/// Why parsing the pickles at the start of a legacy file stopped.
enum HeaderError {
    /// The buffer ended inside pickle `k` (more of the file may fix it).
    Truncated(usize),
    /// A real error.
    Fatal(Error),
}

impl PthFile {
    /// Opens a `.pth` checkpoint (zip or legacy, told apart by the first bytes) and parses its
    /// pickle (no tensor data is read).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut head = [0u8; 20];
        let n = read_up_to(&mut file, &mut head).map_err(|e| Error::io(path, e))?;
        file.seek(SeekFrom::Start(0))
            .map_err(|e| Error::io(path, e))?;
        let head = &head[..n];
        if crate::format::is_zip(head) {
            Self::open_zip(path, file, file_len)
        } else if crate::format::is_legacy_pth(head) {
            Self::open_legacy(path, file, file_len)
        } else {
            Err(Error::format(
                path,
                "not a PyTorch checkpoint: neither a zip archive (torch.save since 1.6) nor the \
                 legacy format (before 1.6, which starts with a pickled magic number)",
            ))
        }
    }

    fn open_zip(path: &Path, file: File, file_len: u64) -> Result<Self, Error> {
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
        let (tensors, model_string, args) = interpret(path, &pickled)?;
        Ok(Self::assemble(
            path,
            Storages::Zip { archive, prefix },
            file_len,
            little_endian,
            tensors,
            model_string,
            args,
        ))
    }

    fn open_legacy(path: &Path, mut file: File, file_len: u64) -> Result<Self, Error> {
        // The pickles come first and are small, but their length is only known by running them:
        // read a prefix and grow it while the interpreter runs out of data.
        let cap = file_len.min(MAX_PICKLE_BYTES);
        let mut want = cap.min(1 << 16);
        let header = loop {
            let mut buf = try_vec(want as usize).map_err(|m| legacy_err(path, m))?;
            buf.resize(want as usize, 0);
            file.seek(SeekFrom::Start(0))
                .and_then(|_| file.read_exact(&mut buf))
                .map_err(|e| Error::io(path, e))?;
            match parse_legacy_header(path, &buf) {
                Ok(h) => break h,
                Err(HeaderError::Truncated(_)) if want < cap => want = (want * 4).min(cap),
                Err(HeaderError::Truncated(k)) if want == file_len => {
                    return Err(legacy_err(
                        path,
                        format!(
                            "the file ends inside pickle {} of 5 ({}): truncated file",
                            k + 1,
                            LEGACY_PICKLES[k]
                        ),
                    ));
                }
                Err(HeaderError::Truncated(k)) => {
                    return Err(legacy_err(
                        path,
                        format!(
                            "pickle {} of 5 ({}) does not end within the first {} bytes",
                            k + 1,
                            LEGACY_PICKLES[k],
                            MAX_PICKLE_BYTES
                        ),
                    ));
                }
                Err(HeaderError::Fatal(e)) => return Err(e),
            }
        };
        let LegacyHeader {
            little_endian,
            state,
            keys,
            end,
        } = header;
        let (tensors, model_string, args) = interpret(path, &state)?;

        // Every storage the state dict refers to, with its declared type and size.
        let mut declared: HashMap<&str, (ElementType, usize)> = HashMap::new();
        for obj in &state.arena {
            if let Obj::Storage(s) = obj {
                match declared.insert(&s.key, (s.dtype, s.numel)) {
                    Some(prev) if prev != (s.dtype, s.numel) => {
                        return Err(legacy_err(
                            path,
                            format!(
                                "storage `{}` is declared twice, as {} {:?} and as {} {:?} elements",
                                s.key, prev.1, prev.0, s.numel, s.dtype
                            ),
                        ));
                    }
                    _ => {}
                }
            }
        }

        // The storage records: an int64 element count, then the data, in the order of `keys`.
        let mut offsets: HashMap<String, u64> = HashMap::new();
        let mut pos = end;
        for key in &keys {
            let Some(&(dtype, numel)) = declared.get(key.as_str()) else {
                return Err(legacy_err(
                    path,
                    format!("the storage key list names `{key}`, which the state dict never uses"),
                ));
            };
            if offsets.contains_key(key) {
                return Err(legacy_err(
                    path,
                    format!("the storage key list names `{key}` twice"),
                ));
            }
            if pos.checked_add(8).is_none_or(|e| e > file_len) {
                return Err(legacy_err(
                    path,
                    format!(
                        "the file ends at byte {file_len}, before the element count of storage \
                         `{key}` (at byte {pos}): truncated file"
                    ),
                ));
            }
            let mut count = [0u8; 8];
            file.seek(SeekFrom::Start(pos))
                .and_then(|_| file.read_exact(&mut count))
                .map_err(|e| Error::io(path, e))?;
            let count = i64::from_le_bytes(count);
            if usize::try_from(count).ok() != Some(numel) {
                return Err(legacy_err(
                    path,
                    format!(
                        "storage `{key}` (at byte {pos}) has an element count of {count}, but the \
                         state dict declares {numel} {dtype:?} elements"
                    ),
                ));
            }
            let bytes = (numel as u64).checked_mul(dtype.size() as u64);
            let data_end = bytes.and_then(|b| b.checked_add(pos + 8));
            match data_end {
                Some(e) if e <= file_len => {
                    offsets.insert(key.clone(), pos + 8);
                    pos = e;
                }
                _ => {
                    return Err(legacy_err(
                        path,
                        format!(
                            "storage `{key}` needs {numel} {dtype:?} elements from byte {} but the \
                             file ends at byte {file_len}: truncated file",
                            pos + 8
                        ),
                    ));
                }
            }
        }
        let mut missing: Vec<&str> = declared
            .keys()
            .copied()
            .filter(|k| !offsets.contains_key(*k))
            .collect();
        if !missing.is_empty() {
            missing.sort_unstable();
            let users: Vec<&str> = tensors
                .iter()
                .filter(|(_, i)| i.storage_key == missing[0])
                .map(|(n, _)| n.as_str())
                .take(3)
                .collect();
            return Err(legacy_err(
                path,
                format!(
                    "storage `{}` (used by {}) has no data in the file: it is missing from the \
                     storage key list{}",
                    missing[0],
                    if users.is_empty() {
                        "no tensor".to_string()
                    } else {
                        format!("`{}`", users.join("`, `"))
                    },
                    if missing.len() > 1 {
                        format!(" ({} storages in all)", missing.len())
                    } else {
                        String::new()
                    }
                ),
            ));
        }
        Ok(Self::assemble(
            path,
            Storages::Legacy { file, offsets },
            file_len,
            little_endian,
            tensors,
            model_string,
            args,
        ))
    }

    fn assemble(
        path: &Path,
        storages: Storages,
        file_len: u64,
        little_endian: bool,
        tensors: Vec<(String, PthTensorInfo)>,
        model_string: Option<String>,
        args: Vec<(String, ArgValue)>,
    ) -> Self {
        let index = tensors
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        PthFile {
            path: path.to_path_buf(),
            storages,
            file_len,
            little_endian,
            tensors,
            index,
            model_string,
            args,
        }
    }

    /// The file this was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Zip or legacy.
    pub fn format(&self) -> PthFormat {
        match self.storages {
            Storages::Zip { .. } => PthFormat::Zip,
            Storages::Legacy { .. } => PthFormat::Legacy,
        }
    }

    /// The `args.model` constructor string (e.g. `AsymmetricMASt3R(...)`), if the checkpoint has one.
    pub fn model_string(&self) -> Option<&str> {
        self.model_string.as_deref()
    }

    /// The scalar attributes (None, bool, int, float, str) of the checkpoint's `args`
    /// (`argparse.Namespace` or dict), in file order; other attributes are left out.
    pub fn args(&self) -> &[(String, ArgValue)] {
        &self.args
    }

    /// One scalar attribute of `args` ([`PthFile::args`]; the last assignment wins).
    pub fn arg(&self, name: &str) -> Option<&ArgValue> {
        self.args
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    /// State-dict tensor names in file order.
    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|(k, _)| k.as_str())
    }

    /// Metadata of one tensor.
    pub fn tensor_info(&self, name: &str) -> Option<&PthTensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i].1)
    }

    /// The bytes of storage `key` (`first_name`: a tensor using it, for errors; `limit`: its
    /// declared size in bytes).
    fn storage_bytes(&mut self, key: &str, first_name: &str, limit: u64) -> Result<Vec<u8>, Error> {
        let bytes = match &mut self.storages {
            Storages::Zip { archive, prefix } => {
                let entry = format!("{prefix}data/{key}");
                let Some(idx) = archive.index_for_name(&entry) else {
                    return Err(Error::tensor(
                        &self.path,
                        first_name,
                        format!("storage entry `{entry}` is missing"),
                    ));
                };
                read_entry(&self.path, archive, idx, &entry, limit, self.file_len)?
            }
            Storages::Legacy { file, offsets } => {
                // `open` checked that every storage has a record inside the file.
                let Some(&offset) = offsets.get(key) else {
                    return Err(Error::tensor(
                        &self.path,
                        first_name,
                        format!("storage `{key}` has no data in the file"),
                    ));
                };
                let len = usize::try_from(limit)
                    .ok()
                    .filter(|_| offset.saturating_add(limit) <= self.file_len)
                    .ok_or_else(|| {
                        Error::tensor(&self.path, first_name, "storage extends past the file")
                    })?;
                let mut buf = try_vec(len).map_err(|m| Error::tensor(&self.path, first_name, m))?;
                buf.resize(len, 0);
                file.seek(SeekFrom::Start(offset))
                    .and_then(|_| file.read_exact(&mut buf))
                    .map_err(|e| Error::io(&self.path, e))?;
                buf
            }
        };
        Ok(bytes)
    }

    /// Reads one contiguous tensor as `f64` (float64 tensors keep their precision; other types
    /// go through [`PthFile::read_tensor`]).
    pub fn read_tensor_f64(&mut self, name: &str) -> Result<(Vec<usize>, Vec<f64>), Error> {
        let Some(&i) = self.index.get(name) else {
            return Err(Error::tensor(
                &self.path,
                name,
                "not in the checkpoint's state dict",
            ));
        };
        let info = self.tensors[i].1.clone();
        if info.dtype != ElementType::F64 {
            let t = self.read_tensor(name)?;
            return Ok((t.shape, t.data.into_iter().map(f64::from).collect()));
        }
        let n =
            numel(&info.shape).ok_or_else(|| Error::tensor(&self.path, name, "size overflows"))?;
        let mut expect = 1usize;
        for (&d, &st) in info.shape.iter().zip(&info.stride).rev() {
            if d != 1 && st != expect {
                return Err(Error::tensor(
                    &self.path,
                    name,
                    "float64 views must be contiguous",
                ));
            }
            expect = expect.saturating_mul(d);
        }
        let limit = info.storage_numel.saturating_mul(8) as u64;
        let bytes = self.storage_bytes(&info.storage_key, name, limit)?;
        let (start, end) = (
            info.storage_offset.saturating_mul(8),
            (info.storage_offset + n).saturating_mul(8),
        );
        if bytes.len() != info.storage_numel * 8 || end > bytes.len() {
            return Err(Error::tensor(
                &self.path,
                name,
                "view reaches past its storage",
            ));
        }
        let le = self.little_endian;
        let data = bytes[start..end]
            .chunks_exact(8)
            .map(|c| {
                let mut b: [u8; 8] = c.try_into().expect("chunk size");
                if !le {
                    b.reverse();
                }
                f64::from_le_bytes(b)
            })
            .collect();
        Ok((info.shape.clone(), data))
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
            let info = &first.1;
            let limit = info.storage_numel.saturating_mul(info.dtype.size()) as u64;
            let first_name = first.0.clone();
            let bytes = self.storage_bytes(&key, &first_name, limit)?;
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

/// Reads into `buf` until it is full or the reader ends; returns the bytes read.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Runs the five pickles at the start of a legacy file (`buf` may be a prefix of it) and checks
/// the magic number, the protocol version, the byte order and the storage key list.
fn parse_legacy_header(path: &Path, buf: &[u8]) -> Result<LegacyHeader, HeaderError> {
    let mut pos = 0usize;
    let mut pickles = Vec::with_capacity(5);
    for (k, what) in LEGACY_PICKLES.iter().enumerate() {
        match unpickle_prefix(&buf[pos..]) {
            Ok((p, used)) => {
                let p = check_legacy_pickle(path, k, p)?;
                pickles.push(p);
                pos += used;
            }
            Err(e) if e.kind == PickleErrorKind::Truncated => {
                return Err(HeaderError::Truncated(k));
            }
            Err(source) => {
                // A file that is not a torch.save file at all fails on its first pickle.
                return Err(HeaderError::Fatal(if k == 0 {
                    legacy_err(
                        path,
                        format!("no magic number: {source}; not a torch.save file"),
                    )
                } else {
                    Error::Pickle {
                        path: path.to_path_buf(),
                        entry: format!(
                            "legacy PyTorch pickle {} of 5 ({what}, from file byte {pos})",
                            k + 1
                        ),
                        source,
                    }
                }));
            }
        }
    }
    let keys_pickle = pickles.pop().expect("five pickles");
    let state = pickles.pop().expect("five pickles");
    let sys_info = pickles.pop().expect("five pickles");
    let little_endian = !matches!(
        sys_info.get(&sys_info.root, "little_endian"),
        Some(Value::Bool(false))
    );
    if !little_endian {
        return Err(HeaderError::Fatal(legacy_err(
            path,
            "sys_info says the file was written on a big-endian machine; only little-endian \
             legacy files are supported",
        )));
    }
    let keys = match keys_pickle.obj(&keys_pickle.root) {
        Some(Obj::List(items)) => items
            .iter()
            .map(|v| match v {
                Value::Str(s) => Ok(s.to_string()),
                other => Err(HeaderError::Fatal(legacy_err(
                    path,
                    format!(
                        "the storage key list holds a {}, expected str",
                        keys_pickle.kind(other)
                    ),
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => {
            return Err(HeaderError::Fatal(legacy_err(
                path,
                format!(
                    "pickle 5 of 5 should be the storage key list but is a {}",
                    keys_pickle.kind(&keys_pickle.root)
                ),
            )));
        }
    };
    Ok(LegacyHeader {
        little_endian,
        state,
        keys,
        end: pos as u64,
    })
}

/// Checks what pickle `k` of a legacy file must be (the magic number, version 1001, a dict).
fn check_legacy_pickle(path: &Path, k: usize, p: Pickled) -> Result<Pickled, HeaderError> {
    let fatal = |m: String| HeaderError::Fatal(legacy_err(path, m));
    match k {
        0 => match &p.root {
            Value::BigInt(b) if **b == LEGACY_MAGIC => Ok(p),
            other => Err(fatal(format!(
                "wrong magic number (the first pickle holds {}): not a torch.save file",
                match other {
                    Value::Int(i) => format!("the int {i}"),
                    Value::BigInt(_) => "another large int".to_string(),
                    v => format!("a {}", p.kind(v)),
                }
            ))),
        },
        1 => match p.root {
            Value::Int(LEGACY_PROTOCOL_VERSION) => Ok(p),
            Value::Int(v) => Err(fatal(format!(
                "unsupported protocol version {v} (expected {LEGACY_PROTOCOL_VERSION})"
            ))),
            ref v => Err(fatal(format!(
                "the protocol version is a {}, expected an int",
                p.kind(v)
            ))),
        },
        2 => match p.mapping(&p.root) {
            Some(_) => Ok(p),
            None => Err(fatal(format!(
                "sys_info is a {}, expected a dict",
                p.kind(&p.root)
            ))),
        },
        _ => Ok(p),
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
type Interpreted = (
    Vec<(String, PthTensorInfo)>,
    Option<String>,
    Vec<(String, ArgValue)>,
);

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
    let args = p
        .get(&p.root, "args")
        .and_then(|a| p.mapping(a))
        .map(|items| {
            items
                .iter()
                .filter_map(|(k, v)| {
                    let Value::Str(k) = k else { return None };
                    let v = match v {
                        Value::None => ArgValue::None,
                        Value::Bool(b) => ArgValue::Bool(*b),
                        Value::Int(i) => ArgValue::Int(*i),
                        Value::Float(f) => ArgValue::Float(*f),
                        Value::Str(s) => ArgValue::Str(s.to_string()),
                        _ => return None,
                    };
                    Some((k.to_string(), v))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok((tensors, model_string, args))
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
