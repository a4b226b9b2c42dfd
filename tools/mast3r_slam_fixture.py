#!/usr/bin/env python3
"""Parity fixtures for rust3r's MASt3R-SLAM algorithms (crates/slam: matching.rs, pair.rs /
tracker.rs, backend.rs), made by the upstream code of rmurai0610/MASt3R-SLAM itself:

* matching: `mast3r_slam/matching.py` `match_iterative_proj` (ray image with `img_gradient`,
  the CUDA kernels `iter_proj` and `refine_matches` of `backend/src/matching_kernels.cu`, the
  occlusion check) on a pair of pointmaps and descriptors;
* tracking: `mast3r_slam/tracker.py` `FrameTracker.get_points_poses` and
  `opt_pose_ray_dist_sim3` / `opt_pose_calib_sim3` (PyTorch) on fixed matches, every
  Gauss-Newton iteration recorded;
* back end: `mast3r_slam/global_opt.py` `FactorGraph.solve_GN_rays` / `solve_GN_calib` (the
  CUDA kernels `gauss_newton_rays` / `gauss_newton_calib` of `backend/src/gn_kernels.cu`) over
  four keyframes with a loop edge.

Upstream files are imported unchanged (`importlib` from the checkout given by `--upstream`);
what they import but these paths never use (the network, shared-memory frames) is stubbed,
and `lietorch` is replaced by `tools/lietorch_shim.py` (pure torch, lietorch's Sim3 formulas).
The CUDA extension `mast3r_slam_backends` is compiled from upstream's sources at run time:

* `--backend cuda`: torch.utils.cpp_extension.load of gn.cpp, gn_kernels.cu and
  matching_kernels.cu as upstream's setup.py builds them (needs nvcc, a GPU, ninja and Eigen
  headers, `--eigen`; TF32 off). `.devcarry4/run.sh` runs this on a machine without network.
* `--backend cpu`: both .cu files compiled as C++ (`cpu_rewrite`): every kernel launch runs the
  blocks one after another and each block's threads as real threads (`__syncthreads` a barrier,
  `__shared__` arrays shared by the block), the warp reduction (which relies on a warp's
  lockstep) by thread 0 with the same additions in the same order, tensors on the CPU.
* `--backend none`: tracking only.

In both builds two edits adapt the sources to PyTorch 2.15 (`D11.type()` ->
`D11.scalar_type()`; `torch::linalg::linalg_norm` -> `at::linalg_norm`, the same function).

Inputs are real: two (matching, tracking) or four (back end) redkitchen frames, depth
resized to `--size` (nearest), back-projected with the scaled intrinsics, with a per-frame
scale error and Gaussian noise (what a network would predict, roughly); confidences and match
qualities are seeded pseudo-random; descriptors are seeded small integers (a frame pixel's
descriptor plus integer noise at the pixel that sees the same 3D point) so that upstream's f16
scores are exact and rust3r's f32 sums must pick the same pixel, ties included. The tracker
and back end run on matches from the ground-truth poses (rounded projection), the tracker in
float64 (upstream's code is dtype-generic), the back end in float32 (the kernels' type).

    python3 tools/mast3r_slam_fixture.py --upstream /tmp/MASt3R-SLAM \
        --data ../shared/data/redkitchen --out crates/slam/tests/fixtures/mast3r_slam \
        --eigen /tmp/MASt3R-SLAM/thirdparty/eigen --backend cpu --pieces matching,tracking,backend

Made with torch 2.15, MASt3R-SLAM b0ae540, Eigen bddaa99 (its submodule). Writes
`<piece>.safetensors` and `config.yaml` (the upstream base.yaml used).
"""

import argparse
import importlib.util
import json
import os
import re
import shutil
import sys
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def stub(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def load_source(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------------------------------------
# The CUDA extension


CPU_PRELUDE = r"""
#pragma once
#include <torch/extension.h>
#include <barrier>
#include <cmath>
#include <functional>
#include <limits>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// Shared memory: one copy, used by the threads of the one block that runs at a time.
#define __shared__ static
struct dim3 { unsigned x, y, z; dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {} };
inline dim3 blockIdx, blockDim, gridDim;
inline thread_local dim3 threadIdx;
inline std::barrier<>* cpu_block_barrier = nullptr;
inline void __syncthreads() { cpu_block_barrier->arrive_and_wait(); }
namespace cuda { namespace std { using ::std::numeric_limits; } }
// ATen defines RestrictPtrTraits only for CUDA compilers.
namespace at { template <typename T> struct RestrictPtrTraits { typedef T* __restrict__ PtrType; }; }
// A kernel launch: the blocks one after another, the threads of a block as real threads
// (so __syncthreads is a barrier and __shared__ arrays are shared).
template <class F> void cpu_launch(dim3 g, dim3 b, F f) {
  gridDim = g; blockDim = b;
  for (unsigned bz = 0; bz < g.z; bz++) for (unsigned by = 0; by < g.y; by++) for (unsigned bx = 0; bx < g.x; bx++) {
    blockIdx = dim3(bx, by, bz);
    std::barrier<> bar(b.x * b.y * b.z);
    cpu_block_barrier = &bar;
    std::vector<std::thread> ts;
    for (unsigned tz = 0; tz < b.z; tz++) for (unsigned ty = 0; ty < b.y; ty++) for (unsigned tx = 0; tx < b.x; tx++)
      ts.emplace_back([=, &f]() { threadIdx = dim3(tx, ty, tz); f(); });
    for (auto& t : ts) t.join();
  }
}
"""


def cpu_rewrite(text):
    """A .cu file as C++ for cpu_launch: includes of CUDA headers dropped, each
    `kernel<<<grid, block>>>(args);` turned into `cpu_launch(grid, block, [&]() { kernel(args); });`,
    tensors created on the GPU created on the CPU, and gn_kernels.cu's warpReduce (which relies on
    a warp's lockstep) run by thread 0 with the same additions in the same order."""
    text = re.sub(r"#include <(cuda\.h|cuda_runtime\.h|cuda_fp16\.h|cuda/std/limits)>\n", "", text)
    text = text.replace("torch::kCUDA", "torch::kCPU")
    out, pos, n = [], 0, 0
    for m in re.finditer(r"([A-Za-z_]\w*(?:<\w+>)?)<<<(\w+),\s*(\w+)>>>\(", text):
        if m.start() < pos:
            continue
        depth, k = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            k += 1
        out.append(text[pos:m.start()])
        out.append(f"cpu_launch({m.group(2)}, {m.group(3)}, [&]() {{ {m.group(1)}({text[m.end():k]}; }})")
        pos = k
        n += 1
    out.append(text[pos:])
    text = "".join(out)
    warp = re.search(r"__device__ void warpReduce\(volatile float \*sdata, unsigned int tid\) \{.*?\n\}", text, re.S)
    if warp:
        text = text.replace(
            warp.group(0),
            "__device__ void warpReduce(volatile float *sdata, unsigned int tid) {\n"
            "  if (tid != 0) return;\n"
            "  for (int s : {32, 16, 8, 4, 2, 1}) for (int t = 0; t < 32; t++) sdata[t] += sdata[t + s];\n"
            "}",
        )
    return text, n


def build_backends(upstream, mode, eigen, build_dir):
    from torch.utils.cpp_extension import load

    src = os.path.join(upstream, "mast3r_slam/backend/src")
    inc = os.path.join(upstream, "mast3r_slam/backend/include")
    os.makedirs(build_dir, exist_ok=True)
    # The two edits for current PyTorch (2.15 no longer dispatches on the deprecated
    # `Tensor::type()` and has no C++ `torch::linalg` namespace): `D11.type()` ->
    # `D11.scalar_type()` in matching_kernels.cu, `torch::linalg::linalg_norm` ->
    # `at::linalg_norm` (the same ATen function) in gn_kernels.cu.
    text = open(os.path.join(src, "matching_kernels.cu")).read()
    text, n = re.subn(r"D11\.type\(\)", "D11.scalar_type()", text)
    assert n == 1, n
    gn_text = open(os.path.join(src, "gn_kernels.cu")).read()
    gn_text, n = re.subn(r"torch::linalg::linalg_norm\(", "at::linalg_norm(", gn_text)
    assert n == 3, n
    if mode == "cuda":
        sources = [os.path.join(src, "gn.cpp")]
        for name, t in (("matching_kernels.cu", text), ("gn_kernels.cu", gn_text)):
            sources.append(os.path.join(build_dir, name))
            with open(sources[-1], "w") as f:
                f.write(t)
        return load(
            name="mast3r_slam_backends",
            sources=sources,
            extra_include_paths=[inc, eigen],
            extra_cflags=["-O3"],
            extra_cuda_cflags=["-O3"],
            build_directory=build_dir,
            verbose=True,
        )
    # CPU: both .cu files rewritten for cpu_launch (cpu_rewrite).
    sources = [os.path.join(src, "gn.cpp")]
    for name, t, launches in (("matching_kernels", text, 2), ("gn_kernels", gn_text, 6)):
        t, n = cpu_rewrite(t)
        assert n == launches, (name, n)
        path = os.path.join(build_dir, f"{name}_cpu.cpp")
        with open(path, "w") as f:
            f.write('#include "cpu_prelude.h"\n' + t)
        sources.append(path)
    with open(os.path.join(build_dir, "cpu_prelude.h"), "w") as f:
        f.write(CPU_PRELUDE)
    return load(
        name="mast3r_slam_backends_cpu",
        sources=sources,
        extra_include_paths=[inc, build_dir, eigen],
        extra_cflags=["-O2", "-w", "-std=c++20"],
        build_directory=build_dir,
        verbose=False,
    )


def upstream_modules(upstream, backends):
    """Upstream's modules with what these paths never touch stubbed out."""
    sys.path.insert(0, HERE)
    import lietorch_shim

    stub("lietorch", Sim3=lietorch_shim.Sim3)
    stub("mast3r_slam").__path__ = []
    stub("mast3r_slam.frame", Frame=object, SharedKeyframes=object)
    stub("mast3r_slam.mast3r_utils", mast3r_match_asymmetric=None, mast3r_match_symmetric=None)
    sys.modules["mast3r_slam_backends"] = backends if backends is not None else stub("mast3r_slam_backends")
    mods = {}
    for name in ("config", "image", "geometry", "nonlinear_optimizer", "matching", "tracker", "global_opt"):
        mods[name] = load_source(f"mast3r_slam.{name}", os.path.join(upstream, f"mast3r_slam/{name}.py"))
    cwd = os.getcwd()
    os.chdir(upstream)  # base.yaml has no `inherit`, but keep upstream's relative paths working
    mods["config"].load_config("config/base.yaml")
    os.chdir(cwd)
    return mods


# ---------------------------------------------------------------------------------------------
# Inputs from redkitchen


def save_file(tensors, path, metadata=None):
    """safetensors writer (the format: u64 header length, JSON header, raw little-endian
    data), so the GPU machine needs no safetensors package."""
    dtypes = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.int32: "I32", torch.int8: "I8", torch.uint8: "U8"}
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype == torch.int64:  # pixel indices: int32 is plenty and halves the files
            t = t.to(torch.int32)
        b = t.numpy().tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))
    os.replace(tmp, path)


def read_depth(data, i):
    """16-bit depth in millimetres: `frame-XXXXXX.depth.png` (needs OpenCV) or a `.depth.npy`
    copy (what .devcarry4 ships, so the GPU machine needs no OpenCV)."""
    npy = os.path.join(data, f"frame-{i:06d}.depth.npy")
    if os.path.exists(npy):
        return np.load(npy)
    import cv2

    return cv2.imread(os.path.join(data, f"frame-{i:06d}.depth.png"), cv2.IMREAD_UNCHANGED)


def resize_nearest(d, w, h):
    """OpenCV's INTER_NEAREST: source index floor(dst * src / dst_size)."""
    ys = np.floor(np.arange(h) * (d.shape[0] / h)).astype(int)
    xs = np.floor(np.arange(w) * (d.shape[1] / w)).astype(int)
    return d[ys][:, xs]


def read_frame(data, i, size, K_full):
    w, h = size
    d = resize_nearest(read_depth(data, i), w, h).astype(np.float64) / 1000.0
    d[d >= 65.0] = 0.0
    T = np.loadtxt(os.path.join(data, f"frame-{i:06d}.pose.txt"))
    return d, T


def scaled_K(K_full, size, full=(640, 480)):
    sx, sy = size[0] / full[0], size[1] / full[1]
    K = K_full.copy()
    K[0, 0] *= sx
    K[0, 2] = (K_full[0, 2] + 0.5) * sx - 0.5
    K[1, 1] *= sy
    K[1, 2] = (K_full[1, 2] + 0.5) * sy - 0.5
    return K


def backproject(depth, K):
    h, w = depth.shape
    u, v = np.meshgrid(np.arange(w), np.arange(h))
    x = (u - K[0, 2]) / K[0, 0] * depth
    y = (v - K[1, 2]) / K[1, 1] * depth
    return np.stack([x, y, depth], -1).reshape(-1, 3)


def fill_missing(depth):
    """Pixels without depth get the image's median depth (a network predicts every pixel);
    they are marked with zero confidence."""
    valid = depth > 0
    out = depth.copy()
    out[~valid] = np.median(depth[valid])
    return out, valid.reshape(-1)


def transform(T, X):
    return X @ T[:3, :3].T + T[:3, 3]


def gt_matches(X_src_world_in_dst, valid_src, depth_dst_valid, K, size, z_dst, tol=0.05):
    """For each source pixel, the destination pixel its point projects to (rounded), valid
    when inside, both depths measured and the depths agree (no occlusion)."""
    w, h = size
    P = X_src_world_in_dst
    z = P[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.rint(K[0, 0] * P[:, 0] / z + K[0, 2])
        v = np.rint(K[1, 1] * P[:, 1] / z + K[1, 2])
    inside = (z > 0.1) & (u >= 0) & (u < w) & (v >= 0) & (v < h)
    idx = np.where(inside, v * w + u, 0).astype(np.int64)
    ok = inside & valid_src & depth_dst_valid[idx] & (np.abs(z_dst[idx] - z) < tol * z)
    return np.where(ok, idx, 0), ok


def quat_from_R(R):
    # Shepperd, [x, y, z, w]
    tr = np.trace(R)
    if tr > 0:
        S = np.sqrt(tr + 1.0) * 2
        w = 0.25 * S
        x = (R[2, 1] - R[1, 2]) / S
        y = (R[0, 2] - R[2, 0]) / S
        z = (R[1, 0] - R[0, 1]) / S
    else:
        i = int(np.argmax(np.diag(R)))
        if i == 0:
            S = np.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2]) * 2
            w = (R[2, 1] - R[1, 2]) / S
            x = 0.25 * S
            y = (R[0, 1] + R[1, 0]) / S
            z = (R[0, 2] + R[2, 0]) / S
        elif i == 1:
            S = np.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2]) * 2
            w = (R[0, 2] - R[2, 0]) / S
            x = (R[0, 1] + R[1, 0]) / S
            y = 0.25 * S
            z = (R[1, 2] + R[2, 1]) / S
        else:
            S = np.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1]) * 2
            w = (R[1, 0] - R[0, 1]) / S
            x = (R[0, 2] + R[2, 0]) / S
            y = (R[1, 2] + R[2, 1]) / S
            z = 0.25 * S
    q = np.array([x, y, z, w])
    return q / np.linalg.norm(q)


def sim3_data(T, s=1.0):
    return np.concatenate([T[:3, 3], quat_from_R(T[:3, :3]), [s]])


def small_rotation(rng, deg):
    a = rng.normal(size=3)
    a *= np.deg2rad(deg) / np.linalg.norm(a)
    th = np.linalg.norm(a)
    k = a / th
    Kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(th) * Kx + (1 - np.cos(th)) * Kx @ Kx


def f32(x):
    return torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float32)


def f64(x):
    return torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float64)


# ---------------------------------------------------------------------------------------------
# Pieces


def pair_inputs(args, rng, K_full):
    """Frame f (view 1) and keyframe k (view 2) as a decode(f, k) would give them."""
    size = args.size
    K = scaled_K(K_full, size)
    fk, ff = args.pair
    dk, Tk = read_frame(args.data, fk, size, K_full)
    df, Tf = read_frame(args.data, ff, size, K_full)
    dk, vk = fill_missing(dk)
    df, vf = fill_missing(df)
    n = size[0] * size[1]
    s_f = args.scale_error  # the pair's scale relative to the keyframe's canonical pointmap
    T_fk = np.linalg.inv(Tf) @ Tk
    Xk_own = backproject(dk, K)
    Xff = s_f * backproject(df, K) + rng.normal(scale=args.noise, size=(n, 3))
    Xkf = s_f * transform(T_fk, Xk_own) + rng.normal(scale=args.noise, size=(n, 3))
    Xk = Xk_own + rng.normal(scale=args.noise, size=(n, 3))  # keyframe's canonical pointmap
    conf = lambda valid: np.where(valid, rng.uniform(1.0, 3.0, n), 0.0)  # noqa: E731
    Cff, Ckf, Ck = conf(vf), conf(vk), conf(vk)
    Qff = rng.uniform(1.0, 3.0, n)
    Qkf = rng.uniform(1.0, 3.0, n)
    # Keyframe pixel -> frame pixel through the true poses (ground-truth matches).
    idx_gt, ok_gt = gt_matches(transform(T_fk, Xk_own), vk, vf, K, size, df.reshape(-1))
    dim = 24
    Dff = rng.integers(-3, 4, size=(n, dim)).astype(np.float32)
    Dkf = rng.integers(-3, 4, size=(n, dim)).astype(np.float32)
    Dkf[ok_gt] = Dff[idx_gt[ok_gt]] + rng.integers(-1, 2, size=(int(ok_gt.sum()), dim))
    return dict(
        K=K, Tk=Tk, Tf=Tf, Xff=Xff, Xkf=Xkf, Xk=Xk, Cff=Cff, Ckf=Ckf, Ck=Ck, Qff=Qff, Qkf=Qkf,
        Dff=Dff, Dkf=Dkf, idx_gt=idx_gt, ok_gt=ok_gt,
    )


def run_matching(mods, args, P):
    w, h = args.size
    backends = sys.modules["mast3r_slam_backends"]
    calls = {}

    class Recorder:
        def iter_proj(self, *a):
            out = backends.iter_proj(*a)
            calls["iter_proj"] = [t.clone() for t in out]
            return out

        def refine_matches(self, *a):
            calls["refine_in"] = a[2].clone()
            out = backends.refine_matches(*a)
            calls["refine_out"] = out[0].clone()
            return out

    mods["matching"].mast3r_slam_backends = Recorder()
    dev = args.device
    X11 = f32(P["Xff"]).view(1, h, w, 3).to(dev)
    X21 = f32(P["Xkf"]).view(1, h, w, 3).to(dev)
    D11 = f32(P["Dff"]).view(1, h, w, -1).to(dev)
    D21 = f32(P["Dkf"]).view(1, h, w, -1).to(dev)
    rays, _, _ = mods["matching"].prep_for_iter_proj(X11, X21, None)
    idx, valid = mods["matching"].match_iterative_proj(X11, X21, D11, D21, None)
    p, conv = calls["iter_proj"]
    cpu = lambda t: t.detach().cpu()  # noqa: E731
    return {
        # Descriptors are small integers: stored as int8.
        "X11": cpu(X11[0]), "X21": cpu(X21[0]), "D11": cpu(D11[0]).to(torch.int8), "D21": cpu(D21[0]).to(torch.int8),
        "rays_with_grad": cpu(rays[0]),
        "iter_proj_p": cpu(p[0]), "iter_proj_converged": cpu(conv[0]).to(torch.uint8),
        "refine_in": cpu(calls["refine_in"][0]).to(torch.int64),
        "refine_out": cpu(calls["refine_out"][0]).to(torch.int64),
        "idx_1_to_2": cpu(idx[0]).to(torch.int64), "valid": cpu(valid[0, :, 0]).to(torch.uint8),
    }


class FakeFrame:
    def __init__(self, X, C, T):
        self.X_canon = X
        self.C = C
        self.T_WC = T

    def get_average_conf(self):
        return self.C


def run_tracking(mods, args, P, calib):
    lie = sys.modules["lietorch"]
    tr = mods["tracker"]
    cfg = mods["config"].config
    w, h = args.size
    T_WCk = lie.Sim3(f32(sim3_data(P["Tk"])).double()[None])
    T_WCf = T_WCk  # tracking starts from the last pose: the keyframe's
    idx = torch.as_tensor(P["idx_gt"])
    # Inputs rounded to the fixture's float32, then run in float64.
    r64 = lambda x: f32(x).double()  # noqa: E731
    frame = FakeFrame(r64(P["Xff"]), r64(P["Cff"])[:, None], T_WCf)
    kf = FakeFrame(r64(P["Xk"]), r64(P["Ck"])[:, None], T_WCk)
    ft = tr.FrameTracker(None, None, "cpu")
    K = f32(P["K"]).double() if calib else None
    Xf, Xk, T_WCf, T_WCk, Cf, Ck, meas_k, valid_meas_k = ft.get_points_poses(frame, kf, idx, (h, w), calib, K)
    # FrameTracker.track, after the matching: Qk, validity (verbatim).
    Qff, Qkf = r64(P["Qff"])[:, None], r64(P["Qkf"])[:, None]
    valid_match_k = torch.as_tensor(P["ok_gt"])[:, None]
    Qk = torch.sqrt(Qff[idx] * Qkf)
    valid_Cf = Cf > ft.cfg["C_conf"]
    valid_Ck = Ck > ft.cfg["C_conf"]
    valid_Q = Qk > ft.cfg["Q_conf"]
    valid_opt = valid_match_k & valid_Cf & valid_Ck & valid_Q
    iters = []
    orig = tr.FrameTracker.solve

    def solve(self, sqrt_info, r, J):
        tau, cost = orig(self, sqrt_info, r, J)
        # The same normal equations as upstream's solve, kept for diagnosis.
        whitened_r = sqrt_info * r
        rs = sqrt_info * torch.sqrt(mods["nonlinear_optimizer"].huber(whitened_r, k=self.cfg["huber"]))
        A = (rs[..., None] * J).view(-1, J.shape[-1])
        b = (rs * r).view(-1, 1)
        iters.append((tau.view(-1).clone(), cost, (A.T @ A).clone(), (-A.T @ b).view(-1).clone()))
        return tau, cost

    tr.FrameTracker.solve = solve
    try:
        if calib:
            T_WCf_new, T_CkCf = ft.opt_pose_calib_sim3(Xf, Xk, T_WCf, T_WCk, Qk, valid_opt, meas_k, valid_meas_k, K, (h, w))
        else:
            T_WCf_new, T_CkCf = ft.opt_pose_ray_dist_sim3(Xf, Xk, T_WCf, T_WCk, Qk, valid_opt)
    finally:
        tr.FrameTracker.solve = orig
    T0 = T_WCk.inv() * T_WCf
    return {
        "T_CkCf_init": T0.data[0].float(),
        "T_CkCf": T_CkCf.data[0].float(),
        "tau": torch.stack([t for t, _, _, _ in iters]).float(),
        "cost": torch.tensor([c for _, c, _, _ in iters], dtype=torch.float64).float(),
        "H": torch.stack([H for _, _, H, _ in iters]).float(),
        "g": torch.stack([g for _, _, _, g in iters]).float(),
        "valid_opt": valid_opt[:, 0].to(torch.uint8),
        "Qk": Qk[:, 0].float(),
    }


def run_backend(mods, args, rng, K_full):
    lie = sys.modules["lietorch"]
    go = mods["global_opt"]
    w, h = args.size
    K = scaled_K(K_full, size=args.size)
    n = w * h
    ids = args.keyframes
    depths, Ts, valids, Xown = [], [], [], []
    for i in ids:
        d, T = read_frame(args.data, i, args.size, K_full)
        d, v = fill_missing(d)
        depths.append(d.reshape(-1))
        Ts.append(T)
        valids.append(v)
        Xown.append(backproject(d, K))
    scales = [1.0] + list(rng.uniform(0.9, 1.1, len(ids) - 1))
    Xs = np.stack([s * X + rng.normal(scale=args.noise, size=X.shape) for s, X in zip(scales, Xown)])
    Cs = np.stack([np.where(v, rng.uniform(1.0, 3.0, n), 0.0) for v in valids])[..., None]
    # Initial poses: the truth (keyframe 0 fixed) perturbed, with the pointmap scale.
    poses = []
    for k, (T, s) in enumerate(zip(Ts, scales)):
        T = T.copy()
        if k > 0:
            T[:3, :3] = small_rotation(rng, 1.0) @ T[:3, :3]
            T[:3, 3] += rng.normal(scale=0.02, size=3)
        poses.append(sim3_data(T, 1.0 / s * (1.0 if k == 0 else rng.uniform(0.97, 1.03))))
    edges = args.edges
    ii = [e[0] for e in edges]
    jj = [e[1] for e in edges]
    idx_ij, valid_j, idx_ji, valid_i, Qj, Qi = [], [], [], [], [], []
    for i, j in edges:
        # j's pixels in i (idx_ii2jj: for each pixel of j, its pixel in i) and the reverse.
        T_ij = np.linalg.inv(Ts[i]) @ Ts[j]
        a, b = gt_matches(transform(T_ij, Xown[j]), valids[j], valids[i], K, args.size, depths[i])
        c, d = gt_matches(transform(np.linalg.inv(T_ij), Xown[i]), valids[i], valids[j], K, args.size, depths[j])
        idx_ij.append(a)
        valid_j.append(b)
        idx_ji.append(c)
        valid_i.append(d)
        Qj.append(rng.uniform(1.0, 3.0, n))
        Qi.append(rng.uniform(1.0, 3.0, n))
    dev = args.device
    inputs = {
        "Xs": f32(Xs), "Cs": f32(Cs), "poses_init": f32(np.stack(poses)), "K": f32(K),
        "ii": torch.tensor(ii, dtype=torch.int64), "jj": torch.tensor(jj, dtype=torch.int64),
        "idx_ii2jj": torch.as_tensor(np.stack(idx_ij)), "valid_match_j": torch.as_tensor(np.stack(valid_j)).to(torch.uint8),
        "idx_jj2ii": torch.as_tensor(np.stack(idx_ji)), "valid_match_i": torch.as_tensor(np.stack(valid_i)).to(torch.uint8),
        "Q_ii2jj": f32(np.stack(Qj)), "Q_jj2ii": f32(np.stack(Qi)),
    }
    # Stored pixel indices as int32 (the kernels take int64).
    out = {k: v.to(torch.int32) if k.startswith("idx") else v for k, v in inputs.items()}
    if args.backend == "none":
        return out
    for calib in (False, True):
        kfs = [FakeFrame(f32(Xs[k]).to(dev), f32(Cs[k]).to(dev), lie.Sim3(f32(poses[k])[None].to(dev))) for k in range(len(ids))]
        kfs[0].img = torch.zeros(3, h, w)

        class Frames:
            def __getitem__(self, k):
                return kfs[k]

            def update_T_WCs(self, T, idx):
                for t, k in zip(T.data, idx.tolist()):
                    kfs[k].T_WC = lie.Sim3(t)

        fg = go.FactorGraph(None, Frames(), K=f32(K).to(dev) if calib else None, device=dev)
        fg.ii = inputs["ii"].to(dev)
        fg.jj = inputs["jj"].to(dev)
        fg.idx_ii2jj = inputs["idx_ii2jj"].to(dev)
        fg.idx_jj2ii = inputs["idx_jj2ii"].to(dev)
        fg.valid_match_j = inputs["valid_match_j"].bool()[..., None].to(dev)
        fg.valid_match_i = inputs["valid_match_i"].bool()[..., None].to(dev)
        fg.Q_ii2jj = inputs["Q_ii2jj"][..., None].to(dev)
        fg.Q_jj2ii = inputs["Q_jj2ii"][..., None].to(dev)
        (fg.solve_GN_calib if calib else fg.solve_GN_rays)()
        out["poses_calib" if calib else "poses_rays"] = torch.stack([kfs[k].T_WC.data.reshape(8).cpu() for k in range(len(ids))])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True, help="rmurai0610/MASt3R-SLAM checkout")
    ap.add_argument("--data", required=True, help="redkitchen folder (frame-XXXXXX.depth.png, .pose.txt)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", choices=["cuda", "cpu", "none"], default="cpu")
    ap.add_argument("--eigen", default="", help="Eigen headers (--backend cuda)")
    ap.add_argument("--build-dir", default="/tmp/mast3r_slam_backends_build")
    ap.add_argument("--pieces", default="matching,tracking", help="comma-separated: matching,tracking,backend")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", default="64x48", help="WxH (W*H a multiple of 16, as the kernels' blocks)")
    ap.add_argument("--pair", default="0,30", help="keyframe,frame indices")
    ap.add_argument("--keyframes", default="0,25,50,75", help="back-end keyframes")
    ap.add_argument("--edges", default="0-1,1-2,2-3,0-2,0-3", help="back-end edges i-j (i<j)")
    ap.add_argument("--noise", type=float, default=0.003, help="pointmap noise (m)")
    ap.add_argument("--scale-error", type=float, default=1.08, help="scale of the pair's pointmaps")
    args = ap.parse_args()
    args.size = tuple(int(v) for v in args.size.split("x"))
    assert (args.size[0] * args.size[1]) % 16 == 0
    args.pair = [int(v) for v in args.pair.split(",")]
    args.keyframes = [int(v) for v in args.keyframes.split(",")]
    args.edges = [tuple(int(v) for v in e.split("-")) for e in args.edges.split(",")]
    args.device = "cuda" if args.backend == "cuda" else "cpu"
    pieces = args.pieces.split(",")
    torch.set_num_threads(2)
    # Plain float32 on the GPU: TF32 convolutions (cuDNN's default) would round the ray image's
    # gradients to 10 bits, a precision mode rather than the algorithm this fixture pins down.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False

    backends = None
    if args.backend != "none" and ("matching" in pieces or "backend" in pieces):
        backends = build_backends(args.upstream, args.backend, args.eigen, args.build_dir)
    mods = upstream_modules(args.upstream, backends)
    K_full = np.loadtxt(os.path.join(args.data, "camera-intrinsics.txt"))
    os.makedirs(args.out, exist_ok=True)
    shutil.copy(os.path.join(args.upstream, "config/base.yaml"), os.path.join(args.out, "config.yaml"))
    meta = {
        "size": f"{args.size[0]}x{args.size[1]}", "seed": str(args.seed), "backend": args.backend,
        "pair": ",".join(map(str, args.pair)), "keyframes": ",".join(map(str, args.keyframes)),
        "noise": str(args.noise), "scale_error": str(args.scale_error), "torch": torch.__version__,
    }

    if "matching" in pieces or "tracking" in pieces:
        P = pair_inputs(args, np.random.default_rng(args.seed), K_full)
    if "matching" in pieces:
        t = run_matching(mods, args, P)
        save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(args.out, "matching.safetensors"), metadata=meta)
        print("matching:", int(t["valid"].sum()), "valid,", int((t["refine_out"] != t["refine_in"]).any(-1).sum()), "refined")
    if "tracking" in pieces:
        t = {
            "Xff": f32(P["Xff"]), "Xk": f32(P["Xk"]), "Cff": f32(P["Cff"]), "Ck": f32(P["Ck"]),
            "Qff": f32(P["Qff"]), "Qkf": f32(P["Qkf"]), "idx_f2k": torch.as_tensor(P["idx_gt"]).to(torch.int32),
            "valid_match_k": torch.as_tensor(P["ok_gt"]).to(torch.uint8), "K": f32(P["K"]),
            "T_WCk": f32(sim3_data(P["Tk"])),
        }
        for calib, tag in ((False, "rays"), (True, "calib")):
            r = run_tracking(mods, args, P, calib)
            t.update({f"{tag}.{k}": v for k, v in r.items()})
            print(f"tracking {tag}: {len(r['cost'])} iterations, cost {r['cost'][0]:.4g} -> {r['cost'][-1]:.4g}, "
                  f"{int(r['valid_opt'].sum())} used, T_CkCf {r['T_CkCf'].numpy().round(5)}")
        save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(args.out, "tracking.safetensors"), metadata=meta)
    if "backend" in pieces:
        t = run_backend(mods, args, np.random.default_rng(args.seed + 1), K_full)
        meta["edges"] = ",".join(f"{i}-{j}" for i, j in args.edges)
        name = "backend.safetensors" if "poses_rays" in t else "backend_inputs.safetensors"
        save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(args.out, name), metadata=meta)
        print("backend:", name, {k: v.shape for k, v in t.items() if k.startswith("poses")})


if __name__ == "__main__":
    main()
