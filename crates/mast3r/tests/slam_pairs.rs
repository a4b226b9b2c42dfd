//! MASt3R-SLAM's pair tracking with the network in the loop: the tiny fixture checkpoint as the
//! front end of `rust3r_slam` on real redkitchen frames (random weights, so the geometry is
//! meaningless; what is checked is that the pair path runs, with the keyframe's cached
//! encoding, and gives finite poses).

mod common;

use rust3r_mast3r::frontend::Mast3rMonoFrontEnd;
use rust3r_slam::{FrameSource, PointmapFrontEnd, SlamConfig, run_slam, run_slam_source};

fn front_end(size: usize) -> Mast3rMonoFrontEnd {
    common::tiny_front_end(size)
}

#[test]
fn pair_decoding_reuses_encodings_and_agrees_with_the_network() {
    let data = rust3r_io::datasets::open(&rust3r_testdata::data("redkitchen"), None, 5).unwrap();
    let mut fe = front_end(224);
    let (f0, f1) = (data.frame(0).unwrap(), data.frame(1).unwrap());
    let pairs = fe
        .pairs()
        .expect("the tiny checkpoint has descriptor confidences");
    pairs.encode(0, &f0).unwrap();
    pairs.encode(1, &f1).unwrap();
    let pred = pairs.pair(1, 0).unwrap();
    pred.check().unwrap();
    assert_eq!(
        (pred.frame.width, pred.frame.height, pred.desc_dim),
        (224, 224, 24)
    );
    assert!(
        pred.frame_desc_conf
            .iter()
            .chain(&pred.keyframe_desc_conf)
            .all(|q| *q > 0.0 && q.is_finite())
    );
    assert!(
        pred.frame
            .conf
            .iter()
            .chain(&pred.keyframe_conf)
            .all(|c| *c >= 1.0 && c.is_finite())
    );
    // The pair is decode(frame, keyframe) of the two frames' encodings.
    let model = fe.model();
    let enc = |f: &rust3r_io::datasets::Frame| {
        let p = rust3r_mast3r::preprocess::preprocess(
            f.rgb.as_raw(),
            f.rgb.width() as usize,
            f.rgb.height() as usize,
            224,
        )
        .unwrap();
        model.encode(model.image_tensor(p.data, [1, 3, p.height, p.width]))
    };
    let [h1, h2] = model.decode(&enc(&f1), &enc(&f0));
    let (h1, h2) = (h1.to_host(), h2.to_host());
    let flat = |p: &[[f32; 3]]| p.iter().flatten().copied().collect::<Vec<f32>>();
    assert_eq!(flat(&pred.frame.points), h1.pts3d);
    assert_eq!(flat(&pred.keyframe_points), h2.pts3d);
    assert_eq!(
        (&pred.frame_desc, &pred.keyframe_desc_conf),
        (&h1.desc, &h2.desc_conf)
    );
    // The frame decoded with itself is the front end's mono pointmap.
    let pairs = fe.pairs().unwrap();
    let mono = pairs.mono(1).unwrap();
    assert_eq!(mono, fe.pointmap(&f1).unwrap());
    // Dropped encodings are an error naming the frame, not a panic.
    let pairs = fe.pairs().unwrap();
    pairs.retain(&[0]);
    let err = pairs.pair(1, 0).unwrap_err().to_string();
    assert!(err.contains("frame 1 is not encoded"), "{err}");
    assert!(pairs.mono(0).is_ok());
}

#[test]
fn slam_tracks_on_network_pairs() {
    let data = rust3r_io::datasets::open(&rust3r_testdata::data("redkitchen"), None, 5).unwrap();
    let frames = 3;
    let mut cfg = SlamConfig {
        single_thread: true,
        ..Default::default()
    };
    let mut fe = front_end(224);
    let res = run_slam(data.as_ref(), &mut fe, &cfg, Some(frames), |_| {}).unwrap();
    assert_eq!(res.frames.len(), frames);
    // Frame 0 starts the map; every later frame is tracked on a pair with its keyframe, unless
    // the previous one was lost (then it relocalises on its own pointmap).
    let relocalising = res.frames.windows(2).filter(|w| !w[0].tracked).count();
    assert_eq!(
        res.pair_frames,
        frames - 1 - relocalising,
        "{:?}",
        res.frames.iter().map(|f| f.tracked).collect::<Vec<_>>()
    );
    assert!(res.pair_frames >= 1);
    for (_, pose) in res.frame_poses() {
        assert!(
            pose.translation.iter().all(|v| v.is_finite())
                && pose.scale.is_finite()
                && pose.rotation.coords.iter().all(|v| v.is_finite())
        );
    }
    for kf in &res.keyframes.frames {
        assert!(kf.pointmap.points.iter().flatten().all(|v| v.is_finite()));
    }

    // With pair tracking switched off the same run tracks on mono pointmaps.
    cfg.tracking.pairs = false;
    let mut fe = front_end(224);
    let mono = run_slam(data.as_ref(), &mut fe, &cfg, Some(2), |_| {}).unwrap();
    assert_eq!((mono.pair_frames, mono.refined_matches), (0, 0));
    assert_eq!(mono.frames.len(), 2);
}

/// With the GPU tracker on the network's device (`set_tracker_device`), the pair's descriptors
/// stay on the device and are the host path's bit for bit; points, confidences and descriptor
/// confidences (read back in one packed transfer per view) are the host path's too; replaying
/// the next pair does not overwrite the descriptors handed out before. On another device (none
/// here), or with the tracker on the CPU, the descriptors come back to the host.
#[test]
fn pair_descriptors_stay_on_the_tracker_device() {
    let data = rust3r_io::datasets::open(&rust3r_testdata::data("redkitchen"), None, 5).unwrap();
    let gpu = rust3r_gpu::Gpu::default_device().unwrap();
    let (f0, f1, f2) = (
        data.frame(0).unwrap(),
        data.frame(1).unwrap(),
        data.frame(2).unwrap(),
    );
    let decode = |device: bool| {
        let mut fe = front_end(224);
        let pairs = fe.pairs().unwrap();
        if device {
            pairs.set_tracker_device(Some(&gpu));
        }
        pairs.encode(0, &f0).unwrap();
        pairs.encode(1, &f1).unwrap();
        pairs.encode(2, &f2).unwrap();
        let p1 = pairs.pair(1, 0).unwrap();
        let p2 = pairs.pair(2, 0).unwrap();
        (p1, p2)
    };
    let (h1, h2) = decode(false);
    let (d1, d2) = decode(true);
    assert!(h1.device_desc.is_none());
    for (h, d) in [(&h1, &d1), (&h2, &d2)] {
        assert!(d.descriptors_on_device_only(), "descriptors were read back");
        d.check().unwrap();
        assert_eq!(d.frame, h.frame);
        assert_eq!(d.keyframe_points, h.keyframe_points);
        assert_eq!(d.keyframe_conf, h.keyframe_conf);
        assert_eq!(d.frame_desc_conf, h.frame_desc_conf);
        assert_eq!(d.keyframe_desc_conf, h.keyframe_desc_conf);
        let back = d.clone().with_host_descriptors().unwrap();
        assert_eq!(back.frame_desc, h.frame_desc);
        assert_eq!(back.keyframe_desc, h.keyframe_desc);
        // The points left on the device for the tracker are the host's too.
        let dd = d.device_desc.as_ref().unwrap();
        let (fp, kp) = dd.points.as_ref().expect("points left on the device");
        let flat = |p: &[[f32; 3]]| p.iter().flatten().copied().collect::<Vec<f32>>();
        assert_eq!(gpu.read(fp).unwrap(), flat(&h.frame.points));
        assert_eq!(gpu.read(kp).unwrap(), flat(&h.keyframe_points));
    }
    // The two frames' descriptors differ, so the first read-back would have caught a replay
    // writing over the buffers handed out for the first pair.
    assert_ne!(h1.frame_desc, h2.frame_desc);
}

/// The bench's timing mode on the tiny network: every frame is tracked on its pair with the
/// keyframe (a keyframe every 3 frames), whatever random weights predict.
fn timing_config() -> SlamConfig {
    let mut cfg = SlamConfig {
        single_thread: true,
        forced_keyframe_every: 3,
        ..Default::default()
    };
    cfg.matching.dist_thresh = f64::MAX;
    cfg.tracking.q_conf = 0.0;
    cfg.tracking.min_match_frac = 0.0;
    cfg
}

/// Frames read and prepared for the network on a loader thread (`FrameSource::Pipelined`), with
/// the GPU tracker reading the pair's points and descriptors where the network left them, give
/// the trajectory, the keyframe pointmaps and the match counts of the same run with everything
/// on the tracking thread, each frame decoded after the previous one was tracked, and the pairs
/// read back and uploaded again (`FrameSource::Inline`, `descriptors_on_host`, no
/// `decode_ahead`), bit for bit; and the same as the GPU tracker on the device-resident pairs of
/// an inline run, with and without decoding ahead (the next frame decoded with the keyframe
/// while a frame is tracked on its own thread and stream, decoded again after a keyframe), and
/// with and without encoding the frame after it behind that decoding (`encode_ahead`).
#[test]
fn pipelined_frames_and_resident_pairs_track_as_inline() {
    let open = || rust3r_io::datasets::open(&rust3r_testdata::data("redkitchen"), None, 5).unwrap();
    let gpu = rust3r_gpu::Gpu::default_device().unwrap();
    // Keyframes 0 and 3: frame 4, decoded ahead with keyframe 0, is decoded again with 3.
    let frames = 5;
    let run = |pipelined: bool, host_pairs: bool, ahead: bool, encode_ahead: bool| {
        let cfg = SlamConfig {
            decode_ahead: ahead,
            encode_ahead,
            ..timing_config()
        };
        let mut fe = front_end(224);
        if host_pairs {
            fe = fe.descriptors_on_host();
        }
        let data = open();
        let source = if pipelined {
            // Two loader threads (frames alternate between them).
            FrameSource::Pipelined {
                datasets: vec![data, open()],
                front: &mut fe,
                ahead: 2,
            }
        } else {
            FrameSource::Inline {
                dataset: data.as_ref(),
                front: &mut fe,
            }
        };
        // `Inline` borrows the data set: run inside this closure's scope.
        run_slam_source(source, &cfg, Some(frames), Some(&gpu), |_| {}).unwrap()
    };
    let reference = run(false, true, false, false);
    assert_eq!(reference.pair_frames, frames - 1);
    assert!(reference.keyframes.frames.len() >= 2);
    assert_eq!(reference.timings.overlap_s, 0.0);
    for (pipelined, host_pairs, ahead, encode) in [
        (true, false, true, true),
        (false, false, true, true),
        (false, false, true, false),
        (true, true, true, true),
        (false, false, false, false),
    ] {
        let r = run(pipelined, host_pairs, ahead, encode);
        let what = format!(
            "pipelined {pipelined}, pairs on the host {host_pairs}, decode ahead {ahead}, encode ahead {encode}"
        );
        assert_eq!(r.timings.overlap_s > 0.0, ahead, "{what}: overlap");
        assert_eq!(r.frame_poses(), reference.frame_poses(), "{what}");
        assert_eq!(
            (r.pair_frames, r.refined_matches),
            (reference.pair_frames, reference.refined_matches),
            "{what}"
        );
        assert_eq!(r.keyframes.frames.len(), reference.keyframes.frames.len());
        for (a, b) in r.keyframes.frames.iter().zip(&reference.keyframes.frames) {
            assert_eq!(a.pointmap, b.pointmap, "{what}");
        }
        if pipelined {
            assert!(r.timings.prepare_s > 0.0, "{what}: nothing prepared ahead");
        }
    }
}

/// A prepared input that is not the front end's own network image is refused with an error
/// naming the frame, and the front end's preparer makes the input `encode` would.
#[test]
fn prepared_inputs_are_checked() {
    let data = rust3r_io::datasets::open(&rust3r_testdata::data("redkitchen"), None, 5).unwrap();
    let f0 = data.frame(0).unwrap();
    let mut fe = front_end(224);
    let pairs = fe.pairs().unwrap();
    let prep = pairs
        .preparer()
        .expect("the network prepares its input ahead");
    let err = pairs
        .encode_prepared(0, &f0, Some(Box::new(3u8)))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&f0.rgb_path.display().to_string()) && err.contains("prepared input"),
        "{err}"
    );
    pairs
        .encode_prepared(0, &f0, Some(prep(&f0).unwrap()))
        .unwrap();
    let ahead = pairs.mono(0).unwrap();
    let mut fe = front_end(224);
    let pairs = fe.pairs().unwrap();
    pairs.encode(0, &f0).unwrap();
    assert_eq!(ahead, pairs.mono(0).unwrap());
}

/// The network image uploaded as bytes and normalised on the device equals the one normalised
/// on the host, bit for bit: every byte value (in an image whose size is not a multiple of four
/// bytes) and a real preprocessed frame.
#[test]
fn byte_images_normalise_on_the_device_as_on_the_host() {
    let fe = front_end(224);
    let model = fe.model();
    let back = |t: burn::tensor::Tensor<4>| t.into_data().try_to_vec::<f32>().unwrap();
    let (w, h) = (13usize, 7usize);
    let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 7 % 256) as u8).collect();
    assert!((0..=255u8).all(|b| rgb.contains(&b)) && !rgb.len().is_multiple_of(4));
    let mut data = vec![0.0f32; rgb.len()];
    for (i, px) in rgb.chunks_exact(3).enumerate() {
        for c in 0..3 {
            data[c * w * h + i] = (px[c] as f32 / 255.0 - 0.5) / 0.5;
        }
    }
    let device = back(model.image_tensor_u8(&rgb, h, w));
    let host = back(model.image_tensor(data, [1, 3, h, w]));
    assert_eq!(
        device.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        host.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    let data = rust3r_io::datasets::open(&rust3r_testdata::data("redkitchen"), None, 5).unwrap();
    let f = data.frame(0).unwrap();
    let p = rust3r_mast3r::preprocess::preprocess(
        f.rgb.as_raw(),
        f.rgb.width() as usize,
        f.rgb.height() as usize,
        512,
    )
    .unwrap();
    assert_eq!(
        back(model.image_tensor_u8(&p.rgb, p.height, p.width)),
        back(model.image_tensor(p.data.clone(), [1, 3, p.height, p.width]))
    );
}
