//! Truncated signed distance volume (KinectFusion's model) on a sparse grid of voxel blocks.
//!
//! Depth images ([`Pointmap`]s in a pinhole camera at a known camera-to-world pose) are
//! integrated as a running weighted average of the truncated projective signed distance and of
//! the colour (Curless and Levoy 1996; Newcombe et al. 2011). Only the blocks that the pixels'
//! truncation bands touch are allocated and updated: every valid pixel's ray is sampled from
//! `trunc` in front of its depth to `trunc` behind it and the blocks met are collected; each
//! voxel of those blocks is then projected into the image and updated from the pixel it falls
//! in. [`Tsdf::raycast`] renders the zero crossing into a view: per pixel, marching along the
//! ray (in steps bounded by the signed distance) to the first crossing from in front of the
//! surface to behind it, the depth interpolated linearly between the two trilinear samples
//! around it, the colour trilinearly at the surface. The result is a [`Pointmap`] whose points
//! lie on the view's pixel rays (as a depth image's do), which the tracker uses like a
//! keyframe.
//!
//! No Rust crate provides this (the maintained TSDF implementations are C++: Open3D, OpenCV's
//! `rgbd` module, InfiniTAM); the OpenCV bindings would bring a system OpenCV and its C++ build
//! for one data structure, so it is written here (a few hundred lines, CPU, rayon).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use nalgebra::Vector3;
use rayon::prelude::*;
use rust3r_geometry::{PinholeCamera, Sim3};

use crate::pointmap::Pointmap;

/// Voxels per block edge.
const BLOCK: i32 = 8;
/// Voxels per block.
const BLOCK_VOXELS: usize = (BLOCK * BLOCK * BLOCK) as usize;

/// Parameters of a [`Tsdf`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TsdfParams {
    /// Voxel edge (metres).
    pub voxel: f64,
    /// Truncation distance (metres): signed distances are clamped to `[-trunc, trunc]` and
    /// voxels more than `trunc` behind the measured surface are not updated.
    pub trunc: f64,
    /// Largest accumulated weight of a voxel (a running average over at most this many
    /// observations).
    pub max_weight: f32,
    /// Smallest accumulated weight of a voxel for the ray-cast to use it.
    pub min_weight: f32,
}

impl Default for TsdfParams {
    fn default() -> Self {
        Self {
            voxel: 0.01,
            trunc: 0.04,
            max_weight: 64.0,
            min_weight: 1.0,
        }
    }
}

/// One block of `BLOCK^3` voxels: normalised signed distance (in `[-1, 1]`, units of
/// `trunc`), weight, colour (0-255 as f32), x fastest.
#[derive(Debug, Clone)]
struct Block {
    sdf: Vec<f32>,
    weight: Vec<f32>,
    rgb: Vec<[f32; 3]>,
}

impl Block {
    fn new() -> Self {
        Self {
            sdf: vec![1.0; BLOCK_VOXELS],
            weight: vec![0.0; BLOCK_VOXELS],
            rgb: vec![[0.0; 3]; BLOCK_VOXELS],
        }
    }
}

/// Multiplicative hash of a packed block key (the keys are already well spread integers).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type KeyMap = HashMap<u64, u32, BuildHasherDefault<KeyHasher>>;

/// Packs a block coordinate (each within +-2^20 blocks) into one key.
#[inline]
fn pack(b: [i32; 3]) -> u64 {
    let m = (1u64 << 21) - 1;
    (b[0] as u64 & m) | ((b[1] as u64 & m) << 21) | ((b[2] as u64 & m) << 42)
}

/// A sparse TSDF volume (see the module documentation).
#[derive(Debug, Clone)]
pub struct Tsdf {
    params: TsdfParams,
    index: KeyMap,
    keys: Vec<[i32; 3]>,
    blocks: Vec<Block>,
}

/// A voxel sample: normalised signed distance, weight, colour.
type Sample = (f32, f32, [f32; 3]);

/// A ray-cast pixel: point (view camera), confidence (0: no surface), colour.
type RayHit = ([f32; 3], f32, [u8; 3]);

impl Tsdf {
    /// An empty volume.
    pub fn new(params: TsdfParams) -> Self {
        Self {
            params,
            index: KeyMap::default(),
            keys: Vec::new(),
            blocks: Vec::new(),
        }
    }

    /// The parameters.
    pub fn params(&self) -> &TsdfParams {
        &self.params
    }

    /// Number of allocated blocks.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Removes every block.
    pub fn clear(&mut self) {
        self.index.clear();
        self.keys.clear();
        self.blocks.clear();
    }

    /// Integrates the depth (and colour) of `pm`, a pointmap in camera `cam` whose points lie
    /// on their pixel rays (`z` is the depth), at camera-to-world pose `t_wc` (scale 1).
    /// Pixels with confidence 0 are skipped.
    pub fn integrate(&mut self, pm: &Pointmap, cam: &PinholeCamera, t_wc: &Sim3) {
        let p = self.params;
        let vs = p.voxel;
        let block_size = vs * BLOCK as f64;
        let (w, h) = (pm.width, pm.height);
        let centre = t_wc.translation;
        // 1. Blocks met by the truncation band of every valid pixel's ray.
        let step = (block_size * 0.5).min(p.trunc).max(vs);
        let n_steps = (2.0 * p.trunc / step).ceil() as usize;
        let touched: Vec<[i32; 3]> = (0..h)
            .into_par_iter()
            .fold(Vec::new, |mut acc, v| {
                for u in 0..w {
                    let i = v * w + u;
                    let z = pm.points[i][2];
                    if !(pm.conf[i] > 0.0 && z > 0.0) {
                        continue;
                    }
                    let x = t_wc.act(&pm.point(i));
                    let dir = (x - centre).normalize();
                    for k in 0..=n_steps {
                        let s = -p.trunc + (k as f64 * step).min(2.0 * p.trunc);
                        let q = (x + dir * s) / block_size;
                        acc.push([q.x.floor() as i32, q.y.floor() as i32, q.z.floor() as i32]);
                    }
                }
                acc
            })
            .reduce(Vec::new, |mut a, mut b| {
                a.append(&mut b);
                a
            });
        let mut active = vec![false; self.blocks.len()];
        for b in touched {
            let key = pack(b);
            let idx = match self.index.get(&key) {
                Some(&i) => i as usize,
                None => {
                    let i = self.blocks.len();
                    self.index.insert(key, i as u32);
                    self.keys.push(b);
                    self.blocks.push(Block::new());
                    active.push(false);
                    i
                }
            };
            active[idx] = true;
        }
        // 2. Every voxel of the touched blocks, projected into the image.
        let t_cw = t_wc.inverse();
        let rot = t_cw.rotation_matrix();
        let tr = t_cw.translation;
        let keys = &self.keys;
        let trunc = p.trunc;
        let max_w = p.max_weight;
        self.blocks
            .par_iter_mut()
            .enumerate()
            .filter(|(i, _)| active[*i])
            .for_each(|(bi, blk)| {
                let o = keys[bi];
                for k in 0..BLOCK_VOXELS {
                    let (lx, ly, lz) = (
                        k as i32 % BLOCK,
                        (k as i32 / BLOCK) % BLOCK,
                        k as i32 / (BLOCK * BLOCK),
                    );
                    let g = Vector3::new(
                        (o[0] * BLOCK + lx) as f64 * vs,
                        (o[1] * BLOCK + ly) as f64 * vs,
                        (o[2] * BLOCK + lz) as f64 * vs,
                    );
                    let c = rot * g + tr;
                    if !(c.z > 1e-6) {
                        continue;
                    }
                    let u = (cam.fx * c.x / c.z + cam.cx).round();
                    let v = (cam.fy * c.y / c.z + cam.cy).round();
                    if u < 0.0 || v < 0.0 || u >= w as f64 || v >= h as f64 {
                        continue;
                    }
                    let i = v as usize * w + u as usize;
                    let d = pm.points[i][2] as f64;
                    if !(pm.conf[i] > 0.0 && d > 0.0) {
                        continue;
                    }
                    // Projective signed distance along the ray (positive in front).
                    let sdf = (d - c.z) * c.norm() / c.z;
                    if sdf < -trunc {
                        continue;
                    }
                    let tsdf = (sdf / trunc).min(1.0) as f32;
                    let w0 = blk.weight[k];
                    let w1 = (w0 + 1.0).min(max_w);
                    let a = 1.0 / (w0 + 1.0);
                    blk.sdf[k] += (tsdf - blk.sdf[k]) * a;
                    let col = pm.colors[i];
                    for (ch, &cv) in blk.rgb[k].iter_mut().zip(col.iter()) {
                        *ch += (cv as f32 - *ch) * a;
                    }
                    blk.weight[k] = w1;
                }
            });
    }

    /// The voxel at integer grid coordinates `g`, when allocated and observed.
    #[inline]
    fn voxel(&self, g: [i32; 3], cache: &mut (u64, Option<usize>)) -> Option<Sample> {
        let b = [
            g[0].div_euclid(BLOCK),
            g[1].div_euclid(BLOCK),
            g[2].div_euclid(BLOCK),
        ];
        let key = pack(b);
        let bi = if cache.0 == key {
            cache.1
        } else {
            let bi = self.index.get(&key).map(|&i| i as usize);
            *cache = (key, bi);
            bi
        }?;
        let l = [
            g[0].rem_euclid(BLOCK),
            g[1].rem_euclid(BLOCK),
            g[2].rem_euclid(BLOCK),
        ];
        let k = (l[0] + BLOCK * (l[1] + BLOCK * l[2])) as usize;
        let blk = &self.blocks[bi];
        (blk.weight[k] >= self.params.min_weight).then(|| (blk.sdf[k], blk.weight[k], blk.rgb[k]))
    }

    /// Trilinear sample at world point `x`: normalised signed distance and colour, when all
    /// eight surrounding voxels are observed.
    fn sample(
        &self,
        x: &Vector3<f64>,
        cache: &mut (u64, Option<usize>),
    ) -> Option<(f32, [f32; 3])> {
        let g = x / self.params.voxel;
        let (fx, fy, fz) = (g.x.floor(), g.y.floor(), g.z.floor());
        let (ax, ay, az) = ((g.x - fx) as f32, (g.y - fy) as f32, (g.z - fz) as f32);
        let (ix, iy, iz) = (fx as i32, fy as i32, fz as i32);
        let (mut s, mut col) = (0.0f32, [0.0f32; 3]);
        for c in 0..8 {
            let (dx, dy, dz) = (c & 1, (c >> 1) & 1, c >> 2);
            let (sd, _, rgb) = self.voxel([ix + dx, iy + dy, iz + dz], cache)?;
            let wx = if dx == 1 { ax } else { 1.0 - ax };
            let wy = if dy == 1 { ay } else { 1.0 - ay };
            let wz = if dz == 1 { az } else { 1.0 - az };
            let wt = wx * wy * wz;
            s += wt * sd;
            for (a, b) in col.iter_mut().zip(rgb.iter()) {
                *a += wt * b;
            }
        }
        Some((s, col))
    }

    /// The nearest voxel to `x`, when observed.
    #[inline]
    fn nearest(&self, x: &Vector3<f64>, cache: &mut (u64, Option<usize>)) -> Option<Sample> {
        let g = x / self.params.voxel;
        self.voxel(
            [g.x.round() as i32, g.y.round() as i32, g.z.round() as i32],
            cache,
        )
    }

    /// The zero crossing of the trilinear signed distance on the ray `o + t dir` between `a`
    /// (in front, value > 0) and `b` (behind, value <= 0): regula falsi with a few trilinear
    /// samples (the truncated distance is linear only within the band, so the first linear
    /// estimate is refined).
    fn refine_crossing(
        &self,
        o: &Vector3<f64>,
        dir: &Vector3<f64>,
        mut a: (f64, f32),
        mut b: (f64, f32),
        cache: &mut (u64, Option<usize>),
    ) -> f64 {
        let mut ts = a.0 + (b.0 - a.0) * (a.1 / (a.1 - b.1)) as f64;
        for _ in 0..4 {
            if (b.0 - a.0) * dir.norm() < 1e-4 * self.params.voxel {
                break;
            }
            let Some((s, _)) = self.sample(&(o + dir * ts), cache) else {
                break;
            };
            if s > 0.0 {
                a = (ts, s);
            } else {
                b = (ts, s);
            }
            ts = a.0 + (b.0 - a.0) * (a.1 / (a.1 - b.1)) as f64;
        }
        ts
    }

    /// Renders the surface (zero crossing) into a `cam.width x cam.height` view at
    /// camera-to-world pose `t_wc` (scale 1), depths searched in `[min_depth, max_depth]`.
    /// Pixels without a crossing get confidence 0.
    pub fn raycast(
        &self,
        cam: &PinholeCamera,
        t_wc: &Sim3,
        min_depth: f64,
        max_depth: f64,
    ) -> Pointmap {
        let (w, h) = (cam.width as usize, cam.height as usize);
        let rot = t_wc.rotation_matrix();
        let o = t_wc.translation;
        let p = self.params;
        let vs = p.voxel;
        let skip = (0.5 * vs * BLOCK as f64).min(0.8 * p.trunc).max(vs);
        let rows: Vec<Vec<RayHit>> = (0..h)
            .into_par_iter()
            .map(|v| {
                let mut cache = (u64::MAX, None);
                (0..w)
                    .map(|u| {
                        let r = Vector3::new(
                            (u as f64 - cam.cx) / cam.fx,
                            (v as f64 - cam.cy) / cam.fy,
                            1.0,
                        );
                        // Depth t along the ray `o + t dir` (dir's camera z is 1).
                        let dir = rot * r;
                        let len = dir.norm();
                        let mut t = min_depth;
                        let mut prev: Option<(f64, f32)> = None;
                        while t <= max_depth {
                            let x = o + dir * t;
                            let Some(near) = self.nearest(&x, &mut cache) else {
                                // Unobserved: skip ahead, by less than the band in front of a
                                // surface (so the march lands in front of it before behind it).
                                prev = None;
                                t += skip / len;
                                continue;
                            };
                            // Trilinear where the eight voxels are observed, else the nearest.
                            let s = self.sample(&x, &mut cache).map_or(near.0, |s| s.0);
                            if s <= 0.0 {
                                if let Some((tp, sp)) = prev.filter(|q| q.1 > 0.0) {
                                    let ts = self.refine_crossing(
                                        &o,
                                        &dir,
                                        (tp, sp),
                                        (t, s),
                                        &mut cache,
                                    );
                                    let xs = o + dir * ts;
                                    let col = match self.sample(&xs, &mut cache) {
                                        Some(v) => v.1,
                                        None => {
                                            self.nearest(&xs, &mut cache).map_or(near.2, |v| v.2)
                                        }
                                    };
                                    let z = ts as f32;
                                    return (
                                        [r.x as f32 * z, r.y as f32 * z, z],
                                        1.0,
                                        col.map(|c| c.round().clamp(0.0, 255.0) as u8),
                                    );
                                }
                                // Entered from behind or from unobserved space: no surface
                                // seen from this side here.
                                prev = Some((t, s));
                                t += vs / len;
                                continue;
                            }
                            prev = Some((t, s));
                            t += (s as f64 * p.trunc * 0.8).max(vs) / len;
                        }
                        ([0.0; 3], 0.0, [0; 3])
                    })
                    .collect()
            })
            .collect();
        let mut pm = Pointmap::with_capacity(w, h);
        for row in rows {
            for (pt, c, col) in row {
                pm.points.push(pt);
                pm.conf.push(c);
                pm.colors.push(col);
            }
        }
        pm
    }
}
