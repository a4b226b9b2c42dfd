//! Full training checkpoints: parameters, Adam moments, densification statistics, step,
//! host RNG and configuration, in one file written atomically (temporary file + rename).
//!
//! Layout: `RUST3R-TRAIN\0\0\0\0` (16 bytes), format version (u32 LE), header length (u64 LE),
//! a JSON header ([`Header`]), then the arrays it lists in order, 4 bytes per value, little
//! endian: f32, except compact Adam moments, which are stored as they live on the device:
//! `adam_mv_bf16.*` one u32 word per value holding bf16 `m` (high half) and `v` (low half),
//! `adam_mv_sh8.sh_rest` the 16-bit 8-bit-moment entries of the higher-order SH coefficients,
//! two per word (with `adam_mv_bf16.sh_dc` for the DC terms; see `Moments::Sh8`).
//! The header's configuration says which moments a checkpoint holds; configurations written
//! before compact moments existed have f32 moments and load unchanged. SH coefficients are
//! written as f32 whatever their device storage (`TrainConfig::sh_precision`); half values are
//! exact in f32, so a resumed run continues bit for bit.

use std::io::{Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::adam::{MomentPrecision, Moments, unpack_moments};
use super::{GROUPS, HostRng, TrainConfig, Trainer};
use crate::SplatError;
use crate::render::GpuSplats;
use rust3r_gpu::Gpu;

const MAGIC: &[u8; 16] = b"RUST3R-TRAIN\0\0\0\0";
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
pub struct Header {
    pub step: u64,
    pub rng: HostRng,
    pub num_splats: usize,
    pub sh_degree: u32,
    pub config: TrainConfig,
    /// `(name, number of 4-byte values)` in file order.
    pub arrays: Vec<(String, usize)>,
}

fn err(path: &Path, msg: impl std::fmt::Display) -> SplatError {
    SplatError::Checkpoint(format!("{}: {msg}", path.display()))
}

/// Names and lengths of the arrays of a checkpoint of `n` Gaussians with per-group row
/// widths `rows`, in file order (the order of [`Trainer::state_buffers`]).
fn layout(n: usize, rows: [usize; 5], moments: MomentPrecision) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = (0..5)
        .map(|i| (GROUPS[i].to_string(), n * rows[i]))
        .collect();
    for i in 0..5 {
        match moments {
            MomentPrecision::F32 => {
                out.push((format!("adam_m.{}", GROUPS[i]), n * rows[i]));
                out.push((format!("adam_v.{}", GROUPS[i]), n * rows[i]));
            }
            MomentPrecision::Sh8 if i == 4 => {
                out.push(("adam_mv_bf16.sh_dc".into(), n * 3));
                out.push((
                    "adam_mv_sh8.sh_rest".into(),
                    (n * (rows[4] - 3)).div_ceil(2),
                ));
            }
            MomentPrecision::Bf16 | MomentPrecision::Sh8 => {
                out.push((format!("adam_mv_bf16.{}", GROUPS[i]), n * rows[i]))
            }
        }
    }
    out.push(("grad2d".into(), n));
    out.push(("count".into(), n));
    out
}

impl Trainer {
    /// Every device buffer of the training state after the SH coefficients, in checkpoint
    /// order, as 32-bit words.
    fn state_buffers(&self) -> Vec<rust3r_gpu::GpuBuffer<u32>> {
        let mut out: Vec<_> = Self::geometry_buffers(&self.splats)
            .iter()
            .map(|b| (*b).clone().cast::<u32>())
            .collect();
        for i in 0..5 {
            match &self.moments[i] {
                Moments::F32 { m, v } => {
                    out.push(m.clone().cast());
                    out.push(v.clone().cast());
                }
                Moments::Bf16(mv) => out.push(mv.clone()),
                Moments::Sh8 { dc, rest, .. } => {
                    out.push(dc.clone());
                    out.push(rest.clone());
                }
            }
        }
        out.push(self.grad2d.clone().cast());
        out.push(self.count.clone().cast());
        out
    }

    /// Write a checkpoint atomically.
    pub fn save_checkpoint(&self, path: &Path) -> Result<(), SplatError> {
        let g = &self.gpu;
        let buffers = self.state_buffers();
        let names = layout(self.splats.len(), self.rows(), self.cfg.adam.moments);
        assert_eq!(names.len(), buffers.len() + 1, "checkpoint layout");
        let mut words = Vec::with_capacity(names.len());
        for buf in &buffers[..4] {
            words.push(g.read(buf)?);
        }
        // SH coefficients as f32 whatever their device storage (half values are exact).
        words.push(
            self.splats
                .read_sh(g)?
                .into_iter()
                .map(f32::to_bits)
                .collect(),
        );
        for buf in &buffers[4..] {
            words.push(g.read(buf)?);
        }
        let arrays: Vec<(String, Vec<u32>)> =
            names.into_iter().map(|(n, _)| n).zip(words).collect();
        let header = Header {
            step: self.step,
            rng: self.rng,
            num_splats: self.splats.len(),
            sh_degree: self.splats.sh_degree,
            config: self.cfg.clone(),
            arrays: arrays.iter().map(|(n, a)| (n.clone(), a.len())).collect(),
        };
        let json = serde_json::to_vec(&header).map_err(|e| err(path, e))?;
        rust3r_io::atomic::write_atomic_with(path, |w| {
            w.write_all(MAGIC)?;
            w.write_all(&VERSION.to_le_bytes())?;
            w.write_all(&(json.len() as u64).to_le_bytes())?;
            w.write_all(&json)?;
            for (_, a) in &arrays {
                w.write_all(bytemuck::cast_slice(a))?;
            }
            Ok(())
        })
        .map_err(|e| err(path, e))
    }

    /// Resume from a checkpoint written by [`Trainer::save_checkpoint`].
    pub fn load_checkpoint(gpu: &Gpu, path: &Path) -> Result<Self, SplatError> {
        let file = std::fs::File::open(path).map_err(|e| err(path, e))?;
        let file_len = file.metadata().map_err(|e| err(path, e))?.len();
        let mut r = std::io::BufReader::new(file);
        let mut magic = [0u8; 16];
        r.read_exact(&mut magic)
            .map_err(|_| err(path, "not a rust3r training checkpoint (too short)"))?;
        if &magic != MAGIC {
            return Err(err(path, "not a rust3r training checkpoint (bad magic)"));
        }
        let mut b4 = [0u8; 4];
        r.read_exact(&mut b4).map_err(|e| err(path, e))?;
        let version = u32::from_le_bytes(b4);
        if version != VERSION {
            return Err(err(
                path,
                format!("checkpoint format version {version}, this build reads {VERSION}"),
            ));
        }
        let mut b8 = [0u8; 8];
        r.read_exact(&mut b8).map_err(|e| err(path, e))?;
        let hlen = u64::from_le_bytes(b8);
        if hlen > file_len {
            return Err(err(
                path,
                format!("header length {hlen} exceeds the file size {file_len}"),
            ));
        }
        let mut json = vec![0u8; hlen as usize];
        r.read_exact(&mut json)
            .map_err(|e| err(path, format!("truncated header: {e}")))?;
        let h: Header =
            serde_json::from_slice(&json).map_err(|e| err(path, format!("bad header: {e}")))?;
        let n = h.num_splats;
        if h.sh_degree > 3 || h.sh_degree != h.config.sh_degree {
            return Err(err(
                path,
                format!("SH degree {} does not match the configuration", h.sh_degree),
            ));
        }
        let k3 = ((h.sh_degree + 1) * (h.sh_degree + 1)) as usize * 3;
        let moments = h.config.adam.moments;
        let expected = layout(n, [3usize, 3, 4, 1, k3], moments);
        if h.arrays != expected {
            return Err(err(
                path,
                "array list does not match the header's Gaussian count and SH degree",
            ));
        }
        let total: u64 = expected.iter().map(|(_, l)| *l as u64 * 4).sum();
        if 28 + hlen + total != file_len {
            return Err(err(
                path,
                format!(
                    "file is {file_len} bytes, the header describes {}",
                    28 + hlen + total
                ),
            ));
        }
        let mut data: Vec<Vec<u32>> = Vec::with_capacity(expected.len());
        for (name, len) in &expected {
            let mut v = vec![0u32; *len];
            r.read_exact(bytemuck::cast_slice_mut(&mut v))
                .map_err(|e| err(path, format!("{name}: {e}")))?;
            // 8-bit moment codes are finite by construction.
            let finite = if name.starts_with("adam_mv_sh8.") {
                true
            } else if name.starts_with("adam_mv_bf16.") {
                v.iter().all(|&w| {
                    let (m, v) = unpack_moments(w);
                    m.is_finite() && v.is_finite()
                })
            } else {
                v.iter().all(|&w| f32::from_bits(w).is_finite())
            };
            if !finite {
                return Err(err(path, format!("{name} holds NaN or infinite values")));
            }
            data.push(v);
        }
        let f = |i: usize| -> &[f32] { bytemuck::cast_slice(&data[i]) };
        Trainer::check_config(gpu, &h.config, n).map_err(|e| err(path, e))?;
        let splats = GpuSplats::from_slices_as(
            gpu,
            f(0),
            f(1),
            f(2),
            f(3),
            f(4),
            h.sh_degree,
            h.config.sh_precision,
        )?;
        let mut t = Trainer::from_parts(gpu, h.config, splats, h.rng);
        let mut at = 5;
        for i in 0..5 {
            t.moments[i] = match moments {
                MomentPrecision::F32 => {
                    at += 2;
                    Moments::F32 {
                        m: gpu.upload(f(at - 2)),
                        v: gpu.upload(f(at - 1)),
                    }
                }
                MomentPrecision::Sh8 if i == 4 => {
                    at += 2;
                    Moments::Sh8 {
                        dc: gpu.upload(&data[at - 2]),
                        rest: gpu.upload(&data[at - 1]),
                        row: k3,
                    }
                }
                MomentPrecision::Bf16 | MomentPrecision::Sh8 => {
                    at += 1;
                    Moments::Bf16(gpu.upload(&data[at - 1]))
                }
            };
        }
        t.grad2d = gpu.upload(f(at));
        t.count = gpu.upload(f(at + 1));
        t.step = h.step;
        Ok(t)
    }
}
