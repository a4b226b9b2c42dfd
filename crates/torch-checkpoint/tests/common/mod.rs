//! Writers of `torch.save` files for the tests: the legacy format (pickles + raw storages) and the
//! zip format, byte for byte as PyTorch lays them out (protocol 2 pickles), with knobs to break
//! them.
#![allow(dead_code)]

use std::io::{Cursor, Write};

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};

/// Seeded random numbers for the tests (`rand`'s `StdRng`).
pub struct Rng(StdRng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(StdRng::seed_from_u64(seed))
    }

    pub fn next(&mut self) -> u64 {
        self.0.random()
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n)
    }

    /// Uniform in [-1, 1).
    pub fn signed(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// How a tensor is pickled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Style {
    /// `torch._utils._rebuild_tensor_v2` (PyTorch >= 0.4).
    V2,
    /// `torch._utils._rebuild_tensor` (0.2-0.3).
    V1,
    /// `torch.FloatTensor` + `BUILD` with `(storage, offset, size, stride)` (0.1.x).
    ClassBuild,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dtype {
    F32,
    F64,
}

impl Dtype {
    fn storage(self) -> &'static str {
        match self {
            Dtype::F32 => "FloatStorage",
            Dtype::F64 => "DoubleStorage",
        }
    }
    fn tensor(self) -> &'static str {
        match self {
            Dtype::F32 => "FloatTensor",
            Dtype::F64 => "DoubleTensor",
        }
    }
    fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F64 => 8,
        }
    }
}

/// A storage: key, type, values.
#[derive(Clone, Debug)]
pub struct Storage {
    pub key: String,
    pub dtype: Dtype,
    pub values: Vec<f64>,
}

impl Storage {
    pub fn bytes(&self) -> Vec<u8> {
        match self.dtype {
            Dtype::F32 => self
                .values
                .iter()
                .flat_map(|&v| (v as f32).to_le_bytes())
                .collect(),
            Dtype::F64 => self.values.iter().flat_map(|&v| v.to_le_bytes()).collect(),
        }
    }
}

/// A state-dict entry: a view of storage `storage` (an index into the storages).
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub storage: usize,
    pub offset: usize,
    pub shape: Vec<usize>,
    pub stride: Vec<usize>,
    pub style: Style,
}

impl Entry {
    /// A contiguous tensor over a whole storage.
    pub fn whole(name: &str, storage: usize, shape: &[usize]) -> Self {
        let mut stride = vec![1; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            stride[i] = stride[i + 1] * shape[i + 1];
        }
        Entry {
            name: name.into(),
            storage,
            offset: 0,
            shape: shape.to_vec(),
            stride,
            style: Style::V2,
        }
    }

    /// The values the reader must return (row-major gather of the view).
    pub fn expected(&self, storages: &[Storage]) -> Vec<f32> {
        let s = &storages[self.storage];
        let n: usize = self.shape.iter().product();
        let mut out = Vec::with_capacity(n);
        let mut idx = vec![0usize; self.shape.len()];
        for _ in 0..n {
            let pos = self.offset
                + idx
                    .iter()
                    .zip(&self.stride)
                    .map(|(i, s)| i * s)
                    .sum::<usize>();
            out.push(s.values[pos] as f32);
            for ax in (0..idx.len()).rev() {
                idx[ax] += 1;
                if idx[ax] < self.shape[ax] {
                    break;
                }
                idx[ax] = 0;
            }
        }
        out
    }
}

/// A minimal protocol-2 pickle emitter.
#[derive(Default)]
pub struct Pickler {
    pub out: Vec<u8>,
    /// Python 2 `str` (`SHORT_BINSTRING`) instead of `BINUNICODE` for strings.
    pub py2_strings: bool,
}

impl Pickler {
    pub fn proto(&mut self) {
        self.out.extend([0x80, 2]);
    }
    pub fn stop(&mut self) {
        self.out.push(b'.');
    }
    pub fn str(&mut self, s: &str) {
        if self.py2_strings && s.len() < 256 {
            self.out.push(b'U');
            self.out.push(s.len() as u8);
        } else {
            self.out.push(b'X');
            self.out.extend((s.len() as u32).to_le_bytes());
        }
        self.out.extend(s.as_bytes());
    }
    pub fn int(&mut self, v: i64) {
        if (0..256).contains(&v) {
            self.out.extend([b'K', v as u8]);
        } else if (0..65536).contains(&v) {
            self.out.push(b'M');
            self.out.extend((v as u16).to_le_bytes());
        } else if i32::try_from(v).is_ok() {
            self.out.push(b'J');
            self.out.extend((v as i32).to_le_bytes());
        } else {
            self.out.extend([0x8a, 8]);
            self.out.extend(v.to_le_bytes());
        }
    }
    pub fn global(&mut self, module: &str, name: &str) {
        self.out.push(b'c');
        self.out.extend(module.as_bytes());
        self.out.push(b'\n');
        self.out.extend(name.as_bytes());
        self.out.push(b'\n');
    }
    pub fn mark(&mut self) {
        self.out.push(b'(');
    }
    pub fn tuple(&mut self) {
        self.out.push(b't');
    }
    pub fn ints(&mut self, v: &[usize]) {
        self.mark();
        for &x in v {
            self.int(x as i64);
        }
        self.tuple();
    }
    pub fn ordered_dict(&mut self) {
        self.global("collections", "OrderedDict");
        self.out.extend([b')', b'R']);
    }
}

/// Knobs to produce broken files.
#[derive(Clone, Debug)]
pub struct LegacyOptions {
    pub magic: [u8; 10],
    pub protocol_version: i64,
    pub little_endian: bool,
    /// Keys written in the storage key list (default: every storage, in order).
    pub keys: Option<Vec<String>>,
    /// Element count written before each storage's data (default: its length).
    pub counts: Option<Vec<i64>>,
    /// A sixth persistent-id element instead of `None`: `(view_key, offset, size)`.
    pub view_metadata: bool,
    pub py2_strings: bool,
    /// Global used for the state dict instead of `collections.OrderedDict`.
    pub dict_global: (String, String),
}

impl Default for LegacyOptions {
    fn default() -> Self {
        LegacyOptions {
            magic: [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19],
            protocol_version: 1001,
            little_endian: true,
            keys: None,
            counts: None,
            view_metadata: false,
            py2_strings: false,
            dict_global: ("collections".into(), "OrderedDict".into()),
        }
    }
}

/// The state-dict pickle; `legacy` selects the 6-element persistent id.
pub fn state_pickle(
    storages: &[Storage],
    entries: &[Entry],
    legacy: bool,
    o: &LegacyOptions,
) -> Vec<u8> {
    let mut p = Pickler {
        py2_strings: o.py2_strings,
        ..Default::default()
    };
    p.proto();
    p.global(&o.dict_global.0, &o.dict_global.1);
    p.out.extend([b')', b'R']);
    for e in entries {
        let s = &storages[e.storage];
        p.str(&e.name);
        let pid = |p: &mut Pickler| {
            p.mark();
            p.str("storage");
            p.global("torch", s.dtype.storage());
            p.str(&s.key);
            p.str("cpu");
            p.int(s.values.len() as i64);
            if legacy {
                if o.view_metadata {
                    p.mark();
                    p.str(&format!("{}v", s.key));
                    p.int(0);
                    p.int(s.values.len() as i64);
                    p.tuple();
                } else {
                    p.out.push(b'N');
                }
            }
            p.tuple();
            p.out.push(b'Q');
        };
        match e.style {
            Style::V2 => {
                p.global("torch._utils", "_rebuild_tensor_v2");
                p.mark();
                pid(&mut p);
                p.int(e.offset as i64);
                p.ints(&e.shape);
                p.ints(&e.stride);
                p.out.push(0x89); // False
                p.ordered_dict();
                p.tuple();
                p.out.push(b'R');
            }
            Style::V1 => {
                p.global("torch._utils", "_rebuild_tensor");
                p.mark();
                pid(&mut p);
                p.int(e.offset as i64);
                p.ints(&e.shape);
                p.ints(&e.stride);
                p.tuple();
                p.out.push(b'R');
            }
            Style::ClassBuild => {
                p.global("torch", s.dtype.tensor());
                p.out.extend([b')', 0x81]); // NEWOBJ with no arguments
                p.mark();
                pid(&mut p);
                p.int(e.offset as i64);
                p.ints(&e.shape);
                p.ints(&e.stride);
                p.tuple();
                p.out.push(b'b');
            }
        }
        p.out.push(b's');
    }
    p.stop();
    p.out
}

/// A legacy (`_use_new_zipfile_serialization=False`) file.
pub fn legacy_file(storages: &[Storage], entries: &[Entry], o: &LegacyOptions) -> Vec<u8> {
    let mut out = Vec::new();
    let mut p = Pickler {
        py2_strings: o.py2_strings,
        ..Default::default()
    };
    // Magic number (LONG1, 10 bytes), protocol version, sys_info.
    p.proto();
    p.out.extend([0x8a, 10]);
    p.out.extend(o.magic);
    p.stop();
    p.proto();
    p.int(o.protocol_version);
    p.stop();
    p.proto();
    p.out.push(b'}');
    p.mark();
    p.str("protocol_version");
    p.int(1001);
    p.str("little_endian");
    p.out.push(if o.little_endian { 0x88 } else { 0x89 });
    p.str("type_sizes");
    p.out.push(b'}');
    p.mark();
    for (k, v) in [("short", 2), ("int", 4), ("long", 8)] {
        p.str(k);
        p.int(v);
    }
    p.out.push(b'u');
    p.out.push(b'u');
    p.stop();
    out.extend(&p.out);
    out.extend(state_pickle(storages, entries, true, o));
    let keys: Vec<String> = o
        .keys
        .clone()
        .unwrap_or_else(|| storages.iter().map(|s| s.key.clone()).collect());
    let mut p = Pickler {
        py2_strings: o.py2_strings,
        ..Default::default()
    };
    p.proto();
    p.out.push(b']');
    p.mark();
    for k in &keys {
        p.str(k);
    }
    p.out.push(b'e');
    p.stop();
    out.extend(&p.out);
    for (i, k) in keys.iter().enumerate() {
        let Some(s) = storages.iter().find(|s| &s.key == k) else {
            continue;
        };
        let count = o
            .counts
            .as_ref()
            .map(|c| c[i])
            .unwrap_or(s.values.len() as i64);
        out.extend(count.to_le_bytes());
        out.extend(s.bytes());
    }
    out
}

/// The same state dict in the zip format (`archive/data.pkl`, `archive/data/<key>`, ...).
pub fn zip_file(storages: &[Storage], entries: &[Entry]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let mut put = |name: String, data: &[u8]| {
        w.start_file(name, opts).unwrap();
        w.write_all(data).unwrap();
    };
    put(
        "archive/data.pkl".into(),
        &state_pickle(storages, entries, false, &LegacyOptions::default()),
    );
    put("archive/byteorder".into(), b"little");
    for s in storages {
        put(format!("archive/data/{}", s.key), &s.bytes());
    }
    put("archive/version".into(), b"3\n");
    w.finish().unwrap().into_inner()
}

/// A small state dict exercising every tensor style: shared storages, strided views, f64.
pub fn sample(rng: &mut Rng) -> (Vec<Storage>, Vec<Entry>) {
    let mut vals = |n: usize| (0..n).map(|_| rng.signed()).collect::<Vec<f64>>();
    let storages = vec![
        Storage {
            key: "94105863014400".into(),
            dtype: Dtype::F32,
            values: vals(64 * 3 * 11 * 11),
        },
        Storage {
            key: "94105863014512".into(),
            dtype: Dtype::F32,
            values: vals(64),
        },
        Storage {
            key: "7".into(),
            dtype: Dtype::F64,
            values: vals(24),
        },
        Storage {
            key: "shared".into(),
            dtype: Dtype::F32,
            values: vals(30),
        },
    ];
    let mut entries = vec![
        Entry::whole("features.0.weight", 0, &[64, 3, 11, 11]),
        Entry::whole("features.0.bias", 1, &[64]),
        Entry::whole("double", 2, &[2, 3, 4]),
        // Two views of one storage: a transposed [5, 3] and a column slice.
        Entry {
            name: "shared.t".into(),
            storage: 3,
            offset: 0,
            shape: vec![5, 3],
            stride: vec![1, 5],
            style: Style::V1,
        },
        Entry {
            name: "shared.cols".into(),
            storage: 3,
            offset: 2,
            shape: vec![3, 2],
            stride: vec![10, 1],
            style: Style::ClassBuild,
        },
    ];
    entries[2].style = Style::V1;
    (storages, entries)
}
