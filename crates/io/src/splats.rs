//! The in-memory splat container and the activation helpers shared by the codecs.

use crate::error::ValidationError;

/// Highest spherical-harmonics degree supported by [`Splats`].
pub const MAX_SH_DEGREE: u32 = 3;

/// Zeroth-order SH basis constant `1 / (2 sqrt(pi))`: `rgb = 0.5 + SH_C0 * f_dc`.
pub const SH_C0: f32 = 0.282_094_79;

/// Number of SH coefficients per colour channel for `degree`, i.e. `(degree + 1)^2`.
pub const fn num_coeffs_for_degree(degree: u32) -> usize {
    let d = degree as usize + 1;
    d * d
}

/// Logistic function, mapping an opacity logit to an opacity in `(0, 1)`.
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Inverse of [`sigmoid`]. Returns `-inf` / `+inf` for `0` / `1`.
pub fn logit(p: f32) -> f32 {
    (p / (1.0 - p)).ln()
}

/// A set of 3D Gaussian splats, host side, structure of arrays.
///
/// Values are stored *before* activation, exactly like the reference 3DGS PLY:
///
/// * `means`: centres, in the coordinate frame of the 3DGS PLY (COLMAP / OpenCV
///   "RDF": x right, y down, z forward). Readers of formats that use another
///   frame (SPZ) convert into it.
/// * `log_scales`: natural log of the per-axis standard deviations.
/// * `rotations`: quaternion `(w, x, y, z)`, not necessarily normalised.
/// * `opacity_logits`: opacity before the sigmoid.
/// * `sh`: spherical-harmonics coefficients, `len() * num_coeffs() * 3` values laid
///   out as `[splat][coeff][rgb]`. Coefficient 0 is the DC term (`f_dc_*`), the
///   others follow the order of the 3DGS `f_rest_*` coefficients (degree 1 band,
///   then degree 2, then degree 3).
///
/// Every loader returns a value that passes [`Splats::validate`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Splats {
    /// Gaussian centres.
    pub means: Vec<[f32; 3]>,
    /// Natural log of the per-axis scales.
    pub log_scales: Vec<[f32; 3]>,
    /// Rotation quaternions `(w, x, y, z)`, not necessarily normalised.
    pub rotations: Vec<[f32; 4]>,
    /// Opacities before the sigmoid.
    pub opacity_logits: Vec<f32>,
    /// SH degree, `0..=3`.
    pub sh_degree: u32,
    /// SH coefficients, layout `[splat][coeff][rgb]`, coefficient 0 = DC.
    pub sh: Vec<f32>,
}

impl Splats {
    /// An empty set with the given SH degree.
    pub fn new(sh_degree: u32) -> Self {
        Self {
            sh_degree,
            ..Self::default()
        }
    }

    /// An empty set with room for `capacity` splats.
    pub fn with_capacity(sh_degree: u32, capacity: usize) -> Self {
        Self {
            means: Vec::with_capacity(capacity),
            log_scales: Vec::with_capacity(capacity),
            rotations: Vec::with_capacity(capacity),
            opacity_logits: Vec::with_capacity(capacity),
            sh_degree,
            sh: Vec::with_capacity(capacity.saturating_mul(num_coeffs_for_degree(sh_degree) * 3)),
        }
    }

    /// Number of splats (the length of `means`).
    pub fn len(&self) -> usize {
        self.means.len()
    }

    /// Whether there are no splats.
    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }

    /// SH coefficients per colour channel, `(sh_degree + 1)^2`.
    pub fn num_coeffs(&self) -> usize {
        num_coeffs_for_degree(self.sh_degree)
    }

    /// The `num_coeffs() * 3` SH values of splat `index`, layout `[coeff][rgb]`.
    ///
    /// # Panics
    /// If `index` is out of range or `sh` is too short.
    pub fn sh_of(&self, index: usize) -> &[f32] {
        let stride = self.num_coeffs() * 3;
        &self.sh[index * stride..(index + 1) * stride]
    }

    /// Checks that all arrays have consistent lengths, the SH degree is supported
    /// and every value is finite.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.sh_degree > MAX_SH_DEGREE {
            return Err(ValidationError::ShDegree(self.sh_degree));
        }
        let n = self.len();
        let check_len = |field, actual| {
            if actual == n {
                Ok(())
            } else {
                Err(ValidationError::Length {
                    field,
                    expected: n,
                    actual,
                })
            }
        };
        check_len("log_scales", self.log_scales.len())?;
        check_len("rotations", self.rotations.len())?;
        check_len("opacity_logits", self.opacity_logits.len())?;
        let sh_stride = self.num_coeffs() * 3;
        if self.sh.len() != n * sh_stride {
            return Err(ValidationError::Length {
                field: "sh",
                expected: n * sh_stride,
                actual: self.sh.len(),
            });
        }

        fn all_finite<const K: usize>(
            field: &'static str,
            values: &[[f32; K]],
        ) -> Result<(), ValidationError> {
            match values.iter().position(|v| !v.iter().all(|x| x.is_finite())) {
                Some(index) => Err(ValidationError::NonFinite { field, index }),
                None => Ok(()),
            }
        }
        all_finite("means", &self.means)?;
        all_finite("log_scales", &self.log_scales)?;
        all_finite("rotations", &self.rotations)?;
        if let Some(index) = self.opacity_logits.iter().position(|x| !x.is_finite()) {
            return Err(ValidationError::NonFinite {
                field: "opacity_logits",
                index,
            });
        }
        if let Some(i) = self.sh.iter().position(|x| !x.is_finite()) {
            return Err(ValidationError::NonFinite {
                field: "sh",
                index: i / sh_stride,
            });
        }
        Ok(())
    }

    /// Axis-aligned bounds `(min, max)` of the splat centres, or `None` when empty.
    ///
    /// Only the means are considered (not the Gaussians' extents). Non-finite
    /// coordinates are ignored; if no finite coordinate exists on an axis the
    /// result holds `+inf` / `-inf` there.
    pub fn bounding_box(&self) -> Option<([f32; 3], [f32; 3])> {
        if self.is_empty() {
            return None;
        }
        let mut lo = [f32::INFINITY; 3];
        let mut hi = [f32::NEG_INFINITY; 3];
        for m in &self.means {
            for k in 0..3 {
                if m[k].is_finite() {
                    lo[k] = lo[k].min(m[k]);
                    hi[k] = hi[k].max(m[k]);
                }
            }
        }
        Some((lo, hi))
    }
}

/// Normalises a quaternion; a zero (or non-finite-norm) quaternion becomes the identity.
pub(crate) fn normalized_quat(q: [f32; 4]) -> [f32; 4] {
    let norm = q.iter().map(|c| c * c).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        q.map(|c| c / norm)
    } else {
        [1.0, 0.0, 0.0, 0.0]
    }
}

/// Smallest distance from 0 and 1 used when inverting an 8-bit opacity: a quarter
/// of a quantisation step, so re-encoding a decoded byte reproduces that byte.
pub(crate) const ALPHA_EPS: f32 = 0.25 / 255.0;

/// Opacity logit for an opacity in `[0, 1]`, clamped away from the infinities.
pub(crate) fn logit_clamped(p: f32) -> f32 {
    logit(p.clamp(ALPHA_EPS, 1.0 - ALPHA_EPS))
}

/// Quantises a value in `[0, 255]` (after rounding) to a byte, saturating.
pub(crate) fn to_u8(x: f32) -> u8 {
    // `as` saturates and maps NaN to 0.
    x.round() as u8
}

/// Sign of each non-DC real SH basis function (degrees 1 to 3, 3DGS order) under
/// the axis flip `(x, y, z) -> (x, -y, -z)`, which converts between the RDF frame of
/// the 3DGS PLY and the RUB frame of SPZ.
pub(crate) const SH_FLIP_YZ: [f32; 15] = [
    // degree 1: y, z, x
    -1.0, -1.0, 1.0, //
    // degree 2: xy, yz, 3z^2 - 1, xz, x^2 - y^2
    -1.0, 1.0, 1.0, -1.0, 1.0, //
    // degree 3: y(3x^2 - y^2), xyz, y(5z^2 - 1), z(5z^2 - 3), x(5z^2 - 1), z(x^2 - y^2), x(x^2 - 3y^2)
    -1.0, 1.0, -1.0, -1.0, 1.0, -1.0, 1.0,
];
