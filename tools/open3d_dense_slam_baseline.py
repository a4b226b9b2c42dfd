#!/usr/bin/env python3
"""Baseline for rust3r's RGB-D SLAM: Open3D's dense SLAM (frame-to-model tracking against a
TSDF voxel-block model, `open3d.t.pipelines.slam`, the settings of Open3D's own example
`examples/python/t_reconstruction_system/dense_slam.py`) on a 7-Scenes sequence, with the ATE
(SE(3)- and Sim(3)-aligned, evo) and the relative translation error per 10 frames.

    pip install open3d==0.20.0 evo
    python3 tools/open3d_dense_slam_baseline.py ../shared/data/redkitchen --frames 500 \
        --out /tmp/o3d_traj.txt [--device CUDA:0]

Writes the estimated trajectory (TUM format; timestamps = frame index / 30, as rust3r's
7-Scenes reader) and prints the figures.
"""
import argparse
import glob
import os
import time

import numpy as np
import open3d as o3d
import open3d.core as o3c
from scipy.spatial.transform import Rotation


def tum_line(t, m):
    q = Rotation.from_matrix(m[:3, :3]).as_quat()  # x y z w
    x, y, z = m[:3, 3]
    return f"{t:.6f} {x:.9f} {y:.9f} {z:.9f} {q[0]:.9f} {q[1]:.9f} {q[2]:.9f} {q[3]:.9f}\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sequence")
    ap.add_argument("--frames", type=int, default=None)
    ap.add_argument("--out", default="o3d_traj.txt")
    ap.add_argument("--device", default="CPU:0")
    ap.add_argument("--voxel-size", type=float, default=3.0 / 512)
    ap.add_argument("--depth-max", type=float, default=3.0)
    ap.add_argument("--depth-diff", type=float, default=0.07)
    args = ap.parse_args()

    colors = sorted(glob.glob(os.path.join(args.sequence, "frame-*.color.jpg")))
    depths = sorted(glob.glob(os.path.join(args.sequence, "frame-*.depth.png")))
    poses_gt = sorted(glob.glob(os.path.join(args.sequence, "frame-*.pose.txt")))
    n = len(depths) if args.frames is None else min(args.frames, len(depths))
    device = o3c.Device(args.device)
    intrinsic = o3c.Tensor([[585.0, 0, 320.0], [0, 585.0, 240.0], [0, 0, 1]], o3c.Dtype.Float64)
    depth_scale, depth_min, trunc = 1000.0, 0.1, 8.0
    T = o3c.Tensor(np.identity(4))
    model = o3d.t.pipelines.slam.Model(args.voxel_size, 16, 40000, T, device)
    ref = o3d.t.io.read_image(depths[0])
    frame = o3d.t.pipelines.slam.Frame(ref.rows, ref.columns, intrinsic, device)
    raycast = o3d.t.pipelines.slam.Frame(ref.rows, ref.columns, intrinsic, device)
    est = []
    start = time.time()
    for i in range(n):
        frame.set_data_from_image("depth", o3d.t.io.read_image(depths[i]).to(device))
        frame.set_data_from_image("color", o3d.t.io.read_image(colors[i]).to(device))
        if i > 0:
            r = model.track_frame_to_model(frame, raycast, depth_scale, args.depth_max, args.depth_diff)
            T = T @ r.transformation
        est.append(T.cpu().numpy())
        model.update_frame_pose(i, T)
        model.integrate(frame, depth_scale, args.depth_max, trunc)
        model.synthesize_model_frame(raycast, depth_scale, depth_min, args.depth_max, trunc, False)
    secs = time.time() - start
    with open(args.out, "w") as f:
        for i, m in enumerate(est):
            f.write(tum_line(i / 30.0, m))
    gt_path = args.out + ".gt.txt"
    with open(gt_path, "w") as f:
        for i in range(n):
            f.write(tum_line(i / 30.0, np.loadtxt(poses_gt[i])))

    from evo.core import metrics, sync
    from evo.tools import file_interface

    ref_t = file_interface.read_tum_trajectory_file(gt_path)
    est_t = file_interface.read_tum_trajectory_file(args.out)
    out = []
    for scale in (False, True):
        r, e = sync.associate_trajectories(ref_t, est_t)
        e = e.__class__(poses_se3=e.poses_se3, timestamps=e.timestamps)
        e.align(r, correct_scale=scale)
        ape = metrics.APE(metrics.PoseRelation.translation_part)
        ape.process_data((r, e))
        out.append(ape.get_statistic(metrics.StatisticsType.rmse))
    r, e = sync.associate_trajectories(ref_t, est_t)
    rpe = metrics.RPE(metrics.PoseRelation.translation_part, delta=10, delta_unit=metrics.Unit.frames, all_pairs=True)
    rpe.process_data((r, e))
    errs = rpe.error
    print(f"Open3D dense SLAM, {n} frames on {args.device}: {n / secs:.1f} FPS; ATE se3 {100 * out[0]:.2f} cm, sim3 {100 * out[1]:.2f} cm")
    for s in range(0, len(errs), 50):
        part = errs[s:s + 50]
        print(f"  frames {s:4d}-{s + len(part) - 1:4d}: RPE/10 max {100 * part.max():5.2f} cm, mean {100 * part.mean():5.2f} cm")


if __name__ == "__main__":
    main()
