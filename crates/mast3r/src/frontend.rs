//! MASt3R as a monocular pointmap front end of `rust3r slam` (MASt3R-SLAM's `mast3r_inference_mono`):
//! each frame is preprocessed (long side 512 by default), encoded, and decoded with itself; the
//! pointmap is view 1's `pts3d` with its `conf`, in the preprocessed image's pixels, coloured by the
//! preprocessed RGB. Uncalibrated and up to scale (`camera() == None`, `is_metric() == false`).
//!
//! The SLAM crate does not depend on this one: the CLI wires the two.

use rust3r_geometry::PinholeCamera;
use rust3r_io::datasets::Frame;
use rust3r_slam::{Pointmap, PointmapFrontEnd, SlamError};

use crate::model::{Encoded, HostPrediction, Mast3r};
use crate::preprocess::{Preprocessed, preprocess};

/// The network as a [`PointmapFrontEnd`]; also keeps the last frame's encoding and descriptors for
/// callers that need them (MASt3R-SLAM's matching).
pub struct Mast3rMonoFrontEnd {
    model: Mast3r,
    size: usize,
    last: Option<(Encoded, HostPrediction, Preprocessed)>,
}

impl Mast3rMonoFrontEnd {
    /// Front end running `model` on frames resized with MASt3R-SLAM's `resize_img(size)`
    /// (`size` 512 or 224).
    pub fn new(model: Mast3r, size: usize) -> Result<Self, String> {
        if size != 512 && size != 224 {
            return Err(format!("MASt3R input size must be 512 or 224, not {size}"));
        }
        Ok(Mast3rMonoFrontEnd {
            model,
            size,
            last: None,
        })
    }

    /// The network.
    pub fn model(&self) -> &Mast3r {
        &self.model
    }

    /// Encoding, full prediction (descriptors and their confidence included) and preprocessed image
    /// of the last frame given to [`PointmapFrontEnd::pointmap`].
    pub fn last(&self) -> Option<&(Encoded, HostPrediction, Preprocessed)> {
        self.last.as_ref()
    }
}

impl PointmapFrontEnd for Mast3rMonoFrontEnd {
    fn name(&self) -> &str {
        "mast3r"
    }

    fn pointmap(&mut self, frame: &Frame) -> Result<Pointmap, SlamError> {
        let (w, h) = (frame.rgb.width() as usize, frame.rgb.height() as usize);
        let p = preprocess(frame.rgb.as_raw(), w, h, self.size)
            .map_err(|e| SlamError::InvalidInput(format!("{}: {e}", frame.rgb_path.display())))?;
        let img = self
            .model
            .image_tensor(p.data.clone(), [1, 3, p.height, p.width]);
        let enc = self.model.encode(img);
        let [own, _] = self.model.mono(&enc);
        let host = own.to_host();
        let points: Vec<[f32; 3]> = host
            .pts3d
            .chunks_exact(3)
            .map(|v| [v[0], v[1], v[2]])
            .collect();
        if points.iter().flatten().any(|v| !v.is_finite()) {
            return Err(SlamError::InvalidInput(format!(
                "{}: the network produced non-finite points",
                frame.rgb_path.display()
            )));
        }
        let pm = Pointmap {
            width: p.width,
            height: p.height,
            points,
            conf: host.conf.clone(),
            colors: p.rgb.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect(),
        };
        self.last = Some((enc, host, p));
        Ok(pm)
    }

    fn camera(&self) -> Option<PinholeCamera> {
        None
    }

    fn is_metric(&self) -> bool {
        false
    }
}
