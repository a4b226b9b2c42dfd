//! SOG bundles of real splats: `save_splats` / `load_splats` by extension (what `rust3r convert
//! x.ply x.sog` does) keep every property within the format's quantisation. (The shared splats
//! have SH degree 0; the unit tests in `src/sog.rs` cover degrees 1-3 and the SH palette.)

use rust3r_io::{SplatFormat, load_splats, save_splats, sigmoid};
use rust3r_testdata::data;

#[test]
fn real_splats_round_trip_through_sog() {
    for file in ["biker_from_spz.3dgs.ply", "guitar.compressed.ply"] {
        round_trip(file);
    }
}

fn round_trip(file: &str) {
    let src = load_splats(&data(&format!("splats/{file}"))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.sog");
    save_splats(&path, &src).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(SplatFormat::detect(&bytes), Some(SplatFormat::Sog));
    // Against the 248 bytes per Gaussian of a 3DGS PLY at SH 3 (62 at SH 0).
    let ply_size = (src.len() * (14 + src.num_coeffs() * 3) * 4) as f64;
    assert!(
        (bytes.len() as f64) < ply_size / 3.0,
        "{file}: SOG {} bytes vs PLY {ply_size}",
        bytes.len()
    );
    let back = load_splats(&path).unwrap();
    assert_eq!((back.len(), back.sh_degree), (src.len(), src.sh_degree));
    let (lo, hi) = src.bounding_box().unwrap();
    let extent = (0..3).map(|a| hi[a] - lo[a]).fold(0.0f32, f32::max);
    let k = src.num_coeffs();
    let mut worst_mean = 0.0f32;
    let mut worst_opacity = 0.0f32;
    let mut worst_quat = 0.0f32;
    let (mut se_scale, mut se_dc, mut se_rest) = (0.0f64, 0.0f64, 0.0f64);
    for i in 0..src.len() {
        for a in 0..3 {
            let m = src.means[i][a];
            // One 16-bit step of sign(x) ln(1 + |x|), back through exp.
            worst_mean = worst_mean.max(
                (back.means[i][a] - m).abs() / ((m.abs() + 1.0) * 2.0 * extent.ln_1p() / 65535.0),
            );
            se_scale += f64::from(back.log_scales[i][a] - src.log_scales[i][a]).powi(2);
        }
        worst_opacity = worst_opacity
            .max((sigmoid(back.opacity_logits[i]) - sigmoid(src.opacity_logits[i])).abs());
        let n = |q: [f32; 4]| {
            let l = q.iter().map(|c| c * c).sum::<f32>().sqrt();
            q.map(|c| c / l)
        };
        let (p, q) = (n(back.rotations[i]), n(src.rotations[i]));
        worst_quat = worst_quat.max(1.0 - (0..4).map(|c| p[c] * q[c]).sum::<f32>().abs());
        for c in 0..k * 3 {
            let d = f64::from(back.sh[i * k * 3 + c] - src.sh[i * k * 3 + c]).powi(2);
            if c < 3 { se_dc += d } else { se_rest += d }
        }
    }
    let n = src.len() as f64;
    let rms = |se: f64, m: f64| (se / (n * m)).sqrt();
    let errors = [
        worst_mean,
        worst_opacity,
        worst_quat,
        rms(se_scale, 3.0) as f32,
        rms(se_dc, 3.0) as f32,
    ];
    eprintln!("{file}: position steps, opacity, rotation, log-scale RMS, DC RMS: {errors:?}");
    assert!(
        worst_mean <= 1.0,
        "{file}: position error {worst_mean} steps"
    );
    assert!(
        worst_opacity <= 0.5 / 255.0 + 1e-6,
        "{file}: opacity error {worst_opacity}"
    );
    assert!(worst_quat < 1e-4, "{file}: rotation error {worst_quat}");
    // 256-entry codebooks by k-means: no worse than 256 even steps over the values' range.
    let even = |v: &mut dyn Iterator<Item = f32>| {
        let (lo, hi) = v.fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), x| {
            (l.min(x), h.max(x))
        });
        f64::from(hi - lo) / 256.0 / 12f64.sqrt()
    };
    let scale_even = even(&mut src.log_scales.iter().flatten().copied());
    let dc_even =
        even(&mut (0..src.len()).flat_map(|i| src.sh[i * k * 3..i * k * 3 + 3].iter().copied()));
    eprintln!("{file}: even-step RMS: log-scale {scale_even}, DC {dc_even}");
    assert!(
        rms(se_scale, 3.0) <= scale_even,
        "{file}: log-scale RMS {} (even steps: {scale_even})",
        rms(se_scale, 3.0)
    );
    assert!(
        rms(se_dc, 3.0) <= dc_even,
        "{file}: DC RMS {} (even steps: {dc_even})",
        rms(se_dc, 3.0)
    );
    if k > 1 {
        let sh = rms(se_rest, (k * 3 - 3) as f64);
        eprintln!("{file}: SH RMS {sh}");
        assert!(sh < 0.05, "{file}: SH RMS {sh}");
    }
}
