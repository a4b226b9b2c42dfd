//! The fixture's parity cases: runs the network on an inputs file laid out like
//! `shared/fixtures/mast3r_tiny/inputs.safetensors` and produces every tensor of the reference
//! `outputs.safetensors`, with the same names, shapes and dtypes (`rust3r mast3r-infer`).
//!
//! | case | inputs | run | storage |
//! |---|---|---|---|
//! | `asym512` | `pair512.view{1,2}.img` | encode both, decode the pair | tokens full; pixel maps on a stride-5 grid |
//! | `mono512` | `pair512.view1.img` | encode, decode with itself | `pos`, `view1.enc_out`, `dec_out`, heads; stride-5 grid |
//! | `asym224` | `pair224.view{1,2}.img` | as asym512 | stride-3 grid |
//! | `asymodd` | `pairodd.view{1,2}.img` | as asym512 | everything full, plus view 1's DPT internals |
//!
//! Sampled cases store `{case}.grid_rows` / `.grid_cols` (every `stride`-th index plus the last)
//! and `{case}.local_feat_tokens` (token rows `{0, h/2, h-1}` x columns `{0, 1, w/2, w-1}`); a
//! NHWC map `M` is stored as `M[:, rows][:, :, cols]`, `dpt_out` as `D[:, :, rows][:, :, :, cols]`,
//! `local_feat_raw` as `L[:, tokens, :]`. Grids found in a reference file take precedence.

use std::collections::BTreeMap;
use std::path::Path;

use burn::tensor::Tensor;

use crate::error::Error;
use crate::model::{Encoded, Mast3r, Trace};
use rust3r_torch_checkpoint::SafetensorsFile;
use rust3r_torch_checkpoint::TensorF32;

/// Values of an output tensor.
#[derive(Clone, Debug, PartialEq)]
pub enum OutData {
    /// binary32.
    F32(Vec<f32>),
    /// int64 (positions, grid indices).
    I64(Vec<i64>),
}

/// One output tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct OutTensor {
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Row-major values.
    pub data: OutData,
}

impl OutTensor {
    fn f32(t: TensorF32) -> Self {
        OutTensor {
            shape: t.shape,
            data: OutData::F32(t.data),
        }
    }

    fn i64(shape: Vec<usize>, data: Vec<i64>) -> Self {
        OutTensor {
            shape,
            data: OutData::I64(data),
        }
    }

    /// Values as `f64` (either dtype).
    pub fn values_f64(&self) -> Vec<f64> {
        match &self.data {
            OutData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            OutData::I64(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }
}

/// How a case decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Asym,
    Mono,
}

/// One case of the fixture.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// Output prefix (`asym512`, ...).
    pub name: &'static str,
    /// Input prefix (`pair512`, ...).
    pub input: &'static str,
    kind: Kind,
    /// Pixel-map sampling stride, `None` for full maps.
    pub stride: Option<usize>,
    /// Whether view 1's DPT internals are stored.
    pub dpt_internals: bool,
}

/// The fixture's cases, in the order they are run.
pub const CASES: [Case; 4] = [
    Case {
        name: "asym512",
        input: "pair512",
        kind: Kind::Asym,
        stride: Some(5),
        dpt_internals: false,
    },
    Case {
        name: "mono512",
        input: "pair512",
        kind: Kind::Mono,
        stride: Some(5),
        dpt_internals: false,
    },
    Case {
        name: "asym224",
        input: "pair224",
        kind: Kind::Asym,
        stride: Some(3),
        dpt_internals: false,
    },
    Case {
        name: "asymodd",
        input: "pairodd",
        kind: Kind::Asym,
        stride: None,
        dpt_internals: true,
    },
];

/// Every `stride`-th index of `0..n` plus the last one.
pub fn grid_indices(n: usize, stride: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).step_by(stride.max(1)).collect();
    if v.last() != Some(&(n - 1)) {
        v.push(n - 1);
    }
    v
}

/// Tokens whose local-feature MLP output is stored: rows `{0, h/2, h-1}` x columns `{0, 1, w/2, w-1}`.
pub fn local_feat_tokens(h: usize, w: usize) -> Vec<usize> {
    let mut out = Vec::new();
    for y in [0, h / 2, h - 1] {
        for x in [0, 1, w / 2, w - 1] {
            let t = y * w + x;
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

/// Reads a `[1, 3, H, W]` image of the inputs file, checking its shape.
fn read_image(f: &mut SafetensorsFile, name: &str, patch: usize) -> Result<TensorF32, Error> {
    let t = f.read_tensor(name)?;
    match t.shape.as_slice() {
        [1, 3, h, w] if h % patch == 0 && w % patch == 0 && *h > 0 && *w > 0 => Ok(t),
        s => Err(Error::tensor(
            f.path(),
            name,
            format!(
                "has shape {s:?}; expected [1, 3, H, W] with H and W positive multiples of {patch}"
            ),
        )),
    }
}

/// Sampling grids of one case.
struct Grid {
    rows: Vec<usize>,
    cols: Vec<usize>,
    tokens: Vec<usize>,
}

fn reference_indices(
    reference: Option<&mut SafetensorsFile>,
    name: &str,
) -> Result<Option<Vec<usize>>, Error> {
    let Some(r) = reference else { return Ok(None) };
    if r.shape(name).is_none() {
        return Ok(None);
    }
    let t = r.read_tensor(name)?;
    Ok(Some(t.data.iter().map(|&v| v as usize).collect()))
}

/// `t[.., rows, cols, ..]` for a tensor whose dims `row_dim` and `row_dim + 1` are the image axes.
fn sample_pixels(t: &TensorF32, row_dim: usize, rows: &[usize], cols: &[usize]) -> TensorF32 {
    let s = &t.shape;
    let outer: usize = s[..row_dim].iter().product();
    let (h, w) = (s[row_dim], s[row_dim + 1]);
    let inner: usize = s[row_dim + 2..].iter().product();
    let mut data = Vec::with_capacity(outer * rows.len() * cols.len() * inner);
    for o in 0..outer {
        for &r in rows {
            for &c in cols {
                let base = ((o * h + r) * w + c) * inner;
                data.extend_from_slice(&t.data[base..base + inner]);
            }
        }
    }
    let mut shape = s.clone();
    shape[row_dim] = rows.len();
    shape[row_dim + 1] = cols.len();
    TensorF32::new(shape, data).expect("sampled shape")
}

/// `t[:, tokens, :]` of a `[B, N, C]` tensor.
fn sample_tokens(t: &TensorF32, tokens: &[usize]) -> TensorF32 {
    let (b, n, c) = (t.shape[0], t.shape[1], t.shape[2]);
    let mut data = Vec::with_capacity(b * tokens.len() * c);
    for bi in 0..b {
        for &tok in tokens {
            let base = (bi * n + tok) * c;
            data.extend_from_slice(&t.data[base..base + c]);
        }
    }
    TensorF32::new(vec![b, tokens.len(), c], data).expect("sampled shape")
}

fn positions(e: &Encoded) -> OutTensor {
    let n = e.grid[0] * e.grid[1];
    OutTensor::i64(vec![1, n, 2], e.positions().into_iter().flatten().collect())
}

fn record_prediction(trace: &mut Trace, v: usize, p: &crate::model::Prediction) {
    trace.record(&format!("view{v}.pts3d"), &p.pts3d);
    trace.record(&format!("view{v}.conf"), &p.conf);
    trace.record(&format!("view{v}.desc"), &p.desc);
    if let Some(dc) = &p.desc_conf {
        trace.record(&format!("view{v}.desc_conf"), dc);
    }
}

/// Runs one case; `reference` (optional) supplies stored sampling grids.
pub fn run_case(
    model: &Mast3r,
    case: &Case,
    inputs: &mut SafetensorsFile,
    mut reference: Option<&mut SafetensorsFile>,
) -> Result<BTreeMap<String, OutTensor>, Error> {
    let patch = model.config().patch_size;
    let img = |f: &mut SafetensorsFile, v: usize| -> Result<Tensor<4>, Error> {
        let t = read_image(f, &format!("{}.view{v}.img", case.input), patch)?;
        let shape = [t.shape[0], t.shape[1], t.shape[2], t.shape[3]];
        Ok(model.image_tensor(t.data, shape))
    };
    let mut trace = Trace::enabled();
    let mut out = BTreeMap::new();
    let (token_grid, preds) = match case.kind {
        Kind::Asym => {
            let i1 = img(inputs, 1)?;
            let i2 = img(inputs, 2)?;
            trace.set_prefix("view1.");
            let e1 = model.encode_traced(i1, &mut trace);
            trace.set_prefix("view2.");
            let e2 = model.encode_traced(i2, &mut trace);
            trace.set_prefix("");
            let preds = model.decode_traced(&e1, &e2, &mut trace);
            out.insert("pos1".to_string(), positions(&e1));
            out.insert("pos2".to_string(), positions(&e2));
            (e1.grid, preds)
        }
        Kind::Mono => {
            let i1 = img(inputs, 1)?;
            trace.set_prefix("view1.");
            let e = model.encode_traced(i1, &mut trace);
            trace.set_prefix("");
            let preds = model.decode_traced(&e, &e, &mut trace);
            out.insert("pos".to_string(), positions(&e));
            (e.grid, preds)
        }
    };
    for (v, p) in preds.iter().enumerate() {
        record_prediction(&mut trace, v + 1, p);
    }
    let [h, w] = token_grid;
    let grid = match case.stride {
        None => None,
        Some(stride) => {
            let (hh, ww) = (h * patch, w * patch);
            let rows = reference_indices(
                reference.as_deref_mut(),
                &format!("{}.grid_rows", case.name),
            )?
            .unwrap_or_else(|| grid_indices(hh, stride));
            let cols = reference_indices(
                reference.as_deref_mut(),
                &format!("{}.grid_cols", case.name),
            )?
            .unwrap_or_else(|| grid_indices(ww, stride));
            let tokens = reference_indices(reference, &format!("{}.local_feat_tokens", case.name))?
                .unwrap_or_else(|| local_feat_tokens(h, w));
            let bad = |what: &str| {
                Error::format(
                    inputs.path(),
                    format!(
                        "{} sampling {what} out of range for a {hh}x{ww} image",
                        case.name
                    ),
                )
            };
            if rows.iter().any(|&r| r >= hh) {
                return Err(bad("rows"));
            }
            if cols.iter().any(|&c| c >= ww) {
                return Err(bad("columns"));
            }
            if tokens.iter().any(|&t| t >= h * w) {
                return Err(bad("tokens"));
            }
            for (name, v) in [
                ("grid_rows", &rows),
                ("grid_cols", &cols),
                ("local_feat_tokens", &tokens),
            ] {
                out.insert(
                    name.to_string(),
                    OutTensor::i64(vec![v.len()], v.iter().map(|&x| x as i64).collect()),
                );
            }
            Some(Grid { rows, cols, tokens })
        }
    };
    for (name, t) in trace.into_tensors() {
        let field = name.split_once('.').map(|(_, f)| f).unwrap_or(&name);
        let view1 = name.starts_with("view1.");
        let keep = match case.kind {
            Kind::Asym => !field.starts_with("dpt.") || (case.dpt_internals && view1),
            Kind::Mono => {
                matches!(
                    field,
                    "dec_out"
                        | "dpt_out"
                        | "local_feat_raw"
                        | "pts3d"
                        | "conf"
                        | "desc"
                        | "desc_conf"
                ) || (view1 && field == "enc_out")
            }
        };
        if !keep {
            continue;
        }
        let t = match &grid {
            Some(g) if matches!(field, "pts3d" | "conf" | "desc" | "desc_conf") => {
                sample_pixels(&t, 1, &g.rows, &g.cols)
            }
            Some(g) if field == "dpt_out" => sample_pixels(&t, 2, &g.rows, &g.cols),
            Some(g) if field == "local_feat_raw" => sample_tokens(&t, &g.tokens),
            _ => t,
        };
        out.insert(name, OutTensor::f32(t));
    }
    Ok(out
        .into_iter()
        .map(|(k, v)| (format!("{}.{k}", case.name), v))
        .collect())
}

/// Runs every case whose inputs are present in `inputs` (at least one must be).
pub fn run_cases(
    model: &Mast3r,
    inputs: &Path,
    reference: Option<&Path>,
) -> Result<BTreeMap<String, OutTensor>, Error> {
    let mut f = SafetensorsFile::open(inputs)?;
    let mut r = reference.map(SafetensorsFile::open).transpose()?;
    let names = f.tensor_names();
    let mut out = BTreeMap::new();
    let mut ran = 0;
    for case in &CASES {
        let needs = match case.kind {
            Kind::Asym => vec![
                format!("{}.view1.img", case.input),
                format!("{}.view2.img", case.input),
            ],
            Kind::Mono => vec![format!("{}.view1.img", case.input)],
        };
        if !needs.iter().all(|n| names.contains(n)) {
            continue;
        }
        out.extend(run_case(model, case, &mut f, r.as_mut())?);
        ran += 1;
    }
    if ran == 0 {
        return Err(Error::format(
            inputs,
            "no case inputs found (expected pair512/pair224/pairodd.view{1,2}.img tensors)",
        ));
    }
    Ok(out)
}

/// Writes outputs as safetensors (F32 and I64 tensors), atomically.
pub fn write_outputs(path: &Path, tensors: &BTreeMap<String, OutTensor>) -> Result<(), Error> {
    use ::safetensors::Dtype;
    use ::safetensors::tensor::TensorView;
    let mut bytes: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let (dtype, b) = match &t.data {
            OutData::F32(v) => (Dtype::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            OutData::I64(v) => (Dtype::I64, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        };
        bytes.push((name.clone(), dtype, t.shape.clone(), b));
    }
    let views = bytes
        .iter()
        .map(|(n, d, s, b)| {
            TensorView::new(*d, s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| Error::tensor(path, n, format!("cannot serialise: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let data = ::safetensors::tensor::serialize(views, None)
        .map_err(|e| Error::format(path, format!("cannot serialise safetensors: {e}")))?;
    Ok(rust3r_torch_checkpoint::safetensors::write_atomic(
        path,
        |w| std::io::Write::write_all(w, &data),
    )?)
}
