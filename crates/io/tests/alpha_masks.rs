//! Alpha channels and masks of training scenes (`Scene::load_view`): the alpha channel of real
//! RGBA images survives downscaling and undistortion unchanged in meaning, COLMAP `masks/`
//! folders and `transforms.json` `mask_path` keys are found, binarised, resized and undistorted
//! like the image, and missing, corrupt or wrongly sized masks are clear errors naming the file.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;

use rust3r_geometry::nalgebra::Vector2;
use rust3r_geometry::{PinholeCamera, RadTanDistortion, UndistortCriteria};
use rust3r_io::scene::{ImageCache, Scene, SceneOptions, ViewImage, open_scene};
use rust3r_testdata::data;

fn open(path: &Path, downscale: u32) -> Scene {
    open_scene(
        path,
        &SceneOptions {
            downscale,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `f` and fails the test if it panics.
fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => panic!("panicked on {what}"),
    }
}

/// `load_view(i)` must fail with a message containing every one of `needles`.
fn expect_view_err(s: &Scene, i: usize, needles: &[&str]) -> String {
    let msg = match no_panic("load_view", || s.load_view(i)) {
        Ok(_) => panic!("view {i} loaded, expected an error containing {needles:?}"),
        Err(e) => e.to_string(),
    };
    eprintln!("view {i}: {msg}");
    for n in needles {
        assert!(msg.contains(n), "'{msg}' should contain '{n}'");
    }
    msg
}

#[test]
fn lego_alpha_is_kept_and_survives_downscaling() {
    let lego = data("lego");
    let raw = image::open(lego.join("train/r_0.png"))
        .unwrap()
        .into_rgba8();
    let raw_alpha: Vec<u8> = raw.pixels().map(|p| p[3]).collect();

    // Full resolution: the file's alpha channel, byte for byte; RGB as load_image.
    let s = open(&lego, 1);
    let v = s.load_view(0).unwrap();
    assert_eq!((v.width, v.height), (800, 800));
    assert_eq!(v.rgb, s.load_image(0).unwrap());
    assert_eq!(v.alpha.as_deref(), Some(&raw_alpha[..]));
    assert!(v.mask.is_none() && s.num_masks() == 0 && s.mask_path(0).is_none());

    // Downscale 4 (resized on load): every alpha value is the mean of its 4x4 block.
    let s4 = open(&lego, 4);
    let v4 = s4.load_view(0).unwrap();
    assert_eq!((v4.width, v4.height), (200, 200));
    let a4 = v4.alpha.as_ref().expect("alpha survives downscaling");
    assert_eq!(a4.len(), 200 * 200);
    assert_eq!(v4.rgb, s4.load_image(0).unwrap());
    let mut partial = 0;
    let mut worst = 0.0f64;
    for y in 0..200 {
        for x in 0..200 {
            let mut sum = 0.0f64;
            for dy in 0..4 {
                for dx in 0..4 {
                    sum += raw_alpha[(y * 4 + dy) * 800 + x * 4 + dx] as f64;
                }
            }
            let got = a4[y * 200 + x] as f64;
            worst = worst.max((got - sum / 16.0).abs());
            partial += (got > 0.0 && got < 255.0) as usize;
        }
    }
    assert!(worst <= 0.5 + 1e-9, "downscaled alpha off by {worst}");
    assert!(partial > 100, "soft edges expected, found {partial}");
    assert_eq!(a4[0], 0, "the corner is transparent");
    // Where alpha is 0 the colour is the background (white), where it is 255 it is not
    // composited.
    let opaque = (0..200 * 200).find(|&p| a4[p] == 255).unwrap();
    let clear = (0..200 * 200).find(|&p| a4[p] == 0).unwrap();
    assert_eq!(&v4.rgb[clear * 3..clear * 3 + 3], &[255, 255, 255]);
    assert!(v4.rgb[opaque * 3..opaque * 3 + 3] != [255, 255, 255]);

    // The cache keeps alpha unless told not to.
    let s4 = Arc::new(s4);
    let cache = ImageCache::new(s4.clone(), u64::MAX);
    assert_eq!(cache.get(0).unwrap().alpha.as_ref(), Some(a4));
    let cache = ImageCache::new(s4, u64::MAX).keep_alpha(false);
    assert!(cache.get(0).unwrap().alpha.is_none());
}

/// A COLMAP text scene of `images` (name, RGB or RGBA image) with one PINHOLE camera.
fn colmap_scene(dir: &Path, w: u32, h: u32, images: &[(&str, image::DynamicImage)]) {
    std::fs::create_dir_all(dir.join("images")).unwrap();
    let mut lines = String::new();
    for (k, (name, img)) in images.iter().enumerate() {
        img.save(dir.join("images").join(name)).unwrap();
        lines += &format!("{} 1 0 0 0 0 0 {} 1 {name}\n\n", k + 1, k as f64 * 0.1);
    }
    std::fs::write(
        dir.join("cameras.txt"),
        format!(
            "1 PINHOLE {w} {h} 100 100 {} {}\n",
            w as f64 / 2.0,
            h as f64 / 2.0
        ),
    )
    .unwrap();
    std::fs::write(dir.join("images.txt"), lines).unwrap();
}

fn rgb(w: u32, h: u32, v: u8) -> image::DynamicImage {
    image::DynamicImage::ImageRgb8(image::RgbImage::from_pixel(w, h, image::Rgb([v, v / 2, 7])))
}

/// Left third black, then a band of grey 100 (below the threshold: ignore), then grey 200
/// (keep), then white.
fn mask_image(w: u32, h: u32) -> image::GrayImage {
    image::GrayImage::from_fn(w, h, |x, _| {
        image::Luma([match x * 4 / w {
            0 => 0,
            1 => 100,
            2 => 200,
            _ => 255,
        }])
    })
}

#[test]
fn colmap_masks_folder_is_found_binarised_and_downscaled() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (w, h) = (120u32, 60u32);
    // An RGBA image whose alpha is 255 everywhere: no alpha is delivered.
    let opaque = image::DynamicImage::ImageRgba8(image::RgbaImage::from_pixel(
        w,
        h,
        image::Rgba([1, 2, 3, 255]),
    ));
    colmap_scene(
        dir,
        w,
        h,
        &[
            ("a.jpg", rgb(w, h, 10)),
            ("b.png", opaque),
            ("c.png", rgb(w, h, 30)),
            ("d.jpg", rgb(w, h, 40)),
        ],
    );
    // Without masks/: no masks.
    let s = open(dir, 1);
    assert_eq!(s.num_masks(), 0);
    assert!(s.load_view(0).unwrap().mask.is_none());

    let masks = dir.join("masks");
    std::fs::create_dir_all(&masks).unwrap();
    let m = mask_image(w, h);
    m.save(masks.join("a.jpg.png")).unwrap(); // COLMAP: NAME.png
    m.save(masks.join("b.png")).unwrap(); // same name (= STEM.png)
    m.save(masks.join("c.png")).unwrap();
    // d.jpg: STEM.png is preferred over the same-name JPEG when both exist; here only the
    // same-name JPEG (lossy: values near 0 and 255 are not exact) exists.
    image::DynamicImage::ImageLuma8(m.clone())
        .into_rgb8()
        .save(masks.join("d.jpg"))
        .unwrap();
    let s = open(dir, 1);
    assert_eq!(s.num_masks(), 4);
    assert_eq!(s.mask_path(0), Some(masks.join("a.jpg.png").as_path()));
    assert_eq!(s.mask_path(1), Some(masks.join("b.png").as_path()));
    assert_eq!(s.mask_path(3), Some(masks.join("d.jpg").as_path()));
    let want: Vec<u8> = m
        .pixels()
        .map(|p| if p[0] >= 128 { 255 } else { 0 })
        .collect();
    for i in 0..4 {
        let v = s.load_view(i).unwrap();
        let mask = v.mask.as_ref().expect("mask");
        if i == 3 {
            // JPEG ringing only near the band edges.
            let wrong = mask.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert!(
                wrong < (w * h / 20) as usize,
                "{wrong} JPEG mask pixels off"
            );
        } else {
            assert_eq!(mask, &want, "view {i}");
        }
        assert!(
            mask.iter().all(|&v| v == 0 || v == 255),
            "binary at full size"
        );
        assert!(v.alpha.is_none(), "opaque or no alpha: none delivered");
        assert_eq!(v.rgb, s.load_image(i).unwrap());
    }

    // Downscale 3 (no images_3/): 40x20, the full-resolution mask area-resized: each output
    // pixel is the kept fraction of its 3x3 block; the bands are 30 pixels (10 output pixels)
    // wide, so the result is 0 or 255 exactly.
    let s3 = open(dir, 3);
    let v = s3.load_view(0).unwrap();
    assert_eq!((v.width, v.height), (40, 20));
    let mask = v.mask.unwrap();
    for y in 0..20 {
        for x in 0..40 {
            let want = if x < 20 { 0 } else { 255 };
            assert_eq!(mask[y * 40 + x], want, "({x},{y})");
        }
    }

    // A pre-downscaled images_3/ copy: the full-resolution mask is resized to its size.
    std::fs::create_dir_all(dir.join("images_3")).unwrap();
    rgb(41, 19, 10).save(dir.join("images_3/a.jpg")).unwrap();
    let s3 = open(dir, 3);
    let v = s3.load_view(0).unwrap();
    assert_eq!((v.width, v.height), (41, 19));
    let mask = v.mask.unwrap();
    assert_eq!(mask.len(), 41 * 19);
    assert!(mask[0] == 0 && mask[40] == 255);
    // A mask of the images_3 file's own size is taken as it is.
    let small =
        image::GrayImage::from_fn(41, 19, |x, _| image::Luma([if x > 5 { 255 } else { 0 }]));
    std::fs::remove_file(masks.join("a.jpg.png")).unwrap();
    small.save(masks.join("a.png")).unwrap(); // STEM.png
    let s3 = open(dir, 3);
    assert_eq!(s3.mask_path(0), Some(masks.join("a.png").as_path()));
    let mask = s3.load_view(0).unwrap().mask.unwrap();
    assert_eq!(mask, small.into_raw());
}

#[test]
fn malformed_masks_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (w, h) = (64u32, 48u32);
    colmap_scene(
        dir,
        w,
        h,
        &[
            ("a.png", rgb(w, h, 10)),
            ("b.jpg", rgb(w, h, 20)),
            ("c.png", rgb(w, h, 30)),
            ("d.png", rgb(w, h, 40)),
        ],
    );
    let masks = dir.join("masks");
    std::fs::create_dir_all(&masks).unwrap();
    // a: fine. b: missing. c: wrong size. d: corrupt bytes.
    mask_image(w, h).save(masks.join("a.png")).unwrap();
    mask_image(w / 2, h).save(masks.join("c.png")).unwrap();
    std::fs::write(masks.join("d.png"), b"\x89PNG\r\n\x1a\nnot really a png").unwrap();
    let s = no_panic("open", || open(dir, 1));
    assert_eq!(
        s.num_masks(),
        4,
        "every image gets a mask once masks/ exists"
    );
    assert!(s.load_view(0).unwrap().mask.is_some());
    expect_view_err(&s, 1, &["no mask for image 'b.jpg'", "b.jpg.png", "b.png"]);
    expect_view_err(&s, 2, &["c.png", "the mask is 32x48", "64x48"]);
    let msg = expect_view_err(&s, 3, &["d.png", "mask of image 'd.png'"]);
    assert!(msg.contains("masks"), "{msg}");
    // Truncated file: the first half of a valid PNG.
    let mut bytes = Vec::new();
    image::DynamicImage::ImageLuma8(mask_image(w, h))
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .unwrap();
    std::fs::write(masks.join("d.png"), &bytes[..bytes.len() / 2]).unwrap();
    expect_view_err(&s, 3, &["d.png", "mask of image 'd.png'"]);
    // The images themselves still load as RGB (load_image does not read masks).
    for i in 0..4 {
        assert_eq!(s.load_image(i).unwrap().len(), (w * h * 3) as usize);
    }
    // Downscaling does not make a wrong size acceptable.
    let s2 = open(dir, 2);
    expect_view_err(&s2, 2, &["c.png", "the mask is 32x48"]);
    // The cache reports mask errors from preload and get.
    let cache = ImageCache::new(Arc::new(s), u64::MAX);
    let err = cache.preload(&[0, 2]).unwrap_err().to_string();
    assert!(err.contains("c.png") && err.contains("mask"), "{err}");
    assert!(cache.get(1).unwrap_err().to_string().contains("b.jpg"));

    // transforms.json `mask_path`.
    let json = dir.join("transforms.json");
    let frame = |file: &str, mask: &str| {
        format!(
            r#"{{"file_path": "images/{file}", {mask} "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]}}"#
        )
    };
    let write = |frames: &[String]| {
        std::fs::write(
            &json,
            format!(
                r#"{{"fl_x": 100, "w": {w}, "h": {h}, "frames": [{}]}}"#,
                frames.join(",")
            ),
        )
        .unwrap()
    };
    write(&[
        frame("a.png", r#""mask_path": "masks/a.png","#),
        frame("b.jpg", ""),
        frame("c.png", r#""mask_path": "masks/nope.png","#),
        frame("d.png", r#""mask_path": null,"#),
    ]);
    let s = open(&json, 1);
    assert_eq!(s.num_masks(), 2);
    assert_eq!(s.mask_path(0), Some(masks.join("a.png").as_path()));
    assert!(s.mask_path(1).is_none() && s.mask_path(3).is_none());
    assert_eq!(
        s.load_view(0).unwrap().mask.unwrap().len(),
        (w * h) as usize
    );
    assert!(s.load_view(1).unwrap().mask.is_none());
    expect_view_err(
        &s,
        2,
        &["nope.png", "does not exist", "'mask_path' of frame 2"],
    );
    for bad in [
        r#""mask_path": 5,"#,
        r#""mask_path": "  ","#,
        r#""mask_path": ["a"],"#,
    ] {
        write(&[frame("a.png", bad)]);
        let err = match no_panic(bad, || open_scene(&json, &SceneOptions::default())) {
            Ok(_) => panic!("{bad} opened"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("transforms.json")
                && err.contains("'mask_path' must be a non-empty string"),
            "{err}"
        );
    }
}

/// Alpha and mask planes go through the same undistortion remap as the colours: an image
/// whose alpha encodes a function of the undistorted coordinates delivers that function
/// through the delivered pinhole intrinsics, and a mask split at the optical axis stays split
/// there.
#[test]
fn alpha_and_masks_are_undistorted_like_the_image() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let camera = PinholeCamera::new(220.0, 216.0, 121.3, 88.7, 240, 180);
    let dist = RadTanDistortion::new(-0.28, 0.09, 0.0012, -0.0021);
    let criteria = UndistortCriteria {
        max_iter: 100,
        epsilon: Some(1e-12),
    };
    let f = |x: f64, y: f64| 128.0 + 100.0 * (3.0 * x).sin() * (2.0 * y).cos();
    let normalised =
        |u: u32, v: u32| dist.undistort_pixel(&camera, &Vector2::new(u as f64, v as f64), criteria);
    let img = image::RgbaImage::from_fn(240, 180, |u, v| {
        let n = normalised(u, v);
        image::Rgba([90, 90, 90, f(n.x, n.y).round() as u8])
    });
    let mask = image::GrayImage::from_fn(240, 180, |u, v| {
        image::Luma([if normalised(u, v).x > 0.0 { 255 } else { 0 }])
    });
    std::fs::create_dir_all(dir.join("images")).unwrap();
    std::fs::create_dir_all(dir.join("masks")).unwrap();
    img.save(dir.join("images/frame.png")).unwrap();
    mask.save(dir.join("masks/frame.png")).unwrap();
    std::fs::write(
        dir.join("cameras.txt"),
        "1 OPENCV 240 180 220 216 121.3 88.7 -0.28 0.09 0.0012 -0.0021\n",
    )
    .unwrap();
    std::fs::write(dir.join("images.txt"), "1 1 0 0 0 0 0 0 1 frame.png\n\n").unwrap();
    for downscale in [1u32, 2] {
        let s = open(dir, downscale);
        assert!(s.is_undistorted(0));
        let v = &s.views[0].camera;
        let ViewImage {
            width,
            height,
            alpha,
            mask,
            ..
        } = s.load_view(0).unwrap();
        let (alpha, mask) = (alpha.unwrap(), mask.unwrap());
        assert_eq!(
            (alpha.len(), mask.len()),
            ((width * height) as usize, (width * height) as usize)
        );
        let (mut worst, mut mask_checked) = (0.0f64, 0);
        for y in 1..height - 1 {
            for x in 1..width - 1 {
                let (nx, ny) = ((x as f64 - v.cx) / v.fx, (y as f64 - v.cy) / v.fy);
                let p = (y * width + x) as usize;
                worst = worst.max((alpha[p] as f64 - f(nx, ny)).abs());
                // Four delivered pixels away from the split: fully kept or fully ignored.
                if nx.abs() > 4.0 / v.fx {
                    let want = if nx > 0.0 { 255 } else { 0 };
                    assert_eq!(mask[p], want, "/{downscale} ({x},{y}) nx {nx}");
                    mask_checked += 1;
                }
            }
        }
        eprintln!("/{downscale}: worst alpha error {worst:.2}");
        assert!(
            worst <= 3.0 * downscale as f64,
            "/{downscale}: alpha off by {worst}"
        );
        assert!(mask_checked > (width * height) as usize / 2);
    }
}
