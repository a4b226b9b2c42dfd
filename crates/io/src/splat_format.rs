//! The antimatter15 `.splat` format: a header-less array of 32-byte records.
//!
//! | bytes  | content                                                           |
//! |--------|-------------------------------------------------------------------|
//! | 0..12  | position, 3 x f32 LE                                              |
//! | 12..24 | scale, 3 x f32 LE, *linear* (`exp(log_scale)`)                    |
//! | 24..28 | RGBA u8: RGB = `0.5 + SH_C0 * f_dc`, A = `sigmoid(opacity)`        |
//! | 28..32 | rotation u8 `(w, x, y, z)`: `q / |q| * 128 + 128`                  |
//!
//! Only the DC colour is stored, so reading yields SH degree 0 and writing drops
//! higher-order coefficients. Positions are stored in the frame of the 3DGS PLY.

use crate::error::{Result, malformed};
use crate::splats::{SH_C0, Splats, logit_clamped, normalized_quat, sigmoid, to_u8};

/// Bytes per splat.
pub(crate) const RECORD_SIZE: usize = 32;

pub(crate) fn decode(bytes: &[u8]) -> Result<Splats> {
    if !bytes.len().is_multiple_of(RECORD_SIZE) {
        return malformed!(
            "file size {} is not a multiple of the {RECORD_SIZE}-byte .splat record ({} complete records, {} bytes left over)",
            bytes.len(),
            bytes.len() / RECORD_SIZE,
            bytes.len() % RECORD_SIZE
        );
    }
    let n = bytes.len() / RECORD_SIZE;
    let mut splats = Splats::with_capacity(0, n);
    for (i, record) in bytes.chunks_exact(RECORD_SIZE).enumerate() {
        let f = |k: usize| {
            f32::from_le_bytes([
                record[4 * k],
                record[4 * k + 1],
                record[4 * k + 2],
                record[4 * k + 3],
            ])
        };
        splats.means.push([f(0), f(1), f(2)]);
        let mut log_scale = [0.0; 3];
        for (k, slot) in log_scale.iter_mut().enumerate() {
            let s = f(3 + k);
            if !(s >= 0.0 && s.is_finite()) {
                return malformed!("splat {i}: scale {s} is not a finite non-negative number");
            }
            // Zero scales (degenerate splats) are clamped to the smallest normal float.
            *slot = s.max(f32::MIN_POSITIVE).ln();
        }
        splats.log_scales.push(log_scale);
        let rgba = &record[24..28];
        splats
            .sh
            .extend((0..3).map(|k| (f32::from(rgba[k]) / 255.0 - 0.5) / SH_C0));
        splats
            .opacity_logits
            .push(logit_clamped(f32::from(rgba[3]) / 255.0));
        let q = std::array::from_fn(|k| (f32::from(record[28 + k]) - 128.0) / 128.0);
        splats.rotations.push(if q == [0.0; 4] {
            [1.0, 0.0, 0.0, 0.0]
        } else {
            q
        });
    }
    splats.validate()?;
    Ok(splats)
}

pub(crate) fn encode(splats: &Splats) -> Result<Vec<u8>> {
    splats.validate()?;
    let mut out = Vec::with_capacity(splats.len() * RECORD_SIZE);
    for i in 0..splats.len() {
        for v in splats.means[i] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in splats.log_scales[i] {
            out.extend_from_slice(&v.exp().min(f32::MAX).to_le_bytes());
        }
        let dc = &splats.sh_of(i)[..3];
        out.extend(dc.iter().map(|&c| to_u8((0.5 + SH_C0 * c) * 255.0)));
        out.push(to_u8(sigmoid(splats.opacity_logits[i]) * 255.0));
        out.extend(normalized_quat(splats.rotations[i]).map(|c| to_u8(c * 128.0 + 128.0)));
    }
    Ok(out)
}
