//! Post-processing (SPEC §8): 3D points from the DPT's xyz channels (`exp` depth mode), confidences
//! through their activation, L2-normalised descriptors.

use burn::tensor::{DType, Tensor};

use crate::config::{ActivationKind, ActivationMode};

/// Per-pixel outputs of one view, channels last.
#[derive(Clone, Debug)]
pub struct Prediction {
    /// `[B, H, W, 3]` points (view 1: in its own frame; view 2: in view 1's frame).
    pub pts3d: Tensor<4>,
    /// `[B, H, W]` point confidence.
    pub conf: Tensor<3>,
    /// `[B, H, W, desc_dim]` unit-norm descriptors.
    pub desc: Tensor<4>,
    /// `[B, H, W]` descriptor confidence (`two_confs`).
    pub desc_conf: Option<Tensor<3>>,
}

/// `expm1` without cancellation: `(u - 1) * x / ln(u)` with `u = exp(x)` (exact `x` where `u == 1`).
fn expm1<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let u = x.clone().exp();
    let one = u.clone().equal_elem(1.0);
    let num = (u.clone() - 1.0) * x.clone();
    let den = u.log().mask_fill(one.clone(), 1.0);
    (num / den).mask_where(one, x)
}

/// Confidence activation (upstream `reg_dense_conf`).
fn conf_act<const D: usize>(x: Tensor<D>, m: &ActivationMode) -> Tensor<D> {
    let range = m.vmax - m.vmin;
    match m.kind {
        ActivationKind::Exp => {
            let e = x.exp();
            let e = if range.is_finite() {
                e.clamp_max(range)
            } else {
                e
            };
            e + m.vmin
        }
        ActivationKind::Square => {
            let e = x.square();
            let e = if range.is_finite() {
                e.clamp_max(range)
            } else {
                e
            };
            e + m.vmin
        }
        ActivationKind::Linear => {
            let x = if m.vmin.is_finite() {
                x.clamp_min(m.vmin)
            } else {
                x
            };
            if m.vmax.is_finite() {
                x.clamp_max(m.vmax)
            } else {
                x
            }
        }
    }
}

/// Channels-last `dpt_out` `[B, H, W, 4]` and local-feature map `[B, H, W, desc + two_confs]` to a
/// [`Prediction`] (computed in binary32).
pub(crate) fn postprocess(
    dpt_out: Tensor<4>,
    local: Tensor<4>,
    depth_mode: &ActivationMode,
    conf_mode: &ActivationMode,
    desc_dim: usize,
    desc_conf_mode: Option<&ActivationMode>,
) -> Prediction {
    let dpt = dpt_out.cast(DType::F32);
    let local = local.cast(DType::F32);
    let [b, h, w, _] = dpt.dims();
    let xyz = dpt.clone().narrow(3, 0, 3);
    let pts3d = match depth_mode.kind {
        ActivationKind::Linear => {
            let x = if depth_mode.vmin.is_finite() {
                xyz.clamp_min(depth_mode.vmin)
            } else {
                xyz
            };
            if depth_mode.vmax.is_finite() {
                x.clamp_max(depth_mode.vmax)
            } else {
                x
            }
        }
        kind => {
            let d = xyz.clone().square().sum_dim(3).sqrt();
            let dir = xyz / d.clone().clamp_min(1e-8);
            match kind {
                ActivationKind::Square => dir * d.square(),
                _ => dir * expm1(d),
            }
        }
    };
    let conf = conf_act(dpt.narrow(3, 3, 1), conf_mode).reshape([b, h, w]);
    let desc = local.clone().narrow(3, 0, desc_dim);
    let norm = desc.clone().square().sum_dim(3).sqrt();
    let desc = desc / norm;
    let desc_conf =
        desc_conf_mode.map(|m| conf_act(local.narrow(3, desc_dim, 1), m).reshape([b, h, w]));
    Prediction {
        pts3d,
        conf,
        desc,
        desc_conf,
    }
}
