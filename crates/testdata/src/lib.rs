//! Where the tests find the shared real data and fixtures (see docs/testing.md).
//!
//! The folder is `../shared` beside the repository (it holds `data/` and `fixtures/`), or the
//! folder named by the `RUST3R_TEST_DATA` environment variable. Only tests and benchmarks use
//! this crate (as a dev-dependency); the libraries and the binary never read that variable.
//! A missing file is a test failure whose message names the path and the variable.

use std::path::{Path, PathBuf};

/// The environment variable that overrides where the shared folder is.
pub const ENV: &str = "RUST3R_TEST_DATA";

/// The shared folder: `$RUST3R_TEST_DATA` when set (and not empty), else `../shared` relative
/// to the repository root. Panics, naming both, when the folder does not exist.
pub fn shared() -> PathBuf {
    let root = match std::env::var_os(ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    };
    if !root.is_dir() {
        panic!(
            "the shared test data folder {} does not exist: put the shared data (data/, \
             fixtures/) there, or set {ENV} to the folder that holds it",
            root.display()
        );
    }
    root
}

/// `rel` under the shared folder's `data/` (real captures: `data("redkitchen")`,
/// `data("splats/biker.spz")`). Panics, naming the path and [`ENV`], when it is missing.
pub fn data(rel: &str) -> PathBuf {
    existing(shared().join("data").join(rel))
}

/// `rel` under the shared folder's `fixtures/` (reference outputs of upstream code:
/// `fixtures("mast3r_tiny/tiny_mast3r.pth")`). Panics, naming the path and [`ENV`], when it is
/// missing.
pub fn fixtures(rel: &str) -> PathBuf {
    existing(shared().join("fixtures").join(rel))
}

fn existing(path: PathBuf) -> PathBuf {
    if !path.exists() {
        panic!(
            "test data {} is missing (the shared folder is ../shared beside the repository, or \
             {ENV} when set)",
            path.display()
        );
    }
    path
}

/// Largest `|a - b|` over the largest `|b|` (`b` the reference), for parity comparisons with a
/// relative tolerance; a NaN or infinite difference makes it infinite, so a value a kernel never
/// wrote (poisoned with NaN) fails the comparison instead of being folded away.
pub fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "compared arrays differ in length");
    let scale = b.iter().fold(0f64, |m, v| m.max(v.abs()));
    let mut worst = 0f64;
    for (x, y) in a.iter().zip(b) {
        let d = (x - y).abs();
        if !d.is_finite() {
            return f64::INFINITY;
        }
        worst = worst.max(d);
    }
    worst / scale.max(f64::MIN_POSITIVE)
}

#[cfg(test)]
mod tests {
    use super::{data, fixtures, shared};

    #[test]
    fn rel_err_is_relative_and_propagates_nan() {
        assert_eq!(super::rel_err(&[1.0, 2.5], &[1.0, 2.0]), 0.25);
        assert_eq!(super::rel_err(&[f64::NAN, 2.0], &[1.0, 2.0]), f64::INFINITY);
        assert_eq!(super::rel_err(&[0.0], &[0.0]), 0.0);
    }

    #[test]
    fn finds_the_shared_data() {
        assert!(data("redkitchen/camera-intrinsics.txt").is_file());
        assert!(fixtures("mast3r_tiny").is_dir());
        assert!(shared().join("data").is_dir());
    }

    #[test]
    #[should_panic(expected = "no-such-scene is missing")]
    fn a_missing_file_names_the_path() {
        data("no-such-scene");
    }
}
