#!/usr/bin/env python3
"""gsplat 1.5.3 baseline for `rust3r run` on the bundled 7-Scenes redkitchen (#22's benchmark).

What a user with ground truth would train: every frame except the held-out ones (frame i with
i % HOLD == HOLD // 2, i.e. every 20th from 10), at its ground-truth pose, with gsplat's standard
3DGS loop (the harness's train_bench.py: DefaultStrategy, Adam learning rates of 3DGS, loss
0.8 L1 + 0.2 (1 - SSIM), SH degree 3), starting from points back-projected from the sensor depth
of the training frames (coloured from the images), subsampled to --init-n.

Colour is registered to the depth camera exactly as rust3r's 7-Scenes reader does it
(crates/io/src/datasets/register.rs: colour camera fx 526.8, fy 529.9, cx 315.26, cy 239.24,
baseline -1.22 cm along x; pixels without depth use the frame's median depth; bilinear sampling),
so both sides train on and are scored against the same pixels, in the depth camera (fx = fy = 585,
cx 320, cy 240). Images are shrunk by --downscale with a box filter (PIL BOX), intrinsics scaled.

Evaluation as #22 defines it: each held-out frame is rendered at the pose interpolated halfway
between its neighbours' poses (here the ground truth of frames i-1 and i+1: slerp of the rotation,
lerp of the centre) and compared with its registered image: PSNR and SSIM (11x11 Gaussian window,
'valid'), renders clamped to [0, 1]. Usage (device machine, gsplat installed as in
../shared/bench/gsplat/device.sh):
    python3 tools/gsplat_redkitchen.py --data DIR --harness .ref/bench/gsplat --steps 2000 --downscale 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

DEPTH_K = (585.0, 585.0, 320.0, 240.0)
COLOUR_K = (526.8, 529.9, 315.26, 239.24)
BASELINE = (-0.0122, 0.0, 0.0)


def register(rgb: np.ndarray, depth_m: np.ndarray) -> np.ndarray:
    """Colour resampled into the depth camera (register.rs, vectorised)."""
    h, w = depth_m.shape
    valid = (depth_m > 0) & np.isfinite(depth_m)
    fallback = float(np.sort(depth_m[valid])[valid.sum() // 2]) if valid.any() else 2.0
    z = np.where(valid, depth_m, fallback).astype(np.float64)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    fx, fy, cx, cy = DEPTH_K
    xc = (xs - cx) / fx * z + BASELINE[0]
    yc = (ys - cy) / fy * z + BASELINE[1]
    zc = z + BASELINE[2]
    cfx, cfy, ccx, ccy = COLOUR_K
    with np.errstate(divide="ignore", invalid="ignore"):
        u = cfx * xc / zc + ccx
        v = cfy * yc / zc + ccy
    ch, cw = rgb.shape[:2]
    ok = (zc > 0) & (u >= 0) & (v >= 0) & (u <= cw - 1) & (v <= ch - 1)
    u = np.where(ok, u, 0.0)
    v = np.where(ok, v, 0.0)
    x0 = np.floor(u).astype(np.int64)
    y0 = np.floor(v).astype(np.int64)
    x1 = np.minimum(x0 + 1, cw - 1)
    y1 = np.minimum(y0 + 1, ch - 1)
    fxr = (u - x0)[..., None]
    fyr = (v - y0)[..., None]
    img = rgb.astype(np.float64)
    top = img[y0, x0] * (1 - fxr) + img[y0, x1] * fxr
    bottom = img[y1, x0] * (1 - fxr) + img[y1, x1] * fxr
    out = np.clip(np.round(top * (1 - fyr) + bottom * fyr), 0, 255).astype(np.uint8)
    out[~ok] = 0
    return out


def slerp_pose(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    from scipy.spatial.transform import Rotation, Slerp

    rots = Rotation.from_matrix(np.stack([a[:3, :3], b[:3, :3]]))
    out = np.eye(4)
    out[:3, :3] = Slerp([0.0, 1.0], rots)([t]).as_matrix()[0]
    out[:3, 3] = (1 - t) * a[:3, 3] + t * b[:3, 3]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="7-Scenes folder (frame-NNNNNN.{color.jpg,depth.png,pose.txt})")
    ap.add_argument("--harness", required=True, help="the gsplat harness folder (train_bench.py, common.py)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--downscale", type=int, default=4)
    ap.add_argument("--hold-out", type=int, default=20)
    ap.add_argument("--init-n", type=int, default=30000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.harness).resolve()))
    import torch
    from PIL import Image
    from gsplat import rasterization
    from gsplat.strategy import DefaultStrategy
    from common import SH_C0, knn_mean_dist  # noqa: F401
    from train_bench import ssim

    t_script = time.time()
    device = torch.device("cuda")
    torch.manual_seed(args.seed)
    data = Path(args.data)
    ids = sorted(int(p.name[6:12]) for p in data.glob("frame-*.color.jpg"))
    half = args.hold_out // 2
    held = [i for i in ids if args.hold_out and i % args.hold_out == half]
    train = [i for i in ids if i not in set(held)]
    ds = args.downscale
    images, poses, depths, full_reg = {}, {}, {}, {}
    for i in ids:
        rgb = np.asarray(Image.open(data / f"frame-{i:06d}.color.jpg").convert("RGB"))
        d = np.asarray(Image.open(data / f"frame-{i:06d}.depth.png")).astype(np.float64) / 1000.0
        d[d >= 65.535] = 0.0
        reg = register(rgb, d)
        full_reg[i] = reg
        if ds > 1:
            reg = np.asarray(Image.fromarray(reg).resize((640 // ds, 480 // ds), Image.BOX))
        images[i] = torch.tensor(reg, device=device)
        poses[i] = np.loadtxt(data / f"frame-{i:06d}.pose.txt").reshape(4, 4)
        depths[i] = d
    H, W = images[ids[0]].shape[:2]
    fx, fy, cx, cy = DEPTH_K
    K = torch.tensor([[fx / ds, 0, cx / ds], [0, fy / ds, cy / ds], [0, 0, 1]], dtype=torch.float32,
                     device=device)[None]

    def viewmat(c2w):
        return torch.tensor(np.linalg.inv(c2w), dtype=torch.float32, device=device)[None]

    # Depth-initialised points from the training frames, coloured from the registered images.
    rng = np.random.default_rng(args.seed)
    pts, cols = [], []
    for i in train:
        d = depths[i]
        full = full_reg[i]
        ys, xs = np.nonzero(d > 0)
        take = rng.choice(len(xs), size=min(len(xs), 4 * args.init_n // len(train) + 1), replace=False)
        xs, ys = xs[take], ys[take]
        z = d[ys, xs]
        cam = np.stack([(xs - cx) / fx * z, (ys - cy) / fy * z, z, np.ones_like(z)], 0)
        pts.append((poses[i] @ cam)[:3].T)
        cols.append(full[ys, xs] / 255.0)
    pts = np.concatenate(pts)
    cols = np.concatenate(cols)
    keep = rng.choice(len(pts), size=min(len(pts), args.init_n), replace=False)
    pts, cols = pts[keep], cols[keep]
    n = len(pts)
    means = torch.tensor(pts, dtype=torch.float32, device=device)
    dist = torch.tensor(knn_mean_dist(pts), dtype=torch.float32, device=device)
    params = torch.nn.ParameterDict({
        "means": torch.nn.Parameter(means),
        "scales": torch.nn.Parameter(torch.log(dist.clamp_min(1e-7))[:, None].repeat(1, 3)),
        "quats": torch.nn.Parameter(torch.tensor([[1.0, 0, 0, 0]], device=device).repeat(n, 1)),
        "opacities": torch.nn.Parameter(torch.logit(torch.full((n,), 0.1, device=device))),
        "sh0": torch.nn.Parameter(((torch.tensor(cols, dtype=torch.float32, device=device) - 0.5) / SH_C0)[:, None]),
        "shN": torch.nn.Parameter(torch.zeros(n, 15, 3, device=device)),
    })
    centres = np.stack([poses[i][:3, 3] for i in train])
    scene_scale = 1.1 * float(np.linalg.norm(centres - centres.mean(0), axis=1).max())
    lrs = {"means": 1.6e-4 * scene_scale, "scales": 5e-3, "quats": 1e-3, "opacities": 5e-2,
           "sh0": 2.5e-3, "shN": 2.5e-3 / 20}
    opts = {k: torch.optim.Adam([{"params": params[k], "lr": lr, "name": k}], eps=1e-15) for k, lr in lrs.items()}
    gamma = 0.01 ** (1.0 / 30000)
    strategy = DefaultStrategy()
    state = strategy.initialize_state(scene_scale=scene_scale)
    strategy.check_sanity(params, opts)
    vms = {i: viewmat(poses[i]) for i in ids}

    def render(vm, sh_deg):
        colors = torch.cat([params["sh0"], params["shN"]], 1)
        return rasterization(params["means"], params["quats"], torch.exp(params["scales"]),
                             torch.sigmoid(params["opacities"]), colors, vm, K, W, H, sh_degree=sh_deg,
                             packed=False, absgrad=False, rasterize_mode="classic")  # black background

    torch.cuda.reset_peak_memory_stats()
    torch.cuda.synchronize()
    t0 = time.time()
    order = []
    for step in range(args.steps):
        if not order:
            order = list(rng.permutation(train))
        i = int(order.pop())
        out, _, info = render(vms[i], min(step // 1000, 3))
        pred = out.permute(0, 3, 1, 2)
        gt = images[i].float().div(255).permute(2, 0, 1)[None]
        loss = 0.8 * (pred - gt).abs().mean() + 0.2 * (1.0 - ssim(pred, gt, padding="same"))
        strategy.step_pre_backward(params, opts, state, step, info)
        loss.backward()
        for o in opts.values():
            o.step()
            o.zero_grad(set_to_none=True)
        opts["means"].param_groups[0]["lr"] = lrs["means"] * gamma ** (step + 1)
        strategy.step_post_backward(params, opts, state, step, info)
    torch.cuda.synchronize()
    train_s = time.time() - t0

    per = []
    with torch.no_grad():
        for i in held:
            if i - 1 not in poses or i + 1 not in poses:
                continue
            c2w = slerp_pose(poses[i - 1], poses[i + 1], 0.5)
            out, _, _ = render(viewmat(c2w), 3)
            pred = out[0].clamp(0, 1).permute(2, 0, 1)[None]
            gt = images[i].float().div(255).permute(2, 0, 1)[None]
            psnr = float(-10 * torch.log10(torch.mean((pred - gt) ** 2)))
            per.append({"frame": i, "psnr": psnr, "ssim": float(ssim(pred, gt, padding="valid"))})
    res = {
        "what": "gsplat 1.5.3, ground-truth poses, depth-initialised points",
        "args": vars(args), "train_frames": len(train), "held_out": len(per), "width": W, "height": H,
        "init_gaussians": n, "gaussians": int(len(params["means"])), "train_s": train_s,
        "peak_alloc_gib": torch.cuda.max_memory_allocated() / 2**30,
        "psnr": float(np.mean([p["psnr"] for p in per])), "ssim": float(np.mean([p["ssim"] for p in per])),
        "per_frame": per, "script_s": time.time() - t_script,
    }
    print(f"gsplat redkitchen {W}x{H} {args.steps} steps: held-out PSNR {res['psnr']:.3f} SSIM {res['ssim']:.4f} "
          f"({len(per)} frames), train {train_s:.1f}s, {res['gaussians']:,} Gaussians, "
          f"peak {res['peak_alloc_gib']:.2f} GiB", flush=True)
    Path(args.json or f"gsplat_redkitchen_{W}x{H}_{args.steps}.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
