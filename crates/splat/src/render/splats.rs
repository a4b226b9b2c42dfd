//! Gaussians resident on the device and how their SH coefficients are stored.

use cubecl::prelude::*;
use rust3r_gpu::Gpu;
use rust3r_gpu::GpuBuffer;
use rust3r_io::MAX_SH_DEGREE;
use rust3r_io::num_coeffs_for_degree;

use super::policy::slot;
use crate::SplatError;
use crate::kernels::project;

/// Gaussians resident on the device, pre-activation (the 3DGS PLY convention).
#[derive(Clone, Debug)]
pub struct GpuSplats {
    pub means: GpuBuffer<f32>,
    pub log_scales: GpuBuffer<f32>,
    /// Quaternions (w, x, y, z), not necessarily normalised.
    pub quats: GpuBuffer<f32>,
    pub opacity_logits: GpuBuffer<f32>,
    /// `(sh_degree + 1)^2` coefficients per Gaussian, RGB each (see [`ShCoeffs`]).
    pub sh: ShCoeffs,
    pub sh_degree: u32,
}

/// How SH coefficients are stored on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShPrecision {
    /// Every coefficient as f32 (192 B per Gaussian at degree 3).
    F32,
    /// The DC term as f32, the higher orders as IEEE half floats (104 B at degree 3). The
    /// trainer's Adam step writes them with stochastic rounding.
    #[default]
    F16,
}

impl ShPrecision {
    /// Checkpoints written before half SH existed hold f32 coefficients.
    pub fn legacy() -> Self {
        Self::F32
    }

    /// Device bytes per Gaussian at `sh_degree` (half rows are packed back to back, so
    /// the average is exact for an even count of Gaussians).
    pub fn bytes_per_splat(self, sh_degree: u32) -> u64 {
        let k = num_coeffs_for_degree(sh_degree.min(MAX_SH_DEGREE)) as u64;
        match self {
            Self::F32 => 12 * k,
            Self::F16 => 12 + 6 * (k - 1),
        }
    }
}

impl std::fmt::Display for ShPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
        })
    }
}

impl std::str::FromStr for ShPrecision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            _ => Err(format!("unknown SH precision {s:?} (f32 or f16)")),
        }
    }
}

/// SH coefficients of `n` Gaussians with `k` coefficients each, on the device.
#[derive(Clone, Debug)]
pub enum ShCoeffs {
    /// `[n][k][rgb]` as f32.
    F32(GpuBuffer<f32>),
    /// `dc`: `[n][rgb]` as f32; `rest`: the `[n][k - 1][rgb]` higher-order coefficients as
    /// half floats packed two per word, back to back across rows (value `i` in the low half of
    /// word `i / 2` when `i` is even; see [`rust3r_gpu::half`]).
    Half {
        dc: GpuBuffer<f32>,
        rest: GpuBuffer<u32>,
    },
}

impl ShCoeffs {
    /// Upload `[n][k][rgb]` host values (rounded to the nearest half where stored as half).
    pub fn upload(
        gpu: &Gpu,
        sh: &[f32],
        k: usize,
        precision: ShPrecision,
    ) -> Result<Self, SplatError> {
        match precision {
            ShPrecision::F32 => {
                gpu.check_fits("SH coefficients", (sh.len() * 4) as u64)?;
                Ok(Self::F32(gpu.upload(sh)))
            }
            ShPrecision::F16 => {
                let row = 3 * k.max(1);
                let n = sh.len() / row;
                let mut dc = Vec::with_capacity(n * 3);
                let mut rest = Vec::with_capacity(n * (row - 3));
                for r in sh.chunks_exact(row) {
                    dc.extend_from_slice(&r[..3]);
                    rest.extend_from_slice(&r[3..]);
                }
                let words = rust3r_gpu::half::pack_f16(&rest);
                gpu.check_fits("SH coefficients (half)", (words.len() * 4) as u64)?;
                Ok(Self::Half {
                    dc: gpu.upload(&dc),
                    rest: gpu.upload(&words),
                })
            }
        }
    }

    pub fn precision(&self) -> ShPrecision {
        match self {
            Self::F32(_) => ShPrecision::F32,
            Self::Half { .. } => ShPrecision::F16,
        }
    }

    /// The f32 buffer the kernels read: every coefficient, or the DC terms of half storage.
    pub fn f32_part(&self) -> &GpuBuffer<f32> {
        match self {
            Self::F32(b) => b,
            Self::Half { dc, .. } => dc,
        }
    }

    /// The half-float buffer for a kernel argument, or a placeholder for f32 storage (a
    /// binding must still be given); with [`ShCoeffs::is_half`] the kernels' `half_sh` flag.
    pub(super) fn rest_arg(&self, gpu: &Gpu) -> BufferArg {
        match self {
            Self::Half { rest, .. } => rest.arg(),
            Self::F32(_) => gpu.placeholder::<u32>(slot::SH_REST).arg(),
        }
    }

    pub fn is_half(&self) -> bool {
        matches!(self, Self::Half { .. })
    }

    /// Device bytes of the buffers.
    pub fn device_bytes(&self) -> u64 {
        match self {
            Self::F32(b) => b.len() as u64 * 4,
            Self::Half { dc, rest } => (dc.len() + rest.len()) as u64 * 4,
        }
    }

    /// All coefficients back on the host as `[n][k][rgb]` f32 (half values are exact in f32).
    pub fn read(&self, gpu: &Gpu, k: usize) -> Result<Vec<f32>, rust3r_gpu::GpuError> {
        match self {
            Self::F32(b) => gpu.read(b),
            Self::Half { dc, rest } => {
                let dc = gpu.read(dc)?;
                let n = dc.len() / 3;
                let r = 3 * (k.max(1) - 1);
                let rest = rust3r_gpu::half::unpack_f16(&gpu.read(rest)?, n * r);
                let mut out = Vec::with_capacity(n * (r + 3));
                for i in 0..n {
                    out.extend_from_slice(&dc[i * 3..i * 3 + 3]);
                    out.extend_from_slice(&rest[i * r..(i + 1) * r]);
                }
                Ok(out)
            }
        }
    }

    /// The same coefficients in another storage (through the host).
    pub fn converted(
        &self,
        gpu: &Gpu,
        k: usize,
        precision: ShPrecision,
    ) -> Result<Self, SplatError> {
        if precision == self.precision() {
            return Ok(self.clone());
        }
        Self::upload(gpu, &self.read(gpu, k)?, k, precision)
    }
}

impl GpuSplats {
    pub fn len(&self) -> usize {
        self.opacity_logits.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn num_coeffs(&self) -> usize {
        num_coeffs_for_degree(self.sh_degree)
    }

    /// Upload splats loaded by `rust3r_io`.
    pub fn from_host(gpu: &Gpu, s: &rust3r_io::Splats) -> Result<Self, SplatError> {
        Self::chunks_from_host(gpu, s, Some(usize::MAX))?
            .pop()
            .ok_or_else(|| SplatError::InvalidSplats("no splats uploaded".into()))
    }

    /// Upload host arrays (flattened, same layouts as the fields; `sh` as `[n][k][rgb]`),
    /// SH coefficients as f32.
    pub fn from_slices(
        gpu: &Gpu,
        means: &[f32],
        log_scales: &[f32],
        quats: &[f32],
        opacity_logits: &[f32],
        sh: &[f32],
        sh_degree: u32,
    ) -> Result<Self, SplatError> {
        Self::from_slices_as(
            gpu,
            means,
            log_scales,
            quats,
            opacity_logits,
            sh,
            sh_degree,
            ShPrecision::F32,
        )
    }

    /// [`GpuSplats::from_slices`] with the SH coefficients stored in `precision`.
    #[allow(clippy::too_many_arguments)]
    pub fn from_slices_as(
        gpu: &Gpu,
        means: &[f32],
        log_scales: &[f32],
        quats: &[f32],
        opacity_logits: &[f32],
        sh: &[f32],
        sh_degree: u32,
        precision: ShPrecision,
    ) -> Result<Self, SplatError> {
        let n = opacity_logits.len();
        let k = num_coeffs_for_degree(sh_degree);
        if sh_degree > MAX_SH_DEGREE {
            return Err(SplatError::InvalidSplats(format!(
                "SH degree {sh_degree} > 3"
            )));
        }
        if means.len() != n * 3
            || log_scales.len() != n * 3
            || quats.len() != n * 4
            || sh.len() != n * k * 3
        {
            return Err(SplatError::InvalidSplats(format!(
                "inconsistent lengths: {n} opacities, {} means, {} scales, {} quats, {} SH values (degree {sh_degree})",
                means.len(),
                log_scales.len(),
                quats.len(),
                sh.len()
            )));
        }
        Ok(Self {
            sh: ShCoeffs::upload(gpu, sh, k, precision)?,
            means: gpu.upload(means),
            log_scales: gpu.upload(log_scales),
            quats: gpu.upload(quats),
            opacity_logits: gpu.upload(opacity_logits),
            sh_degree,
        })
    }

    /// The same Gaussians with their SH coefficients stored in `precision`.
    pub fn with_sh_precision(
        mut self,
        gpu: &Gpu,
        precision: ShPrecision,
    ) -> Result<Self, SplatError> {
        self.sh = self.sh.converted(gpu, self.num_coeffs(), precision)?;
        Ok(self)
    }

    /// All SH coefficients on the host, `[n][k][rgb]` f32.
    pub fn read_sh(&self, gpu: &Gpu) -> Result<Vec<f32>, rust3r_gpu::GpuError> {
        self.sh.read(gpu, self.num_coeffs())
    }
}

/// Gaussians per chunk of [`GpuSplats::chunks_from_host`] at `sh_degree` on this adapter: as many
/// rows as keep the widest per-Gaussian buffer (the SH coefficients, or the quaternions at low
/// degrees) inside one buffer binding.
pub fn rows_per_chunk(gpu: &Gpu, sh_degree: u32) -> usize {
    let k = num_coeffs_for_degree(sh_degree.min(MAX_SH_DEGREE));
    let widest = 4 * (k * 3).max(4);
    ((gpu.max_buffer_bytes() as usize / widest).max(1)).min(u32::MAX as usize / 64)
}

impl GpuSplats {
    /// Upload splats split into consecutive row ranges ("chunks") of at most `max_rows`
    /// Gaussians each (`None`: [`rows_per_chunk`]), so every buffer fits the adapter's
    /// binding limit however many Gaussians there are (wgpu binds at most 2 GiB at once, SH degree
    /// 3 needs 192 B per Gaussian: one buffer stops at about 11M). [`render_chunks`] and
    /// [`render_backward_chunks`] render them as one scene; chunk `i` holds rows
    /// `sum(len of chunks < i)..` of `s`.
    pub fn chunks_from_host(
        gpu: &Gpu,
        s: &rust3r_io::Splats,
        max_rows: Option<usize>,
    ) -> Result<Vec<Self>, SplatError> {
        s.validate()
            .map_err(|e| SplatError::InvalidSplats(e.to_string()))?;
        Self::chunks_from_slices(
            gpu,
            bytemuck::cast_slice(&s.means),
            bytemuck::cast_slice(&s.log_scales),
            bytemuck::cast_slice(&s.rotations),
            &s.opacity_logits,
            &s.sh,
            s.sh_degree,
            max_rows,
        )
    }

    /// [`GpuSplats::chunks_from_host`] from flat host arrays (the layouts of
    /// [`GpuSplats::from_slices`]).
    #[allow(clippy::too_many_arguments)]
    pub fn chunks_from_slices(
        gpu: &Gpu,
        means: &[f32],
        log_scales: &[f32],
        quats: &[f32],
        opacity_logits: &[f32],
        sh: &[f32],
        sh_degree: u32,
        max_rows: Option<usize>,
    ) -> Result<Vec<Self>, SplatError> {
        let n = opacity_logits.len();
        let per = num_coeffs_for_degree(sh_degree.min(MAX_SH_DEGREE)) * 3;
        let rows = max_rows
            .unwrap_or_else(|| rows_per_chunk(gpu, sh_degree))
            .max(1);
        if means.len() != n * 3
            || log_scales.len() != n * 3
            || quats.len() != n * 4
            || sh.len() != n * per
        {
            // One call over everything reports the inconsistency.
            return Self::from_slices(gpu, means, log_scales, quats, opacity_logits, sh, sh_degree)
                .map(|c| vec![c]);
        }
        let mut chunks = Vec::with_capacity(n.div_ceil(rows).max(1));
        for start in (0..n.max(1)).step_by(rows) {
            let end = start.saturating_add(rows).min(n);
            chunks.push(Self::from_slices(
                gpu,
                &means[start * 3..end * 3],
                &log_scales[start * 3..end * 3],
                &quats[start * 4..end * 4],
                &opacity_logits[start..end],
                &sh[start * per..end * per],
                sh_degree,
            )?);
        }
        Ok(chunks)
    }
}

/// The SH degree every chunk shares, and the total number of Gaussians.
pub(super) fn chunks_layout(chunks: &[GpuSplats]) -> Result<(u32, usize), SplatError> {
    let degree = chunks.first().map_or(0, |c| c.sh_degree);
    if let Some(c) = chunks.iter().find(|c| c.sh_degree != degree) {
        return Err(SplatError::InvalidSplats(format!(
            "splat chunks mix SH degrees {degree} and {}",
            c.sh_degree
        )));
    }
    Ok((degree, chunks.iter().map(GpuSplats::len).sum()))
}

impl GpuSplats {
    /// The projection kernels' shared arguments for this chunk: its parameters, as rows
    /// `row0..` of the scene's per-Gaussian outputs, seen from the camera block `cam` at
    /// `width x height`.
    pub(super) fn project_args(
        &self,
        gpu: &Gpu,
        cam: &GpuBuffer<f32>,
        row0: usize,
        width: u32,
        height: u32,
    ) -> project::ProjectArgsLaunch {
        project::ProjectArgsLaunch {
            means: self.means.arg(),
            log_scales: self.log_scales.arg(),
            quats: self.quats.arg(),
            opacity_logits: self.opacity_logits.arg(),
            sh: self.sh.f32_part().arg(),
            sh_rest: self.sh.rest_arg(gpu),
            cam: cam.arg(),
            n: self.len() as u32,
            row0: row0 as u32,
            width,
            height,
        }
    }
}
