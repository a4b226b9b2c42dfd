//! Coarse-to-fine schedules (after DashGaussian, Chen et al. 2025): train on downscaled images
//! first and at full resolution at the end, and let the number of Gaussians grow with the
//! resolution instead of ahead of it.

use serde::{Deserialize, Serialize};

/// The image downscale factor per step: `levels + 1` factors from `start_factor` down to 1,
/// evenly spaced in log scale (`start^(1 - k / levels)`, level `k`), level `k` starting at step
/// `k * full_at / levels`; full resolution from `full_at` on.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResolutionSchedule {
    /// Downscale factor of the first steps (>= 1).
    pub start_factor: f32,
    /// Number of resolution increases before full resolution (0: always full).
    pub levels: u32,
    /// Step from which images are used at full resolution.
    pub full_at: u64,
}

impl ResolutionSchedule {
    /// The level (0 = coarsest, `levels` = full resolution) of step `step`.
    pub fn level_at(&self, step: u64) -> u32 {
        if self.levels == 0 || step >= self.full_at || self.full_at == 0 {
            return self.levels;
        }
        ((step as u128 * self.levels as u128 / self.full_at as u128) as u32).min(self.levels)
    }

    /// The downscale factor of level `level` (1 at `levels` and above).
    pub fn factor_of(&self, level: u32) -> f32 {
        if self.levels == 0 || level >= self.levels {
            return 1.0;
        }
        let start = self.start_factor.max(1.0) as f64;
        start.powf(1.0 - level as f64 / self.levels as f64) as f32
    }

    /// The downscale factor at step `step`.
    pub fn factor_at(&self, step: u64) -> f32 {
        self.factor_of(self.level_at(step))
    }

    /// Image size at `factor` for a `width x height` image (rounded, at least 1 pixel).
    pub fn size_at(factor: f32, width: u32, height: u32) -> (u32, u32) {
        let f = factor.max(1.0) as f64;
        let s = |v: u32| ((v as f64 / f).round() as u32).clamp(1, v.max(1));
        (s(width), s(height))
    }
}

/// The number of Gaussians allowed at a level of downscale `factor` when the run may end with
/// `final_cap` and started with `initial`: the growth allowed scales with the pixel count,
/// `initial + (final_cap - initial) / factor²` (DashGaussian ties the primitive budget to the
/// rendering resolution). Never below `initial` (pruning still works) nor above `final_cap`.
pub fn growth_cap(initial: usize, final_cap: usize, factor: f32) -> usize {
    if initial >= final_cap {
        return final_cap;
    }
    let f = factor.max(1.0) as f64;
    let grow = (final_cap - initial) as f64 / (f * f);
    (initial + grow.floor() as usize).min(final_cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_levels_run_from_coarse_to_full() {
        let s = ResolutionSchedule {
            start_factor: 4.0,
            levels: 2,
            full_at: 6000,
        };
        assert_eq!(s.factor_at(0), 4.0);
        assert_eq!(s.factor_at(2999), 4.0);
        assert_eq!(s.factor_at(3000), 2.0);
        assert_eq!(s.factor_at(5999), 2.0);
        assert_eq!(s.factor_at(6000), 1.0);
        assert_eq!(s.factor_at(u64::MAX), 1.0);
        let four = ResolutionSchedule { levels: 4, ..s };
        let f: Vec<f32> = [0, 1500, 3000, 4500, 6000]
            .map(|t| four.factor_at(t))
            .to_vec();
        let want = [4.0, 8f32.sqrt(), 2.0, 2f32.sqrt(), 1.0];
        for (a, b) in f.iter().zip(want) {
            assert!((a - b).abs() < 1e-5, "{f:?} vs {want:?}");
        }
        // Never coarser later than earlier.
        let mut last = f32::INFINITY;
        for t in 0..7000 {
            let x = four.factor_at(t);
            assert!(x <= last && x >= 1.0);
            last = x;
        }
        let off = ResolutionSchedule { levels: 0, ..s };
        assert_eq!(off.factor_at(0), 1.0);
        assert_eq!(ResolutionSchedule::size_at(4.0, 800, 800), (200, 200));
        assert_eq!(
            ResolutionSchedule::size_at(8f32.sqrt(), 800, 600),
            (283, 212)
        );
        assert_eq!(ResolutionSchedule::size_at(1000.0, 3, 2), (1, 1));
    }

    #[test]
    fn growth_follows_the_pixel_count() {
        assert_eq!(growth_cap(100_000, 300_000, 1.0), 300_000);
        assert_eq!(growth_cap(100_000, 300_000, 2.0), 150_000);
        assert_eq!(growth_cap(100_000, 300_000, 4.0), 112_500);
        assert_eq!(growth_cap(400_000, 300_000, 4.0), 300_000);
    }
}
