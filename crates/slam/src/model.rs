//! Frame-to-model tracking: a local model made of the last keyframes, rendered into the
//! predicted view of the next frame (RGB-D addition, `tracking.model_keyframes`).
//!
//! Each source keyframe's points (with their normals) are moved into the view and splatted
//! onto the 2x2 pixels around their projection, each pixel taking the depth where its ray meets
//! the point's tangent plane (exact for planar surfaces, so the model's points lie on the view's
//! pixel rays as a depth image's do). A z-buffer keeps the nearest surface: per pixel, the
//! candidates within [`MODEL_DEPTH_BAND`] of the nearest depth are averaged, weighted by their
//! bilinear footprint and confidence, depth and colour alike. The result is a [`Pointmap`] in
//! the view's camera, which the tracker uses in place of the keyframe: the frame is then
//! tracked against a view that covers what it sees (not only what the keyframe saw) and
//! averages several keyframes' noise, as KinectFusion's and ElasticFusion's frame-to-model
//! tracking does.

use nalgebra::Vector3;
use rust3r_geometry::{PinholeCamera, Sim3};

use crate::pointmap::{Pointmap, normal_at};
use crate::tracker::NORMAL_MAX_REL_JUMP;

/// Relative depth band around a pixel's nearest candidate within which candidates are fused
/// (the rest are occluded).
pub const MODEL_DEPTH_BAND: f64 = 0.03;

/// Smallest summed footprint weight of a rendered pixel (below it the pixel stays empty).
pub const MODEL_MIN_WEIGHT: f64 = 0.1;

/// Largest angle between a tangent plane and the pixel ray, as `|n . r| / |r|` floor, for the
/// plane intersection (below: the point's own depth is used).
const MIN_INCIDENCE: f64 = 0.2;

/// One keyframe of the model: its pose in the world, its pointmap (camera frame) and the
/// per-pixel confidence (0: no point).
#[derive(Debug, Clone, Copy)]
pub struct ModelSource<'a> {
    /// Camera-to-world pose of the keyframe.
    pub t_wc: Sim3,
    /// Points, colours.
    pub pointmap: &'a Pointmap,
    /// Confidence per pixel.
    pub conf: &'a [f32],
}

/// A splat candidate of one source point for pixel `(px, py)`: depth and weight, or `None`.
#[inline]
fn candidate(
    cam: &PinholeCamera,
    y: &Vector3<f64>,
    n: Option<&Vector3<f64>>,
    px: f64,
    py: f64,
) -> Option<f64> {
    match n {
        Some(n) => {
            let r = Vector3::new((px - cam.cx) / cam.fx, (py - cam.cy) / cam.fy, 1.0);
            let nr = n.dot(&r);
            if nr.abs() < MIN_INCIDENCE * r.norm() {
                return Some(y.z);
            }
            let z = n.dot(y) / nr;
            // The tangent plane is trusted half a pixel or so around the point only.
            ((z - y.z).abs() <= MODEL_DEPTH_BAND * y.z && z > 0.0).then_some(z)
        }
        None => Some(y.z),
    }
}

/// Renders `sources` into a `width x height` view with intrinsics `cam` at camera-to-world
/// pose `t_wc_view` (see the module documentation). Points are on the view's pixel rays;
/// confidence is the footprint-weighted mean of the sources' (0: empty pixel).
pub fn render_model(
    sources: &[ModelSource<'_>],
    cam: &PinholeCamera,
    width: usize,
    height: usize,
    t_wc_view: &Sim3,
) -> Pointmap {
    let n = width * height;
    // Candidates: (pixel, depth, footprint weight, confidence, colour) of every source, in
    // source order.
    let mut cands: Vec<(u32, f32, f32, f32, [u8; 3])> = Vec::new();
    let t_view_w = t_wc_view.inverse();
    for s in sources {
        let pm = s.pointmap;
        let t = t_view_w.compose(&s.t_wc);
        let rot = t.rotation_matrix();
        let (w, h) = (pm.width, pm.height);
        for i in 0..pm.len() {
            let c = s.conf[i];
            if !(c > 0.0) || !(pm.points[i][2] > 0.0) {
                continue;
            }
            let y = t.act(&pm.point(i));
            if !(y.z > 1e-6) {
                continue;
            }
            let nrm = normal_at(
                &pm.points,
                |j| s.conf[j] > 0.0 && pm.points[j][2] > 0.0,
                w,
                h,
                i % w,
                i / w,
                NORMAL_MAX_REL_JUMP,
            )
            .map(|v| rot * Vector3::new(v[0] as f64, v[1] as f64, v[2] as f64));
            let u = cam.fx * y.x / y.z + cam.cx;
            let v = cam.fy * y.y / y.z + cam.cy;
            if !(u > -1.0 && v > -1.0 && u < width as f64 && v < height as f64) {
                continue;
            }
            let colour = pm.colors.get(i).copied().unwrap_or([0; 3]);
            let (u0, v0) = (u.floor(), v.floor());
            let (fu, fv) = (u - u0, v - v0);
            for (du, dv, wgt) in [
                (0.0, 0.0, (1.0 - fu) * (1.0 - fv)),
                (1.0, 0.0, fu * (1.0 - fv)),
                (0.0, 1.0, (1.0 - fu) * fv),
                (1.0, 1.0, fu * fv),
            ] {
                let (px, py) = (u0 + du, v0 + dv);
                if px < 0.0 || py < 0.0 || px >= width as f64 || py >= height as f64 {
                    continue;
                }
                if wgt <= 0.0 {
                    continue;
                }
                if let Some(z) = candidate(cam, &y, nrm.as_ref(), px, py) {
                    let p = py as usize * width + px as usize;
                    cands.push((p as u32, z as f32, wgt as f32, c, colour));
                }
            }
        }
    }
    // Z-buffer: the nearest candidate per pixel.
    let mut zmin = vec![f32::INFINITY; n];
    for &(p, z, ..) in &cands {
        let m = &mut zmin[p as usize];
        if z < *m {
            *m = z;
        }
    }
    // Fuse the candidates near the nearest surface: (footprint, footprint x confidence,
    // weighted depth, weighted colour).
    let mut acc = vec![(0.0f64, 0.0f64, 0.0f64, [0.0f64; 3]); n];
    for &(p, z, fp, c, col) in &cands {
        let p = p as usize;
        if (z - zmin[p]) as f64 > MODEL_DEPTH_BAND * zmin[p] as f64 {
            continue;
        }
        let a = &mut acc[p];
        let wgt = fp as f64 * c as f64;
        a.0 += fp as f64;
        a.1 += wgt;
        a.2 += wgt * z as f64;
        for k in 0..3 {
            a.3[k] += wgt * col[k] as f64;
        }
    }
    let mut out = Pointmap::empty(width, height);
    for p in 0..n {
        let (cover, sw, swz, swc) = acc[p];
        if !(sw > 0.0) || cover < MODEL_MIN_WEIGHT {
            continue;
        }
        let z = swz / sw;
        let (px, py) = ((p % width) as f64, (p / width) as f64);
        out.points[p] = [
            ((px - cam.cx) / cam.fx * z) as f32,
            ((py - cam.cy) / cam.fy * z) as f32,
            z as f32,
        ];
        // Footprint-weighted mean confidence of the fused candidates.
        out.conf[p] = (sw / cover) as f32;
        out.colors[p] = [
            (swc[0] / sw).round().clamp(0.0, 255.0) as u8,
            (swc[1] / sw).round().clamp(0.0, 255.0) as u8,
            (swc[2] / sw).round().clamp(0.0, 255.0) as u8,
        ];
    }
    out
}
