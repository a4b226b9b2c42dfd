//! A training session's per-pixel depth weights (`ViewDepth::weight`, the mono mode's network
//! confidence): a view with weights gets the depth term (and is reported as weighted), a view
//! whose pixels with depth all weigh 0 does not, and weights that are negative, non-finite or of
//! the wrong size are an error naming the view, before any training.

use rust3r_geometry::PinholeCamera;
use rust3r_gpu::{Gpu, GpuOptions};
use rust3r_io::scene::{PosedImage, SceneOptions, scene_from_images};
use rust3r_pipelines::train::{
    Refinement, SceneSetup, TrainEvent, TrainOptions, TrainSession, ViewDepth,
};
use rust3r_splat::train::init;

const W: u32 = 16;
const H: u32 = 12;
const WS: usize = W as usize;
const HS: usize = H as usize;
const NPIX: usize = WS * HS;

/// A session on one 16x12 grey view with a depth map (2 m on the left half, none on the right)
/// and per-pixel `weight`: the messages it printed, or its error.
fn session(dir: &std::path::Path, weight: Option<Vec<f32>>) -> Result<Vec<String>, String> {
    let img = dir.join("view.png");
    image::RgbImage::from_pixel(W, H, image::Rgb([128, 128, 128]))
        .save(&img)
        .unwrap();
    let posed = PosedImage {
        image_path: img,
        camera: PinholeCamera::new(12.0, 12.0, 7.5, 5.5, W, H),
        world_to_camera: [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ],
    };
    let scene = scene_from_images(
        dir,
        &dir.join("views.json"),
        &[posed],
        None,
        &SceneOptions {
            downscale: 1,
            background: [0.0; 3],
            kind: None,
        },
    )
    .unwrap();
    let depth: Vec<f32> = (0..NPIX)
        .map(|p| if p % WS < 8 { 2.0 } else { 0.0 })
        .collect();
    let mut splats = init::random_box(50, 0.5, 0.5, 1.0, 3, 0);
    for p in splats.means.chunks_exact_mut(3) {
        p[2] += 2.0;
    }
    let setup = SceneSetup {
        train: vec![0],
        eval: Vec::new(),
        init: Some(splats),
        depth: vec![Some(ViewDepth { depth, weight })],
        scale: Some(1.0),
        interpolated: Vec::new(),
        trainer: None,
    };
    let opts = TrainOptions {
        out: dir.join("out"),
        steps: 2,
        sh_degree: 0,
        eval_every: 0,
        ..TrainOptions::default()
    };
    let refine = Refinement {
        depth_weight: 0.2,
        ..Refinement::default()
    };
    let gpu = Gpu::new(&GpuOptions::default()).expect("a GPU adapter is required");
    let mut lines = Vec::new();
    let mut on_event = |e: TrainEvent<'_>| {
        if let TrainEvent::Info(s) = e {
            lines.push(s);
        }
    };
    TrainSession::from_scene("synthetic", scene, setup, opts, refine, &gpu, &mut on_event)
        .map_err(|e| e.to_string())?;
    Ok(lines)
}

fn depth_line(lines: &[String]) -> &str {
    lines
        .iter()
        .find(|l| l.starts_with("depth supervision"))
        .map_or("", |l| l.as_str())
}

#[test]
fn depth_weights_are_used_checked_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    // Weights falling from the top row to the bottom one.
    let ramp: Vec<f32> = (0..NPIX).map(|p| (HS - p / WS) as f32).collect();
    let lines = session(dir.path(), Some(ramp)).unwrap();
    assert!(
        depth_line(&lines).ends_with("1 of 1 training views have depth (1 with per-pixel weights)"),
        "{lines:?}"
    );
    // Sensor depth: no weights, no mention of them.
    let lines = session(dir.path(), None).unwrap();
    assert!(
        depth_line(&lines).ends_with("1 of 1 training views have depth"),
        "{lines:?}"
    );
    // Weight only where there is no depth: nothing is supervised.
    let right: Vec<f32> = (0..NPIX).map(|p| (p % WS >= 8) as u8 as f32).collect();
    let lines = session(dir.path(), Some(right)).unwrap();
    assert!(
        depth_line(&lines).ends_with("0 of 1 training views have depth"),
        "{lines:?}"
    );
    for bad in [vec![-1.0; NPIX], vec![f32::NAN; NPIX], vec![1.0; NPIX - 1]] {
        let err = session(dir.path(), Some(bad)).unwrap_err();
        assert!(
            err.contains("synthetic") && err.contains("depth weights of view view.png"),
            "{err}"
        );
    }
}
