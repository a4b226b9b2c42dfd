//! The SLAM algorithms against MASt3R-SLAM's own code, piece by piece on the same inputs.
//! `tests/fixtures/mast3r_slam` was made by `tools/mast3r_slam_fixture.py`, which imports
//! upstream's `matching.py`, `tracker.py`, `global_opt.py` and `geometry.py` unchanged and
//! compiles upstream's CUDA kernels (`matching_kernels.cu`, `gn_kernels.cu`) on a GPU, or for
//! the CPU with every kernel launch run as a loop over the grid (`--backend cpu`, the
//! committed fixtures say which in their metadata). Inputs: redkitchen frames at 64x48,
//! pointmaps from the depth images with a scale error and noise (docs/guide.md, "SLAM parity with
//! MASt3R-SLAM"). Floats compare within `1e-4 * max|ref|`, discrete results exactly.
//!
//! Pieces: the ray image with its gradients, iterative projection (sub-pixel positions and
//! convergence flags), descriptor refinement (exact pixels), the whole `match_pair` where its
//! rounding and upstream's truncation agree (exact), one tracking solve in both
//! residual models (validity, match quality, every Gauss-Newton iteration's normal equations,
//! cost and update, the iteration count and the final pose), and the back end's global solve
//! over four keyframes with a loop edge in both residual models. The back end is compared
//! through rust3r's pieces (the residual model and Jacobians of `backend.rs`, `Sim3::retr`)
//! assembled on upstream's fixed matches: `backend::optimize` itself re-associates the matches
//! by iterative projection at every iteration (for RGB-D), which upstream does not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nalgebra::{DMatrix, DVector};
use rust3r_geometry::{PinholeCamera, Sim3, Vector7};
use rust3r_slam::SlamConfig;
use rust3r_slam::matching::{iter_proj, ray_image, refine_matches};
use rust3r_slam::pointmap::Pointmap;
use rust3r_slam::tracker::{LevelView, ResidualParams, converged, point_info_weighted, solve_pose};
use rust3r_testdata::rel_err;
use rust3r_torch_checkpoint::SafetensorsFile;

const TOL: f64 = 1e-4;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mast3r_slam")
        .join(name)
}

struct Tensors {
    map: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    meta: BTreeMap<String, String>,
}

impl Tensors {
    fn open(name: &str) -> Self {
        let path = fixture(name);
        let mut f = SafetensorsFile::open(&path).unwrap();
        let mut map = BTreeMap::new();
        for n in f.tensor_names() {
            let t = f.read_tensor(&n).unwrap();
            map.insert(n.clone(), (t.shape, t.data));
        }
        let meta: BTreeMap<String, String> = f
            .metadata()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        Self { map, meta }
    }
    fn f(&self, name: &str) -> &[f32] {
        &self.map.get(name).unwrap_or_else(|| panic!("{name}")).1
    }
    fn shape(&self, name: &str) -> &[usize] {
        &self.map[name].0
    }
    fn f64(&self, name: &str) -> Vec<f64> {
        self.f(name).iter().map(|&v| v as f64).collect()
    }
    fn ints(&self, name: &str) -> Vec<i64> {
        self.f(name).iter().map(|&v| v as i64).collect()
    }
    fn bools(&self, name: &str) -> Vec<bool> {
        self.f(name).iter().map(|&v| v != 0.0).collect()
    }
    fn points(&self, name: &str) -> Vec<[f32; 3]> {
        self.f(name).chunks(3).map(|c| [c[0], c[1], c[2]]).collect()
    }
    fn sim3(&self, name: &str, i: usize) -> Sim3 {
        let d = &self.f(name)[i * 8..(i + 1) * 8];
        let mut a = [0f64; 8];
        for (x, y) in a.iter_mut().zip(d) {
            *x = *y as f64;
        }
        Sim3::from_data(&a)
    }
}

/// `[sR | t]` of a pose, row-major (compares poses without the quaternion's sign).
fn sim3_matrix(t: &Sim3) -> Vec<f64> {
    let m = t.matrix();
    (0..3)
        .flat_map(|r| (0..4).map(move |c| (r, c)))
        .map(|(r, c)| m[(r, c)])
        .collect()
}

/// Upstream's config (the `config/base.yaml` the fixture was made with) over rust3r's defaults.
fn upstream_config() -> SlamConfig {
    let mut cfg = SlamConfig::default();
    cfg.apply_yaml_file(&fixture("config.yaml")).unwrap();
    cfg
}

fn size(t: &Tensors) -> (usize, usize) {
    let s: Vec<usize> = t.meta["size"]
        .split('x')
        .map(|v| v.parse().unwrap())
        .collect();
    (s[0], s[1])
}

fn camera(t: &Tensors) -> PinholeCamera {
    let k = t.f64("K");
    let (w, h) = size(t);
    PinholeCamera::new(k[0], k[4], k[2], k[5], w as u32, h as u32)
}

#[test]
fn ray_image_matches_upstream() {
    let t = Tensors::open("matching.safetensors");
    let (w, h) = size(&t);
    assert_eq!(t.shape("rays_with_grad"), &[h, w, 9]);
    let rays = ray_image(w, h, &t.points("X11"), |_| None, |_| true);
    let got: Vec<f64> = rays.data.iter().map(|&v| v as f64).collect();
    let e = rel_err(&got, &t.f64("rays_with_grad"));
    println!("ray image: rel err {e:.2e}");
    assert!(e <= TOL, "ray image rel err {e:.3e}");
}

#[test]
fn iterative_projection_matches_upstream() {
    let t = Tensors::open("matching.safetensors");
    let cfg = upstream_config();
    let (w, h) = size(&t);
    let rays = ray_image(w, h, &t.points("X11"), |_| None, |_| true);
    // Upstream: F.normalize(X21) (x / max(|x|, 1e-12)) in f32, identity initial pixels.
    let pts: Vec<[f32; 3]> = t
        .points("X21")
        .iter()
        .map(|p| {
            let n = (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt().max(1e-12);
            [p[0] / n, p[1] / n, p[2] / n]
        })
        .collect();
    let init: Vec<[f32; 2]> = (0..w * h)
        .map(|i| [(i % w) as f32, (i / w) as f32])
        .collect();
    let (pos, conv) = iter_proj(&rays, &pts, &init, &cfg.matching);
    let want_conv = t.bools("iter_proj_converged");
    let flips = conv.iter().zip(&want_conv).filter(|(a, b)| a != b).count();
    let n_conv = want_conv.iter().filter(|c| **c).count();
    let got: Vec<f64> = pos
        .iter()
        .flat_map(|p| [p[0] as f64, p[1] as f64])
        .collect();
    let want = t.f64("iter_proj_p");
    // Converged points within the tolerance. Points that do not converge (their ray is outside
    // the image: the LM steps push them against the clamp at the border; upstream marks them
    // invalid) run all `max_iter` damped steps, where rust3r's f64 and upstream's f32 drift
    // apart slightly: bounded separately, in pixels.
    let pick = |c: bool| -> (Vec<f64>, Vec<f64>) {
        (0..w * h)
            .filter(|&i| want_conv[i] == c)
            .flat_map(|i| [(got[2 * i], want[2 * i]), (got[2 * i + 1], want[2 * i + 1])])
            .unzip()
    };
    let (gc, wc) = pick(true);
    let e = rel_err(&gc, &wc) * wc.iter().fold(0f64, |m, v| m.max(v.abs()))
        / want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let (gn, wn) = pick(false);
    let worst_px = gn
        .iter()
        .zip(&wn)
        .map(|(a, b)| (a - b).abs())
        .fold(0f64, f64::max);
    let on_border = (0..w * h)
        .filter(|&i| !want_conv[i])
        .filter(|&i| {
            let (u, v) = (want[2 * i], want[2 * i + 1]);
            u == 1.0 || v == 1.0 || u == (w - 2) as f64 || v == (h - 2) as f64
        })
        .count();
    println!(
        "iterative projection: {n_conv}/{} converged upstream, {flips} flags differ; converged \
         positions rel err {e:.2e}; the {} others ({on_border} at the border clamp) differ by at \
         most {worst_px:.2e} px",
        want_conv.len(),
        wn.len() / 2
    );
    assert_eq!(flips, 0, "convergence flags differ from upstream");
    assert!(n_conv > w * h / 2, "the fixture should converge mostly");
    assert!(
        e <= TOL,
        "iterative projection rel err {e:.3e} (converged points)"
    );
    assert!(
        worst_px <= 0.05,
        "non-converged points differ by {worst_px:.3e} px"
    );
}

#[test]
fn descriptor_refinement_matches_upstream() {
    let t = Tensors::open("matching.safetensors");
    let cfg = upstream_config();
    let (w, h) = size(&t);
    let dim = t.shape("D11")[2];
    // Upstream's refine_matches input: the iterative projection's pixels truncated (`.long()`).
    let p_in = t.ints("refine_in");
    let idx: Vec<u32> = p_in
        .chunks(2)
        .map(|p| (p[1] as usize * w + p[0] as usize) as u32)
        .collect();
    let got = refine_matches(
        t.f("D11"),
        w,
        h,
        dim,
        t.f("D21"),
        &idx,
        cfg.matching.radius,
        cfg.matching.dilation_max,
    );
    let want: Vec<u32> = t
        .ints("refine_out")
        .chunks(2)
        .map(|p| (p[1] as usize * w + p[0] as usize) as u32)
        .collect();
    let moved = want.iter().zip(&idx).filter(|(a, b)| a != b).count();
    let diff = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    println!(
        "descriptor refinement: {moved}/{} moved upstream, {diff} differ",
        want.len()
    );
    assert!(
        moved > want.len() / 10,
        "the fixture should exercise the refinement"
    );
    assert_eq!(diff, 0, "refined pixels differ from upstream");
    // Upstream's final linear index is the refined pixel.
    assert_eq!(
        t.ints("idx_1_to_2"),
        want.iter().map(|&v| v as i64).collect::<Vec<_>>()
    );
}

/// The whole of `pair::match_pair` (iterative projection, occlusion check, refinement) against
/// upstream's `match_iterative_proj`. rust3r rounds the sub-pixel match to the nearest pixel
/// where upstream truncates (module docs of `pair.rs`), so the two start the refinement from
/// the same pixel only where rounding and truncation agree: there, the refined pixel and the
/// validity must be identical; elsewhere the difference is counted.
#[test]
fn match_pair_matches_upstream_where_rounding_agrees() {
    let t = Tensors::open("matching.safetensors");
    let cfg = upstream_config();
    let (w, h) = size(&t);
    let n = w * h;
    let dim = t.shape("D11")[2];
    let pred = rust3r_slam::pair::PairPrediction {
        frame: Pointmap {
            width: w,
            height: h,
            points: t.points("X11"),
            conf: vec![1.0; n],
            colors: vec![[0; 3]; n],
        },
        frame_desc: t.f("D11").to_vec(),
        frame_desc_conf: vec![1.0; n],
        keyframe_points: t.points("X21"),
        keyframe_conf: vec![1.0; n],
        keyframe_desc: t.f("D21").to_vec(),
        keyframe_desc_conf: vec![1.0; n],
        desc_dim: dim,
        device_desc: None,
    };
    pred.check().unwrap();
    let m = rust3r_slam::pair::match_pair(&pred, &cfg.matching, None).unwrap();
    // rust3r's pixel before the refinement (rounded), from its own sub-pixel positions.
    let rays = ray_image(w, h, &pred.frame.points, |_| None, |_| true);
    let pts: Vec<[f32; 3]> = pred
        .keyframe_points
        .iter()
        .map(|p| {
            let l = (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt();
            [p[0] / l, p[1] / l, p[2] / l]
        })
        .collect();
    let init: Vec<[f32; 2]> = (0..n).map(|i| [(i % w) as f32, (i / w) as f32]).collect();
    let (pos, _) = iter_proj(&rays, &pts, &init, &cfg.matching);
    let trunc = t.ints("refine_in");
    let same: Vec<bool> = (0..n)
        .map(|i| {
            rust3r_slam::matching::round_pixel(pos[i], w, h)
                == (trunc[2 * i + 1] as usize) * w + trunc[2 * i] as usize
        })
        .collect();
    let want_idx = t.ints("idx_1_to_2");
    let want_valid = t.bools("valid");
    let n_same = same.iter().filter(|s| **s).count();
    let (mut idx_diff, mut valid_diff, mut idx_other, mut valid_other) = (0, 0, 0, 0);
    for i in 0..n {
        let di = m.idx[i] as i64 != want_idx[i];
        let dv = m.valid[i] != want_valid[i];
        if same[i] {
            idx_diff += di as usize;
            valid_diff += dv as usize;
        } else {
            idx_other += di as usize;
            valid_other += dv as usize;
        }
    }
    println!(
        "match_pair: rounding agrees with truncation for {n_same}/{n} points: {idx_diff} pixels \
         and {valid_diff} validity flags differ there; elsewhere ({}) {idx_other} pixels and \
         {valid_other} validity flags differ",
        n - n_same
    );
    assert!(n_same > n / 5, "the comparison should cover many points");
    assert_eq!((idx_diff, valid_diff), (0, 0));
}

/// One tracking solve (`opt_pose_ray_dist_sim3` / `opt_pose_calib_sim3`) on the fixture's
/// fixed matches, as `Tracker::track_pair` runs it after the matching: validity and match
/// quality as `FrameTracker.track`, then Gauss-Newton with `pair_normal_eq`, `solve_pose`,
/// `Sim3::retr` and `converged` (the loop of `Tracker::iterate_level`).
fn tracking_case(calib: bool) {
    let t = Tensors::open("tracking.safetensors");
    let tag = if calib { "calib" } else { "rays" };
    let cfg = upstream_config();
    let (w, h) = size(&t);
    let n = w * h;
    let cam = calib.then(|| camera(&t));
    let mut p = ResidualParams::tracking(&cfg.tracking);
    // rust3r's RGB-D additions, not in upstream (and off for a mono config).
    assert_eq!(p.sigma_plane, 0.0);
    assert!(!p.depth_noise && !p.checkerboard);
    p.sigma_plane = 0.0;
    let pm = |pts: &str, conf: &str| Pointmap {
        width: w,
        height: h,
        points: t.points(pts),
        conf: t.f(conf).to_vec(),
        colors: Vec::new(),
    };
    let (f, k) = (pm("Xff", "Cff"), pm("Xk", "Ck"));
    let fv = LevelView::build(&f, &f.conf, cam, 0, &p, false, false);
    let kv = LevelView::build(&k, &k.conf, cam, 0, &p, false, false);
    let idx: Vec<u32> = t.ints("idx_f2k").iter().map(|&v| v as u32).collect();
    let valid_match = t.bools("valid_match_k");
    let (qff, qkf) = (t.f("Qff"), t.f("Qkf"));
    // Upstream: Qk = sqrt(Qff[idx] * Qkf); used = valid & Cf > C_conf & Ck > C_conf & Qk > Q_conf.
    let qk: Vec<f32> = (0..n)
        .map(|q| (qff[idx[q] as usize] * qkf[q]).sqrt())
        .collect();
    let used: Vec<bool> = (0..n)
        .map(|q| {
            valid_match[q]
                && fv.valid[idx[q] as usize]
                && kv.valid[q]
                && qk[q] as f64 > cfg.tracking.q_conf
        })
        .collect();
    let e = rel_err(
        &qk.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        &t.f64(&format!("{tag}.Qk")),
    );
    assert!(e <= TOL, "{tag}: Qk rel err {e:.3e}");
    assert_eq!(
        used,
        t.bools(&format!("{tag}.valid_opt")),
        "{tag}: used matches"
    );

    let want_tau = t.f64(&format!("{tag}.tau"));
    let want_cost = t.f64(&format!("{tag}.cost"));
    let want_h = t.f64(&format!("{tag}.H"));
    let want_g = t.f64(&format!("{tag}.g"));
    let iters = want_cost.len();
    let mut pose = t.sim3(&format!("{tag}.T_CkCf_init"), 0);
    let mut old_cost = f64::INFINITY;
    let mut ran = 0;
    for it in 0..cfg.tracking.max_iters {
        ran += 1;
        let eq = rust3r_slam::pair::pair_normal_eq(&fv, &kv, &idx, &used, &qk, &pose, &p);
        let delta = solve_pose(&eq, true).expect("positive definite");
        assert!(
            it < iters,
            "{tag}: rust3r runs more iterations than upstream ({iters})"
        );
        let h_got: Vec<f64> = eq.h.iter().copied().collect(); // symmetric: order irrelevant
        let eh = rel_err(&h_got, &want_h[it * 49..(it + 1) * 49]);
        let eg = rel_err(eq.g.as_slice(), &want_g[it * 7..(it + 1) * 7]);
        let ec = ((eq.cost - want_cost[it]) / want_cost[it]).abs();
        let et = rel_err(delta.as_slice(), &want_tau[it * 7..(it + 1) * 7]);
        println!(
            "{tag} iteration {it}: cost {:.6e} (upstream {:.6e}); rel err H {eh:.1e} g {eg:.1e} \
             cost {ec:.1e} tau {et:.1e}",
            eq.cost, want_cost[it]
        );
        assert!(
            eh <= TOL && eg <= TOL && ec <= TOL && et <= TOL,
            "{tag} iteration {it}"
        );
        pose = pose.retr(&delta);
        let done = converged(
            cfg.tracking.rel_error,
            cfg.tracking.delta_norm,
            old_cost,
            eq.cost,
            &delta,
        );
        old_cost = eq.cost;
        if done {
            break;
        }
    }
    assert_eq!(ran, iters, "{tag}: iterations");
    let want = t.sim3(&format!("{tag}.T_CkCf"), 0);
    let e = rel_err(&sim3_matrix(&pose), &sim3_matrix(&want));
    println!(
        "{tag}: {ran} iterations, final T_CkCf rel err {e:.2e}, scale {:.5} (upstream {:.5})",
        pose.scale, want.scale
    );
    assert!(e <= TOL, "{tag}: final pose rel err {e:.3e}");
}

#[test]
fn tracking_rays_matches_upstream() {
    tracking_case(false);
}

#[test]
fn tracking_calib_matches_upstream() {
    tracking_case(true);
}

/// One directed edge of the factor graph as upstream's kernels see it: pixel `k` of `j`
/// matched to pixel `idx[k]` of `i`.
struct Directed {
    i: usize,
    j: usize,
    idx: Vec<i64>,
    valid: Vec<bool>,
    q: Vec<f32>,
}

/// `gauss_newton_rays` / `gauss_newton_calib` on fixed matches with rust3r's pieces: for every
/// directed edge the residual of `T_CiCj X_j[k]` against `i`'s pixel `idx[k]`
/// ([`point_info_weighted`], the same model as tracking) with the world-pose Jacobians of
/// `backend.rs` (`dy/dxi_j = D`, `dy/dxi_i = -D`), keyframe 0 fixed, `delta_norm` and
/// `max_iters` as `local_opt`. Returns the poses and the iterations run.
fn global_solve(
    views: &[LevelView],
    poses: &mut [Sim3],
    edges: &[Directed],
    p: &ResidualParams,
    q_conf: f64,
    max_iters: usize,
    delta_norm: f64,
) -> usize {
    let n = poses.len();
    let free = n - 1;
    let mut ran = 0;
    for _ in 0..max_iters {
        ran += 1;
        let mut hm = DMatrix::<f64>::zeros(7 * n, 7 * n);
        let mut gv = DVector::<f64>::zeros(7 * n);
        for e in edges {
            let t_i_inv = poses[e.i].inverse();
            let t_ij = t_i_inv.compose(&poses[e.j]);
            for k in 0..views[e.j].len() {
                if !e.valid[k] || e.q[k] as f64 <= q_conf {
                    continue;
                }
                let qi = e.idx[k] as usize;
                if !views[e.j].valid[k] || !views[e.i].valid[qi] {
                    continue;
                }
                let x = views[e.j].point(k);
                let y = t_ij.act(&x);
                let Some(info) = point_info_weighted(&views[e.i], qi, &y, p, e.q[k] as f64) else {
                    continue;
                };
                let d = rust3r_slam::residuals::world_point_jacobian(&t_i_inv, &poses[e.j].act(&x));
                let hb = d.transpose() * (info.m * d);
                let gb = d.transpose() * info.v;
                for (a, b, s) in [
                    (e.j, e.j, 1.0),
                    (e.i, e.i, 1.0),
                    (e.i, e.j, -1.0),
                    (e.j, e.i, -1.0),
                ] {
                    let mut blk = hm.view_mut((7 * a, 7 * b), (7, 7));
                    blk += hb * s;
                }
                let mut gj = gv.rows_mut(7 * e.j, 7);
                gj += gb;
                let mut gi = gv.rows_mut(7 * e.i, 7);
                gi -= gb;
            }
        }
        let hf = hm.view((7, 7), (7 * free, 7 * free)).into_owned();
        let gf = gv.rows(7, 7 * free).into_owned();
        let x = hf.cholesky().expect("positive definite").solve(&gf);
        for k in 1..n {
            let d = Vector7::from_iterator(x.rows(7 * (k - 1), 7).iter().copied());
            poses[k] = poses[k].retr(&d);
        }
        if x.norm() < delta_norm {
            break;
        }
    }
    ran
}

#[test]
fn backend_global_solve_matches_upstream() {
    let t = Tensors::open("backend.safetensors");
    let cfg = upstream_config();
    let (w, h) = size(&t);
    let nk = t.shape("Xs")[0];
    let n = w * h;
    let ii = t.ints("ii");
    let jj = t.ints("jj");
    let ne = ii.len();
    let slice = |name: &str, e: usize| -> Vec<f32> { t.f(name)[e * n..(e + 1) * n].to_vec() };
    // prep_two_way_edges: (i, j, idx_ii2jj, valid_match_j, Q_ii2jj) and the reverse.
    let mut edges = Vec::new();
    for e in 0..ne {
        let (i, j) = (ii[e] as usize, jj[e] as usize);
        for (a, b, idx, valid, q) in [
            (i, j, "idx_ii2jj", "valid_match_j", "Q_ii2jj"),
            (j, i, "idx_jj2ii", "valid_match_i", "Q_jj2ii"),
        ] {
            edges.push(Directed {
                i: a,
                j: b,
                idx: slice(idx, e).iter().map(|&v| v as i64).collect(),
                valid: slice(valid, e).iter().map(|&v| v != 0.0).collect(),
                q: slice(q, e),
            });
        }
    }
    let lo = &cfg.local_opt;
    for (calib, tag) in [(false, "poses_rays"), (true, "poses_calib")] {
        let cam = calib.then(|| camera(&t));
        // The kernels' Huber threshold is the constant 1.345.
        let mut p = ResidualParams::local_opt(lo, 1.345);
        p.sigma_plane = 0.0;
        let views: Vec<LevelView> = (0..nk)
            .map(|k| {
                let pm = Pointmap {
                    width: w,
                    height: h,
                    points: t.points("Xs")[k * n..(k + 1) * n].to_vec(),
                    conf: slice("Cs", k),
                    colors: Vec::new(),
                };
                LevelView::build(&pm, &pm.conf, cam, 0, &p, false, false)
            })
            .collect();
        let mut poses: Vec<Sim3> = (0..nk).map(|k| t.sim3("poses_init", k)).collect();
        let ran = global_solve(
            &views,
            &mut poses,
            &edges,
            &p,
            lo.q_conf,
            lo.max_iters,
            lo.delta_norm,
        );
        let got: Vec<f64> = poses.iter().flat_map(sim3_matrix).collect();
        let want: Vec<f64> = (0..nk).flat_map(|k| sim3_matrix(&t.sim3(tag, k))).collect();
        let init: Vec<f64> = (0..nk)
            .flat_map(|k| sim3_matrix(&t.sim3("poses_init", k)))
            .collect();
        let moved = rel_err(&init, &want);
        let e = rel_err(&got, &want);
        println!(
            "back end {tag} ({}): {ran} iterations, poses rel err {e:.2e} (upstream moved them \
             by {moved:.2e})",
            t.meta["backend"]
        );
        assert!(moved > 10.0 * TOL, "{tag}: the solve should move the poses");
        assert!(e <= TOL, "{tag}: poses rel err {e:.3e}");
    }
}
