"""Reference fixture for rust3r's LPIPS (run where PyTorch is installed).

LPIPS v0.1 (Zhang et al. 2018, the `lpips` package that gsplat, nerfstudio and torchmetrics use),
written here from the package's source in plain torch so that it runs without the `lpips` and
`torchvision` packages: ScalingLayer -> backbone slices (AlexNet: torchvision `features[0:2], [2:5],
[5:8], [8:10], [10:12]`; VGG16: `[0:4], [4:9], [9:16], [16:23], [23:30]`) -> unit-normalise each
feature over channels (eps 1e-10) -> squared difference -> 1x1 conv without bias (`lin{k}.model.1`)
-> spatial mean -> sum over the five layers.

Backbones get small random channel counts so the fixture stays tiny; key names are torchvision's and
lpips's. Weights are written in both torch.save formats: legacy (pre-1.6, like torchvision's
`alexnet-owt-7be5be79.pth` and lpips's `weights/v0.1/alex.pth`) and zip. Reference values are
computed in float64. Also records the key layout (names, shapes) of the full-size networks.

usage: python lpips_fixture.py OUTDIR
"""
import json, os, sys
import torch
import torch.nn.functional as F

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
g = torch.Generator().manual_seed(20261126)

SHIFT = torch.tensor([-.030, -.088, -.188], dtype=torch.float64).view(1, 3, 1, 1)
SCALE = torch.tensor([.458, .448, .450], dtype=torch.float64).view(1, 3, 1, 1)

# torchvision `features` layer lists: ("conv", cin, cout, k, stride, pad) | ("relu",) | ("pool", k, s)
def alex_layers(c):
    c1, c2, c3, c4, c5 = c
    return [("conv", 3, c1, 11, 4, 2), ("relu",), ("pool", 3, 2),
            ("conv", c1, c2, 5, 1, 2), ("relu",), ("pool", 3, 2),
            ("conv", c2, c3, 3, 1, 1), ("relu",),
            ("conv", c3, c4, 3, 1, 1), ("relu",),
            ("conv", c4, c5, 3, 1, 1), ("relu",), ("pool", 3, 2)]
ALEX_SLICES = [(0, 2), (2, 5), (5, 8), (8, 10), (10, 12)]

def vgg_layers(c):
    a, b, d, e = c  # vgg16: 64, 128, 256, 512
    L, cin = [], 3
    for i, (n, ch) in enumerate([(2, a), (2, b), (3, d), (3, e), (3, e)]):
        if i: L.append(("pool", 2, 2))
        for _ in range(n):
            L += [("conv", cin, ch, 3, 1, 1), ("relu",)]
            cin = ch
    L.append(("pool", 2, 2))
    return L
VGG_SLICES = [(0, 4), (4, 9), (9, 16), (16, 23), (23, 30)]

def make_weights(layers, slices):
    sd, chans = {}, []
    for i, l in enumerate(layers):
        if l[0] == "conv":
            _, cin, cout, k, _, _ = l
            fan = cin * k * k
            sd[f"features.{i}.weight"] = torch.randn(cout, cin, k, k, generator=g, dtype=torch.float64) * (2.0 / fan) ** 0.5
            sd[f"features.{i}.bias"] = torch.randn(cout, generator=g, dtype=torch.float64) * 0.05
    for a, b in slices:
        chans.append([l for l in layers[a:b] if l[0] == "conv"][-1][2])
    # classifier weights torchvision also stores; a loader must ignore them
    sd["classifier.1.weight"] = torch.randn(4, 4, generator=g, dtype=torch.float64)
    lin = {f"lin{k}.model.1.weight": torch.rand(1, c, 1, 1, generator=g, dtype=torch.float64) * 0.2
           for k, c in enumerate(chans)}
    return sd, lin

def run(layers, slices, sd, x):
    feats, h = [], x
    for a, b in slices:
        for i in range(a, b):
            l = layers[i]
            if l[0] == "conv":
                h = F.conv2d(h, sd[f"features.{i}.weight"], sd[f"features.{i}.bias"], stride=l[4], padding=l[5])
            elif l[0] == "relu":
                h = F.relu(h)
            else:
                h = F.max_pool2d(h, kernel_size=l[1], stride=l[2])
        feats.append(h)
    return feats

def lpips(layers, slices, sd, lin, img0, img1):
    # img in [0, 1], NCHW; normalize=True maps to [-1, 1]
    x0 = ((2 * img0 - 1) - SHIFT) / SCALE
    x1 = ((2 * img1 - 1) - SHIFT) / SCALE
    f0, f1 = run(layers, slices, sd, x0), run(layers, slices, sd, x1)
    per_layer = []
    for k in range(5):
        n0 = f0[k] / (torch.sqrt(torch.sum(f0[k] ** 2, dim=1, keepdim=True)) + 1e-10)
        n1 = f1[k] / (torch.sqrt(torch.sum(f1[k] ** 2, dim=1, keepdim=True)) + 1e-10)
        d = (n0 - n1) ** 2
        per_layer.append(F.conv2d(d, lin[f"lin{k}.model.1.weight"]).mean(dim=(2, 3)).view(-1))
    return sum(per_layer), per_layer

# image pairs: smooth random field + a perturbed copy; sizes include odd ones
def image(h, w):
    base = torch.rand(1, 3, h // 8 + 2, w // 8 + 2, generator=g, dtype=torch.float64)
    return F.interpolate(base, size=(h, w), mode="bilinear", align_corners=False).clamp(0, 1)

pairs = []
for (h, w) in [(64, 64), (83, 117), (96, 72)]:
    a = image(h, w)
    b = (a + 0.08 * torch.randn(a.shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    pairs.append((a, b))
pairs.append((pairs[0][0], pairs[0][0].clone()))  # identical -> 0

meta = {"pairs": [], "nets": {}}
raw = bytearray()
def put(t):
    global raw
    off = len(raw)
    raw += t.to(torch.float32).contiguous().numpy().tobytes()
    return off
for a, b in pairs:
    h, w = a.shape[2], a.shape[3]
    # stored HWC float32 (as rust3r images are)
    meta["pairs"].append({"height": h, "width": w,
                          "a_offset": put(a[0].permute(1, 2, 0)), "b_offset": put(b[0].permute(1, 2, 0))})
for name, layers, slices, chans in [("alex", alex_layers, ALEX_SLICES, (16, 24, 32, 24, 20)),
                                     ("vgg", vgg_layers, VGG_SLICES, (8, 12, 16, 20))]:
    L = layers(chans)
    sd, lin = make_weights(L, slices)
    # the stored weights are float32; compute the reference from exactly those values
    sd32 = {k: v.float() for k, v in sd.items()}
    lin32 = {k: v.float() for k, v in lin.items()}
    sd64 = {k: v.double() for k, v in sd32.items()}
    lin64 = {k: v.double() for k, v in lin32.items()}
    vals = []
    for a, b in pairs:
        a32 = a.float().double(); b32 = b.float().double()
        v, per = lpips(L, slices, sd64, lin64, a32, b32)
        vals.append({"lpips": v.item(), "per_layer": [p.item() for p in per]})
    meta["nets"][name] = vals
    torch.save(sd32, f"{out}/{name}_backbone_legacy.pth", _use_new_zipfile_serialization=False)
    torch.save(lin32, f"{out}/{name}_lin_legacy.pth", _use_new_zipfile_serialization=False)
    torch.save(sd32, f"{out}/{name}_backbone_zip.pth")
    torch.save(lin32, f"{out}/{name}_lin_zip.pth")

# full-size layouts (what users' files hold)
full = {}
for name, L, slices, chans in [("alex", alex_layers((64, 192, 384, 256, 256)), ALEX_SLICES, None),
                               ("vgg", vgg_layers((64, 128, 256, 512)), VGG_SLICES, None)]:
    keys = {}
    for i, l in enumerate(L):
        if l[0] == "conv":
            keys[f"features.{i}.weight"] = [l[2], l[1], l[3], l[3]]
            keys[f"features.{i}.bias"] = [l[2]]
    lins = {}
    for k, (a, b) in enumerate(slices):
        c = [l for l in L[a:b] if l[0] == "conv"][-1][2]
        lins[f"lin{k}.model.1.weight"] = [1, c, 1, 1]
    full[name] = {"backbone": keys, "lin": lins}
meta["full_size_layout"] = full
try:
    import torchvision
    tv = {"alex": torchvision.models.alexnet(), "vgg": torchvision.models.vgg16()}
    for name, m in tv.items():
        got = {k: list(v.shape) for k, v in m.state_dict().items() if k.startswith("features.")}
        assert got == full[name]["backbone"], (name, got)
    meta["full_size_layout_checked_against_torchvision"] = torchvision.__version__
except ImportError:
    meta["full_size_layout_checked_against_torchvision"] = None
meta["torch"] = torch.__version__
with open(f"{out}/images.f32", "wb") as f:
    f.write(raw)
with open(f"{out}/reference.json", "w") as f:
    json.dump(meta, f, indent=1)
print(json.dumps({k: v for k, v in meta.items() if k == "nets"}, indent=1))
