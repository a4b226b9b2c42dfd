//! Absolute trajectory error (ATE), replicating evo's `evo_ape` with the
//! default translation-part pose relation.
//!
//! Pipeline (as in evo 1.38): timestamp association
//! ([`associate_trajectories`], evo `sync.associate_trajectories` with
//! `max_diff = 0.01 s`), optional Umeyama alignment of the estimate onto the
//! reference ([`umeyama_alignment`], `-a` / `-as`), then statistics of the
//! per-pose translation errors `|p_ref - p_est_aligned|`.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use nalgebra::{Matrix3, Vector3};
use rust3r_geometry::Sim3;
use serde::{Deserialize, Serialize};

use crate::SlamError;
use crate::trajectory::{Trajectory, display_name, read_trajectory};

/// Default maximum timestamp difference for association (evo `--t_max_diff`).
pub const DEFAULT_MAX_DIFF: f64 = 0.01;

/// Alignment applied to the estimate before computing errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Align {
    /// No alignment (evo_ape without `-a`).
    None,
    /// Rigid Umeyama alignment (evo_ape `-a`).
    #[default]
    Se3,
    /// Similarity Umeyama alignment with scale (evo_ape `-as`).
    Sim3,
}

impl FromStr for Align {
    type Err = SlamError;
    /// Parses `none`, `se3` or `sim3` (case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(Align::None),
            "se3" => Ok(Align::Se3),
            "sim3" => Ok(Align::Sim3),
            _ => Err(SlamError::InvalidArgument(format!(
                "unknown alignment {s:?} (expected none, se3 or sim3)"
            ))),
        }
    }
}

impl fmt::Display for Align {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Align::None => "none",
            Align::Se3 => "se3",
            Align::Sim3 => "sim3",
        })
    }
}

/// Options of [`eval_ate_with_options`] / [`ate_from_trajectories`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AteOptions {
    /// Alignment mode.
    pub align: Align,
    /// Maximum timestamp difference for association in seconds (evo default 0.01).
    pub max_diff: f64,
    /// Time offset added to the estimate's timestamps (evo `--t_offset`).
    pub offset: f64,
}

impl Default for AteOptions {
    fn default() -> Self {
        Self {
            align: Align::Se3,
            max_diff: DEFAULT_MAX_DIFF,
            offset: 0.0,
        }
    }
}

/// Result of an ATE evaluation (errors in the reference's units, metres for
/// TUM/EuRoC ground truth).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AteReport {
    /// Root-mean-square translation error.
    pub rmse: f64,
    /// Mean translation error.
    pub mean: f64,
    /// Median translation error (mean of the two middle values for even counts).
    pub median: f64,
    /// Population standard deviation of the translation errors.
    pub std: f64,
    /// Minimum translation error.
    pub min: f64,
    /// Maximum translation error.
    pub max: f64,
    /// Sum of squared translation errors.
    pub sse: f64,
    /// Number of associated pose pairs.
    pub num_matched: usize,
    /// Number of poses in the reference (ground truth) file.
    pub num_reference: usize,
    /// Number of poses in the estimate file.
    pub num_estimate: usize,
    /// Alignment mode used.
    pub align: Align,
    /// Scale of the alignment (1 unless `align == Sim3`).
    pub scale: f64,
    /// Alignment transform mapping estimate positions into the reference frame
    /// (identity for [`Align::None`]).
    pub alignment: Sim3,
    /// Timestamps (of the reference) of the associated pairs.
    pub timestamps: Vec<f64>,
    /// Per-pair translation errors.
    pub errors: Vec<f64>,
}

impl fmt::Display for AteReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "APE w.r.t. translation part (m), alignment: {} ({} of {} estimated poses matched)",
            self.align, self.num_matched, self.num_estimate
        )?;
        if self.align == Align::Sim3 {
            writeln!(f, "     scale\t{:.6}", self.scale)?;
        }
        writeln!(f, "       max\t{:.6}", self.max)?;
        writeln!(f, "      mean\t{:.6}", self.mean)?;
        writeln!(f, "    median\t{:.6}", self.median)?;
        writeln!(f, "       min\t{:.6}", self.min)?;
        writeln!(f, "      rmse\t{:.6}", self.rmse)?;
        writeln!(f, "       sse\t{:.6}", self.sse)?;
        write!(f, "       std\t{:.6}", self.std)
    }
}

/// evo's `sync.matching_time_indices`: for each stamp of `stamps_1` find the
/// closest stamp of `stamps_2 + offset_2` and keep the pair if the difference
/// is at most `max_diff`. Returns the matched index lists `(idx_1, idx_2)`.
///
/// Exactly like evo, a binary search is used when `stamps_2` is sorted
/// (ties go to the earlier stamp) and a linear arg-min otherwise; each index
/// of `stamps_1` is used at most once, while an index of `stamps_2` may be
/// matched by several stamps of `stamps_1`.
pub fn matching_time_indices(
    stamps_1: &[f64],
    stamps_2: &[f64],
    max_diff: f64,
    offset_2: f64,
) -> (Vec<usize>, Vec<usize>) {
    let mut idx_1 = Vec::new();
    let mut idx_2 = Vec::new();
    if stamps_2.is_empty() {
        return (idx_1, idx_2);
    }
    let s2: Vec<f64> = stamps_2.iter().map(|s| s + offset_2).collect();
    let sorted = s2.windows(2).all(|w| w[1] - w[0] >= 0.0);
    if !sorted {
        for (i1, &t1) in stamps_1.iter().enumerate() {
            // np.argmin: first index of the minimum
            let mut best = 0usize;
            let mut best_diff = f64::INFINITY;
            for (i2, &t2) in s2.iter().enumerate() {
                let d = (t2 - t1).abs();
                if d < best_diff {
                    best_diff = d;
                    best = i2;
                }
            }
            if best_diff <= max_diff {
                idx_1.push(i1);
                idx_2.push(best);
            }
        }
        return (idx_1, idx_2);
    }
    let n = s2.len();
    for (i1, &t1) in stamps_1.iter().enumerate() {
        if t1 < s2[0] - max_diff || t1 > s2[n - 1] + max_diff {
            continue;
        }
        // np.searchsorted(side="right"): first index with s2[i] > t1
        let mut i2 = s2.partition_point(|&s| s <= t1);
        if i2 >= n {
            i2 = n - 1;
        }
        let diff_ub = s2[i2] - t1;
        let diff_lb = if i2 > 0 {
            t1 - s2[i2 - 1]
        } else {
            f64::INFINITY
        };
        let best = if diff_ub <= max_diff && diff_ub < diff_lb {
            i2
        } else if diff_lb <= max_diff && diff_lb <= diff_ub {
            i2 - 1
        } else {
            continue;
        };
        idx_1.push(i1);
        idx_2.push(best);
    }
    (idx_1, idx_2)
}

/// evo's `sync.associate_trajectories(reference, estimate, max_diff, offset)`:
/// starts from the trajectory with fewer poses (the estimate on ties) and
/// matches each of its stamps to the closest stamp of the other one.
///
/// Returns the matched `(reference_index, estimate_index)` pairs in the order
/// of the shorter trajectory. `offset` is added to the estimate's stamps.
pub fn associate_trajectories(
    reference: &[f64],
    estimate: &[f64],
    max_diff: f64,
    offset: f64,
) -> Vec<(usize, usize)> {
    let second_longer = estimate.len() > reference.len();
    if second_longer {
        // short = reference, long = estimate (+offset)
        let (short, long) = matching_time_indices(reference, estimate, max_diff, offset);
        short.into_iter().zip(long).collect()
    } else {
        // short = estimate, long = reference (-offset)
        let (short, long) = matching_time_indices(estimate, reference, max_diff, -offset);
        long.into_iter().zip(short).collect()
    }
}

/// Result of [`umeyama_alignment`]: `y ~= scale * rotation * x + translation`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Umeyama {
    /// Rotation `R`.
    pub rotation: Matrix3<f64>,
    /// Translation `t`.
    pub translation: Vector3<f64>,
    /// Scale `c` (1 without scale estimation).
    pub scale: f64,
}

impl Umeyama {
    /// The alignment as a [`Sim3`].
    pub fn to_sim3(&self) -> Sim3 {
        Sim3::from_rotation_translation_scale(&self.rotation, &self.translation, self.scale)
    }

    /// Applies the alignment to a point.
    pub fn apply(&self, p: &Vector3<f64>) -> Vector3<f64> {
        self.rotation * p * self.scale + self.translation
    }
}

/// Least-squares similarity (or rigid, if `with_scale` is false) transform
/// mapping points `x` onto `y` (Umeyama 1991), as in evo's
/// `geometry.umeyama_alignment`.
pub fn umeyama_alignment(
    x: &[Vector3<f64>],
    y: &[Vector3<f64>],
    with_scale: bool,
) -> Result<Umeyama, SlamError> {
    if x.len() != y.len() {
        return Err(SlamError::InvalidArgument(format!(
            "point sets differ in size ({} vs {})",
            x.len(),
            y.len()
        )));
    }
    let n = x.len();
    if n == 0 {
        return Err(SlamError::DegenerateAlignment("no points to align".into()));
    }
    let nf = n as f64;
    let mean_x = x.iter().sum::<Vector3<f64>>() / nf;
    let mean_y = y.iter().sum::<Vector3<f64>>() / nf;
    let sigma_x = x.iter().map(|p| (p - mean_x).norm_squared()).sum::<f64>() / nf;
    let mut outer_sum = Matrix3::zeros();
    for (px, py) in x.iter().zip(y) {
        outer_sum += (py - mean_y) * (px - mean_x).transpose();
    }
    let cov_xy = outer_sum * (1.0 / nf);
    let svd = cov_xy.svd(true, true);
    let (u, v_t) = match (svd.u, svd.v_t) {
        (Some(u), Some(v_t)) => (u, v_t),
        _ => return Err(SlamError::DegenerateAlignment("SVD failed".into())),
    };
    let d = svd.singular_values;
    if d.iter().filter(|&&s| s > f64::EPSILON).count() < 2 {
        return Err(SlamError::DegenerateAlignment(
            "degenerate covariance rank, Umeyama alignment is not possible".into(),
        ));
    }
    // S = diag(1, 1, +-1) acting on the smallest singular value (numpy sorts
    // singular values in descending order, so evo flips the last one)
    let mut s = Vector3::new(1.0, 1.0, 1.0);
    if u.determinant() * v_t.determinant() < 0.0 {
        let imin = d.imin();
        s[imin] = -1.0;
    }
    let rotation = u * Matrix3::from_diagonal(&s) * v_t;
    let scale = if with_scale { d.dot(&s) / sigma_x } else { 1.0 };
    let translation = mean_y - rotation * mean_x * scale;
    Ok(Umeyama {
        rotation,
        translation,
        scale,
    })
}

/// Summary statistics of an error vector, evo style:
/// `(rmse, mean, median, std, min, max, sse)`.
fn statistics(errors: &[f64]) -> (f64, f64, f64, f64, f64, f64, f64) {
    let n = errors.len() as f64;
    let sse: f64 = errors.iter().map(|e| e * e).sum();
    let rmse = (sse / n).sqrt();
    let mean = errors.iter().sum::<f64>() / n;
    let std = (errors.iter().map(|e| (e - mean) * (e - mean)).sum::<f64>() / n).sqrt();
    let mut sorted = errors.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let m = sorted.len();
    let median = if m % 2 == 1 {
        sorted[m / 2]
    } else {
        0.5 * (sorted[m / 2 - 1] + sorted[m / 2])
    };
    (rmse, mean, median, std, sorted[0], sorted[m - 1], sse)
}

/// Computes the ATE between in-memory trajectories (see [`eval_ate`]).
///
/// `reference_name` / `estimate_name` are only used in error messages.
pub fn ate_from_trajectories(
    estimate: &Trajectory,
    reference: &Trajectory,
    options: &AteOptions,
) -> Result<AteReport, SlamError> {
    ate_named(estimate, reference, options, "estimate", "reference")
}

fn ate_named(
    estimate: &Trajectory,
    reference: &Trajectory,
    options: &AteOptions,
    est_name: &str,
    ref_name: &str,
) -> Result<AteReport, SlamError> {
    if options.max_diff.is_nan() || options.max_diff < 0.0 || !options.offset.is_finite() {
        return Err(SlamError::InvalidArgument(format!(
            "max_diff must be >= 0 and offset finite (got {} and {})",
            options.max_diff, options.offset
        )));
    }
    let pairs = associate_trajectories(
        &reference.timestamps,
        &estimate.timestamps,
        options.max_diff,
        options.offset,
    );
    if pairs.is_empty() {
        return Err(SlamError::NoMatches {
            reference: ref_name.to_owned(),
            estimate: est_name.to_owned(),
            num_reference: reference.len(),
            num_estimate: estimate.len(),
            max_diff: options.max_diff,
            offset: options.offset,
        });
    }
    let p_ref: Vec<Vector3<f64>> = pairs
        .iter()
        .map(|&(r, _)| reference.poses[r].translation)
        .collect();
    let p_est: Vec<Vector3<f64>> = pairs
        .iter()
        .map(|&(_, e)| estimate.poses[e].translation)
        .collect();
    let umeyama = match options.align {
        Align::None => Umeyama {
            rotation: Matrix3::identity(),
            translation: Vector3::zeros(),
            scale: 1.0,
        },
        Align::Se3 => umeyama_alignment(&p_est, &p_ref, false)?,
        Align::Sim3 => umeyama_alignment(&p_est, &p_ref, true)?,
    };
    let errors: Vec<f64> = p_est
        .iter()
        .zip(&p_ref)
        .map(|(pe, pr)| {
            let aligned = match options.align {
                Align::None => *pe,
                _ => umeyama.apply(pe),
            };
            (pr - aligned).norm()
        })
        .collect();
    let (rmse, mean, median, std, min, max, sse) = statistics(&errors);
    Ok(AteReport {
        rmse,
        mean,
        median,
        std,
        min,
        max,
        sse,
        num_matched: pairs.len(),
        num_reference: reference.len(),
        num_estimate: estimate.len(),
        align: options.align,
        scale: umeyama.scale,
        alignment: umeyama.to_sim3(),
        timestamps: pairs
            .iter()
            .map(|&(r, _)| reference.timestamps[r])
            .collect(),
        errors,
    })
}

/// ATE (evo `APE`, translation part) of `estimate` against `groundtruth`,
/// both read with format auto-detection (TUM or EuRoC CSV), associated with
/// `max_diff = 0.01 s` and aligned according to `align`.
///
/// Equivalent to `evo_ape tum <groundtruth> <estimate> [-a | -as]` (or
/// `evo_ape euroc <groundtruth.csv> <estimate>`).
pub fn eval_ate(estimate: &Path, groundtruth: &Path, align: Align) -> Result<AteReport, SlamError> {
    eval_ate_with_options(
        estimate,
        groundtruth,
        &AteOptions {
            align,
            ..AteOptions::default()
        },
    )
}

/// [`eval_ate`] with explicit association options.
pub fn eval_ate_with_options(
    estimate: &Path,
    groundtruth: &Path,
    options: &AteOptions,
) -> Result<AteReport, SlamError> {
    let reference = read_trajectory(groundtruth)?;
    let est = read_trajectory(estimate)?;
    ate_named(
        &est,
        &reference,
        options,
        &display_name(estimate),
        &display_name(groundtruth),
    )
}

/// Relative pose error over a fixed frame gap (evo `RPE --delta D --delta_unit f`, translation
/// part, all pairs): after associating the two trajectories by timestamp like
/// [`ate_from_trajectories`], for every associated index `i` with `i + delta` associated too,
/// `|| trans((Q_i^-1 Q_{i+d})^-1 (P_i^-1 P_{i+d})) ||` with `Q` the reference and `P` the
/// estimate. No alignment is needed (relative motions are frame independent for SE(3)).
/// Returns `(reference timestamp of i, error)` per pair.
pub fn relative_translation_errors(
    estimate: &Trajectory,
    reference: &Trajectory,
    delta: usize,
    max_diff: f64,
) -> Result<Vec<(f64, f64)>, SlamError> {
    if delta == 0 {
        return Err(SlamError::InvalidArgument(
            "the RPE frame gap must be at least 1".into(),
        ));
    }
    let pairs = associate_trajectories(&reference.timestamps, &estimate.timestamps, max_diff, 0.0);
    if pairs.is_empty() {
        return Err(SlamError::NoMatches {
            reference: "reference".into(),
            estimate: "estimate".into(),
            num_reference: reference.len(),
            num_estimate: estimate.len(),
            max_diff,
            offset: 0.0,
        });
    }
    Ok(pairs
        .iter()
        .zip(pairs.iter().skip(delta))
        .map(|(&(r0, e0), &(r1, e1))| {
            let q = reference.poses[r0].inverse().compose(&reference.poses[r1]);
            let p = estimate.poses[e0].inverse().compose(&estimate.poses[e1]);
            (
                reference.timestamps[r0],
                q.inverse().compose(&p).translation.norm(),
            )
        })
        .collect())
}
