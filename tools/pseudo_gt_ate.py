#!/usr/bin/env python3
"""ATE of RGB-D SLAM trajectories on 7-Scenes against an independent ground truth.

7-Scenes' published poses ("D-SLAM" pseudo ground truth) come from KinectFusion on the same
depth images a depth SLAM tracks. Brachmann et al. ("On the Limits of Pseudo Ground Truth in
Visual Camera Re-Localization", ICCV 2021) re-estimated every frame's pose by structure from
motion on the colour images (COLMAP); their files are in
https://github.com/tsattler/visloc_pseudo_gt_limitations (`pgt/sfm/7scenes/<scene>_train.txt`,
one line per image: `seq-XX/frame-NNNNNN.color.png qw qx qy qz tx ty tz f`, world to camera,
released under 7-Scenes' licence). This script scores trajectories against both:

    python3 tools/pseudo_gt_ate.py ../shared/data/redkitchen redkitchen_train.txt seq-01 \
        out/trajectory.txt [more trajectories...] [--frames 500]

Each trajectory (TUM: `time tx ty tz qx qy qz qw`, camera to world, as `rust3r slam` writes;
frame index = time x `--rate`, 30 for 7-Scenes)
and the published poses are scored against the SfM poses. The SfM poses are of the colour
camera, the others of the depth camera (1-3 cm apart on a Kinect), so every comparison with
them fits, besides the Sim(3) / SE(3) alignment, one constant offset of the camera centre in
the camera's own frame (3 numbers, the same for all frames); the printed offset says how far
the two cameras' centres are. Comparisons between two depth-camera trajectories fit no offset.
"""
import argparse
import re
import sys

import numpy as np
from scipy.optimize import least_squares
from scipy.spatial.transform import Rotation


def published(data, frames):
    poses = {}
    for i in range(frames):
        try:
            m = np.loadtxt(f"{data}/frame-{i:06d}.pose.txt")
        except OSError:
            continue
        if np.all(np.isfinite(m)) and abs(m[3, 3] - 1) < 1e-6:
            poses[i] = (m[:3, :3], m[:3, 3])
    return poses


def sfm(path, seq, frames):
    poses = {}
    pat = re.compile(rf"^{re.escape(seq)}/frame-(\d+)\.color\.png$")
    with open(path) as f:
        for line in f:
            p = line.split()
            m = pat.match(p[0]) if p else None
            if not m or int(m.group(1)) >= frames:
                continue
            qw, qx, qy, qz, tx, ty, tz = map(float, p[1:8])
            r_wc = Rotation.from_quat([qx, qy, qz, qw]).as_matrix()  # world -> camera
            t = np.array([tx, ty, tz])
            poses[int(m.group(1))] = (r_wc.T, -r_wc.T @ t)  # camera -> world
    return poses


def tum(path, frames, rate):
    poses = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) != 8 or p[0].startswith("#"):
                continue
            i = int(round(float(p[0]) * rate))
            if i < frames:
                tx, ty, tz, qx, qy, qz, qw = map(float, p[1:])
                poses[i] = (Rotation.from_quat([qx, qy, qz, qw]).as_matrix(), np.array([tx, ty, tz]))
    return poses


def umeyama(x, y, scale):
    """s, R, t minimising |s R x + t - y|^2 (x, y: n x 3)."""
    mx, my = x.mean(0), y.mean(0)
    xc, yc = x - mx, y - my
    u, d, vt = np.linalg.svd(yc.T @ xc / len(x))
    s_ = np.eye(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        s_[2, 2] = -1
    r = u @ s_ @ vt
    s = (d * np.diag(s_)).sum() / xc.var(0).sum() if scale else 1.0
    return s, r, my - s * r @ mx


def ate(est, ref, scale, offset):
    """RMS position error (m) after alignment; with `offset`, est's camera centres move by one
    constant vector in the camera frame (fitted jointly). Returns (rmse, offset, n)."""
    ids = sorted(set(est) & set(ref))
    rs = np.array([est[i][0] for i in ids])
    p = np.array([est[i][1] for i in ids])
    q = np.array([ref[i][1] for i in ids])
    if not offset:
        s, r, t = umeyama(p, q, scale)
        e = (s * (r @ p.T)).T + t - q
        return np.sqrt((e**2).sum(1).mean()), np.zeros(3), len(ids)

    def res(o):
        pc = p + np.einsum("nij,j->ni", rs, o)
        s, r, t = umeyama(pc, q, scale)
        return ((s * (r @ pc.T)).T + t - q).ravel()

    sol = least_squares(res, np.zeros(3))
    e = sol.fun.reshape(-1, 3)
    return np.sqrt((e**2).sum(1).mean()), sol.x, len(ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="7-Scenes sequence folder (frame-NNNNNN.pose.txt)")
    ap.add_argument("sfm", help="SfM pseudo ground truth file (<scene>_train.txt or _test.txt)")
    ap.add_argument("seq", help="sequence prefix in that file, e.g. seq-01")
    ap.add_argument("trajectories", nargs="*", help="TUM trajectories to score")
    ap.add_argument("--frames", type=int, default=500)
    ap.add_argument("--rate", type=float, default=30.0, help="frames per second of the TUM times")
    a = ap.parse_args()
    gt = published(a.data, a.frames)
    sf = sfm(a.sfm, a.seq, a.frames)
    if not sf:
        sys.exit(f"{a.sfm}: no poses of {a.seq}/frame-*.color.png below frame {a.frames}")
    rows = [("published (D-SLAM)", gt)] + [(t, tum(t, a.frames, a.rate)) for t in a.trajectories]
    print(f"frames 0-{a.frames - 1}: {len(gt)} published poses, {len(sf)} SfM poses")
    print("| trajectory | vs published SE(3) / Sim(3) | vs SfM SE(3) / Sim(3), no offset | with the offset | colour-camera offset (fit) |")
    print("|---|---|---|---|---|")
    for name, tr in rows:
        if name.startswith("published"):
            pub = "-"
        else:
            pub = f"{ate(tr, gt, False, False)[0] * 100:.2f} / {ate(tr, gt, True, False)[0] * 100:.2f} cm"
        e0, _, _ = ate(tr, sf, False, False)
        s0, _, _ = ate(tr, sf, True, False)
        e3, off, n = ate(tr, sf, False, True)
        s3, _, _ = ate(tr, sf, True, True)
        print(f"| {name} ({n} frames) | {pub} | {e0 * 100:.2f} / {s0 * 100:.2f} cm | {e3 * 100:.2f} / {s3 * 100:.2f} cm | "
              f"{off[0] * 100:.1f}, {off[1] * 100:.1f}, {off[2] * 100:.1f} cm |")


if __name__ == "__main__":
    main()
