//! Iterative-projection matching on synthetic pointmaps with known correspondences.

mod common;

use nalgebra::Vector3;
use rust3r_geometry::Sim3;
use rust3r_slam::config::SlamConfig;
use rust3r_slam::matching::{iter_proj, match_iterative_proj, ray_image, refine_matches};

/// A pointmap whose rays are those of a pinhole camera with mild barrel distortion (so the
/// ray image is not an exact pinhole and the search has to be iterative).
fn distorted_rays(w: usize, h: usize) -> (Vec<[f32; 3]>, impl Fn(f64, f64) -> Vector3<f64>) {
    let f = w as f64 * 0.8;
    let (cx, cy) = ((w as f64 - 1.0) / 2.0, (h as f64 - 1.0) / 2.0);
    let ray = move |u: f64, v: f64| {
        let (x, y) = ((u - cx) / f, (v - cy) / f);
        let r2 = x * x + y * y;
        let k = 1.0 + 0.1 * r2;
        Vector3::new(x * k, y * k, 1.0).normalize()
    };
    let mut pts = Vec::with_capacity(w * h);
    for v in 0..h {
        for u in 0..w {
            // Depth varies, rays do not depend on it.
            let d = 1.5 + 0.3 * ((u as f64) * 0.1).sin();
            let r = ray(u as f64, v as f64) * d;
            pts.push([r.x as f32, r.y as f32, r.z as f32]);
        }
    }
    (pts, ray)
}

#[test]
fn iterative_projection_recovers_subpixel_positions_from_the_identity_start() {
    let (w, h) = (64usize, 48usize);
    let (pts, ray) = distorted_rays(w, h);
    let img = ray_image(w, h, &pts, |_| None, |_| true);
    let cfg = SlamConfig::default().matching;
    // Queries: rays of known sub-pixel positions, started from the integer pixel they were
    // displaced from (identity start) by up to 3 px.
    let mut queries = Vec::new();
    let mut init = Vec::new();
    let mut truth = Vec::new();
    for k in 0..200 {
        let u = 4.0 + (k as f64 * 7.31) % (w as f64 - 8.0);
        let v = 4.0 + (k as f64 * 3.77) % (h as f64 - 8.0);
        let r = ray(u, v);
        queries.push([r.x as f32, r.y as f32, r.z as f32]);
        init.push([
            (u + ((k % 7) as f64 - 3.0)).round() as f32,
            (v + ((k % 5) as f64 - 2.0)).round() as f32,
        ]);
        truth.push([u, v]);
    }
    let (pos, conv) = iter_proj(&img, &queries, &init, &cfg);
    let mut worst = 0.0f64;
    for i in 0..queries.len() {
        assert!(conv[i], "query {i} did not converge");
        let e = ((pos[i][0] as f64 - truth[i][0]).powi(2)
            + (pos[i][1] as f64 - truth[i][1]).powi(2))
        .sqrt();
        worst = worst.max(e);
    }
    assert!(worst < 0.1, "largest error {worst} px");
}

#[test]
fn points_outside_the_field_of_view_do_not_converge() {
    let (w, h) = (64usize, 48usize);
    let (pts, ray) = distorted_rays(w, h);
    let img = ray_image(w, h, &pts, |_| None, |_| true);
    let cfg = SlamConfig::default().matching;
    let outside = [
        (-15.0, 20.0),
        (80.0, 20.0),
        (30.0, -12.0),
        (30.0, 70.0),
        (-20.0, -20.0),
    ];
    let queries: Vec<[f32; 3]> = outside
        .iter()
        .map(|&(u, v)| {
            let r = ray(u, v);
            [r.x as f32, r.y as f32, r.z as f32]
        })
        .collect();
    let init = vec![[32.0f32, 24.0]; queries.len()];
    let (_, conv) = iter_proj(&img, &queries, &init, &cfg);
    assert!(
        conv.iter().all(|c| !c),
        "a point outside the image converged: {conv:?}"
    );
    // Inside control: the same call converges for a point in view.
    let r = ray(20.3, 30.6);
    let (_, conv) = iter_proj(
        &img,
        &[[r.x as f32, r.y as f32, r.z as f32]],
        &[[32.0, 24.0]],
        &cfg,
    );
    assert!(conv[0]);
}

/// Two views of the synthetic room: every keyframe point moved into the frame's camera is
/// matched to the frame pixel that sees it (known by projection), and points hidden behind
/// a closer surface in the frame fail the occlusion check.
#[test]
fn matching_between_views_and_occlusion_check() {
    let cam = common::camera(96, 72);
    let scene = common::room();
    let t_wk = Sim3::identity();
    let t_wf = common::se3([0.0, 1.0, 0.0], 4.0, [0.12, 0.0, 0.05]);
    let kf = common::render(&scene, &cam, &t_wk, 10.0);
    let fr = common::render(&scene, &cam, &t_wf, 10.0);
    let cfg = SlamConfig::default().matching;
    // Frame rays from the pointmap (all pixels valid in the closed room).
    let rays = ray_image(
        fr.width,
        fr.height,
        &fr.points,
        |_| None,
        |i| fr.conf[i] > 0.0,
    );
    let t_fk = t_wf.inverse().compose(&t_wk);
    let queries: Vec<Option<[f32; 3]>> = (0..kf.len())
        .map(|q| {
            let y = t_fk.act(&kf.point(q));
            Some([y.x as f32, y.y as f32, y.z as f32])
        })
        .collect();
    let init: Vec<[f32; 2]> = (0..kf.len())
        .map(|q| [(q % kf.width) as f32, (q / kf.width) as f32])
        .collect();
    let valid_ref: Vec<bool> = fr.conf.iter().map(|c| *c > 0.0).collect();
    let m = match_iterative_proj(&rays, &fr.points, &valid_ref, &queries, &init, &cfg);
    let (mut inside, mut good, mut occluded_rejected, mut occluded) = (0, 0, 0, 0);
    for q in 0..kf.len() {
        let y = t_fk.act(&kf.point(q));
        let uv = cam.project(&y);
        let in_view = uv.x > 1.5
            && uv.y > 1.5
            && uv.x < cam.width as f64 - 2.5
            && uv.y < cam.height as f64 - 2.5;
        if !in_view {
            continue;
        }
        inside += 1;
        let j = m.idx[q] as usize;
        let (ju, jv) = ((j % fr.width) as f64, (j / fr.width) as f64);
        // The frame's own depth at the projected pixel tells whether the point is visible.
        let visible = (fr.point(j).norm() - y.norm()).abs() < 0.02;
        if visible {
            if m.valid[q] && (ju - uv.x).abs() <= 0.5 + 1e-3 && (jv - uv.y).abs() <= 0.5 + 1e-3 {
                good += 1;
            }
        } else if (fr.point(j) - y).norm() > cfg.dist_thresh {
            occluded += 1;
            if !m.valid[q] {
                occluded_rejected += 1;
            }
        }
    }
    assert!(inside > 4000, "only {inside} points in view");
    assert!(
        good as f64 > 0.97 * (inside - occluded) as f64,
        "{good} of {} visible points matched to the right pixel",
        inside - occluded
    );
    assert!(
        occluded > 20,
        "the test scene should have occlusions ({occluded})"
    );
    assert_eq!(occluded_rejected, occluded, "occluded points accepted");
}

#[test]
fn descriptor_refinement_finds_the_best_descriptor_in_the_window() {
    let (w, h, dim) = (60usize, 50usize, 4usize);
    // Unit descriptors whose similarity to the query falls with the distance to the target
    // pixel, so the coarse-to-fine window search must end on the target.
    let (tu, tv) = (37.0f32, 21.0f32);
    let mut desc = vec![0.0f32; w * h * dim];
    for v in 0..h {
        for u in 0..w {
            let d = [1.0, 0.3 * (u as f32 - tu), 0.3 * (v as f32 - tv), 0.1];
            let n = d.iter().map(|x| x * x).sum::<f32>().sqrt();
            for c in 0..dim {
                desc[(v * w + u) * dim + c] = d[c] / n;
            }
        }
    }
    let query = [1.0f32, 0.0, 0.0, 0.1];
    // Starts 13 px left and 9 px below: reachable with radius 3 and dilations 5..1.
    let starts = [(24usize, 30usize), (50, 12), (37, 21)];
    let idx: Vec<u32> = starts.iter().map(|&(u, v)| (v * w + u) as u32).collect();
    let q: Vec<f32> = starts.iter().flat_map(|_| query).collect();
    let out = refine_matches(&desc, w, h, dim, &q, &idx, 3, 5);
    for o in out {
        assert_eq!((o as usize % w, o as usize / w), (tu as usize, tv as usize));
    }
    // Radius 0 keeps the match.
    let out = refine_matches(&desc, w, h, dim, &q, &idx, 0, 5);
    assert_eq!(out, idx);
}
