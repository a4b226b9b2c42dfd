//! A validated MASt3R checkpoint in memory: load from `.pth` (zip or legacy) or safetensors, save
//! as safetensors.

use std::collections::BTreeMap;
use std::path::Path;

use rust3r_torch_checkpoint::{
    CheckpointFormat, PthFile, SafetensorsFile, TensorF32, detect_format, write_safetensors,
};

use crate::config::{Mast3rConfig, expected_layout};
use crate::error::{Error, LayoutReport};

/// safetensors `__metadata__` key holding the constructor string (written by
/// [`Checkpoint::save_safetensors`], read by [`Checkpoint::load`]).
pub const MODEL_STRING_METADATA_KEY: &str = "args.model";

/// Strips a `module.` prefix (left by `torch.nn.DataParallel`) from a state-dict key.
pub fn normalize_key(key: &str) -> &str {
    key.strip_prefix("module.").unwrap_or(key)
}

/// Compares a checkpoint's `key -> shape` map with the expected layout.
pub fn validate_layout(
    expected: &BTreeMap<String, Vec<usize>>,
    found: &BTreeMap<String, Vec<usize>>,
) -> LayoutReport {
    let mut r = LayoutReport::default();
    for (k, e) in expected {
        match found.get(k) {
            None => r.missing.push((k.clone(), e.clone())),
            Some(f) if f != e => r.mismatched.push((k.clone(), e.clone(), f.clone())),
            Some(_) => {}
        }
    }
    for (k, f) in found {
        if !expected.contains_key(k) {
            r.unexpected.push((k.clone(), f.clone()));
        }
    }
    r
}

/// Options for [`Checkpoint::load_with`].
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Constructor string (`AsymmetricMASt3R(...)`) to use instead of the file's own `args.model`
    /// (or safetensors metadata). Needed for safetensors files written by other tools when the
    /// head counts are not `width / 64`.
    pub model_string: Option<String>,
}

/// All tensors of a MASt3R checkpoint as `f32`, checked against the layout of its derived
/// configuration (so every key the network loads is present with the right shape).
#[derive(Clone, Debug)]
pub struct Checkpoint {
    tensors: BTreeMap<String, TensorF32>,
    config: Mast3rConfig,
    path: std::path::PathBuf,
}

impl Checkpoint {
    /// Loads a `.pth` (zip) or safetensors checkpoint; see [`Checkpoint::load_with`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, Error> {
        Self::load_with(path, &LoadOptions::default())
    }

    /// Loads a checkpoint, choosing the reader from the file's content
    /// ([`rust3r_torch_checkpoint::detect_format`]).
    ///
    /// Keys lose a `module.` prefix; the configuration is derived from the shapes and the
    /// constructor string; the key/shape map must equal [`expected_layout`] exactly (missing, extra
    /// and mis-shaped keys are reported together) before any tensor data is read. Aliased keys
    /// (`dpt.scratch.layer_rn.{k}` / `layer{k+1}_rn`) must hold equal values.
    pub fn load_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Self, Error> {
        let path = path.as_ref();
        match detect_format(path)? {
            CheckpointFormat::PyTorchZip | CheckpointFormat::PyTorchLegacy => {
                let mut f = PthFile::open(path)?;
                let listed: Vec<(String, Vec<usize>)> = f
                    .tensor_names()
                    .map(|n| {
                        (
                            n.to_string(),
                            f.tensor_info(n).expect("listed").shape.clone(),
                        )
                    })
                    .collect();
                let model_string = options
                    .model_string
                    .clone()
                    .or(f.model_string().map(str::to_string));
                Self::assemble(path, listed, model_string, |names| {
                    Ok(f.read_tensors(names.iter().map(String::as_str))?)
                })
            }
            CheckpointFormat::Safetensors => {
                let mut f = SafetensorsFile::open(path)?;
                let listed: Vec<(String, Vec<usize>)> = f
                    .tensor_names()
                    .into_iter()
                    .map(|n| {
                        let s = f.shape(&n).expect("listed").to_vec();
                        (n, s)
                    })
                    .collect();
                let file_string = f
                    .metadata()
                    .and_then(|m| m.get(MODEL_STRING_METADATA_KEY))
                    .cloned();
                let model_string = options.model_string.clone().or(file_string);
                Self::assemble(path, listed, model_string, |names| {
                    names
                        .iter()
                        .map(|n| Ok((n.clone(), f.read_tensor(n)?)))
                        .collect()
                })
            }
        }
    }

    fn assemble(
        path: &Path,
        listed: Vec<(String, Vec<usize>)>,
        model_string: Option<String>,
        read: impl FnOnce(&[String]) -> Result<BTreeMap<String, TensorF32>, Error>,
    ) -> Result<Self, Error> {
        let mut shapes = BTreeMap::new();
        let mut original = BTreeMap::new();
        for (name, shape) in listed {
            let key = normalize_key(&name).to_string();
            if let Some(other) = original.insert(key.clone(), name.clone()) {
                return Err(Error::format(
                    path,
                    format!(
                        "keys `{other}` and `{name}` are the same after removing the `module.` prefix"
                    ),
                ));
            }
            shapes.insert(key, shape);
        }
        let config =
            Mast3rConfig::from_shapes(&shapes, model_string.as_deref()).map_err(|source| {
                Error::Config {
                    path: path.to_path_buf(),
                    source,
                }
            })?;
        let report = validate_layout(&expected_layout(&config), &shapes);
        if !report.is_empty() {
            return Err(Error::Layout {
                path: path.to_path_buf(),
                report,
            });
        }

        let names: Vec<String> = original.values().cloned().collect();
        let mut read = read(&names)?;
        let mut tensors = BTreeMap::new();
        for (key, name) in original {
            let t = read
                .remove(&name)
                .expect("reader returns every requested tensor");
            if t.shape != shapes[&key]
                || t.data.len() != rust3r_torch_checkpoint::numel(&t.shape).unwrap_or(usize::MAX)
            {
                return Err(Error::tensor(
                    path,
                    &name,
                    "data does not match the declared shape",
                ));
            }
            tensors.insert(key, t);
        }
        for v in 1..=2 {
            for k in 0..4 {
                let a = format!("downstream_head{v}.dpt.scratch.layer{}_rn.weight", k + 1);
                let b = format!("downstream_head{v}.dpt.scratch.layer_rn.{k}.weight");
                if tensors[&a].data != tensors[&b].data {
                    return Err(Error::tensor(
                        path,
                        &b,
                        format!(
                            "must be the same tensor as `{a}` (an alias upstream) but the values differ"
                        ),
                    ));
                }
            }
        }
        Ok(Checkpoint {
            tensors,
            config,
            path: path.to_path_buf(),
        })
    }

    /// The file the checkpoint was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The configuration derived from the checkpoint.
    pub fn config(&self) -> &Mast3rConfig {
        &self.config
    }

    /// Every tensor, by normalised key (exactly the keys of [`expected_layout`]).
    pub fn tensors(&self) -> &BTreeMap<String, TensorF32> {
        &self.tensors
    }

    /// One tensor by normalised key.
    pub fn tensor(&self, key: &str) -> Option<&TensorF32> {
        self.tensors.get(key)
    }

    /// Splits the checkpoint into its configuration and tensors (to move the data into a network
    /// without copying).
    pub fn into_parts(self) -> (Mast3rConfig, BTreeMap<String, TensorF32>) {
        (self.config, self.tensors)
    }

    /// Writes every tensor as `F32` safetensors, with the constructor string (the original one, or
    /// [`Mast3rConfig::to_model_string`]) under the metadata key [`MODEL_STRING_METADATA_KEY`], so the
    /// file loads back to the same configuration. The write is atomic (temporary file + rename).
    pub fn save_safetensors(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let model_string = self
            .config
            .source_model_string
            .clone()
            .unwrap_or_else(|| self.config.to_model_string());
        let metadata = BTreeMap::from([
            ("format".to_string(), "pt".to_string()),
            (MODEL_STRING_METADATA_KEY.to_string(), model_string),
        ]);
        Ok(write_safetensors(path, &self.tensors, &metadata)?)
    }
}
