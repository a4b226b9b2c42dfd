//! MASt3R-SLAM's pair tracking with the network in the loop: the tiny fixture checkpoint as the
//! front end of `rust3r_slam` on real redkitchen frames (random weights, so the geometry is
//! meaningless; what is checked is that the pair path runs, with the keyframe's cached
//! encoding, and gives finite poses).

mod common;

use rust3r_mast3r::frontend::Mast3rMonoFrontEnd;
use rust3r_slam::{PointmapFrontEnd, SlamConfig, run_slam};

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
    let frames = 4;
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
    let mono = run_slam(data.as_ref(), &mut fe, &cfg, Some(frames), |_| {}).unwrap();
    assert_eq!((mono.pair_frames, mono.refined_matches), (0, 0));
    assert_eq!(mono.frames.len(), frames);
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
    }
    // The two frames' descriptors differ, so the first read-back would have caught a replay
    // writing over the buffers handed out for the first pair.
    assert_ne!(h1.frame_desc, h2.frame_desc);
}
