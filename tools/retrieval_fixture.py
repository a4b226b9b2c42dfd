#!/usr/bin/env python3
"""Parity fixture for rust3r's learned retrieval (crates/mast3r/src/retrieval), made by the
upstream code itself:

* naver/mast3r `mast3r/retrieval/model.py` (RetrievalModel, Whitener, how_select_local) and
  `processor.py` (Retriever: loads the retrieval checkpoint and the ASMK codebook cache);
* rmurai0610/MASt3R-SLAM `mast3r_slam/retrieval_database.py` (RetrievalDatabase.update: feature
  selection, quantisation, ASMK aggregation, inverted-file query and insertion);
* the `asmk` package (jenicek/asmk, with its Cython Hamming kernel) and faiss-cpu.

A tiny random retrieval head (prewhiten, one Linear projector, residual, postwhiten) matching
the encoder width of the input features and a random codebook are saved as upstream saves them
(`torch.save({'model': state_dict, 'args': Namespace})`, and asmk's `save_pickle` of
`Codebook.state_dict()`), loaded back through upstream's `Retriever`, and a sequence of
`RetrievalDatabase.update` calls runs on the given encoder features. Everything each call
computes is recorded.

Inputs: `--features`, a safetensors file with `feat.<j>` [N, E] encoder outputs of the frames
in query order (rust3r writes it: `RUST3R_RETRIEVAL_DUMP=features.safetensors cargo test
--release --workspace --test retrieval -- --ignored dump_encoder_features`; the encoder itself
is checked against upstream by crates/mast3r/tests/parity.rs), and checkouts of the upstream
repositories (`--mast3r`, `--mast3r-slam`). Needs torch, numpy, safetensors, faiss-cpu and asmk
(built from its repository: `pip install faiss-cpu pyaml cython`, regenerate its C file for
current Pythons with `cython -3 cython/hamming.pyx -o cython/hamming.c`, then
`pip install --no-build-isolation <asmk checkout>`). Made with torch 2.15, numpy 2.4, faiss-cpu
1.15.1, asmk 2a96d9c, naver/mast3r f5209af, MASt3R-SLAM b0ae540.

    python3 tools/retrieval_fixture.py --features features.safetensors \
        --mast3r /tmp/mast3r --mast3r-slam /tmp/MASt3R-SLAM \
        --out crates/mast3r/tests/fixtures/retrieval --seed 0 --nclusters 64 --nfeat 300
"""

import argparse
import importlib.util
import json
import os
import pickle
import sys
import types

import numpy as np
import torch
from safetensors.numpy import load_file, save_file


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


def upstream_modules(mast3r_dir, slam_dir):
    """Upstream's retrieval modules, with the parts they import but this path never uses
    (dust3r's image loading, the full AsymmetricMASt3R class) stubbed out."""
    stub("mast3r").__path__ = []
    stub("mast3r.utils").__path__ = []
    stub("mast3r.utils.path_to_dust3r")
    stub("dust3r").__path__ = []
    stub("dust3r.utils").__path__ = []
    stub("dust3r.utils.image", load_images=None)
    stub("mast3r.model", AsymmetricMASt3R=None)
    stub("mast3r.retrieval").__path__ = []
    model = load_source("mast3r.retrieval.model", os.path.join(mast3r_dir, "mast3r/retrieval/model.py"))
    proc = load_source("mast3r.retrieval.processor", os.path.join(mast3r_dir, "mast3r/retrieval/processor.py"))
    stub("mast3r_slam").__path__ = []
    db = load_source("mast3r_slam.retrieval_database", os.path.join(slam_dir, "mast3r_slam/retrieval_database.py"))
    return model, proc, db


class Backbone(torch.nn.Module):
    """What RetrievalModel needs of the MASt3R backbone when features come precomputed."""

    def __init__(self, dim):
        super().__init__()
        self.enc_embed_dim = dim


class Frame:
    def __init__(self, feat):
        self.feat = feat


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--features", required=True)
    ap.add_argument("--mast3r", required=True, help="naver/mast3r checkout")
    ap.add_argument("--mast3r-slam", required=True, help="rmurai0610/MASt3R-SLAM checkout")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nclusters", type=int, default=64)
    ap.add_argument("--nfeat", type=int, default=300)
    ap.add_argument("--k", type=int, default=3, help="retrieval.k (MASt3R-SLAM config/base.yaml)")
    ap.add_argument("--min-thresh", type=float, default=5e-3, help="retrieval.min_thresh")
    ap.add_argument("--no-add", default="", help="comma-separated query steps with add_after_query=False")
    args = ap.parse_args()

    model_mod, proc_mod, db_mod = upstream_modules(args.mast3r, args.mast3r_slam)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    feats = load_file(args.features)
    names = sorted((k for k in feats if k.startswith("feat.")), key=lambda k: int(k.split(".")[1]))
    frames = [feats[k].astype(np.float32) for k in names]
    dim = frames[0].shape[1]

    # A random head as RetrievalModel builds it: prewhiten (float64 Whitener), one Linear
    # projector (hdims = E), residual, postwhiten.
    head_args = argparse.Namespace(
        pretrained="tiny", freeze_backbone=1, prewhiten=1, hdims=str(dim), residual=True,
        postwhiten=1, featweights="l2norm", nfeat=args.nfeat, nclusters=args.nclusters, imsize=512,
    )
    net = model_mod.RetrievalModel(
        Backbone(dim), freeze_backbone=1, prewhiten=1, hdims=[dim], residual=True, postwhiten=1,
        featweights="l2norm", nfeat=args.nfeat,
    )
    with torch.no_grad():
        allf = np.concatenate(frames, 0).astype(np.float64)
        m, P = model_mod.pcawhitenlearn_shrinkage(allf[rng.choice(len(allf), 2000, replace=False)])
        net.prewhiten.load_state_dict({"m": torch.from_numpy(m), "p": torch.from_numpy(np.real(P).copy())})
        lin = net.projector[0]
        lin.weight.copy_(torch.randn_like(lin.weight) / np.sqrt(dim))
        lin.bias.copy_(torch.randn_like(lin.bias) * 0.1)
        net.postwhiten.m.copy_(torch.randn(1, dim, dtype=torch.float64) * 0.1)
        q, _ = torch.linalg.qr(torch.randn(dim, dim, dtype=torch.float64))
        net.postwhiten.p.copy_(q * torch.rand(dim, dtype=torch.float64)[None] * 2.0)
    os.makedirs(args.out, exist_ok=True)
    ckpt = os.path.join(args.out, "tiny_retrieval_trainingfree.pth")
    torch.save({"model": net.state_dict(), "args": head_args}, ckpt)

    # Codebook: centroids near the head's local features (so words are shared between frames).
    sel = []
    for f in frames:
        x = torch.from_numpy(f)[None]
        pre = net.prewhiten(x)
        proj = net.projector(pre) + pre
        att = net.attention(proj)
        post = net.postwhiten(proj)
        t, _, _ = model_mod.how_select_local(post, att, net.nfeat)
        sel.append(t[0].detach().numpy())
    sel = np.concatenate(sel, 0)
    cents = sel[rng.choice(len(sel), args.nclusters, replace=False)]
    cents = (cents + rng.normal(size=cents.shape) * cents.std() * 0.5).astype(np.float32)
    import asmk.codebook
    import asmk.index
    from asmk import io_helpers

    cdb = asmk.codebook.Codebook(asmk.index.FaissL2Index(), size=args.nclusters)
    cdb.index(cents)
    cb_path = os.path.join(args.out, "tiny_retrieval_codebook.pkl")
    io_helpers.save_pickle(cb_path, cdb.state_dict())
    # The same state in other pickle protocols and memory orders, for the reader's tests.
    state = cdb.state_dict()
    for proto in (2, 5):
        with open(os.path.join(args.out, f"codebook_protocol{proto}.pkl"), "wb") as fh:
            pickle.dump(state, fh, protocol=proto)
    fstate = {**state, "state": {"centroids": np.asfortranarray(cents)}}
    with open(os.path.join(args.out, "codebook_fortran.pkl"), "wb") as fh:
        pickle.dump(fstate, fh, protocol=4)
    with open(os.path.join(args.out, "codebook_bare_f8_bigendian.pkl"), "wb") as fh:
        pickle.dump(cents.astype(">f8"), fh, protocol=4)

    # Upstream's database, loaded as MASt3R-SLAM loads it (Retriever with our backbone).
    # Upstream predates torch 2.6's weights_only default; its checkpoints hold a Namespace.
    torch.serialization.add_safe_globals([argparse.Namespace])
    rdb = db_mod.RetrievalDatabase(ckpt, backbone=Backbone(dim), device="cpu")

    # Record what each update computes.
    rec = {}
    orig_select = db_mod.how_select_local

    def select(feat, attn, nfeat):
        out = orig_select(feat, attn, nfeat)
        rec["features"], _, rec["indices"] = (o[0].detach().numpy() for o in out)
        return out

    db_mod.how_select_local = select
    kern = rdb.ivf_builder.kernel
    orig_agg = kern.aggregate_image

    def agg(des, word_ids, **kw):
        ades, ids = orig_agg(des, word_ids, **kw)
        rec.setdefault("agg", []).append((word_ids.copy(), ades.copy(), ids.copy()))
        return ades, ids

    kern.aggregate_image = agg
    orig_query = rdb.query

    def query(feat, ids):
        ranks, scores, topk = orig_query(feat, ids)
        full = np.empty_like(scores)
        full[np.arange(scores.shape[0])[:, None], ranks] = scores
        rec["scores"] = full[0]
        return ranks, scores, topk

    rdb.query = query

    def unpack(codes, d):
        bits = np.unpackbits(codes.astype(">u4").view(np.uint8), axis=1)
        return bits[:, :d]

    no_add = {int(s) for s in args.no_add.split(",") if s}
    out, meta = {}, {"steps": len(frames), "k": args.k, "min_thresh": args.min_thresh, "add": []}
    with torch.no_grad():
        for j, f in enumerate(frames):
            rec.clear()
            add = j not in no_add
            got = rdb.update(Frame(torch.from_numpy(f)[None]), add_after_query=add, k=args.k, min_thresh=args.min_thresh)
            meta["add"].append(add)
            p = f"step{j}."
            out[p + "indices"] = rec["indices"].astype(np.int64)
            out[p + "features"] = rec["features"].astype(np.float32)
            aggs = rec.get("agg", [])
            if j > 0:
                qw, qcodes, qids = aggs.pop(0)
                out[p + "assign"] = qw.astype(np.int64)
                out[p + "query_words"] = qids.astype(np.int64)
                out[p + "query_bits"] = unpack(qcodes, dim)
                out[p + "scores"] = rec["scores"].astype(np.float64)
            r = np.full(args.k, -1, dtype=np.int64)
            r[: len(got)] = got
            out[p + "retrieved"] = r
            if add:
                sw, scodes, sids = aggs.pop(0)
                out[p + "stored_words"] = sids.astype(np.int64)
                out[p + "stored_bits"] = unpack(scodes, dim)
            assert not aggs
    save_file(out, os.path.join(args.out, "expected.safetensors"), metadata={"meta": json.dumps(meta)})
    save_file({k: feats[k] for k in names}, os.path.join(args.out, "features.safetensors"),
              metadata={"frames": json.dumps([k for k in names])})
    print(json.dumps(meta), "retrieved:", [out[f"step{j}.retrieved"].tolist() for j in range(len(frames))])


if __name__ == "__main__":
    main()
