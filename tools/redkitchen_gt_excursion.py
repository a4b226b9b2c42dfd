#!/usr/bin/env python3
"""How much a stretch of the 7-Scenes ground truth costs an estimate: the ground-truth positions
of frames a+1 .. b-1 are replaced by the straight line between frames a and b (rotations kept),
and the estimate's ATE (SE(3), positions, Umeyama without scale), the mean ATE of frames
400-449 / 450-499 and the worst relative translation error over 10 frames are printed against
the published and the straightened ground truth (docs/slam-rgbd.md, "Where the remaining error
is": frames 447-453 of redkitchen).

    pip install numpy scipy
    SEQUENCE_EVAL_TRAJECTORY=/tmp/traj.txt target/release/examples/sequence_eval \
        ../shared/data/redkitchen 500
    python3 tools/redkitchen_gt_excursion.py /tmp/traj.txt ../shared/data/redkitchen 446 454
"""
import sys

import numpy as np
from scipy.spatial.transform import Rotation

# The alignment of tools/pseudo_gt_ate.py (this folder is on the path when run as a script).
from pseudo_gt_ate import umeyama


def tum_to_matrix(row):
    t = np.eye(4)
    t[:3, :3] = Rotation.from_quat(row[4:8]).as_matrix()
    t[:3, 3] = row[1:4]
    return t


def straightened(gt, a, b):
    out = [g.copy() for g in gt]
    for i in range(a + 1, b):
        s = (i - a) / (b - a)
        out[i][:3, 3] = gt[a][:3, 3] * (1 - s) + gt[b][:3, 3] * s
    return out


def ate(est, gt):
    p = np.array([e[:3, 3] for e in est])
    q = np.array([g[:3, 3] for g in gt])
    _, r, t = umeyama(p, q, scale=False)
    err = np.linalg.norm((r @ p.T).T + t - q, axis=1)
    return np.sqrt((err**2).mean()), err


def rpe(est, gt, d=10):
    out = []
    for i in range(len(est) - d):
        re = np.linalg.inv(est[i]) @ est[i + d]
        rg = np.linalg.inv(gt[i]) @ gt[i + d]
        out.append(np.linalg.norm((np.linalg.inv(rg) @ re)[:3, 3]))
    return np.array(out)


def main():
    traj, root, a, b = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    est = [tum_to_matrix(r) for r in np.loadtxt(traj)]
    gt = [np.loadtxt(f"{root}/frame-{i:06d}.pose.txt") for i in range(len(est))]
    for name, g in [("published", gt), (f"{a + 1}-{b - 1} straightened", straightened(gt, a, b))]:
        total, err = ate(est, g)
        r = rpe(est, g)
        w = int(np.argmax(r))
        print(
            f"{name}: ATE {100 * total:.2f} cm; mean 400-449 / 450-499 "
            f"{100 * err[400:450].mean():.2f} / {100 * err[450:500].mean():.2f} cm; "
            f"worst RPE/10 {100 * r[w]:.2f} cm ({w}-{w + 10}); "
            f"worst from frame 300 {100 * r[300:].max():.2f} cm "
            f"({300 + int(np.argmax(r[300:]))}-{310 + int(np.argmax(r[300:]))})"
        )


if __name__ == "__main__":
    main()
