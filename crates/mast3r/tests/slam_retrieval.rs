//! Loop closure and relocalisation by learned retrieval in the mono SLAM system, with the tiny
//! checkpoint and the retrieval head and codebook of `tests/fixtures/retrieval` (random
//! weights: the thresholds on match fractions are relaxed, what is checked is that retrieval
//! finds the revisited keyframe, the pair is decoded and the edge or relocalisation follows).

mod common;

use std::path::PathBuf;

use rust3r_io::datasets::DatasetKind;
use rust3r_mast3r::Precision;
use rust3r_mast3r::frontend::Mast3rMonoFrontEnd;
use rust3r_slam::{PointmapFrontEnd, SlamConfig, run_slam};

fn front_end() -> Mast3rMonoFrontEnd {
    common::tiny_front_end_with_retrieval()
}

/// An image folder holding redkitchen colour frames `frames`, in that order.
fn folder(frames: &[usize]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    for (j, i) in frames.iter().enumerate() {
        let src = rust3r_testdata::data("redkitchen").join(format!("frame-{i:06}.color.jpg"));
        std::fs::copy(src, dir.path().join(format!("{j:03}.jpg"))).unwrap();
    }
    let p = dir.path().to_path_buf();
    (dir, p)
}

/// The revisit retrieves the first keyframe, with the network in binary32 and in binary16 (the
/// head takes binary32 features either way: an f16 network once failed every query).
#[test]
fn retrieval_finds_the_revisited_keyframe() {
    let (_d, path) = folder(&[0, 20, 40, 0]);
    let data = rust3r_io::datasets::open(&path, Some(DatasetKind::ImageFolder), 1).unwrap();
    for precision in [Precision::F32, Precision::F16] {
        let mut fe = common::tiny_front_end_with_retrieval_in(precision);
        let pairs = fe.pairs().unwrap();
        for i in 0..3 {
            pairs.encode(i, &data.frame(i).unwrap()).unwrap();
            // Keyframe ids 10, 11, 12: the database maps its images back to them.
            pairs.retrieve(i, Some(10 + i), 3, 5e-3).unwrap().unwrap();
        }
        pairs.encode(3, &data.frame(3).unwrap()).unwrap();
        let found = pairs.retrieve(3, None, 3, 5e-3).unwrap().unwrap();
        assert_eq!(found.first(), Some(&10), "{precision:?}: {found:?}");
        // A query without `add_as` leaves the database as it was.
        assert_eq!(fe.retrieval_db(|db| db.len()).unwrap(), 3);
    }
}

#[test]
fn revisit_closes_a_loop_and_lost_frames_relocalise() {
    // Loop: every tracked frame becomes a keyframe; the revisit of frame 0 retrieves keyframe 0
    // and is verified on the decoded pair (match threshold relaxed for random weights). In turn
    // (`single_thread`) and with the queries on their own thread (the last keyframe's answer
    // is verified after the last frame).
    let (_d, path) = folder(&[0, 20, 40, 0]);
    let data = rust3r_io::datasets::open(&path, Some(DatasetKind::ImageFolder), 1).unwrap();
    for single_thread in [true, false] {
        let mut cfg = SlamConfig {
            single_thread,
            ..Default::default()
        };
        cfg.tracking.match_frac_thresh = 2.0;
        cfg.tracking.min_match_frac = 0.0;
        cfg.local_opt.min_match_frac = 0.0;
        let mut fe = front_end();
        let res = run_slam(data.as_ref(), &mut fe, &cfg, None, |_| {}).unwrap();
        let kfs: Vec<usize> = res.keyframes.frames.iter().map(|k| k.frame_index).collect();
        assert_eq!(kfs, vec![0, 1, 2, 3]);
        assert!(
            res.loop_closures >= 1,
            "single thread {single_thread}: no loop closure; edges {:?}",
            res.edges
        );
        assert!(
            res.edges.iter().any(|e| (e.i, e.j) == (0, 3)),
            "single thread {single_thread}: no loop edge 0-3: {:?}",
            res.edges
        );
        assert_eq!(res.relocalisations, 0);
        assert_eq!(fe.retrieval_db(|db| db.len()).unwrap(), 4);
    }

    // Relocalisation: every tracked frame is lost; frame 2 (frame 0 again) retrieves keyframe 0
    // and relocalises on it; frame 1, lost in between, gets no pose.
    let (_d, path) = folder(&[0, 20, 0]);
    let data = rust3r_io::datasets::open(&path, Some(DatasetKind::ImageFolder), 1).unwrap();
    let mut cfg = SlamConfig {
        single_thread: true,
        ..Default::default()
    };
    cfg.tracking.min_match_frac = 2.0;
    cfg.reloc.min_match_frac = 0.0;
    let mut fe = front_end();
    let res = run_slam(data.as_ref(), &mut fe, &cfg, None, |_| {}).unwrap();
    let tracked: Vec<bool> = res.frames.iter().map(|f| f.tracked).collect();
    assert_eq!(tracked, vec![true, false, true]);
    assert_eq!(res.relocalisations, 1);
    assert_eq!(res.keyframes.len(), 2);
    assert!(
        res.edges.iter().any(|e| (e.i, e.j) == (0, 1)),
        "{:?}",
        res.edges
    );
    // The relocalised keyframe joined the database.
    assert_eq!(fe.retrieval_db(|db| db.len()).unwrap(), 2);
}
