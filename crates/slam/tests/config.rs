//! Configuration: base.yaml defaults and YAML overrides.

use std::path::Path;

use rust3r_slam::config::{FusionMode, SlamConfig};

#[test]
fn defaults_are_mast3r_slam_base_yaml() {
    let c = SlamConfig::default();
    assert_eq!(
        (
            c.matching.max_iter,
            c.matching.lambda_init,
            c.matching.convergence_thresh
        ),
        (10, 1e-8, 1e-6)
    );
    assert_eq!(
        (
            c.matching.dist_thresh,
            c.matching.radius,
            c.matching.dilation_max
        ),
        (0.1, 3, 5)
    );
    let t = &c.tracking;
    assert_eq!(
        (t.min_match_frac, t.max_iters, t.c_conf, t.q_conf),
        (0.05, 50, 0.0, 1.5)
    );
    assert_eq!(
        (t.rel_error, t.delta_norm, t.huber, t.match_frac_thresh),
        (1e-3, 1e-3, 1.345, 0.333)
    );
    assert_eq!(
        (t.sigma_ray, t.sigma_dist, t.sigma_pixel, t.sigma_depth),
        (0.003, 10.0, 1.0, 10.0)
    );
    assert_eq!(
        (t.depth_eps, t.pixel_border, t.filtering_mode),
        (1e-6, -10.0, FusionMode::Weighted)
    );
    // rust3r switch: MASt3R-SLAM always tracks on network pairs.
    assert!(t.pairs);
    let l = &c.local_opt;
    assert_eq!(
        (
            l.pin,
            l.window_size,
            l.min_match_frac,
            l.max_iters,
            l.delta_norm
        ),
        (1, 1_000_000, 0.1, 10, 1e-8)
    );
    assert_eq!(
        (
            c.retrieval.k,
            c.retrieval.min_thresh,
            c.reloc.min_match_frac,
            c.reloc.strict
        ),
        (3, 5e-3, 0.3, true)
    );
}

#[test]
fn yaml_overrides_keys_and_rejects_unknown_ones() {
    let mut c = SlamConfig::rgbd();
    let text = "use_calib: True\ntracking:\n  max_iters: 7 # comment\n  pairs: False\n  filtering_mode: indep_conf\nlocal_opt:\n  window_size: 1e+6\n\nrgbd:\n  pyramid_levels: 2\n";
    c.apply_yaml(text, Path::new("my.yaml")).unwrap();
    assert_eq!(c.tracking.max_iters, 7);
    assert!(!c.tracking.pairs);
    assert_eq!(c.tracking.filtering_mode, FusionMode::IndepConf);
    assert_eq!(c.local_opt.window_size, 1_000_000);
    assert_eq!(c.rgbd.pyramid_levels, 2);
    // Frame-to-model tracking: off in the RGB-D defaults, set per key.
    assert_eq!(
        (c.tracking.model_keyframes, c.tracking.model_frames),
        (0, 0)
    );
    c.apply_yaml(
        "tracking:\n  model_keyframes: 3\n  model_frames: 4\n",
        Path::new("model.yaml"),
    )
    .unwrap();
    assert_eq!(
        (c.tracking.model_keyframes, c.tracking.model_frames),
        (3, 4)
    );
    let err = c
        .apply_yaml("tracking:\n  model_frames: -1\n", Path::new("bad.yaml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("bad.yaml:2") && err.contains("-1"), "{err}");
    let err = c
        .apply_yaml("tracking:\n  max_itres: 3\n", Path::new("bad.yaml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.yaml:2") && err.contains("max_itres"),
        "{err}"
    );
    let err = c
        .apply_yaml("tracking:\n  huber: abc\n", Path::new("bad.yaml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("abc"), "{err}");
    let err = SlamConfig::default()
        .apply_yaml_file(Path::new("/nonexistent/cfg.yaml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/cfg.yaml"), "{err}");
}
