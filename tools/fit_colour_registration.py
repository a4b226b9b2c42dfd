#!/usr/bin/env python3
"""Fits the colour camera of an RGB-D sequence whose colour is not registered to its depth
(Microsoft 7-Scenes) by aligning colour edges with depth edges.

Model (crates/io/src/datasets/register.rs): a depth pixel p with depth Z back-projects with the
depth calibration (585, 585, 320, 240) to X; the colour camera sees X + (b, 0, 0) through its own
pinhole (fx_c, fy_c, cx_c, cy_c). The score is the normalised correlation between the depth-edge
magnitude (of 1/Z) and the colour-edge magnitude resampled into the depth camera, averaged over
frames. Fitted on frames 0-299 (every 12th), reported on 300-499 (held out).

    pip install opencv-python-headless scipy numpy
    python3 tools/fit_colour_registration.py ../shared/data/redkitchen
"""
import sys

import cv2
import numpy as np
from scipy.optimize import minimize

FD, CXD, CYD = 585.0, 320.0, 240.0


def edges(img):
    gx = cv2.Sobel(img, cv2.CV_32F, 1, 0, ksize=3)
    gy = cv2.Sobel(img, cv2.CV_32F, 0, 1, ksize=3)
    return np.hypot(gx, gy)


def load(root, frames):
    out = []
    for f in frames:
        c = cv2.imread(f"{root}/frame-{f:06d}.color.jpg", 0).astype(np.float32)
        d = cv2.imread(f"{root}/frame-{f:06d}.depth.png", -1).astype(np.float32)
        valid = (d > 0) & (d < 65535)
        inv = np.where(valid, 1000.0 / np.maximum(d, 1), 0).astype(np.float32)
        ed = edges(cv2.GaussianBlur(inv, (3, 3), 0))
        ed[cv2.erode(valid.astype(np.uint8), np.ones((5, 5), np.uint8)) == 0] = 0
        ed /= ed.max() + 1e-9
        ec = edges(cv2.GaussianBlur(c, (3, 3), 0))
        ec /= ec.max()
        z = cv2.medianBlur(np.where(valid, d / 1000.0, 0).astype(np.float32), 5)
        z[z <= 0.1] = np.median(z[z > 0.1])
        out.append((ed, ec, z))
    return out


YY, XX = np.mgrid[0:480, 0:640].astype(np.float32)


def score(p, frames):
    fx, fy, cx, cy, b = p
    total = 0.0
    for ed, ec, z in frames:
        mx = (fx * ((XX - CXD) / FD + b / z) + cx).astype(np.float32)
        my = (fy * (YY - CYD) / FD + cy).astype(np.float32)
        w = cv2.remap(ec, mx, my, cv2.INTER_LINEAR)
        total += (w * ed).sum() / np.sqrt((w * w).sum() * (ed * ed).sum() + 1e-9)
    return total / len(frames)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/redkitchen"
    tune, held = load(root, range(0, 300, 12)), load(root, range(300, 500, 12))
    best = None
    for b0 in (-0.02, 0.0):
        r = minimize(lambda p: -score(p, tune), [527, 527, 315, 239, b0], method="Nelder-Mead",
                     options=dict(maxiter=400, xatol=1e-3, fatol=1e-5))
        if best is None or r.fun < best.fun:
            best = r
    fx, fy, cx, cy, b = best.x
    ident = [FD, FD, CXD, CYD, 0.0]
    print(f"colour camera fx {fx:.1f} fy {fy:.1f} cx {cx:.2f} cy {cy:.2f}, baseline {b:.4f} m")
    print(f"edge agreement, tuning frames: {score(best.x, tune):.3f} (unregistered {score(ident, tune):.3f})")
    print(f"edge agreement, held-out frames: {score(best.x, held):.3f} (unregistered {score(ident, held):.3f})")


if __name__ == "__main__":
    main()
