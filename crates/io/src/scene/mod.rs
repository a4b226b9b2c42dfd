//! Posed-image training scenes for Gaussian-splatting training: COLMAP models, nerfstudio /
//! instant-ngp `transforms.json` and NeRF-synthetic (Blender) scenes, behind one [`Scene`] type.
//!
//! [`open_scene`] recognises the layout ([`detect_scene`]) and returns a [`Scene`]: one
//! [`SceneView`] per posed image (pinhole intrinsics and a world-to-camera pose), optional
//! initial points ([`ScenePoints`]), and [`Scene::load_image`], which decodes a view to RGB8
//! after alpha compositing, downscaling and undistortion, so that the delivered image matches
//! the view's pinhole intrinsics exactly.
//!
//! | kind | layout | intrinsics | poses | points | order of views |
//! |---|---|---|---|---|---|
//! | [`SceneKind::Colmap`] | `sparse/0/`, `sparse/` or the folder itself holding `cameras`, `images`, `points3D` (`.bin` or `.txt`); images in `<root>/images/` | `SIMPLE_PINHOLE`, `PINHOLE`, `SIMPLE_RADIAL`, `RADIAL`, `OPENCV` (`FULL_OPENCV` with `k4 = k5 = k6 = 0`) | `qvec`/`tvec` (world-to-camera) | `points3D` | sorted by image name |
//! | [`SceneKind::Transforms`] | `transforms.json` (nerfstudio, instant-ngp) | `fl_x fl_y cx cy w h` or `camera_angle_x/y`, shared or per frame; `k1 k2 [k3] p1 p2` | `transform_matrix` (OpenGL camera-to-world) | `ply_file_path` | file order |
//! | [`SceneKind::NerfSynthetic`] | `transforms_train.json` (a `transforms_val.json` / `transforms_test.json` is opened by passing the file itself) | `camera_angle_x`, `cx = W/2`, `cy = H/2` | `transform_matrix` (OpenGL camera-to-world) | none | file order |
//!
//! Conventions of the delivered values:
//!
//! * Poses ([`SceneView::world_to_camera`]) are row-major 4x4 world-to-camera matrices with
//!   OpenCV camera axes (x right, y down, z forward), in the data set's own world frame and
//!   units; nothing is re-centred or rescaled. OpenGL camera-to-world matrices are converted by
//!   negating the camera y and z axes (columns 1 and 2) and inverting. Their rotation block,
//!   often stored as float32, is snapped to the nearest rotation (SVD), so every delivered pose
//!   is exactly rigid; camera centres are kept exactly. Rotations further than 1e-3 from
//!   orthonormal (scaled or sheared poses) and reflections are errors.
//! * Intrinsics are used as the files store them, with no half-pixel shift, like gsplat and the
//!   reference 3DGS code (COLMAP and nerfstudio place the centre of the top-left pixel at
//!   `(0.5, 0.5)`, so strictly their `cx`/`cy` are half a pixel larger than OpenCV's; gsplat
//!   and 3DGS ignore this and so does this module). NeRF-synthetic uses
//!   `f = 0.5 W / tan(0.5 camera_angle_x)`, `cx = W / 2`, `cy = H / 2` exactly.
//! * Downscaling by `N` ([`SceneOptions::downscale`]) reads `images_N/` (COLMAP: next to
//!   `images/`; transforms: next to the folder of each `file_path`) when that file exists, and
//!   otherwise resizes on load to `round(W / N) x round(H / N)` with an exact area (box) filter.
//!   Intrinsics are scaled by the ratio of the real sizes (`fx * w' / W`, `cx * w' / W`, ...),
//!   like gsplat (`c * s` is the exact rescaling in the pixel-centre-at-0.5 convention of the
//!   files; in strict OpenCV terms it would be `(c + 0.5) s - 0.5`).
//! * Distorted cameras (`SIMPLE_RADIAL`, `RADIAL`, `OPENCV`, or `k1 k2 p1 p2` in a
//!   `transforms.json`) are undistorted on load, at the (downscaled) image size, to the pinhole
//!   camera of OpenCV's `getOptimalNewCameraMatrix(alpha = 0)` (every delivered pixel is a
//!   valid source pixel), with bilinear sampling; the view's intrinsics are those of that camera
//!   and its size stays the same.
//! * A COLMAP project folder without `images/` of its own but with `dense/<n>/` (the output of
//!   COLMAP's `image_undistorter`: `images/` + `sparse/`) opens that undistorted model; give
//!   `sparse/0` explicitly to open the distorted reconstruction.
//! * Images with alpha are composited over [`SceneOptions::background`]:
//!   `floor(255 (c a + bg (1 - a)) + 0.5)` with `c`, `a` in `0..1`. [`Scene::load_view`] also
//!   returns the alpha channel itself ([`ViewImage::alpha`], 8 bit), downscaled and undistorted
//!   exactly like the colours (area filter, bilinear remap), for an alpha loss; an alpha channel
//!   that is 255 everywhere carries nothing and is dropped.
//! * Masks ([`ViewImage::mask`]; 255 = keep the pixel, 0 = ignore it, e.g. for moving objects):
//!   COLMAP scenes with a `masks/` folder next to `images/` take the mask of image `NAME` from
//!   `masks/NAME.png` (COLMAP's own convention), `masks/STEM.png` (the name with its extension
//!   replaced, nerfstudio) or `masks/NAME`, first found; once `masks/` exists every image
//!   needs a mask. `transforms.json` frames take theirs from a `mask_path` key (relative to the
//!   json's folder; frames without one are unmasked). The mask file is binarised (grey value
//!   `>= 128` keeps, `< 128` ignores, so that JPEG-compressed masks stay binary; a colour mask
//!   uses its luma, a mask with its own alpha channel is composited over black), must have the
//!   size of its image file or of the full-resolution (calibrated) image, and is then resized
//!   with the same area filter and undistorted with the same bilinear remap as the image, so
//!   that a delivered value between 0 and 255 is the kept fraction of that pixel. A missing,
//!   undecodable or wrongly sized mask is an error naming the mask file (raised when the view
//!   is loaded).
//! * [`SceneView::name`] is the image file name; when two views of a scene share a file name
//!   the path relative to the image folder (COLMAP name, or `file_path`) is used instead for
//!   every view.
//!
//! Every error names the offending file and the problem; malformed input never panics. Images
//! are only decoded by [`Scene::load_image`]; opening reads at most image headers (of
//! `images_N/` files, and of `transforms` frames without `w`/`h`), so a scene whose images are
//! missing still opens (loading then names the missing file). [`Scene::remove_missing_images`]
//! drops such views (the instant-ngp fox lists 67 frames but ships 50 images).
//!
//! [`ImageCache`] decodes views in parallel and keeps them in memory. [`write_transforms_json`],
//! [`write_colmap_text`] and [`write_points_ply`] export posed views (e.g. from SLAM) in forms
//! [`open_scene`] reads back; [`colmap`] has the full COLMAP model reader and text writer.
//!
//! ```no_run
//! use std::path::Path;
//! use rust3r_io::scene::{self, SceneOptions};
//! let scene = scene::open_scene(Path::new("../shared/data/lego"), &SceneOptions::default())?;
//! let (train, eval) = scene.split(8);
//! let v = &scene.views[train[0]];
//! let rgb = scene.load_image(train[0])?;
//! assert_eq!(rgb.len(), (v.camera.width * v.camera.height * 3) as usize);
//! println!("{} train / {} eval views, fx = {}", train.len(), eval.len(), v.camera.fx);
//! # Ok::<(), rust3r_io::IoError>(())
//! ```

mod cache;
pub mod colmap;
mod image_ops;
mod points;
mod transforms;

/// Bilinear remap of an RGB8 image through an undistortion map (shared with the data sets).
pub(crate) use image_ops::remap_bilinear_channels;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rust3r_geometry::{
    PinholeCamera, RadTanDistortion, UndistortMap, init_undistort_rectify_map,
    optimal_new_camera_matrix_alpha0,
};

use crate::IoError;

pub use cache::ImageCache;

/// The decoded image of a view ([`Scene::load_view`]), at the view's delivered size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewImage {
    /// Width of the delivered image (the width of [`SceneView::camera`]).
    pub width: u32,
    /// Height of the delivered image.
    pub height: u32,
    /// Interleaved RGB8 (`width * height * 3` bytes, row-major), composited over the
    /// background where the image has alpha ([`Scene::load_image`]).
    pub rgb: Vec<u8>,
    /// The image's alpha channel (`width * height` bytes), when it has one that is not fully
    /// opaque.
    pub alpha: Option<Vec<u8>>,
    /// The view's mask (`width * height` bytes; 255 = keep, 0 = ignore, in between: the kept
    /// fraction of a resized pixel), when the scene has one for it.
    pub mask: Option<Vec<u8>>,
}

impl ViewImage {
    /// Bytes of pixel data held (RGB, alpha and mask).
    pub fn bytes(&self) -> u64 {
        (self.rgb.len()
            + self.alpha.as_ref().map_or(0, Vec::len)
            + self.mask.as_ref().map_or(0, Vec::len)) as u64
    }

    /// The image, alpha and mask resized to `width x height` with the area (box) filter the
    /// scene's own `downscale` uses.
    pub fn resized(&self, width: u32, height: u32) -> ViewImage {
        let (w, h) = (self.width, self.height);
        let plane = |p: &Vec<u8>| image_ops::area_resize_channels(p, 1, w, h, width, height);
        ViewImage {
            width,
            height,
            rgb: image_ops::area_resize_channels(&self.rgb, 3, w, h, width, height),
            alpha: self.alpha.as_ref().map(plane),
            mask: self.mask.as_ref().map(plane),
        }
    }
}
pub use points::{read_points_ply, write_points_ply};
pub use transforms::write_transforms_json;

/// The layout of a training scene.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SceneKind {
    /// A COLMAP sparse model (binary or text) with an `images/` folder.
    Colmap,
    /// A nerfstudio / instant-ngp `transforms.json`.
    Transforms,
    /// A NeRF-synthetic (Blender) scene: `transforms_train.json` (+ `_val` / `_test`).
    NerfSynthetic,
}

impl SceneKind {
    /// Lower-case name (`colmap`, `transforms`, `nerf-synthetic`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Colmap => "colmap",
            Self::Transforms => "transforms",
            Self::NerfSynthetic => "nerf-synthetic",
        }
    }
}

impl fmt::Display for SceneKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SceneKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "colmap" => Ok(Self::Colmap),
            "transforms" | "nerfstudio" | "instant-ngp" | "ngp" => Ok(Self::Transforms),
            "nerf-synthetic" | "blender" | "nerf" => Ok(Self::NerfSynthetic),
            _ => Err(format!(
                "unknown scene kind '{s}' (expected colmap, transforms or nerf-synthetic)"
            )),
        }
    }
}

/// Options of [`open_scene`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SceneOptions {
    /// Image downscale factor (1 = full resolution; must be at least 1).
    pub downscale: u32,
    /// Background colour (linear, `0..1`) that images with an alpha channel are composited over.
    pub background: [f32; 3],
    /// The scene layout; `None` detects it ([`detect_scene`]).
    pub kind: Option<SceneKind>,
}

impl SceneOptions {
    /// Checks the options of a scene opened from `path` (errors name it).
    fn check(&self, path: &Path) -> Result<(), IoError> {
        if self.downscale == 0 {
            return Err(dataset_error(
                path,
                "the downscale factor must be at least 1",
            ));
        }
        if !self.background.iter().all(|v| v.is_finite()) {
            return Err(dataset_error(path, "the background colour must be finite"));
        }
        Ok(())
    }
}

impl Default for SceneOptions {
    /// Full resolution, white background, detected layout.
    fn default() -> Self {
        Self {
            downscale: 1,
            background: [1.0, 1.0, 1.0],
            kind: None,
        }
    }
}

/// One posed image of a [`Scene`].
#[derive(Debug, Clone, PartialEq)]
pub struct SceneView {
    /// Image file name (stem and extension), unique within the scene (see the module docs for
    /// the fallback when file names repeat).
    pub name: String,
    /// The file [`Scene::load_image`] decodes (in `images_N/` when that is used).
    pub image_path: PathBuf,
    /// The pinhole camera of the image delivered by [`Scene::load_image`] (after downscaling and
    /// undistortion, so without a distortion; see the module docs on conventions).
    pub camera: PinholeCamera,
    /// World-to-camera transform, row-major, OpenCV camera axes (x right, y down, z forward), in
    /// the data set's own world frame and units.
    pub world_to_camera: [[f64; 4]; 4],
}

impl SceneView {
    /// Camera-to-world transform (the rigid inverse of [`SceneView::world_to_camera`]).
    pub fn camera_to_world(&self) -> [[f64; 4]; 4] {
        rigid_inverse(&self.world_to_camera)
    }

    /// Projects a world point to pixel coordinates of the delivered image; `None` behind the
    /// camera.
    pub fn project(&self, p: [f64; 3]) -> Option<[f64; 2]> {
        let m = &self.world_to_camera;
        let c: [f64; 3] =
            std::array::from_fn(|r| m[r][0] * p[0] + m[r][1] * p[1] + m[r][2] * p[2] + m[r][3]);
        let k = &self.camera;
        (c[2] > 0.0).then(|| [k.fx * c[0] / c[2] + k.cx, k.fy * c[1] / c[2] + k.cy])
    }
}

/// Initial points of a scene (COLMAP `points3D`, a `ply_file_path`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScenePoints {
    /// Positions in the world frame of the views.
    pub xyz: Vec<[f32; 3]>,
    /// Colours (sRGB, 8 bit).
    pub rgb: Vec<[u8; 3]>,
}

impl ScenePoints {
    /// Number of points.
    pub fn len(&self) -> usize {
        self.xyz.len()
    }

    /// Whether there are no points.
    pub fn is_empty(&self) -> bool {
        self.xyz.is_empty()
    }
}

/// A training scene: posed views, optional initial points and the image decoder.
///
/// `Scene` is `Send + Sync`; [`Scene::load_image`] may be called from several threads.
#[derive(Debug)]
pub struct Scene {
    /// The layout the scene was read as.
    pub kind: SceneKind,
    /// The scene folder (the folder holding `images/`, or the json's folder).
    pub root: PathBuf,
    /// Posed views, in the data set's order (by image name for COLMAP, file order for json).
    /// Do not add or remove entries directly (use [`Scene::retain_views`]): each view has
    /// private decoding state at the same index.
    pub views: Vec<SceneView>,
    /// Initial points, when the scene has them.
    pub points: Option<ScenePoints>,
    sources: Vec<ViewSource>,
    undistorters: Vec<Undistorter>,
    background: [f32; 3],
    downscale: u32,
}

/// How to produce the delivered image of one view.
#[derive(Debug, Clone)]
struct ViewSource {
    /// Size the decoded file must have.
    file_width: u32,
    file_height: u32,
    /// Where the expected size comes from (for error messages).
    size_origin: String,
    /// Area-downscale to this size after decoding.
    resize_to: Option<(u32, u32)>,
    /// Index into `Scene::undistorters`.
    undistorter: Option<usize>,
    /// Calibrated (full-resolution) size: a mask may have this size or the file's.
    full_width: u32,
    full_height: u32,
    /// The view's mask file, when it has one.
    mask: Option<MaskSource>,
}

/// Where the mask of a view comes from.
#[derive(Debug, Clone)]
pub(crate) struct MaskSource {
    /// The mask file (when no candidate exists: the first one looked for).
    pub path: PathBuf,
    /// Where the mask is declared, for error messages ("'mask_path' of frame 3 of ...").
    pub origin: String,
    /// Every file name looked for (COLMAP `masks/`), for the error when none exists.
    pub tried: Vec<PathBuf>,
}

/// Undistortion of one distinct (camera, image size) pair.
#[derive(Debug)]
struct Undistorter {
    source: PinholeCamera,
    distortion: RadTanDistortion,
    target: PinholeCamera,
    /// Cached map (only when `keep_map`).
    map: OnceLock<Arc<UndistortMap>>,
    keep_map: bool,
}

/// Maps of all distorted cameras of a scene are kept in memory when they take at most this
/// many bytes together (8 bytes per pixel each); otherwise each load recomputes its map.
const MAP_CACHE_BYTES: u64 = 512 << 20;

impl Undistorter {
    fn map(&self) -> Arc<UndistortMap> {
        let build = || {
            Arc::new(init_undistort_rectify_map(
                &self.source,
                &self.distortion,
                &self.target,
            ))
        };
        if self.keep_map {
            self.map.get_or_init(build).clone()
        } else {
            build()
        }
    }
}

/// A view as read from the files, before downscaling and undistortion.
#[derive(Debug, Clone)]
pub(crate) struct RawView {
    /// Path relative to the image folder (COLMAP name, json `file_path`), for unique names.
    pub relative: String,
    /// Full-resolution image file.
    pub image_path: PathBuf,
    /// Candidate pre-downscaled file (`images_N/...`), used when it exists.
    pub downscaled_path: Option<PathBuf>,
    /// Calibration at full resolution, with the distortion (non-zero) of the files.
    pub camera: PinholeCamera,
    pub world_to_camera: [[f64; 4]; 4],
    /// Where the calibration comes from, for error messages ("cameras.bin camera 3").
    pub calibration_origin: String,
    /// The view's mask, when it has one.
    pub mask: Option<MaskSource>,
}

/// Recognises the layout of a scene folder (or json file):
///
/// * a `.json` file: `transforms_*.json` is NeRF-synthetic, any other json a `transforms.json`;
/// * a folder with `transforms_train.json`: NeRF-synthetic;
/// * a folder with `transforms.json`: nerfstudio / instant-ngp;
/// * a folder with `sparse/0/cameras.{bin,txt}`, `sparse/cameras.{bin,txt}` or
///   `cameras.{bin,txt}`: COLMAP.
pub fn detect_scene(path: &Path) -> Option<SceneKind> {
    if path.is_file() {
        let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
        if !name.ends_with(".json") {
            return None;
        }
        return Some(if name.starts_with("transforms_") {
            SceneKind::NerfSynthetic
        } else {
            SceneKind::Transforms
        });
    }
    if !path.is_dir() {
        return None;
    }
    if path.join("transforms_train.json").is_file() {
        Some(SceneKind::NerfSynthetic)
    } else if path.join("transforms.json").is_file() {
        Some(SceneKind::Transforms)
    } else if colmap::find_model_dir(path).is_some() {
        Some(SceneKind::Colmap)
    } else {
        None
    }
}

/// Opens a training scene (see the module docs for the layouts and conventions).
///
/// `path` is the scene folder, or for json scenes also the json file itself (e.g.
/// `lego/transforms_test.json`). For COLMAP, `path` may also be the model folder
/// (`<root>/sparse/0`); images are then looked for in `<root>/images/`.
pub fn open_scene(path: &Path, opts: &SceneOptions) -> Result<Scene, IoError> {
    opts.check(path)?;
    if !path.exists() {
        return Err(IoError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        ));
    }
    let kind = match opts.kind {
        Some(kind) => kind,
        None => detect_scene(path).ok_or_else(|| {
            dataset_error(
                path,
                "not a training scene: expected transforms_train.json (NeRF-synthetic), \
                 transforms.json (nerfstudio / instant-ngp) or a COLMAP model \
                 (sparse/0/cameras.bin or .txt)",
            )
        })?,
    };
    let loaded = match kind {
        SceneKind::Colmap => colmap::load(path, opts.downscale)?,
        SceneKind::Transforms | SceneKind::NerfSynthetic => {
            transforms::load(path, kind, opts.downscale)?
        }
    };
    finish(kind, loaded, opts)
}

/// One posed image for [`scene_from_images`]: a full-resolution image file with its calibration
/// and world-to-camera pose (OpenCV axes).
#[derive(Debug, Clone, PartialEq)]
pub struct PosedImage {
    /// The image file.
    pub image_path: PathBuf,
    /// The camera of the file at full resolution (its size is the file's); a distortion is
    /// undistorted on load, like the `k1 k2 p1 p2` of a `transforms.json`.
    pub camera: PinholeCamera,
    /// World-to-camera transform, row-major.
    pub world_to_camera: [[f64; 4]; 4],
}

/// A training scene built in memory from posed images (e.g. a SLAM trajectory), read and
/// downscaled like a `transforms.json` scene ([`SceneKind::Transforms`]). `root` names the
/// scene in messages; `source` is the file errors about the views are reported against.
pub fn scene_from_images(
    root: &Path,
    source: &Path,
    images: &[PosedImage],
    points: Option<ScenePoints>,
    opts: &SceneOptions,
) -> Result<Scene, IoError> {
    opts.check(source)?;
    let views = images
        .iter()
        .enumerate()
        .map(|(i, v)| RawView {
            relative: v.image_path.to_string_lossy().into_owned(),
            image_path: v.image_path.clone(),
            downscaled_path: None,
            camera: v.camera,
            world_to_camera: v.world_to_camera,
            calibration_origin: format!("view {i} ({})", v.image_path.display()),
            mask: None,
        })
        .collect();
    let loaded = Loaded {
        root: root.to_path_buf(),
        views,
        points,
        source_file: source.to_path_buf(),
    };
    finish(SceneKind::Transforms, loaded, opts)
}

/// What a format loader hands to [`finish`].
pub(crate) struct Loaded {
    pub root: PathBuf,
    pub views: Vec<RawView>,
    pub points: Option<ScenePoints>,
    /// File the views come from (for "no views" errors).
    pub source_file: PathBuf,
}

/// Applies downscaling and undistortion to the raw views and builds the scene.
fn finish(kind: SceneKind, loaded: Loaded, opts: &SceneOptions) -> Result<Scene, IoError> {
    let Loaded {
        root,
        views: raw,
        points,
        source_file,
    } = loaded;
    if raw.is_empty() {
        return Err(dataset_error(&source_file, "the scene has no views"));
    }
    let n = opts.downscale;
    // Unique names: file names, or relative paths when file names repeat.
    let file_names: Vec<String> = raw
        .iter()
        .map(|v| {
            v.image_path
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| v.relative.clone())
        })
        .collect();
    let mut sorted = file_names.clone();
    sorted.sort();
    let names_unique = sorted.windows(2).all(|w| w[0] != w[1]);
    let names: Vec<String> = if names_unique {
        file_names
    } else {
        raw.iter().map(|v| v.relative.replace('\\', "/")).collect()
    };
    {
        let mut sorted = names.clone();
        sorted.sort();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(malformed(
                &source_file,
                format!("image '{}' appears more than once", w[0]),
            ));
        }
    }

    let mut views = Vec::with_capacity(raw.len());
    let mut sources = Vec::with_capacity(raw.len());
    let mut undistorters: Vec<Undistorter> = Vec::new();
    let mut undistorter_keys: Vec<[u64; 11]> = Vec::new();
    for (v, name) in raw.into_iter().zip(names) {
        let full = v.camera;
        if full.width == 0 || full.height == 0 {
            return Err(malformed(
                &source_file,
                format!(
                    "{}: image size {}x{} is empty",
                    v.calibration_origin, full.width, full.height
                ),
            ));
        }
        // Which file, and at which size.
        let mut image_path = v.image_path.clone();
        let (file_w, file_h, size_origin, resize_to, w1, h1);
        match v.downscaled_path.as_ref().filter(|p| n > 1 && p.is_file()) {
            Some(p) => {
                let (w, h) = image_dimensions(p)?;
                image_path = p.clone();
                (file_w, file_h) = (w, h);
                size_origin = "its header when the scene was opened".to_string();
                resize_to = None;
                (w1, h1) = (w, h);
            }
            None => {
                (file_w, file_h) = (full.width, full.height);
                size_origin = v.calibration_origin.clone();
                if n > 1 {
                    let w = ((full.width as f64 / n as f64).round() as u32).max(1);
                    let h = ((full.height as f64 / n as f64).round() as u32).max(1);
                    resize_to = Some((w, h));
                    (w1, h1) = (w, h);
                } else {
                    resize_to = None;
                    (w1, h1) = (full.width, full.height);
                }
            }
        }
        let cam = full.scaled(w1, h1).with_distortion(None);
        let (delivered, undistorter) = match full.distortion.filter(|d| !d.is_zero()) {
            None => (cam, None),
            Some(d) => {
                let key = [
                    cam.fx.to_bits(),
                    cam.fy.to_bits(),
                    cam.cx.to_bits(),
                    cam.cy.to_bits(),
                    ((w1 as u64) << 32) | h1 as u64,
                    d.k1.to_bits(),
                    d.k2.to_bits(),
                    d.p1.to_bits(),
                    d.p2.to_bits(),
                    d.k3.to_bits(),
                    0,
                ];
                let index = match undistorter_keys.iter().position(|k| *k == key) {
                    Some(i) => i,
                    None => {
                        let target = optimal_new_camera_matrix_alpha0(&cam, &d);
                        let ok = [target.fx, target.fy, target.cx, target.cy]
                            .iter()
                            .all(|v| v.is_finite())
                            && target.fx > 0.0
                            && target.fy > 0.0;
                        if !ok {
                            return Err(malformed(
                                &source_file,
                                format!(
                                    "{}: cannot undistort: the distortion (k1 {}, k2 {}, p1 {}, \
                                     p2 {}, k3 {}) folds the image over",
                                    v.calibration_origin, d.k1, d.k2, d.p1, d.p2, d.k3
                                ),
                            ));
                        }
                        undistorters.push(Undistorter {
                            source: cam,
                            distortion: d,
                            target,
                            map: OnceLock::new(),
                            keep_map: false,
                        });
                        undistorter_keys.push(key);
                        undistorters.len() - 1
                    }
                };
                (undistorters[index].target, Some(index))
            }
        };
        views.push(SceneView {
            name,
            image_path,
            camera: delivered,
            world_to_camera: v.world_to_camera,
        });
        sources.push(ViewSource {
            file_width: file_w,
            file_height: file_h,
            size_origin,
            resize_to,
            undistorter,
            full_width: full.width,
            full_height: full.height,
            mask: v.mask,
        });
    }
    let map_bytes: u64 = undistorters
        .iter()
        .map(|u| u.target.width as u64 * u.target.height as u64 * 8)
        .sum();
    for u in &mut undistorters {
        u.keep_map = map_bytes <= MAP_CACHE_BYTES;
    }
    Ok(Scene {
        kind,
        root,
        views,
        points,
        sources,
        undistorters,
        background: opts.background,
        downscale: n,
    })
}

impl Scene {
    /// Number of views.
    pub fn len(&self) -> usize {
        self.views.len()
    }

    /// Whether the scene has no views (never true for an opened scene).
    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    /// The downscale factor the scene was opened with.
    pub fn downscale(&self) -> u32 {
        self.downscale
    }

    /// The background colour images with alpha are composited over.
    pub fn background(&self) -> [f32; 3] {
        self.background
    }

    /// Keeps only the views for which `keep` returns true (in their order), together with
    /// their decoding state. Use this rather than editing [`Scene::views`] directly, whose
    /// entries must stay in step with the scene's private per-view state.
    pub fn retain_views(&mut self, mut keep: impl FnMut(&SceneView) -> bool) {
        let flags: Vec<bool> = self.views.iter().map(&mut keep).collect();
        self.retain_mask(&flags);
    }

    fn retain_mask(&mut self, flags: &[bool]) {
        let mut it = flags.iter();
        self.views
            .retain(|_| *it.next().expect("one flag per view"));
        let mut it = flags.iter();
        self.sources
            .retain(|_| *it.next().expect("one flag per view"));
    }

    /// Appends `other`'s views after this scene's, with their decoding state (e.g. a separate
    /// evaluation scene in the same world frame). The scenes must have been opened with the
    /// same downscale and background; this scene's initial points are kept.
    pub fn append(&mut self, other: Scene) -> Result<(), IoError> {
        if other.downscale != self.downscale || other.background != self.background {
            return Err(IoError::Dataset {
                path: other.root.clone(),
                message: format!(
                    "opened with downscale {} and background {:?}, but {} with downscale {} and background {:?}",
                    other.downscale,
                    other.background,
                    self.root.display(),
                    self.downscale,
                    self.background
                ),
            });
        }
        let offset = self.undistorters.len();
        self.undistorters.extend(other.undistorters);
        self.sources.extend(other.sources.into_iter().map(|mut s| {
            s.undistorter = s.undistorter.map(|u| u + offset);
            s
        }));
        self.views.extend(other.views);
        Ok(())
    }

    /// Indices of the views whose image file does not exist.
    pub fn missing_images(&self) -> Vec<usize> {
        (0..self.views.len())
            .filter(|&i| !self.views[i].image_path.is_file())
            .collect()
    }

    /// Removes the views whose image file does not exist (e.g. the instant-ngp fox lists 67
    /// frames but ships 50 images) and returns them.
    pub fn remove_missing_images(&mut self) -> Vec<SceneView> {
        let keep: Vec<bool> = self.views.iter().map(|v| v.image_path.is_file()).collect();
        let missing = self
            .views
            .iter()
            .zip(&keep)
            .filter(|(_, k)| !**k)
            .map(|(v, _)| v.clone())
            .collect();
        self.retain_mask(&keep);
        missing
    }

    /// Whether view `i` is undistorted on load.
    pub fn is_undistorted(&self, i: usize) -> bool {
        self.sources.get(i).is_some_and(|s| s.undistorter.is_some())
    }

    /// Train / eval split: every `eval_every`-th view (`index % eval_every == 0`, in the order of
    /// [`Scene::views`]) is held out for evaluation; `eval_every = 0` holds out nothing.
    /// Returns `(train indices, eval indices)`, both ascending.
    pub fn split(&self, eval_every: usize) -> (Vec<usize>, Vec<usize>) {
        let all = 0..self.views.len();
        if eval_every == 0 {
            return (all.collect(), Vec::new());
        }
        all.partition(|i| i % eval_every != 0)
    }

    /// The mask file of view `i`, when it has one (see the module docs); it may not exist
    /// (loading the view then names it).
    pub fn mask_path(&self, i: usize) -> Option<&Path> {
        self.sources.get(i)?.mask.as_ref().map(|m| m.path.as_path())
    }

    /// Number of views with a mask.
    pub fn num_masks(&self) -> usize {
        self.sources.iter().filter(|s| s.mask.is_some()).count()
    }

    /// Decodes view `i` to RGB8 (`width * height * 3` bytes, row-major), after compositing
    /// over the background (images with alpha), downscaling and undistortion. Errors name the
    /// image file. [`Scene::load_view`] also delivers the alpha channel and the mask.
    pub fn load_image(&self, i: usize) -> Result<Vec<u8>, IoError> {
        Ok(self.load(i, false, false)?.rgb)
    }

    /// Decodes view `i`: RGB8 as [`Scene::load_image`], plus the image's alpha channel and the
    /// view's mask when there are, both downscaled and undistorted like the colours (see the
    /// module docs). Errors name the image or mask file.
    pub fn load_view(&self, i: usize) -> Result<ViewImage, IoError> {
        self.load(i, true, true)
    }

    /// [`Scene::load_view`], delivering the alpha channel and the mask only when asked.
    pub(crate) fn load(
        &self,
        i: usize,
        with_alpha: bool,
        with_mask: bool,
    ) -> Result<ViewImage, IoError> {
        let (Some(view), Some(source)) = (self.views.get(i), self.sources.get(i)) else {
            return Err(dataset_error(
                &self.root,
                format!(
                    "view index {i} is out of range ({} views)",
                    self.views.len()
                ),
            ));
        };
        let path = &view.image_path;
        let decoded = image_ops::decode(path)?;
        let (w, h) = (decoded.width(), decoded.height());
        if (w, h) != (source.file_width, source.file_height) {
            return Err(malformed(
                path,
                format!(
                    "the image is {w}x{h} but {} says {}x{}",
                    source.size_origin, source.file_width, source.file_height
                ),
            ));
        }
        let (mut rgb, alpha) = image_ops::split_alpha(decoded, self.background);
        let mut alpha = alpha.filter(|_| with_alpha);
        let (tw, th) = source.resize_to.unwrap_or((w, h));
        let mut mask = match &source.mask {
            Some(m) if with_mask => Some(self.load_mask(view, source, m, (tw, th))?),
            _ => None,
        };
        if (tw, th) != (w, h) {
            rgb = image_ops::area_resize_channels(&rgb, 3, w, h, tw, th);
            if let Some(a) = &mut alpha {
                *a = image_ops::area_resize_channels(a, 1, w, h, tw, th);
            }
        }
        if let Some(u) = source.undistorter {
            let map = self.undistorters[u].map();
            rgb = image_ops::remap_bilinear_channels(&rgb, 3, tw, th, &map);
            for plane in [&mut alpha, &mut mask].into_iter().flatten() {
                *plane = image_ops::remap_bilinear_channels(plane, 1, tw, th, &map);
            }
        }
        let (width, height) = (view.camera.width, view.camera.height);
        let npix = width as usize * height as usize;
        debug_assert_eq!(rgb.len(), npix * 3);
        debug_assert!(alpha.as_ref().is_none_or(|a| a.len() == npix));
        debug_assert!(mask.as_ref().is_none_or(|m| m.len() == npix));
        Ok(ViewImage {
            width,
            height,
            rgb,
            alpha,
            mask,
        })
    }

    /// Decodes, checks and binarises the mask of a view and resizes it to `(tw, th)` (the
    /// size before undistortion).
    fn load_mask(
        &self,
        view: &SceneView,
        source: &ViewSource,
        m: &MaskSource,
        (tw, th): (u32, u32),
    ) -> Result<Vec<u8>, IoError> {
        let path = &m.path;
        if !path.is_file() {
            let message = if !m.tried.is_empty() {
                let names: Vec<String> = m.tried.iter().map(|p| p.display().to_string()).collect();
                format!(
                    "no mask for image '{}' ({}): looked for {}",
                    view.name,
                    m.origin,
                    names.join(", ")
                )
            } else {
                format!(
                    "the mask file of image '{}' ({}) does not exist",
                    view.name, m.origin
                )
            };
            return Err(dataset_error(path, message));
        }
        let what = format!("the mask of image '{}'", view.name);
        let decoded = image_ops::decode(path).map_err(|e| match e {
            IoError::Malformed { path, message } => IoError::Malformed {
                path,
                message: if message.contains("the image") {
                    message.replacen("the image", &what, 1)
                } else {
                    format!("{message} ({what})")
                },
            },
            // The file exists: a read error while decoding is a truncated or damaged file.
            IoError::Io { path, error } => IoError::Malformed {
                path,
                message: format!("cannot decode {what}: {error}"),
            },
            e => e,
        })?;
        let (mw, mh) = (decoded.width(), decoded.height());
        let file = (source.file_width, source.file_height);
        let full = (source.full_width, source.full_height);
        if (mw, mh) != file && (mw, mh) != full {
            let expected = if file == full {
                format!("{}x{}", file.0, file.1)
            } else {
                format!(
                    "{}x{} (the image file) or {}x{} (full resolution)",
                    file.0, file.1, full.0, full.1
                )
            };
            return Err(malformed(
                path,
                format!(
                    "the mask is {mw}x{mh} but image '{}' ({}) needs {expected}",
                    view.name,
                    view.image_path.display()
                ),
            ));
        }
        let mask = image_ops::mask_to_u8(decoded);
        Ok(image_ops::area_resize_channels(&mask, 1, mw, mh, tw, th))
    }

    /// The source camera (after downscaling, before undistortion), its distortion and the
    /// delivered camera of view `i`, when the view is undistorted on load.
    pub fn distortion(&self, i: usize) -> Option<(PinholeCamera, RadTanDistortion, PinholeCamera)> {
        let u = &self.undistorters[self.sources.get(i)?.undistorter?];
        Some((u.source, u.distortion, u.target))
    }
}

/// Writes a COLMAP text model (`cameras.txt` with `PINHOLE` cameras, one per distinct set of
/// intrinsics; `images.txt` with empty keypoint lists; `points3D.txt` without tracks) into `dir`,
/// each file atomically. `dir` is typically `<root>/sparse/0`; [`open_scene`] on `<root>` then
/// reads the views back, looking for the images in `<root>/images/<name>`, so view names must be
/// paths relative to that folder. Images are written in the order given, with ids from 1.
pub fn write_colmap_text(
    dir: &Path,
    views: &[SceneView],
    points: Option<&ScenePoints>,
) -> Result<(), IoError> {
    colmap::write_views_text(dir, views, points)
}

// ---------------------------------------------------------------------------
// Shared helpers

pub(crate) use crate::error::at::{dataset_error, malformed};

pub(crate) use crate::image_file::dimensions as image_dimensions;

/// Inverse of a rigid 4x4 transform `[R t; 0 1]`: `[R^T, -R^T t; 0 1]`.
pub fn rigid_inverse(m: &[[f64; 4]; 4]) -> [[f64; 4]; 4] {
    let mut out = [[0.0; 4]; 4];
    for r in 0..3 {
        for c in 0..3 {
            out[r][c] = m[c][r];
        }
        out[r][3] = -(0..3).map(|k| m[k][r] * m[k][3]).sum::<f64>();
    }
    out[3][3] = 1.0;
    out
}

/// Largest deviation of the rotation block from orthonormality (`max |R^T R - I|`).
pub(crate) fn orthonormality_error(m: &[[f64; 4]; 4]) -> f64 {
    let mut worst = 0.0f64;
    for a in 0..3 {
        for b in 0..3 {
            let dot: f64 = (0..3).map(|k| m[k][a] * m[k][b]).sum();
            let target = if a == b { 1.0 } else { 0.0 };
            worst = worst.max((dot - target).abs());
        }
    }
    if worst.is_nan() { f64::INFINITY } else { worst }
}

/// Replaces the rotation block of `m` by the nearest rotation (`U V^T` of its SVD), so that
/// poses stored with float32 precision become exactly rigid. Returns `false` (leaving `m`
/// unchanged) when the block is not close to a proper rotation (a reflection, or singular).
pub(crate) fn make_rotation_exact(m: &mut [[f64; 4]; 4]) -> bool {
    use rust3r_geometry::nalgebra::Matrix3;
    let r = Matrix3::from_fn(|i, j| m[i][j]);
    if r.determinant().is_nan() || r.determinant() <= 0.0 {
        return false;
    }
    let svd = r.svd(true, true);
    let (Some(u), Some(v_t)) = (svd.u, svd.v_t) else {
        return false;
    };
    let q = u * v_t;
    if !q.iter().all(|v| v.is_finite()) || q.determinant() <= 0.0 {
        return false;
    }
    for (i, row) in m.iter_mut().enumerate().take(3) {
        for (j, v) in row.iter_mut().enumerate().take(3) {
            *v = q[(i, j)];
        }
    }
    true
}

/// A path written in a scene file, relative to `base` unless absolute; `/` and `\` both
/// separate components, and `.` components are dropped.
pub(crate) fn scene_path(base: &Path, written: &str) -> PathBuf {
    let written = written.trim();
    #[cfg(not(windows))]
    let written = written.replace('\\', "/");
    let p = PathBuf::from(written);
    let p: PathBuf = p
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect();
    if p.is_absolute() { p } else { base.join(p) }
}
