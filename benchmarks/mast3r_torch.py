#!/usr/bin/env python3
"""MASt3R (AsymmetricMASt3R, catmlp+dpt heads, as MASt3R-SLAM runs it) in plain PyTorch, written
from shared/fixtures/mast3r_tiny/SPEC.md (not copied from upstream), for timing against
`rust3r bench mast3r` with the same random-weight architecture.

    python3 benchmarks/mast3r_torch.py --size full --precision tf32 --json out.json
    python3 benchmarks/mast3r_torch.py --size full --precision f16
    python3 benchmarks/mast3r_torch.py --check-fixture ../shared/fixtures/mast3r_tiny   # parity self-check
    python3 benchmarks/mast3r_torch.py --compare ours.safetensors --reference outputs.safetensors

Per tracked frame at 512x384 (batch 1), as `rust3r bench mast3r` measures it:
  encoder  one frame through the ViT encoder;
  mono     encode + decoder(frame, frame) + both heads + post-processing;
  pair     encode + decoder(frame, cached keyframe encoding) + both heads + post-processing.
Median of --iters after --warmup untimed runs, torch.cuda.synchronize() around each run.

Precisions: f32 (TF32 off), tf32 (f32 storage, TF32 matmuls/convs allowed: MASt3R-SLAM's setting),
f16 (weights and activations in half precision; PyTorch's CUDA LayerNorm/softmax accumulate in f32),
amp (f32 weights under torch.autocast(float16)). Attention is the explicit
softmax(q k^T * d^-1/2) v that upstream uses; --sdpa switches to F.scaled_dot_product_attention.

--check-fixture loads the tiny fixture checkpoint and compares every stored tensor of the asym512,
mono512, asym224 and asymodd cases (intermediates included) with max|diff| <= 1e-4 * max|ref|, so the
timed code is checked against the upstream reference outputs. Needs only torch (safetensors and the
.pth are read here).
"""

import argparse
import json
import math
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    # The released MASt3R_ViTLarge_BaseDecoder_512_catmlpdpt_metric (688.6 M parameters).
    "full": dict(E=1024, enc_depth=24, enc_heads=16, D=768, dec_depth=12, dec_heads=12,
                 layer_dims=(96, 192, 384, 768), feat=256, last_dim=128, hidden=7168, desc=24),
    # The fixture's tiny model (head constants replaced, see SPEC).
    "tiny": dict(E=64, enc_depth=3, enc_heads=4, D=48, dec_depth=10, dec_heads=3,
                 layer_dims=(16, 24, 32, 40), feat=24, last_dim=12, hidden=14, desc=24),
}
PATCH = 16
ROPE_BASE = 100.0
EPS = 1e-6
USE_SDPA = False


# ---------------------------------------------------------------------------------------------
# RoPE2D (SPEC §3): first half of each head vector rotated with the row, second half with the
# column; rotate-half pairing (j, j + q); inv_freq and theta in float32.

_rope_cache = {}


def rope_tables(h, w, d, device, dtype):
    key = (h, w, d, device, dtype)
    if key not in _rope_cache:
        m = d // 2
        inv = 1.0 / (ROPE_BASE ** (torch.arange(0, m, 2, device=device, dtype=torch.float32) / m))
        rows = torch.arange(h, device=device, dtype=torch.float32).repeat_interleave(w)
        cols = torch.arange(w, device=device, dtype=torch.float32).repeat(h)

        def tab(p):
            f = p[:, None] * inv[None, :]
            f = torch.cat([f, f], dim=-1)
            return f.cos().to(dtype), f.sin().to(dtype)

        _rope_cache[key] = tab(rows) + tab(cols)
    return _rope_cache[key]


def _rotate_half(u):
    q = u.shape[-1] // 2
    return torch.cat([-u[..., q:], u[..., :q]], dim=-1)


def apply_rope(t, tables):
    """t: [B, heads, N, d]."""
    cy, sy, cx, sx = tables
    y, x = t.chunk(2, dim=-1)
    y = y * cy + _rotate_half(y) * sy
    x = x * cx + _rotate_half(x) * sx
    return torch.cat([y, x], dim=-1)


def attend(q, k, v):
    """q, k, v: [B, heads, N, d] -> [B, Nq, heads * d]."""
    b, h, n, d = q.shape
    if USE_SDPA:
        o = F.scaled_dot_product_attention(q, k, v)
    else:
        a = (q @ k.transpose(-2, -1)) * (d ** -0.5)
        o = a.softmax(dim=-1) @ v
    return o.transpose(1, 2).reshape(b, n, h * d)


# ---------------------------------------------------------------------------------------------
# Transformer (SPEC §4, §5). Module names follow the checkpoint's keys.

class Mlp(nn.Module):
    def __init__(self, dim, hidden, out=None):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, out or dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))  # exact (erf) GELU


class SelfAttn(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, rope):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        return self.proj(attend(apply_rope(q, rope), apply_rope(k, rope), v))


class CrossAttn(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.projq = nn.Linear(dim, dim)
        self.projk = nn.Linear(dim, dim)
        self.projv = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, y, qrope, krope):
        b, nq, c = x.shape
        nk = y.shape[1]
        h, d = self.heads, c // self.heads
        q = self.projq(x).reshape(b, nq, h, d).transpose(1, 2)
        k = self.projk(y).reshape(b, nk, h, d).transpose(1, 2)
        v = self.projv(y).reshape(b, nk, h, d).transpose(1, 2)
        return self.proj(attend(apply_rope(q, qrope), apply_rope(k, krope), v))


class EncBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=EPS)
        self.attn = SelfAttn(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=EPS)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x, rope):
        x = x + self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm2(x))


class DecBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=EPS)
        self.attn = SelfAttn(dim, heads)
        self.cross_attn = CrossAttn(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=EPS)
        self.norm3 = nn.LayerNorm(dim, eps=EPS)
        self.mlp = Mlp(dim, 4 * dim)
        self.norm_y = nn.LayerNorm(dim, eps=EPS)

    def forward(self, x, y, xrope, yrope):
        x = x + self.attn(self.norm1(x), xrope)
        x = x + self.cross_attn(self.norm2(x), self.norm_y(y), xrope, yrope)
        return x + self.mlp(self.norm3(x))


# ---------------------------------------------------------------------------------------------
# DPT head (SPEC §6) and local-feature head (SPEC §7).

def up2(x):
    return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)


class RCU(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.conv1 = nn.Conv2d(f, f, 3, padding=1)
        self.conv2 = nn.Conv2d(f, f, 3, padding=1)

    def forward(self, z):
        return self.conv2(F.relu(self.conv1(F.relu(z)))) + z


class Fusion(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.resConfUnit1 = RCU(f)  # unused by refinenet4 but present in the checkpoint
        self.resConfUnit2 = RCU(f)
        self.out_conv = nn.Conv2d(f, f, 1)

    def forward(self, a, skip=None):
        if skip is not None:
            a = a + self.resConfUnit1(skip)
        return self.out_conv(up2(self.resConfUnit2(a)))


class Scratch(nn.Module):
    def __init__(self, layer_dims, f):
        super().__init__()
        for k, lk in enumerate(layer_dims):
            setattr(self, f"layer{k + 1}_rn", nn.Conv2d(lk, f, 3, padding=1, bias=False))
        for r in range(1, 5):
            setattr(self, f"refinenet{r}", Fusion(f))


class Interp(nn.Module):
    def forward(self, x):
        return up2(x)


class DPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, D, ld, f = c["E"], c["D"], c["layer_dims"], c["feat"]
        L = c["dec_depth"]
        self.hooks = [0, L * 2 // 4, L * 3 // 4, L]
        dims = [E, D, D, D]
        self.act_postprocess = nn.ModuleList([
            nn.Sequential(nn.Conv2d(dims[0], ld[0], 1), nn.ConvTranspose2d(ld[0], ld[0], 4, stride=4)),
            nn.Sequential(nn.Conv2d(dims[1], ld[1], 1), nn.ConvTranspose2d(ld[1], ld[1], 2, stride=2)),
            nn.Sequential(nn.Conv2d(dims[2], ld[2], 1)),
            nn.Sequential(nn.Conv2d(dims[3], ld[3], 1), nn.Conv2d(ld[3], ld[3], 3, stride=2, padding=1)),
        ])
        self.scratch = Scratch(ld, f)
        self.head = nn.Sequential(
            nn.Conv2d(f, f // 2, 3, padding=1), Interp(),
            nn.Conv2d(f // 2, c["last_dim"], 3, padding=1), nn.ReLU(),
            nn.Conv2d(c["last_dim"], 4, 1))

    def forward(self, tokens, h, w, trace=None):
        s = self.scratch
        rn = []
        for k in range(4):
            t = tokens[self.hooks[k]]
            b, n, c = t.shape
            a = self.act_postprocess[k](t.transpose(1, 2).reshape(b, c, h, w))
            r = getattr(s, f"layer{k + 1}_rn")(a)
            if trace is not None:
                trace[f"dpt.act{k + 1}"] = a
                trace[f"dpt.rn{k + 1}"] = r
            rn.append(r)
        p4 = s.refinenet4(rn[3])
        path = p4[:, :, : rn[2].shape[2], : rn[2].shape[3]]
        if trace is not None:
            trace["dpt.refinenet4_uncropped"] = p4
        for k in (3, 2, 1):
            name = f"dpt.refinenet{k}"
            if trace is not None:
                trace[name + ".in0"] = path
                trace[name + ".in1"] = rn[k - 1]
            path = getattr(s, f"refinenet{k}")(path, rn[k - 1])
            if trace is not None:
                trace[name] = path
        x = path
        for i, layer in enumerate(self.head):
            x = layer(x)
            if trace is not None and i < 4:
                trace[f"dpt.head{i}"] = x
        return x


class Head(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dpt = DPT(c)
        self.head_local_features = Mlp(c["E"] + c["D"], c["hidden"], (c["desc"] + 1) * PATCH * PATCH)
        self.desc = c["desc"]

    def forward(self, tokens, h, w, trace=None):
        dpt_out = self.dpt(tokens, h, w, trace)
        raw = self.head_local_features(torch.cat([tokens[0], tokens[-1]], dim=-1))
        b = raw.shape[0]
        local = (raw.reshape(b, h, w, self.desc + 1, PATCH, PATCH)
                 .permute(0, 3, 1, 4, 2, 5).reshape(b, self.desc + 1, h * PATCH, w * PATCH))
        if trace is not None:
            trace["dpt_out"] = dpt_out
            trace["local_feat_raw"] = raw
        return postprocess(dpt_out, local, self.desc)


def postprocess(dpt_out, local, desc_dim):
    """SPEC §8 (depth exp, conf exp vmin 1, desc L2, desc_conf exp vmin 0), in float32."""
    d = dpt_out.float().permute(0, 2, 3, 1)
    lf = local.float().permute(0, 2, 3, 1)
    xyz = d[..., :3]
    n = xyz.norm(dim=-1, keepdim=True)
    pts3d = xyz / n.clamp(min=1e-8) * torch.expm1(n)
    desc = lf[..., :desc_dim]
    return dict(pts3d=pts3d, conf=1 + d[..., 3].exp(), desc=desc / desc.norm(dim=-1, keepdim=True),
                desc_conf=lf[..., desc_dim].exp())


class PatchEmbed(nn.Module):
    def __init__(self, E):
        super().__init__()
        self.proj = nn.Conv2d(3, E, PATCH, stride=PATCH)

    def forward(self, img):
        return self.proj(img).flatten(2).transpose(1, 2)


class Mast3r(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        E, D = c["E"], c["D"]
        self.patch_embed = PatchEmbed(E)
        self.enc_blocks = nn.ModuleList([EncBlock(E, c["enc_heads"]) for _ in range(c["enc_depth"])])
        self.enc_norm = nn.LayerNorm(E, eps=EPS)
        self.decoder_embed = nn.Linear(E, D)
        self.dec_blocks = nn.ModuleList([DecBlock(D, c["dec_heads"]) for _ in range(c["dec_depth"])])
        self.dec_norm = nn.LayerNorm(D, eps=EPS)
        self.dec_blocks2 = nn.ModuleList([DecBlock(D, c["dec_heads"]) for _ in range(c["dec_depth"])])
        self.downstream_head1 = Head(c)
        self.downstream_head2 = Head(c)

    def encode(self, img, trace=None):
        h, w = img.shape[2] // PATCH, img.shape[3] // PATCH
        x = self.patch_embed(img)
        if trace is not None:
            trace["patch_embed"] = x
        rope = rope_tables(h, w, self.c["E"] // self.c["enc_heads"], x.device, x.dtype)
        for i, blk in enumerate(self.enc_blocks):
            x = blk(x, rope)
            if trace is not None:
                trace[f"enc_block{i}"] = x
        x = self.enc_norm(x)
        if trace is not None:
            trace["enc_out"] = x
        return x, (h, w)

    def decode(self, f1, g1, f2, g2, traces=None):
        """MASt3R-SLAM's decoder(): both stacks, head 1 on view 1, head 2 on view 2."""
        hd = self.c["D"] // self.c["dec_heads"]
        r1 = rope_tables(*g1, hd, f1.device, f1.dtype)
        r2 = rope_tables(*g2, hd, f2.device, f2.dtype)
        x1, x2 = self.decoder_embed(f1), self.decoder_embed(f2)
        t1, t2 = [f1], [f2]
        if traces is not None:
            traces[0]["decoder_embed"], traces[1]["decoder_embed"] = x1, x2
        for i, (b1, b2) in enumerate(zip(self.dec_blocks, self.dec_blocks2)):
            x1, x2 = b1(x1, x2, r1, r2), b2(x2, x1, r2, r1)
            t1.append(x1)
            t2.append(x2)
            if traces is not None:
                traces[0][f"dec_block{i}"], traces[1][f"dec_block{i}"] = x1, x2
        t1[-1], t2[-1] = self.dec_norm(t1[-1]), self.dec_norm(t2[-1])
        if traces is not None:
            traces[0]["dec_out"], traces[1]["dec_out"] = t1[-1], t2[-1]
        p1 = self.downstream_head1(t1, *g1, None if traces is None else traces[0])
        p2 = self.downstream_head2(t2, *g2, None if traces is None else traces[1])
        return p1, p2


def random_init_(model, seed):
    """The fixture's scales (SPEC §12) so activations stay finite: weights N(0, 1/fan_in)
    (ConvTranspose2d: fan_in = in_channels), biases N(0, 0.05^2), LayerNorm weights 1 + N(0, 0.1^2)."""
    g = torch.Generator().manual_seed(seed)

    def normal(p, mean, std):
        p.copy_(mean + std * torch.randn(p.shape, generator=g))

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                normal(m.weight, 1.0, 0.1)
                normal(m.bias, 0.0, 0.05)
            elif isinstance(m, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
                fan_in = m.weight.shape[0] if isinstance(m, nn.ConvTranspose2d) else m.weight[0].numel()
                normal(m.weight, 0.0, 1.0 / math.sqrt(fan_in))
                if m.bias is not None:
                    normal(m.bias, 0.0, 0.05)


# ---------------------------------------------------------------------------------------------
# Benchmark.

def flops(c, h, w):
    """Matrix-product and convolution FLOPs (multiply-add = 2) for one h x w frame:
    (encoder, decoder with both stacks, both heads); the same count as rust3r's Mast3r::flops."""
    th, tw = h // PATCH, w // PATCH
    n = th * tw
    E, D = c["E"], c["D"]
    enc = 2 * n * 3 * PATCH * PATCH * E + c["enc_depth"] * (2 * n * (4 * E * E + 2 * E * 4 * E) + 4 * n * n * E)
    dec = 2 * (2 * n * E * D + c["dec_depth"] * (2 * n * (8 * D * D + 2 * D * 4 * D) + 8 * n * n * D))
    l1, l2, l3, l4 = c["layer_dims"]
    f, ld = c["feat"], c["last_dim"]
    n4 = math.ceil(th / 2) * math.ceil(tw / 2)

    def conv(pix, k, cin, cout):
        return 2 * pix * k * k * cin * cout

    act = (2 * n * (E * l1 + l1 * 16 * l1) + 2 * n * (D * l2 + l2 * 4 * l2) + 2 * n * D * l3
           + 2 * n * D * l4 + conv(n4, 3, l4, l4))
    rn = conv(16 * n, 3, l1, f) + conv(4 * n, 3, l2, f) + conv(n, 3, l3, f) + conv(n4, 3, l4, f)

    def fusion(pix, units):
        return units * 2 * conv(pix, 3, f, f) + conv(4 * pix, 1, f, f)

    refine = fusion(n4, 1) + fusion(n, 2) + fusion(4 * n, 2) + fusion(16 * n, 2)
    px = n * PATCH * PATCH
    head = conv(px / 4, 3, f, f / 2) + conv(px, 3, f / 2, ld) + conv(px, 1, ld, 4)
    local = 2 * n * ((E + D) * c["hidden"] + c["hidden"] * (c["desc"] + 1) * PATCH * PATCH)
    return float(enc), float(dec), float(2 * (act + rn + refine + head + local))


def stats(ms):
    ms = sorted(ms)
    med = statistics.median(ms)
    return dict(median_ms=med, mean_ms=sum(ms) / len(ms), min_ms=ms[0], max_ms=ms[-1],
                fps=1000.0 / med, samples_ms=ms)


def bench(args):
    global USE_SDPA
    USE_SDPA = args.sdpa
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    prec = args.precision
    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
    torch.backends.cudnn.allow_tf32 = prec == "tf32"
    cfg = CONFIGS[args.size]
    w, h = (int(v) for v in args.res.split("x"))
    assert w % PATCH == 0 and h % PATCH == 0, "--res must be multiples of 16"
    model = Mast3r(cfg)
    random_init_(model, 0)
    model.eval().to(dev)
    dtype = torch.float16 if prec == "f16" else torch.float32
    if prec == "f16":
        model.half()
    # Parameters used at inference (refinenet4.resConfUnit1 exists but is never run), as rust3r counts.
    params = sum(p.numel() for n, p in model.named_parameters() if "refinenet4.resConfUnit1" not in n)
    amp = torch.autocast(dev.type, dtype=torch.float16) if prec == "amp" else None

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def image():
        return torch.rand(1, 3, h, w, device=dev, dtype=dtype) * 2 - 1

    peak = 0
    results = {}
    with torch.inference_mode():
        ctx = amp if amp is not None else torch.inference_mode()
        with ctx:
            kf, gkf = model.encode(image())

            def run_encoder(img):
                model.encode(img)

            def run_mono(img):
                f, g = model.encode(img)
                model.decode(f, g, f, g)

            def run_pair(img):
                f, g = model.encode(img)
                model.decode(f, g, kf, gkf)

            for what, fn in (("encoder", run_encoder), ("mono", run_mono), ("pair", run_pair)):
                if cuda:
                    torch.cuda.reset_peak_memory_stats(dev)
                ms = []
                for i in range(args.warmup + args.iters):
                    img = image()
                    sync()
                    t = time.perf_counter()
                    fn(img)
                    sync()
                    if i >= args.warmup:
                        ms.append((time.perf_counter() - t) * 1e3)
                if cuda:
                    peak = max(peak, torch.cuda.max_memory_allocated(dev))
                results[what] = stats(ms)
                print(f"  {what:8} median {results[what]['median_ms']:8.2f} ms "
                      f"({results[what]['fps']:.2f} FPS)", file=sys.stderr)
    fe, fd, fh = flops(cfg, h, w)
    for what, flop in (("encoder", fe), ("mono", fe + fd + fh), ("pair", fe + fd + fh)):
        results[what]["gflop"] = flop / 1e9
        results[what]["tflop_per_s"] = flop / (results[what]["median_ms"] * 1e-3) / 1e12
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    doc = {
        "implementation": f"PyTorch {torch.__version__}" + (" (SDPA)" if args.sdpa else ""),
        "device": name,
        "size": args.size,
        "precision": prec,
        "width": w,
        "height": h,
        "params": params,
        "warmup": args.warmup,
        "iters": args.iters,
        **results,
        "weights_bytes": params * (2 if prec == "f16" else 4),
        "peak_memory_bytes": peak,
        "peak_memory_note": "torch.cuda.max_memory_allocated over the measurements (weights included)",
    }
    text = json.dumps(doc, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    else:
        print(text)


# ---------------------------------------------------------------------------------------------
# Parity self-check against the fixture.

_ST_DTYPES = {"F32": torch.float32, "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8,
              "F16": torch.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=_ST_DTYPES[v["dtype"]])
        out[k] = t.reshape(v["shape"])
    return out


def load_fixture_model(root):
    import argparse as _ap
    try:
        torch.serialization.add_safe_globals([_ap.Namespace])
        ckpt = torch.load(f"{root}/tiny_mast3r.pth", map_location="cpu", weights_only=True)
    except Exception:
        ckpt = torch.load(f"{root}/tiny_mast3r.pth", map_location="cpu", weights_only=False)
    sd = {k: v for k, v in ckpt["model"].items() if k != "mask_token" and ".scratch.layer_rn." not in k}
    model = Mast3r(CONFIGS["tiny"])
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return model.eval()


def check_fixture(args):
    root = args.check_fixture
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(args.device)
    model = load_fixture_model(root).to(dev)
    inputs = read_safetensors(f"{root}/inputs.safetensors")
    ref = read_safetensors(f"{root}/outputs.safetensors")
    ours = {}

    def grid_sample(case, key, t, kind):
        rows, cols = ref[f"{case}.grid_rows"], ref[f"{case}.grid_cols"]
        if kind == "nhwc":
            return t[:, rows][:, :, cols]
        if kind == "nchw":
            return t[:, :, rows][:, :, :, cols]
        return t[:, ref[f"{case}.local_feat_tokens"]]

    cases = [("asym512", "pair512", "asym", True), ("mono512", "pair512", "mono", True),
             ("asym224", "pair224", "asym", True), ("asymodd", "pairodd", "asym", False)]
    with torch.no_grad():
        for case, inp, kind, sampled in cases:
            img1 = inputs[f"{inp}.view1.img"].to(dev)
            img2 = inputs[f"{inp}.view2.img"].to(dev)
            tr = [{}, {}]
            f1, g1 = model.encode(img1, tr[0])
            if kind == "asym":
                f2, g2 = model.encode(img2, tr[1])
            else:
                f2, g2 = f1, g1
                tr[1] = {}
            p = model.decode(f1, g1, f2, g2, tr)
            for v in range(2):
                tr[v].update(p[v])
            for v in range(2):
                for k, t in tr[v].items():
                    name = f"{case}.view{v + 1}.{k}"
                    if name not in ref:
                        continue
                    if sampled and k in ("pts3d", "conf", "desc", "desc_conf"):
                        t = grid_sample(case, k, t, "nhwc")
                    elif sampled and k == "dpt_out":
                        t = grid_sample(case, k, t, "nchw")
                    elif sampled and k == "local_feat_raw":
                        t = grid_sample(case, k, t, "tok")
                    ours[name] = t.float().cpu()
    worst, bad, checked = {}, [], 0
    for name, r in ref.items():
        if r.dtype != torch.float32 or name not in ours:
            continue
        o = ours[name]
        if o.shape != r.shape:
            bad.append(f"{name}: shape {tuple(o.shape)} vs {tuple(r.shape)}")
            continue
        scale = r.abs().max().item()
        diff = (o - r).abs().max().item()
        checked += 1
        case = name.split(".")[0]
        worst[case] = max(worst.get(case, 0.0), diff / scale)
        if not diff <= 1e-4 * scale:
            bad.append(f"{name}: max|diff| {diff:.3e} > 1e-4 * {scale:.3e}")
    n_float = sum(1 for t in ref.values() if t.dtype == torch.float32)
    print(f"checked {checked} of {n_float} float tensors; worst normalised difference per case: "
          + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    if bad or checked != n_float:
        print("FAILED:\n" + "\n".join(bad), file=sys.stderr)
        sys.exit(1)
    print("fixture parity: OK")


def compare_outputs(args):
    """Every tensor of the reference outputs file against a `rust3r mast3r-infer` output: same names,
    dtypes and shapes, integers equal, floats within 1e-4 * max|ref| (for checking a GPU run)."""
    ours = read_safetensors(args.compare)
    ref = read_safetensors(args.reference)
    worst, bad = {}, []
    for name, r in ref.items():
        o = ours.get(name)
        if o is None or o.shape != r.shape or o.dtype != r.dtype:
            bad.append(f"{name}: missing or different shape/dtype")
            continue
        if r.dtype != torch.float32:
            if not torch.equal(o, r):
                bad.append(f"{name}: integer values differ")
            continue
        scale = r.abs().max().item()
        diff = (o - r).abs().max().item() if torch.isfinite(o).all() else float("inf")
        case = name.split(".")[0]
        worst[case] = max(worst.get(case, 0.0), diff / scale)
        if not diff <= 1e-4 * scale:
            bad.append(f"{name}: max|diff| {diff:.3e} > 1e-4 * {scale:.3e}")
    extra = sorted(set(ours) - set(ref))
    if extra:
        bad.append(f"not in the reference: {extra}")
    print(f"compared {len(ref)} tensors; worst normalised difference per case: "
          + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    if bad:
        print("FAILED:\n" + "\n".join(bad), file=sys.stderr)
        sys.exit(1)
    print("outputs match the reference")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(CONFIGS), default="full")
    ap.add_argument("--precision", choices=["f32", "tf32", "f16", "amp"], default="tf32")
    ap.add_argument("--res", default="512x384", help="WxH, multiples of 16")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sdpa", action="store_true", help="F.scaled_dot_product_attention")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--check-fixture", metavar="DIR", help="parity self-check on the tiny fixture")
    ap.add_argument("--compare", metavar="OURS", help="check a `rust3r mast3r-infer` output file ...")
    ap.add_argument("--reference", metavar="REF", help="... against this outputs.safetensors")
    args = ap.parse_args()
    if args.compare:
        compare_outputs(args)
    elif args.check_fixture:
        check_fixture(args)
    else:
        bench(args)


if __name__ == "__main__":
    main()
