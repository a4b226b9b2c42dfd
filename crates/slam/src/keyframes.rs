//! Keyframes and their growable store, with MASt3R-SLAM's pointmap fusion modes.

use std::path::PathBuf;
use std::sync::Arc;

use rust3r_geometry::Sim3;

use crate::appearance::Descriptor;
use crate::config::{FilteringScore, FusionMode};
use crate::pointmap::Pointmap;

/// A keyframe: a tracked frame whose pointmap later frames are registered against.
#[derive(Debug, Clone)]
pub struct Keyframe {
    /// Index of the frame in the data set (after the stride).
    pub frame_index: usize,
    /// Timestamp of the frame (s).
    pub timestamp: f64,
    /// Camera-to-world pose.
    pub t_wc: Sim3,
    /// Canonical pointmap in the keyframe's camera; `conf` holds the *accumulated* confidence.
    pub pointmap: Arc<Pointmap>,
    /// Number of observations averaged into the pointmap (MASt3R-SLAM `N`).
    pub n: u32,
    /// Number of fusion calls (MASt3R-SLAM `N_updates`).
    pub n_updates: u32,
    /// Score of the pointmap kept by [`FusionMode::BestScore`].
    pub score: f32,
    /// Colour image file of the frame.
    pub rgb_path: PathBuf,
    /// Appearance descriptor of the keyframe's image (loop closure and relocalisation by
    /// appearance, [`crate::appearance`]).
    pub descriptor: Arc<Descriptor>,
}

fn score_of(c: &[f32], kind: FilteringScore) -> f32 {
    let mut v: Vec<f32> = c.iter().copied().filter(|x| *x > 0.0).collect();
    if v.is_empty() {
        return 0.0;
    }
    match kind {
        FilteringScore::Mean => v.iter().sum::<f32>() / v.len() as f32,
        FilteringScore::Median => {
            // torch.median returns the lower of the two middle values.
            let k = (v.len() - 1) / 2;
            let (_, m, _) = v.select_nth_unstable_by(k, |a, b| a.total_cmp(b));
            *m
        }
    }
}

fn to_spherical(p: [f32; 3]) -> [f32; 3] {
    let r = (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt();
    let phi = p[1].atan2(p[0]);
    let theta = if r > 0.0 {
        (p[2] / r).clamp(-1.0, 1.0).acos()
    } else {
        0.0
    };
    [r, phi, theta]
}

fn from_spherical(s: [f32; 3]) -> [f32; 3] {
    let [r, phi, theta] = s;
    [
        r * theta.sin() * phi.cos(),
        r * theta.sin() * phi.sin(),
        r * theta.cos(),
    ]
}

impl Keyframe {
    /// A keyframe made from a frame's pointmap (its first observation).
    pub fn new(
        frame_index: usize,
        timestamp: f64,
        t_wc: Sim3,
        pointmap: Pointmap,
        rgb_path: PathBuf,
        score: FilteringScore,
    ) -> Self {
        let s = score_of(&pointmap.conf, score);
        let descriptor = Arc::new(Descriptor::of(&pointmap));
        Self {
            frame_index,
            timestamp,
            t_wc,
            pointmap: Arc::new(pointmap),
            n: 1,
            n_updates: 1,
            score: s,
            rgb_path,
            descriptor,
        }
    }

    /// Average confidence per pixel (`C / N`, MASt3R-SLAM `get_average_conf`).
    pub fn average_conf(&self) -> Vec<f32> {
        let n = self.n.max(1) as f32;
        self.pointmap.conf.iter().map(|c| c / n).collect()
    }

    /// Fuses an observation of the keyframe's pixels: `points` in the keyframe camera and their
    /// confidences (0 where a pixel was not observed), following MASt3R-SLAM
    /// `Frame.update_pointmap`. Pixels without an observation keep their point in every mode
    /// (MASt3R predicts every pixel; a depth camera does not).
    pub fn fuse(
        &mut self,
        points: &[[f32; 3]],
        conf: &[f32],
        mode: FusionMode,
        score: FilteringScore,
    ) {
        let pm = Arc::make_mut(&mut self.pointmap);
        assert_eq!(
            points.len(),
            pm.points.len(),
            "observation size differs from the keyframe's"
        );
        assert_eq!(
            conf.len(),
            pm.conf.len(),
            "observation size differs from the keyframe's"
        );
        let replace = |pm: &mut Pointmap, keep_conf: bool| {
            for i in 0..points.len() {
                if conf[i] > 0.0 {
                    pm.points[i] = points[i];
                    if !keep_conf {
                        pm.conf[i] = conf[i];
                    }
                }
            }
        };
        match mode {
            FusionMode::First => {
                if self.n_updates == 1 {
                    replace(pm, false);
                    self.n = 1;
                }
            }
            FusionMode::Recent => {
                replace(pm, false);
                self.n = 1;
            }
            FusionMode::BestScore => {
                let s = score_of(conf, score);
                if s > self.score {
                    replace(pm, false);
                    self.n = 1;
                    self.score = s;
                }
            }
            FusionMode::IndepConf => {
                for i in 0..points.len() {
                    if conf[i] > pm.conf[i] {
                        pm.points[i] = points[i];
                        pm.conf[i] = conf[i];
                    }
                }
                self.n = 1;
            }
            FusionMode::Weighted => {
                // Element-wise, so parallel is the same as sequential.
                use rayon::prelude::*;
                pm.points
                    .par_iter_mut()
                    .zip(pm.conf.par_iter_mut())
                    .zip(points.par_iter().zip(conf.par_iter()))
                    .with_min_len(4096)
                    .for_each(|((a, c0), (b, &c1))| {
                        if c1 <= 0.0 {
                            return;
                        }
                        let s = *c0 + c1;
                        let c = *c0;
                        *a = [
                            (c * a[0] + c1 * b[0]) / s,
                            (c * a[1] + c1 * b[1]) / s,
                            (c * a[2] + c1 * b[2]) / s,
                        ];
                        *c0 = s;
                    });
                self.n += 1;
            }
            FusionMode::WeightedSpherical => {
                for i in 0..points.len() {
                    let (c0, c1) = (pm.conf[i], conf[i]);
                    if c1 <= 0.0 {
                        continue;
                    }
                    let s = c0 + c1;
                    let (a, b) = (to_spherical(pm.points[i]), to_spherical(points[i]));
                    let m = [
                        (c0 * a[0] + c1 * b[0]) / s,
                        (c0 * a[1] + c1 * b[1]) / s,
                        (c0 * a[2] + c1 * b[2]) / s,
                    ];
                    pm.points[i] = from_spherical(m);
                    pm.conf[i] = s;
                }
                self.n += 1;
            }
        }
        self.n_updates += 1;
    }

    /// Bytes held by this keyframe (pointmap, confidences, colours).
    pub fn memory_bytes(&self) -> usize {
        let pm = &self.pointmap;
        std::mem::size_of::<Self>() + pm.points.len() * 12 + pm.conf.len() * 4 + pm.colors.len() * 3
    }
}

/// Growable keyframe store (no preallocated slots).
#[derive(Debug, Clone, Default)]
pub struct KeyframeStore {
    /// Keyframes in creation order.
    pub frames: Vec<Keyframe>,
}

impl KeyframeStore {
    /// Number of keyframes.
    pub fn len(&self) -> usize {
        self.frames.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
    /// Appends a keyframe and returns its index.
    pub fn push(&mut self, kf: Keyframe) -> usize {
        self.frames.push(kf);
        self.frames.len() - 1
    }
    /// The most recent keyframe.
    pub fn last(&self) -> Option<&Keyframe> {
        self.frames.last()
    }
    /// Total bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.frames.iter().map(Keyframe::memory_bytes).sum()
    }
}
