//! ATE against evo reference numbers.
//!
//! Reference values were produced with evo 1.38.1 (`pip install evo`), run in
//! /work/shared/data/trajectories with `--save_results <name>.zip` appended
//! to each command listed below; the literals are the full-precision
//! `stats.json` values, the matched-pose count is the length of
//! `error_array.npy` and the Sim(3) scale is `cbrt(det)` of the rotation block
//! of `alignment_transformation_sim3.npy`.

use std::path::PathBuf;

use rust3r_slam::{Align, AteReport, eval_ate};

fn data(name: &str) -> PathBuf {
    rust3r_testdata::data("trajectories").join(name)
}

/// evo statistics: rmse, mean, median, std, max, min, matched poses, scale.
struct Expected {
    rmse: f64,
    mean: f64,
    median: f64,
    std: f64,
    max: f64,
    min: f64,
    matched: usize,
    scale: f64,
}

fn check(est: &str, gt: &str, align: Align, e: Expected) -> AteReport {
    let r = eval_ate(&data(est), &data(gt), align).unwrap_or_else(|err| panic!("{err}"));
    let tol = 1e-5;
    let what = format!("{est} vs {gt} ({align})");
    assert_eq!(r.num_matched, e.matched, "{what}: matched poses");
    assert!(
        (r.rmse - e.rmse).abs() < tol,
        "{what}: rmse {} vs evo {}",
        r.rmse,
        e.rmse
    );
    assert!(
        (r.mean - e.mean).abs() < tol,
        "{what}: mean {} vs evo {}",
        r.mean,
        e.mean
    );
    assert!(
        (r.median - e.median).abs() < tol,
        "{what}: median {} vs evo {}",
        r.median,
        e.median
    );
    assert!(
        (r.std - e.std).abs() < tol,
        "{what}: std {} vs evo {}",
        r.std,
        e.std
    );
    assert!(
        (r.max - e.max).abs() < tol,
        "{what}: max {} vs evo {}",
        r.max,
        e.max
    );
    assert!(
        (r.min - e.min).abs() < tol,
        "{what}: min {} vs evo {}",
        r.min,
        e.min
    );
    assert!(
        (r.scale - e.scale).abs() < 1e-6,
        "{what}: scale {} vs evo {}",
        r.scale,
        e.scale
    );
    // in practice the agreement is far tighter than the 1e-5 m requirement
    assert!(
        (r.rmse - e.rmse).abs() < 1e-9,
        "{what}: rmse {} vs evo {}",
        r.rmse,
        e.rmse
    );
    r
}

// ---------------------------------------------------------------- fr2/desk ORB

#[test]
fn fr2_desk_orb_none() {
    // evo_ape tum fr2_desk_groundtruth.txt fr2_desk_ORB.txt
    check(
        "fr2_desk_ORB.txt",
        "fr2_desk_groundtruth.txt",
        Align::None,
        Expected {
            rmse: 3.17399354190223,
            mean: 2.9496938875994747,
            median: 2.594642464975095,
            std: 1.1719816438389132,
            max: 5.066735062280106,
            min: 1.4603442833644174,
            matched: 2174,
            scale: 1.0,
        },
    );
}

#[test]
fn fr2_desk_orb_se3() {
    // evo_ape tum fr2_desk_groundtruth.txt fr2_desk_ORB.txt -a
    check(
        "fr2_desk_ORB.txt",
        "fr2_desk_groundtruth.txt",
        Align::Se3,
        Expected {
            rmse: 0.008118977562044926,
            mean: 0.0074917768702161495,
            median: 0.007414629829316952,
            std: 0.00312906950703932,
            max: 0.024299593694385276,
            min: 0.0003496361984068482,
            matched: 2174,
            scale: 1.0,
        },
    );
}

#[test]
fn fr2_desk_orb_sim3() {
    // evo_ape tum fr2_desk_groundtruth.txt fr2_desk_ORB.txt -as
    check(
        "fr2_desk_ORB.txt",
        "fr2_desk_groundtruth.txt",
        Align::Sim3,
        Expected {
            rmse: 0.006123163030157264,
            mean: 0.00558619731870614,
            median: 0.005305225075852613,
            std: 0.002507493770752984,
            max: 0.021476785562788304,
            min: 0.0001897958096088303,
            matched: 2174,
            scale: 0.9969698308032565,
        },
    );
}

// ------------------------------------------------------ fr2/desk ORB mono (KF)

#[test]
fn fr2_desk_orb_kf_mono_none() {
    // evo_ape tum fr2_desk_groundtruth.txt fr2_desk_ORB_kf_mono.txt
    check(
        "fr2_desk_ORB_kf_mono.txt",
        "fr2_desk_groundtruth.txt",
        Align::None,
        Expected {
            rmse: 2.3738829047911167,
            mean: 2.2686993293991407,
            median: 2.415295317233584,
            std: 0.6988014012889509,
            max: 3.377261086167217,
            min: 0.9076457108868196,
            matched: 118,
            scale: 1.0,
        },
    );
}

#[test]
fn fr2_desk_orb_kf_mono_se3() {
    // evo_ape tum fr2_desk_groundtruth.txt fr2_desk_ORB_kf_mono.txt -a
    check(
        "fr2_desk_ORB_kf_mono.txt",
        "fr2_desk_groundtruth.txt",
        Align::Se3,
        Expected {
            rmse: 0.9390492628342705,
            mean: 0.9169908762115202,
            median: 0.9212130012115443,
            std: 0.20233944492959063,
            max: 1.411524442034499,
            min: 0.5316000522870523,
            matched: 118,
            scale: 1.0,
        },
    );
}

#[test]
fn fr2_desk_orb_kf_mono_sim3() {
    // evo_ape tum fr2_desk_groundtruth.txt fr2_desk_ORB_kf_mono.txt -as
    check(
        "fr2_desk_ORB_kf_mono.txt",
        "fr2_desk_groundtruth.txt",
        Align::Sim3,
        Expected {
            rmse: 0.007729264783424068,
            mean: 0.007103615951625619,
            median: 0.007099822211333756,
            std: 0.003046337884097819,
            max: 0.015688557595242313,
            min: 0.0012163596984312017,
            matched: 118,
            scale: 2.2280217535893287,
        },
    );
}

// -------------------------------------------------------------- fr1/xyz pairs

#[test]
fn fr1_xyz_orb_kf_mono() {
    // evo_ape tum freiburg1_xyz-groundtruth.txt freiburg1_xyz-ORB_kf_mono.txt
    check(
        "freiburg1_xyz-ORB_kf_mono.txt",
        "freiburg1_xyz-groundtruth.txt",
        Align::None,
        Expected {
            rmse: 2.025141545687368,
            mean: 2.0236645535549287,
            median: 2.0016708774530043,
            std: 0.07733081374428134,
            max: 2.1762458585185933,
            min: 1.8959225974436535,
            matched: 32,
            scale: 1.0,
        },
    );
    // evo_ape tum freiburg1_xyz-groundtruth.txt freiburg1_xyz-ORB_kf_mono.txt -a
    check(
        "freiburg1_xyz-ORB_kf_mono.txt",
        "freiburg1_xyz-groundtruth.txt",
        Align::Se3,
        Expected {
            rmse: 0.024301632277621003,
            mean: 0.022598292987352643,
            median: 0.021090778176947957,
            std: 0.008937923999144282,
            max: 0.04273479767682471,
            min: 0.005640417727587571,
            matched: 32,
            scale: 1.0,
        },
    );
    // evo_ape tum freiburg1_xyz-groundtruth.txt freiburg1_xyz-ORB_kf_mono.txt -as
    check(
        "freiburg1_xyz-ORB_kf_mono.txt",
        "freiburg1_xyz-groundtruth.txt",
        Align::Sim3,
        Expected {
            rmse: 0.009754581898685118,
            mean: 0.008218698588816626,
            median: 0.007909070259951256,
            std: 0.0052540328819240326,
            max: 0.02792400173407602,
            min: 0.0018768480970276604,
            matched: 32,
            scale: 1.1056223637370346,
        },
    );
}

#[test]
fn fr1_xyz_rgbdslam() {
    // evo_ape tum freiburg1_xyz-groundtruth.txt freiburg1_xyz-rgbdslam.txt
    check(
        "freiburg1_xyz-rgbdslam.txt",
        "freiburg1_xyz-groundtruth.txt",
        Align::None,
        Expected {
            rmse: 0.020079418378506592,
            mean: 0.01806251843069654,
            median: 0.016517756173282164,
            std: 0.008770887660884508,
            max: 0.04328943388403233,
            min: 0.0012561023047507462,
            matched: 785,
            scale: 1.0,
        },
    );
    // evo_ape tum freiburg1_xyz-groundtruth.txt freiburg1_xyz-rgbdslam.txt -a
    check(
        "freiburg1_xyz-rgbdslam.txt",
        "freiburg1_xyz-groundtruth.txt",
        Align::Se3,
        Expected {
            rmse: 0.013470088849733684,
            mean: 0.012024498709110237,
            median: 0.011183186775061079,
            std: 0.0060708092058905936,
            max: 0.03475954589500906,
            min: 0.0009550461813175756,
            matched: 785,
            scale: 1.0,
        },
    );
    // evo_ape tum freiburg1_xyz-groundtruth.txt freiburg1_xyz-rgbdslam.txt -as
    check(
        "freiburg1_xyz-rgbdslam.txt",
        "freiburg1_xyz-groundtruth.txt",
        Align::Sim3,
        Expected {
            rmse: 0.013389384904168201,
            mean: 0.011986889624888909,
            median: 0.011133899090810936,
            std: 0.005965744315062285,
            max: 0.034846144852261104,
            min: 0.000732706705229249,
            matched: 785,
            scale: 1.0080013899313376,
        },
    );
}

#[test]
fn fr1_xyz_rgbdslam_drift() {
    // evo_ape tum freiburg1_xyz-groundtruth.txt freiburg1_xyz-rgbdslam_drift.txt
    check(
        "freiburg1_xyz-rgbdslam_drift.txt",
        "freiburg1_xyz-groundtruth.txt",
        Align::None,
        Expected {
            rmse: 0.1341854204892675,
            mean: 0.12298561737556277,
            median: 0.12653056052590608,
            std: 0.053668100307661386,
            max: 0.249332053412713,
            min: 0.0012561023047507462,
            matched: 785,
            scale: 1.0,
        },
    );
    // evo_ape tum freiburg1_xyz-groundtruth.txt freiburg1_xyz-rgbdslam_drift.txt -a
    check(
        "freiburg1_xyz-rgbdslam_drift.txt",
        "freiburg1_xyz-groundtruth.txt",
        Align::Se3,
        Expected {
            rmse: 0.013470118951368286,
            mean: 0.012024516062202239,
            median: 0.011183137957357155,
            std: 0.006070841624836824,
            max: 0.03475989717409255,
            min: 0.0009555203012449429,
            matched: 785,
            scale: 1.0,
        },
    );
    // evo_ape tum freiburg1_xyz-groundtruth.txt freiburg1_xyz-rgbdslam_drift.txt -as
    check(
        "freiburg1_xyz-rgbdslam_drift.txt",
        "freiburg1_xyz-groundtruth.txt",
        Align::Sim3,
        Expected {
            rmse: 0.013389416164851113,
            mean: 0.011986907749897155,
            median: 0.011133736392279863,
            std: 0.005965778057473459,
            max: 0.034846485997036776,
            min: 0.0007331965391188692,
            matched: 785,
            scale: 1.0080013413255458,
        },
    );
}

// ------------------------------------------------------------ EuRoC V1_02

#[test]
fn euroc_v102() {
    // evo_ape euroc V102_groundtruth.csv V102.txt
    check(
        "V102.txt",
        "V102_groundtruth.csv",
        Align::None,
        Expected {
            rmse: 2.5541740462181335,
            mean: 2.5072878884642713,
            median: 2.377860678157887,
            std: 0.4871473111233262,
            max: 3.6551520318116726,
            min: 1.7521054261676152,
            matched: 798,
            scale: 1.0,
        },
    );
    // evo_ape euroc V102_groundtruth.csv V102.txt -a
    check(
        "V102.txt",
        "V102_groundtruth.csv",
        Align::Se3,
        Expected {
            rmse: 0.09172711520685745,
            mean: 0.08152162194619841,
            median: 0.07791194901949514,
            std: 0.04204864824739554,
            max: 0.2558167338139711,
            min: 0.0026199870973829826,
            matched: 798,
            scale: 1.0,
        },
    );
    // evo_ape euroc V102_groundtruth.csv V102.txt -as
    let r = check(
        "V102.txt",
        "V102_groundtruth.csv",
        Align::Sim3,
        Expected {
            rmse: 0.08384138804295287,
            mean: 0.07484108478263368,
            median: 0.07194517866622556,
            std: 0.03779140613324193,
            max: 0.2266517923827704,
            min: 0.007000290579423439,
            matched: 798,
            scale: 0.9796982521745785,
        },
    );
    assert_eq!(r.num_reference, 16702);
    assert_eq!(r.num_estimate, 807);
    assert!((r.alignment.scale - r.scale).abs() < 1e-12);
}

/// RPE over 10 frames, translation part, all pairs, against evo 1.38.1:
/// `metrics.RPE(PoseRelation.translation_part, delta=10, delta_unit=Unit.frames, all_pairs=True)`
/// on `sync.associate_trajectories(groundtruth, estimate, max_diff=0.01)`.
#[test]
fn relative_errors_match_evo_rpe() {
    let gt = rust3r_slam::read_trajectory(data("freiburg1_xyz-groundtruth.txt")).unwrap();
    let est = rust3r_slam::read_trajectory(data("freiburg1_xyz-rgbdslam_drift.txt")).unwrap();
    let e = rust3r_slam::relative_translation_errors(&est, &gt, 10, 0.01).unwrap();
    let v: Vec<f64> = e.iter().map(|x| x.1).collect();
    assert_eq!(v.len(), 775);
    let rmse = (v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64).sqrt();
    let max = v.iter().copied().fold(
        f64::NEG_INFINITY,
        |a, b| if b.is_nan() || b > a { b } else { a },
    );
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    for (got, want, what) in [
        (rmse, 0.014040694883947975, "rmse"),
        (max, 0.04802324920295407, "max"),
        (mean, 0.012023436849269415, "mean"),
        (v[0], 0.004676313940816796, "first"),
        (v[774], 0.0015664153514319391, "last"),
    ] {
        assert!((got - want).abs() < 1e-9, "RPE {what}: {got} vs evo {want}");
    }
    assert!(rust3r_slam::relative_translation_errors(&est, &gt, 0, 0.01).is_err());
}
