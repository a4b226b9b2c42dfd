//! Tracking on network pairs ([`rust3r_slam::pair`]): the descriptor refinement against a plain
//! window search, matching of a synthetic pair, and MASt3R-SLAM's Q weighting and filtering;
//! the GPU's matching, normal equations and tracking against the CPU's (fails without an adapter).

mod common;

use nalgebra::Vector3;
use rand::{Rng, SeedableRng, rngs::StdRng};
use rust3r_geometry::{PinholeCamera, Sim3};
use rust3r_slam::Pointmap;
use rust3r_slam::config::SlamConfig;
use rust3r_slam::matching::refine_matches;
use rust3r_slam::pair::{PairPrediction, match_pair};
use rust3r_slam::tracker::Tracker;

/// The window search written plainly: for each dilation `d` from `dmax` down to 1, every pixel
/// at offsets `-r d, ..., r d` (multiples of `d`) in both directions around the current centre,
/// columns outer, the first strictly larger dot product winning; the best score carries over
/// between dilations and starts at the smallest positive normal float (upstream's
/// `numeric_limits<float>::min()`); the centre moves to the best pixel after each dilation.
#[allow(clippy::too_many_arguments)] // mirrors `refine_matches`' signature
fn reference_refine(
    desc: &[f32],
    w: usize,
    h: usize,
    dim: usize,
    query: &[f32],
    start: usize,
    r: usize,
    dmax: usize,
) -> usize {
    let (mut cu, mut cv) = ((start % w) as i64, (start / w) as i64);
    let mut best = f32::MIN_POSITIVE;
    let mut arg = (cu, cv);
    for d in (1..=dmax as i64).rev() {
        let rd = r as i64 * d;
        let offsets: Vec<i64> = (-rd..=rd).filter(|o| (o + rd) % d == 0).collect();
        for &du in &offsets {
            for &dv in &offsets {
                let (u, v) = (cu + du, cv + dv);
                if u < 0 || v < 0 || u >= w as i64 || v >= h as i64 {
                    continue;
                }
                let px = &desc[(v as usize * w + u as usize) * dim..][..dim];
                let score: f32 = px.iter().zip(query).map(|(a, b)| a * b).sum();
                if score > best {
                    best = score;
                    arg = (u, v);
                }
            }
        }
        (cu, cv) = arg;
    }
    arg.1 as usize * w + arg.0 as usize
}

fn unit(rng: &mut StdRng, dim: usize) -> Vec<f32> {
    let v: Vec<f32> = (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

#[test]
fn refinement_equals_a_plain_window_search() {
    let mut rng = StdRng::seed_from_u64(7);
    let (w, h, dim) = (41usize, 29usize, 8usize);
    // Smooth random descriptors (neighbours alike, as a network's are), normalised.
    let base: Vec<Vec<f32>> = (0..6).map(|_| unit(&mut rng, dim)).collect();
    let mut desc = vec![0.0f32; w * h * dim];
    for v in 0..h {
        for u in 0..w {
            let (a, b) = (u as f32 / w as f32, v as f32 / h as f32);
            let mix = [
                (1.0 - a) * (1.0 - b),
                a * (1.0 - b),
                (1.0 - a) * b,
                a * b,
                0.3 * (7.0 * a).sin(),
                0.3 * (5.0 * b).cos(),
            ];
            let mut d: Vec<f32> = (0..dim)
                .map(|c| {
                    (0..6).map(|k| mix[k] * base[k][c]).sum::<f32>()
                        + 0.05 * rng.random_range(-1.0f32..1.0)
                })
                .collect();
            let n = d.iter().map(|x| x * x).sum::<f32>().sqrt();
            d.iter_mut().for_each(|x| *x /= n);
            desc[(v * w + u) * dim..][..dim].copy_from_slice(&d);
        }
    }
    let n = 300;
    // Queries: descriptors of random pixels (with noise) starting from other random pixels,
    // near the borders too, and a few arbitrary descriptors.
    let mut query = Vec::with_capacity(n * dim);
    let mut idx = Vec::with_capacity(n);
    for k in 0..n {
        let q: Vec<f32> = if k % 10 == 9 {
            unit(&mut rng, dim)
        } else {
            let p = rng.random_range(0..w * h);
            desc[p * dim..][..dim]
                .iter()
                .map(|x| x + 0.02 * rng.random_range(-1.0f32..1.0))
                .collect()
        };
        query.extend(q);
        idx.push(rng.random_range(0..(w * h) as u32));
    }
    let mut moved = 0;
    for (radius, dmax) in [(3, 5), (2, 3), (1, 1), (3, 1), (0, 5)] {
        let got = refine_matches(&desc, w, h, dim, &query, &idx, radius, dmax);
        for k in 0..n {
            let want = reference_refine(
                &desc,
                w,
                h,
                dim,
                &query[k * dim..][..dim],
                idx[k] as usize,
                radius,
                dmax,
            );
            assert_eq!(
                got[k] as usize, want,
                "query {k}, radius {radius}, dilation {dmax}"
            );
            moved += (got[k] != idx[k]) as usize;
        }
        if radius == 0 {
            assert_eq!(got, idx, "radius 0 keeps every match");
        }
    }
    assert!(
        moved > n,
        "the refinement should move most queries ({moved})"
    );

    // Every score zero or negative: the match stays where it is (upstream's initial score).
    let flat = [1.0f32, 0.0].repeat(w * h);
    let away = [-1.0f32, 0.0].repeat(3);
    let start = [0u32, 17, (w * h - 1) as u32];
    assert_eq!(
        refine_matches(&flat, w, h, 2, &away, &start, 3, 5),
        start.to_vec()
    );
}

/// A synthetic pair: the keyframe seen from `t_wk`, the frame from `t_wf`, the frame's points
/// scaled by `s` (network pointmaps are up to scale), `Xkf` the keyframe's pixels in the frame's
/// camera at the frame's scale. Frame descriptors are random unit vectors; the keyframe pixel
/// `q` gets the descriptor of the frame pixel `shift` away from where `q` projects (when that
/// pixel sees the same point). `q_value` is every descriptor confidence.
#[derive(Clone)]
struct Synthetic {
    pred: PairPrediction,
    kf: Pointmap,
    /// True frame pixel of each keyframe pixel (None: outside or occluded).
    truth: Vec<Option<usize>>,
    /// `T_CkCf` (with the scale).
    t_kf_frame: Sim3,
}

fn synthetic(
    cam: &PinholeCamera,
    t_wk: &Sim3,
    t_wf: &Sim3,
    s: f64,
    shift: (i64, i64),
    q_value: f32,
) -> Synthetic {
    let scene = common::room();
    let kf = common::render(&scene, cam, t_wk, 10.0);
    let fr = common::render(&scene, cam, t_wf, 10.0);
    let (w, h) = (cam.width as usize, cam.height as usize);
    let dim = 16;
    let mut rng = StdRng::seed_from_u64(3);
    // Smooth descriptors, as a network's: `[cos(w_k . p), sin(w_k . p)] / sqrt(K)` for random
    // frequencies `w_k`, so the score between pixels `a` and `b` is `mean_k cos(w_k . (a - b))`,
    // 1 at `a = b` only and falling off over a few pixels.
    let freqs: Vec<(f32, f32, f32)> = (0..dim / 2)
        .map(|_| {
            (
                rng.random_range(-0.3f32..0.3),
                rng.random_range(-0.3f32..0.3),
                rng.random_range(0.0f32..6.3),
            )
        })
        .collect();
    let norm = (dim as f32 / 2.0).sqrt();
    let frame_desc: Vec<f32> = (0..w * h)
        .flat_map(|i| {
            let (u, v) = ((i % w) as f32, (i / w) as f32);
            freqs.iter().flat_map(move |&(a, b, c)| {
                let t = a * u + b * v + c;
                [t.cos() / norm, t.sin() / norm]
            })
        })
        .collect();
    let t_fk = t_wf.inverse().compose(t_wk);
    let mut keyframe_points = Vec::with_capacity(w * h);
    let mut keyframe_desc = Vec::with_capacity(w * h * dim);
    let mut truth = Vec::with_capacity(w * h);
    for q in 0..w * h {
        let pk = kf.points[q];
        let y = t_fk.act(&Vector3::new(pk[0] as f64, pk[1] as f64, pk[2] as f64));
        keyframe_points.push([(s * y.x) as f32, (s * y.y) as f32, (s * y.z) as f32]);
        let (u, v) = (
            (cam.fx * y.x / y.z + cam.cx).round() as i64,
            (cam.fy * y.y / y.z + cam.cy).round() as i64,
        );
        let inside = |u: i64, v: i64| y.z > 0.0 && u >= 0 && v >= 0 && u < w as i64 && v < h as i64;
        let visible = inside(u, v) && {
            let p = fr.points[v as usize * w + u as usize];
            (Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64) - y).norm() < 0.05
        };
        truth.push(visible.then_some(v as usize * w + u as usize));
        let (su, sv) = (u + shift.0, v + shift.1);
        let d = if visible && inside(su, sv) {
            frame_desc[(sv as usize * w + su as usize) * dim..][..dim].to_vec()
        } else {
            unit(&mut rng, dim)
        };
        keyframe_desc.extend(d);
    }
    let mut frame = fr.clone();
    for p in &mut frame.points {
        *p = p.map(|c| (s * c as f64) as f32);
    }
    frame.conf = vec![2.0; w * h];
    let pred = PairPrediction {
        frame,
        frame_desc,
        frame_desc_conf: vec![q_value; w * h],
        keyframe_points,
        keyframe_conf: vec![3.0; w * h],
        keyframe_desc,
        keyframe_desc_conf: vec![q_value; w * h],
        desc_dim: dim,
        device_desc: None,
    };
    pred.check().unwrap();
    // Y = T_CkCf X_f with X_f = s P_f: T_kf with scale 1 / s.
    let t_kf = t_wk.inverse().compose(t_wf);
    let t_kf_frame = Sim3::new(t_kf.rotation, t_kf.translation, 1.0 / s);
    Synthetic {
        pred,
        kf,
        truth,
        t_kf_frame,
    }
}

#[test]
fn pair_matching_finds_the_true_pixels_and_refines_with_the_descriptors() {
    let cam = common::camera(96, 72);
    let t_wk = Sim3::identity();
    let t_wf = common::se3([0.2, 1.0, 0.1], 3.0, [0.06, -0.02, 0.04]);
    let cfg = SlamConfig::default().matching;
    for shift in [(0i64, 0i64), (2, -1)] {
        let syn = synthetic(&cam, &t_wk, &t_wf, 0.7, shift, 2.0);
        let m = match_pair(&syn.pred, &cfg, None).unwrap();
        let (mut checked, mut exact) = (0, 0);
        for (q, t) in syn.truth.iter().enumerate() {
            let Some(t) = t else { continue };
            let (tu, tv) = ((t % 96) as i64 + shift.0, (t / 96) as i64 + shift.1);
            if !m.valid[q] || tu < 0 || tv < 0 || tu >= 96 || tv >= 72 {
                continue;
            }
            checked += 1;
            exact += (m.idx[q] as i64 == tv * 96 + tu) as usize;
        }
        let visible = syn.truth.iter().filter(|t| t.is_some()).count();
        assert!(
            checked > visible * 8 / 10,
            "shift {shift:?}: {checked} valid of {visible} visible"
        );
        assert!(
            exact as f64 > 0.99 * checked as f64,
            "shift {shift:?}: {exact} of {checked} matches on the descriptor's pixel"
        );
        if shift != (0, 0) {
            // The descriptors moved nearly every match by the shift.
            assert!(m.refined > checked * 9 / 10, "{} refined", m.refined);
        }
        // Without refinement the shifted descriptors are ignored: matches stay geometric.
        let mut plain = cfg.clone();
        plain.radius = 0;
        let m0 = match_pair(&syn.pred, &plain, None).unwrap();
        assert_eq!(m0.refined, 0);
        assert_eq!(
            m0.valid, m.valid,
            "validity is decided before the refinement"
        );
        // A warm start from the answer converges to the same matches.
        let warm = match_pair(&syn.pred, &cfg, Some(&m.idx)).unwrap();
        let same = warm
            .idx
            .iter()
            .zip(&m.idx)
            .zip(&m.valid)
            .filter(|((a, b), v)| **v && a == b)
            .count();
        assert!(same as f64 > 0.99 * m.valid.iter().filter(|v| **v).count() as f64);
    }
}

fn tracker(cfg: &SlamConfig) -> Tracker {
    Tracker {
        cfg: cfg.tracking.clone(),
        matching: cfg.matching.clone(),
        levels: 1,
        optimize_scale: true,
    }
}

/// Matches are whole pixels (in both views), so even exact pointmaps give a pose within the
/// quantisation: with a 160x120 camera (f = 144 px) about 0.04 degrees and 1.5 mm here (at
/// 96x72, whose rounding offsets happen to line up across the image, 0.3 degrees).
#[test]
fn pair_tracking_recovers_a_similarity_uncalibrated_and_calibrated() {
    let cam = common::camera(160, 120);
    let t_wk = common::se3([0.0, 1.0, 0.0], 2.0, [0.1, 0.0, -0.1]);
    let motion = common::se3([0.3, 1.0, -0.2], 3.0, [0.05, 0.03, -0.04]);
    let t_wf = t_wk.compose(&motion);
    for (name, cfg, camera) in [
        ("uncalibrated", SlamConfig::default(), None),
        ("calibrated", SlamConfig::calib(), Some(cam)),
    ] {
        let syn = synthetic(&cam, &t_wk, &t_wf, 1.4, (0, 0), 2.0);
        let kf_conf = vec![1.0f32; syn.kf.len()];
        let pt = tracker(&cfg)
            .track_pair(
                &syn.pred,
                &syn.kf,
                &kf_conf,
                camera,
                &Sim3::identity(),
                None,
            )
            .unwrap();
        let r = &pt.result;
        let (ang, trans) = common::pose_error(&r.t_kf_frame, &syn.t_kf_frame);
        assert!(
            ang < 0.08 && trans < 3e-3,
            "{name}: error {ang} deg, {trans}"
        );
        assert!(
            (r.t_kf_frame.scale - syn.t_kf_frame.scale).abs() < 1e-3,
            "{name}: scale {} instead of {}",
            r.t_kf_frame.scale,
            syn.t_kf_frame.scale
        );
        assert!(
            !r.lost && r.match_frac > 0.5 && r.iterations > 1,
            "{name}: match fraction {}, {} iterations",
            r.match_frac,
            r.iterations
        );
        assert_eq!(pt.used as f64 / syn.kf.len() as f64, r.match_frac);
        // Fusion: every keyframe pixel observed, Xkf moved into the keyframe with Ckf.
        let (obs, conf) = r.observation.as_ref().expect("tracked");
        assert!(conf.iter().all(|&c| c == 3.0));
        let close = obs
            .iter()
            .zip(&syn.kf.points)
            .filter(|(o, k)| (0..3).all(|c| (o[c] - k[c]).abs() < 5e-3))
            .count();
        assert!(
            close > obs.len() * 95 / 100,
            "{name}: {close} of {} fused points on the keyframe's",
            obs.len()
        );
    }
}

#[test]
fn descriptor_confidence_gates_and_weights_the_matches() {
    let (w, h) = (160usize, 120usize);
    let cam = common::camera(w as u32, h as u32);
    let t_wk = Sim3::identity();
    let t_wf = common::se3([0.2, 1.0, 0.1], 2.0, [0.04, -0.02, 0.03]);
    let cfg = SlamConfig::default();
    let kf_conf = vec![1.0f32; w * h];
    let track = |pred: &PairPrediction, kf: &Pointmap| {
        tracker(&cfg)
            .track_pair(pred, kf, &kf_conf, None, &Sim3::identity(), None)
            .unwrap()
    };
    let good = synthetic(&cam, &t_wk, &t_wf, 1.0, (0, 0), 2.0);
    let all = track(&good.pred, &good.kf);
    assert!(!all.result.lost);
    // Qk = sqrt(Qff(idx) Qkf) = 1.2 < Q_conf 1.5 everywhere: no usable match, lost before any
    // optimisation, nothing fused.
    let low = synthetic(&cam, &t_wk, &t_wf, 1.0, (0, 0), 1.2);
    let lost = track(&low.pred, &low.kf);
    assert!(lost.result.lost && lost.result.observation.is_none());
    assert_eq!(
        (lost.used, lost.result.iterations, lost.result.match_frac),
        (0, 0, 0.0)
    );
    assert_eq!(lost.result.t_kf_frame, Sim3::identity());
    // The keyframe's left half below the threshold: exactly the right half's matches remain.
    let mut half = good.pred.clone();
    for q in 0..half.len() {
        if q % w < w / 2 {
            half.keyframe_desc_conf[q] = 1.0;
        }
    }
    let h = track(&half, &good.kf);
    let m = match_pair(&good.pred, &cfg.matching, None).unwrap();
    let right = (0..m.valid.len())
        .filter(|&q| m.valid[q] && q % w >= w / 2)
        .count();
    assert_eq!(h.used, right);
    // Keyframe rule: matches with Qk below the threshold no longer count.
    assert!(
        h.result.keyframe_frac < all.result.keyframe_frac * 0.7,
        "{} vs {}",
        h.result.keyframe_frac,
        all.result.keyframe_frac
    );
    // Q weighs the residuals: scaling every Q by 4 (all above the threshold) keeps the same
    // matches and, up to where Huber cuts in, the same solution; the cost grows with Q.
    let mut q4 = good.pred.clone();
    q4.frame_desc_conf
        .iter_mut()
        .chain(q4.keyframe_desc_conf.iter_mut())
        .for_each(|q| *q *= 4.0);
    let w4 = track(&q4, &good.kf);
    let (ang, trans) = common::pose_error(&w4.result.t_kf_frame, &all.result.t_kf_frame);
    assert!(ang < 0.03 && trans < 1e-3, "{ang} deg, {trans}");
    assert_eq!(w4.used, all.used);
    assert!(
        w4.result.cost > 2.0 * all.result.cost,
        "cost {} with Q x 4, {} without",
        w4.result.cost,
        all.result.cost
    );
    // A keyframe of another size is an error, not a panic.
    let small = common::render(&common::room(), &common::camera(48, 36), &t_wk, 10.0);
    let err = tracker(&cfg)
        .track_pair(
            &good.pred,
            &small,
            &vec![1.0; small.len()],
            None,
            &Sim3::identity(),
            None,
        )
        .unwrap_err();
    assert!(err.to_string().contains("48x36"), "{err}");
}

fn gpu() -> rust3r_gpu::Gpu {
    rust3r_gpu::Gpu::new(&rust3r_gpu::GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter (lavapipe: apt-get install mesa-vulkan-drivers)")
}

/// The first `dim` floats of every pixel's descriptors.
fn truncated_descriptors(pred: &PairPrediction, dim: usize) -> PairPrediction {
    let cut = |d: &[f32]| -> Vec<f32> {
        d.chunks(pred.desc_dim)
            .flat_map(|c| c[..dim].iter().copied())
            .collect()
    };
    PairPrediction {
        frame_desc: cut(&pred.frame_desc),
        keyframe_desc: cut(&pred.keyframe_desc),
        desc_dim: dim,
        ..pred.clone()
    }
}

/// The GPU's matching (iterative projection, occlusion check, descriptor refinement) against
/// the CPU's on a pair whose descriptors move every match by a shift, cold and warm-started;
/// with descriptors of 16 floats (read as vectors of 4), 14 (of 2) and 15 (one by one).
#[test]
fn gpu_pair_matching_equals_the_cpu_reference() {
    let gpu = gpu();
    let cam = common::camera(96, 72);
    let t_wf = common::se3([0.2, 1.0, 0.1], 3.0, [0.06, -0.02, 0.04]);
    let cfg = SlamConfig::default().matching;
    let full = synthetic(&cam, &Sim3::identity(), &t_wf, 0.7, (2, -1), 2.0);
    assert_eq!(full.pred.desc_dim, 16);
    for dim in [16, 14, 15] {
        let pred = truncated_descriptors(&full.pred, dim);
        let syn = Synthetic {
            pred,
            ..full.clone()
        };
        let cpu = match_pair(&syn.pred, &cfg, None).unwrap();
        for warm in [None, Some(cpu.idx.clone())] {
            let c = match_pair(&syn.pred, &cfg, warm.as_deref()).unwrap();
            let g = rust3r_slam::kernels::match_pair_gpu(&gpu, &syn.pred, &cfg, warm.as_deref())
                .unwrap();
            let n = c.idx.len();
            let same_valid = (0..n).filter(|&q| g.valid[q] == c.valid[q]).count();
            let nv = c.valid.iter().filter(|v| **v).count();
            let same_idx = (0..n)
                .filter(|&q| c.valid[q] && g.idx[q] == c.idx[q])
                .count();
            // f32 on both sides, but the GPU may fuse multiply-adds: a position within a hair of
            // a pixel boundary may round the other way.
            assert!(nv > n / 2, "{nv} valid of {n}");
            assert!(
                same_valid as f64 > 0.995 * n as f64,
                "{same_valid} of {n} flags agree"
            );
            assert!(
                same_idx as f64 > 0.995 * nv as f64,
                "{same_idx} of {nv} indices agree"
            );
            assert!(
                g.refined.abs_diff(c.refined) as f64 <= 0.005 * nv as f64
                    && c.refined > nv * 9 / 10,
                "{dim} floats: refined: GPU {}, CPU {}",
                g.refined,
                c.refined
            );
        }
    }
}

/// The GPU's normal equations of a pair against the CPU's float64 sums at a pose off the truth,
/// with Q weights that vary per pixel and Huber active on part of the residuals.
#[test]
fn gpu_pair_normal_equations_equal_the_cpu_reference() {
    use rust3r_slam::tracker::{LevelView, ResidualParams};
    let gpu = gpu();
    let cam = common::camera(96, 72);
    let t_wf = common::se3([0.2, 1.0, 0.1], 3.0, [0.06, -0.02, 0.04]);
    let cfg = SlamConfig::default();
    let syn = synthetic(&cam, &Sim3::identity(), &t_wf, 0.7, (0, 0), 2.0);
    let m = match_pair(&syn.pred, &cfg.matching, None).unwrap();
    let p = ResidualParams::tracking(&cfg.tracking);
    let f = &syn.pred.frame;
    let kf_conf = vec![1.0f32; syn.kf.len()];
    let fv = LevelView::build(f, &f.conf, None, 0, &p, false, false);
    let kv = LevelView::build(&syn.kf, &kf_conf, None, 0, &p, false, false);
    let mut rng = StdRng::seed_from_u64(11);
    let qk: Vec<f32> = (0..kv.len())
        .map(|_| rng.random_range(1.5f32..4.0))
        .collect();
    let used: Vec<bool> = (0..kv.len())
        .map(|q| m.valid[q] && fv.valid[m.idx[q] as usize] && kv.valid[q])
        .collect();
    let t = syn
        .t_kf_frame
        .retr(&rust3r_geometry::Vector7::from_column_slice(&[
            0.01, -0.02, 0.015, 0.01, -0.005, 0.008, 0.02,
        ]));
    let c = rust3r_slam::pair::pair_normal_eq(&fv, &kv, &m.idx, &used, &qk, &t, &p);
    let g = rust3r_slam::kernels::GpuPairNormalEq::new(
        &gpu,
        &f.points,
        &syn.kf.points,
        &m.idx,
        &used,
        &qk,
        &p,
    )
    .at(&gpu, &t)
    .unwrap();
    assert!(c.count > 1000, "{} correspondences", c.count);
    assert_eq!(g.count, c.count);
    let rel = |a: f64, b: f64, scale: f64| (a - b).abs() / scale;
    let hs = c.h.amax();
    let gs = c.g.amax();
    for r in 0..7 {
        for k in 0..7 {
            let e = rel(g.h[(r, k)], c.h[(r, k)], hs);
            assert!(e < 1e-4, "H[{r},{k}]: {} vs {}", g.h[(r, k)], c.h[(r, k)]);
        }
        let e = rel(g.g[r], c.g[r], gs);
        assert!(e < 1e-4, "g[{r}]: {} vs {}", g.g[r], c.g[r]);
    }
    assert!(
        rel(g.cost, c.cost, c.cost) < 1e-4,
        "cost {} vs {}",
        g.cost,
        c.cost
    );
}

/// Whole-frame tracking of a pair on the GPU against the CPU's: the same pose, statistics and
/// keyframe decision.
#[test]
fn gpu_pair_tracking_equals_the_cpu_reference() {
    let gpu = gpu();
    let cam = common::camera(160, 120);
    let t_wk = common::se3([0.0, 1.0, 0.0], 2.0, [0.1, 0.0, -0.1]);
    let motion = common::se3([0.3, 1.0, -0.2], 3.0, [0.05, 0.03, -0.04]);
    let t_wf = t_wk.compose(&motion);
    let cfg = SlamConfig::default();
    let syn = synthetic(&cam, &t_wk, &t_wf, 1.4, (0, 0), 2.0);
    let kf_conf = vec![1.0f32; syn.kf.len()];
    let tr = tracker(&cfg);
    let c = tr
        .track_pair(&syn.pred, &syn.kf, &kf_conf, None, &Sim3::identity(), None)
        .unwrap();
    let g = rust3r_slam::kernels::track_pair_gpu(
        &gpu,
        &tr,
        &syn.pred,
        &syn.kf,
        &kf_conf,
        &Sim3::identity(),
        None,
    )
    .unwrap();
    let (ang, trans) = common::pose_error(&g.result.t_kf_frame, &c.result.t_kf_frame);
    assert!(
        ang < 2e-3 && trans < 2e-5,
        "GPU vs CPU pose: {ang} deg, {trans}"
    );
    let (ang, trans) = common::pose_error(&g.result.t_kf_frame, &syn.t_kf_frame);
    assert!(
        ang < 0.08 && trans < 3e-3,
        "GPU vs truth: {ang} deg, {trans}"
    );
    assert!((g.result.match_frac - c.result.match_frac).abs() < 0.005);
    assert_eq!(
        (g.result.lost, g.result.new_keyframe),
        (c.result.lost, c.result.new_keyframe)
    );
    assert!(g.result.iterations > 1);
    // A calibrated keyframe of another size is an error, not a panic.
    let small = common::render(&common::room(), &common::camera(48, 36), &t_wk, 10.0);
    let err = rust3r_slam::kernels::track_pair_gpu(
        &gpu,
        &tr,
        &syn.pred,
        &small,
        &vec![1.0; small.len()],
        &Sim3::identity(),
        None,
    )
    .unwrap_err();
    assert!(err.to_string().contains("48x36"), "{err}");
}

/// The GPU matching's start positions, made on the device, are the pixels of the previous
/// matches (or the keyframe pixels themselves) as exact floats, bit for bit.
#[test]
fn gpu_warm_start_is_exact() {
    let gpu = gpu();
    let (w, h) = (37usize, 23usize);
    let n = w * h;
    let prev: Vec<u32> = (0..n as u32).map(|q| (q * 7919 + 13) % n as u32).collect();
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    let pixels = |idx: &mut dyn Iterator<Item = u32>| {
        bits(
            idx.flat_map(|i| [(i as usize % w) as f32, (i as usize / w) as f32])
                .collect(),
        )
    };
    let identity = pixels(&mut (0..n as u32));
    for (init, want) in [
        (Some(prev.as_slice()), pixels(&mut prev.iter().copied())),
        (None, identity.clone()),
        (Some(&prev[..n - 1]), identity.clone()),
    ] {
        let got = gpu
            .read(&rust3r_slam::kernels::warm_start_on(&gpu, init, w, n))
            .unwrap();
        assert_eq!(bits(got), want, "{:?}", init.map(<[u32]>::len));
    }
}

/// The ray image made on the device from the frame's points (`kernels::ray_image_on`) against a
/// float64 reference written plainly (unit rays, Scharr / 32 with reflected borders), and the
/// host's `matching::ray_image` against the same reference, on images with zero points and on
/// one-pixel-wide and one-pixel-high images.
#[test]
fn gpu_ray_image_equals_a_float64_reference() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(11);
    for (w, h) in [(37usize, 23usize), (1, 5), (6, 1), (64, 48)] {
        let n = w * h;
        let pts: Vec<[f32; 3]> = (0..n)
            .map(|i| {
                if i % 17 == 3 {
                    [0.0; 3] // no point: a zero ray
                } else {
                    [
                        rng.random_range(-1.0..1.0),
                        rng.random_range(-1.0..1.0),
                        rng.random_range(0.5..3.0),
                    ]
                }
            })
            .collect();
        let unit = |p: [f32; 3]| {
            let p = Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64);
            if p.norm() > 0.0 { p / p.norm() } else { p }
        };
        let refl = |i: isize, len: usize| -> usize {
            let r = if i < 0 {
                -i
            } else if i >= len as isize {
                2 * len as isize - 2 - i
            } else {
                i
            };
            r.clamp(0, len as isize - 1) as usize
        };
        let k = [[-3.0, 0.0, 3.0], [-10.0, 0.0, 10.0], [-3.0, 0.0, 3.0]];
        let mut want = vec![0.0f64; n * 9];
        for v in 0..h {
            for u in 0..w {
                let o = (v * w + u) * 9;
                let r = unit(pts[v * w + u]);
                want[o..o + 3].copy_from_slice(r.as_slice());
                for a in 0..3 {
                    for b in 0..3 {
                        let vv = refl(v as isize + a as isize - 1, h);
                        let uu = refl(u as isize + b as isize - 1, w);
                        let r = unit(pts[vv * w + uu]);
                        for c in 0..3 {
                            want[o + 3 + c] += k[a][b] / 32.0 * r[c];
                            want[o + 6 + c] += k[b][a] / 32.0 * r[c];
                        }
                    }
                }
            }
        }
        let flat: Vec<f32> = pts.iter().flatten().copied().collect();
        let got = gpu
            .read(&rust3r_slam::kernels::ray_image_on(
                &gpu,
                &gpu.upload(&flat),
                w,
                h,
            ))
            .unwrap();
        let host = rust3r_slam::matching::ray_image(w, h, &pts, |_| None, |_| true);
        let worst = |g: &[f32]| {
            g.iter()
                .zip(&want)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0.0f64, f64::max)
        };
        assert_eq!(got.len(), want.len());
        assert!(worst(&got) < 1e-6, "{w}x{h}: device off by {}", worst(&got));
        assert!(
            worst(&host.data) < 1e-6,
            "{w}x{h}: host off by {}",
            worst(&host.data)
        );
        // A zero point has a zero ray on both.
        assert_eq!(&got[3 * 9..3 * 9 + 3], &[0.0; 3]);
    }
}
