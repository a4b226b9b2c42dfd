//! The tiny fixture checkpoint (.pth and .safetensors), the released layout, conversions.

mod common;

use std::collections::BTreeMap;

use common::*;
use rust3r_mast3r::{
    ActivationKind, Checkpoint, LoadOptions, MODEL_STRING_METADATA_KEY, Mast3rConfig, PthFile,
    SafetensorsFile, expected_layout, write_safetensors,
};

fn tiny_options() -> LoadOptions {
    LoadOptions {
        model_string: Some(tiny_model_string()),
    }
}

#[test]
fn pth_reader_sees_the_pickle() {
    let f = PthFile::open(tiny_pth()).unwrap();
    assert_eq!(f.tensor_names().count(), 669);
    assert_eq!(f.tensor_names().next(), Some("mask_token"));
    assert_eq!(f.model_string(), Some(tiny_model_string().as_str()));
    let i = f.tensor_info("patch_embed.proj.weight").unwrap();
    assert_eq!(i.shape, [64, 3, 16, 16]);
    assert_eq!(i.stride, [768, 256, 16, 1]);
    assert_eq!(i.storage_offset, 0);
    // Aliases share a storage.
    let a = f
        .tensor_info("downstream_head1.dpt.scratch.layer2_rn.weight")
        .unwrap();
    let b = f
        .tensor_info("downstream_head1.dpt.scratch.layer_rn.1.weight")
        .unwrap();
    assert_eq!(a.storage_key, b.storage_key);
}

#[test]
fn pth_and_safetensors_load_identical_tensors() {
    let pth = Checkpoint::load(tiny_pth()).unwrap();
    let st = Checkpoint::load_with(tiny_st(), &tiny_options()).unwrap();
    assert_eq!(pth.tensors().len(), 669);
    assert_eq!(
        pth.tensors().keys().collect::<Vec<_>>(),
        st.tensors().keys().collect::<Vec<_>>()
    );
    for (k, a) in pth.tensors() {
        let b = st.tensor(k).unwrap();
        assert_eq!(a.shape, b.shape, "{k}");
        // Bit-identical, not just close.
        let (ab, bb): (Vec<u32>, Vec<u32>) = (
            a.data.iter().map(|x| x.to_bits()).collect(),
            b.data.iter().map(|x| x.to_bits()).collect(),
        );
        assert!(ab == bb, "{k} differs");
    }
    assert_eq!(pth.config(), st.config());

    // Cross-check a few values against an independent read of the safetensors file.
    let mut raw = SafetensorsFile::open(tiny_st()).unwrap();
    let t = raw
        .read_tensor("downstream_head2.head_local_features.fc2.bias")
        .unwrap();
    assert_eq!(
        &t,
        pth.tensor("downstream_head2.head_local_features.fc2.bias")
            .unwrap()
    );
}

#[test]
fn tiny_config_matches_config_json() {
    let c = json(&tiny("config.json"));
    let ckpt = Checkpoint::load(tiny_pth()).unwrap();
    let cfg = ckpt.config();
    let ctor = &c["constructor"];
    let derived = &c["derived"];
    let tiny = &c["head_constants_overridden_for_tiny_model"]["tiny"];
    let u = |v: &serde_json::Value| v.as_u64().unwrap() as usize;
    let arr = |v: &serde_json::Value| v.as_array().unwrap().iter().map(u).collect::<Vec<_>>();

    assert_eq!(cfg.enc_embed_dim, u(&ctor["enc_embed_dim"]));
    assert_eq!(cfg.enc_depth, u(&ctor["enc_depth"]));
    assert_eq!(cfg.enc_num_heads, u(&ctor["enc_num_heads"]));
    assert_eq!(cfg.dec_embed_dim, u(&ctor["dec_embed_dim"]));
    assert_eq!(cfg.dec_depth, u(&ctor["dec_depth"]));
    assert_eq!(cfg.dec_num_heads, u(&ctor["dec_num_heads"]));
    assert_eq!(cfg.patch_size, u(&ctor["patch_size"]));
    assert_eq!(cfg.img_size.to_vec(), arr(&ctor["img_size"]));
    assert_eq!(cfg.two_confs, ctor["two_confs"].as_bool().unwrap());
    assert_eq!(
        cfg.landscape_only,
        ctor["landscape_only"].as_bool().unwrap()
    );
    assert_eq!(cfg.head_type, ctor["head_type"].as_str().unwrap());
    assert_eq!(cfg.output_mode, ctor["output_mode"].as_str().unwrap());
    assert_eq!(cfg.desc_mode, ctor["desc_mode"].as_str().unwrap());
    assert_eq!(
        cfg.norm_im2_in_dec,
        ctor["norm_im2_in_dec"].as_bool().unwrap()
    );
    assert_eq!(cfg.patch_embed_cls, "PatchEmbedDust3R");

    assert_eq!(cfg.enc_head_dim(), u(&derived["enc_head_dim"]));
    assert_eq!(cfg.dec_head_dim(), u(&derived["dec_head_dim"]));
    assert_eq!(cfg.enc_mlp_hidden, u(&derived["enc_mlp_hidden"]));
    assert_eq!(cfg.dec_mlp_hidden, u(&derived["dec_mlp_hidden"]));
    assert_eq!(cfg.rope_base as f64, derived["rope_base"].as_f64().unwrap());
    assert_eq!(cfg.dpt.hooks.to_vec(), arr(&derived["dpt_hooks"]));
    assert_eq!(cfg.dpt.dim_tokens.to_vec(), arr(&derived["dpt_dim_tokens"]));
    assert_eq!(cfg.dpt.num_channels, u(&derived["dpt_num_channels"]));
    assert_eq!(cfg.local_feat.desc_dim, u(&derived["local_feat_dim"]));
    assert_eq!(cfg.local_feat.in_dim, u(&derived["local_feat_in_dim"]));
    assert_eq!(cfg.local_feat.hidden_dim, u(&derived["local_feat_hidden"]));
    assert_eq!(cfg.local_feat.out_dim, u(&derived["local_feat_out_dim"]));
    assert_eq!(
        cfg.layernorm_eps,
        derived["layernorm_eps"].as_f64().unwrap()
    );
    assert_eq!(cfg.local_feat_channels(), 25);

    assert_eq!(cfg.dpt.feature_dim, u(&tiny["dpt_feature_dim"]));
    assert_eq!(cfg.dpt.last_dim, u(&tiny["dpt_last_dim"]));
    assert_eq!(cfg.dpt.layer_dims.to_vec(), arr(&tiny["dpt_layer_dims"]));

    assert_eq!(cfg.depth_mode.kind, ActivationKind::Exp);
    assert_eq!(
        (cfg.depth_mode.vmin, cfg.depth_mode.vmax),
        (f64::NEG_INFINITY, f64::INFINITY)
    );
    assert_eq!(
        (cfg.conf_mode.vmin, cfg.conf_mode.vmax),
        (1.0, f64::INFINITY)
    );
    let dc = cfg.desc_conf_mode.unwrap();
    assert_eq!(
        (dc.kind, dc.vmin, dc.vmax),
        (ActivationKind::Exp, 0.0, f64::INFINITY)
    );

    // Same string as upstream load_model instantiates.
    assert_eq!(
        cfg.to_model_string(),
        c["instantiated_model_string"].as_str().unwrap()
    );
    assert_eq!(
        cfg.source_model_string.as_deref(),
        c["checkpoint_model_string"].as_str()
    );
    // The layout equals the file's key set.
    assert_eq!(expected_layout(cfg), shapes_of(ckpt.tensors()));
    // The built-in tiny configuration (benchmarks) is this one.
    let mut tiny_cfg = Mast3rConfig::tiny_fixture();
    tiny_cfg.source_model_string = cfg.source_model_string.clone();
    assert_eq!(&tiny_cfg, cfg);
}

#[test]
fn released_layout_matches_expected_layout_exactly() {
    let j = json(&tiny("released_checkpoint_layout.json"));
    let shapes: BTreeMap<String, Vec<usize>> = j["keys"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_u64().unwrap() as usize)
                    .collect(),
            )
        })
        .collect();
    assert_eq!(shapes.len(), j["n_keys"].as_u64().unwrap() as usize);
    let ctor = j["constructor"].as_str().unwrap();

    // The same derivation the loader runs.
    let cfg = Mast3rConfig::from_shapes(&shapes, Some(ctor)).unwrap();
    let layout = expected_layout(&cfg);
    let missing: Vec<_> = shapes.keys().filter(|k| !layout.contains_key(*k)).collect();
    let extra: Vec<_> = layout.keys().filter(|k| !shapes.contains_key(*k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "not derived: {missing:?}; not in file: {extra:?}"
    );
    assert_eq!(layout, shapes);

    assert_eq!(
        (
            cfg.enc_embed_dim,
            cfg.enc_depth,
            cfg.enc_num_heads,
            cfg.enc_mlp_hidden
        ),
        (1024, 24, 16, 4096)
    );
    assert_eq!(
        (
            cfg.dec_embed_dim,
            cfg.dec_depth,
            cfg.dec_num_heads,
            cfg.dec_mlp_hidden
        ),
        (768, 12, 12, 3072)
    );
    assert_eq!(cfg.dpt.hooks, [0, 6, 9, 12]);
    assert_eq!(cfg.dpt.dim_tokens, [1024, 768, 768, 768]);
    assert_eq!(cfg.dpt.layer_dims, [96, 192, 384, 768]);
    assert_eq!(
        (cfg.dpt.feature_dim, cfg.dpt.last_dim, cfg.dpt.num_channels),
        (256, 128, 4)
    );
    assert_eq!(
        (
            cfg.local_feat.desc_dim,
            cfg.local_feat.in_dim,
            cfg.local_feat.hidden_dim,
            cfg.local_feat.out_dim
        ),
        (24, 1792, 7168, 6400)
    );
    assert_eq!(cfg.to_model_string(), ctor);

    // Unique parameters: everything but the 8 aliases.
    let numel = |s: &Vec<usize>| s.iter().product::<usize>();
    let unique: usize = layout
        .iter()
        .filter(|(k, _)| !k.contains(".scratch.layer_rn."))
        .map(|(_, s)| numel(s))
        .sum();
    assert_eq!(unique as u64, j["n_unique_params"].as_u64().unwrap());

    // The built-in released configuration (benchmarks) is this one.
    let mut released = Mast3rConfig::released();
    released.source_model_string = Some(ctor.to_string());
    assert_eq!(released, cfg);

    // Without a constructor string the released model's values are assumed: same config.
    let mut bare = Mast3rConfig::from_shapes(&shapes, None).unwrap();
    assert_eq!(bare.source_model_string.take(), None);
    let mut with = cfg.clone();
    with.source_model_string = None;
    assert_eq!(bare, with);
}

#[test]
fn round_trip_pth_to_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    let pth = Checkpoint::load(tiny_pth()).unwrap();
    let out = dir.path().join("tiny.safetensors");
    pth.save_safetensors(&out).unwrap();
    // The constructor string travels in the metadata, so no options are needed.
    let f = SafetensorsFile::open(&out).unwrap();
    assert_eq!(
        f.metadata().unwrap()[MODEL_STRING_METADATA_KEY],
        tiny_model_string()
    );
    let back = Checkpoint::load(&out).unwrap();
    assert_eq!(back.tensors(), pth.tensors());
    assert_eq!(back.config(), pth.config());
    // No temporary files left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("tiny.safetensors")]);

    // Overwriting works and gives the same bytes.
    let first = std::fs::read(&out).unwrap();
    back.save_safetensors(&out).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), first);
}

#[test]
fn config_without_string_uses_canonical_string_on_save() {
    // A safetensors file without metadata, loaded with an explicit string, then saved: the
    // original string is kept.
    let dir = tempfile::tempdir().unwrap();
    let st = Checkpoint::load_with(tiny_st(), &tiny_options()).unwrap();
    let out = dir.path().join("a.safetensors");
    st.save_safetensors(&out).unwrap();
    assert_eq!(Checkpoint::load(&out).unwrap().config(), st.config());
}

#[test]
fn module_prefix_is_stripped() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, tensors) = Checkpoint::load(tiny_pth()).unwrap().into_parts();
    let prefixed: BTreeMap<_, _> = tensors
        .iter()
        .map(|(k, v)| (format!("module.{k}"), v.clone()))
        .collect();
    let meta = BTreeMap::from([(MODEL_STRING_METADATA_KEY.to_string(), tiny_model_string())]);
    let p = dir.path().join("dp.safetensors");
    write_safetensors(&p, &prefixed, &meta).unwrap();
    let back = Checkpoint::load(&p).unwrap();
    assert_eq!(back.tensors(), &tensors);
    assert_eq!(back.config(), &cfg);

    // Also in a .pth: rename every key in the pickle.
    let bytes = tiny_with_pickle(|pkl| {
        // BINUNICODE carries a 4-byte length before the text; rewrite each key entry.
        let mut out = Vec::new();
        let mut i = 0;
        let keys: std::collections::HashSet<&str> = tensors.keys().map(String::as_str).collect();
        while i < pkl.len() {
            if pkl[i] == b'X' && i + 5 <= pkl.len() {
                let n = u32::from_le_bytes(pkl[i + 1..i + 5].try_into().unwrap()) as usize;
                if let Some(s) = pkl
                    .get(i + 5..i + 5 + n)
                    .and_then(|b| std::str::from_utf8(b).ok())
                    && keys.contains(s)
                {
                    let new = format!("module.{s}");
                    out.push(b'X');
                    out.extend((new.len() as u32).to_le_bytes());
                    out.extend(new.as_bytes());
                    i += 5 + n;
                    continue;
                }
            }
            out.push(pkl[i]);
            i += 1;
        }
        *pkl = out;
    });
    let p = write(dir.path(), "dp.pth", &bytes);
    let f = PthFile::open(&p).unwrap();
    assert!(f.tensor_names().all(|n| n.starts_with("module.")));
    let back = Checkpoint::load(&p).unwrap();
    assert_eq!(back.tensors(), &tensors);
}

#[test]
fn half_precision_safetensors_convert_to_f32() {
    // Write an F16 copy by hand and check the conversion against half's.
    let dir = tempfile::tempdir().unwrap();
    let header = r#"{"a":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]}}"#;
    let mut h = header.as_bytes().to_vec();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend(&h);
    for x in [1.0f32, -0.5, 65504.0, 1e-3] {
        bytes.extend(half::f16::from_f32(x).to_le_bytes());
    }
    bytes.extend(half::bf16::from_f32(3.25).to_le_bytes());
    let p = write(dir.path(), "h.safetensors", &bytes);
    let mut f = SafetensorsFile::open(&p).unwrap();
    let a = f.read_tensor("a").unwrap();
    assert_eq!(a.shape, [2, 2]);
    assert_eq!(
        a.data,
        vec![1.0, -0.5, 65504.0, half::f16::from_f32(1e-3).to_f32()]
    );
    assert_eq!(f.read_tensor("b").unwrap().data, vec![3.25]);
}

#[test]
fn released_model_work_per_frame() {
    // Hand count for 512x384 (768 tokens): encoder 24 x (24 N E^2 + 4 N^2 E) + patch embedding.
    let cfg = Mast3rConfig::released();
    let [enc, dec, heads] = rust3r_mast3r::Mast3r::flops(&cfg, 384, 512);
    let n = 768.0f64;
    let e = 1024.0f64;
    let hand_enc = 2.0 * n * 768.0 * e + 24.0 * (24.0 * n * e * e + 4.0 * n * n * e);
    assert!(
        (enc - hand_enc).abs() < 1e-6 * hand_enc,
        "{enc} vs {hand_enc}"
    );
    println!(
        "GFLOP: encoder {:.1}, decoder {:.1}, heads {:.1}",
        enc / 1e9,
        dec / 1e9,
        heads / 1e9
    );
    // MASt3R-SLAM's figure: about 1.5 TFLOP per tracked frame.
    let total = enc + dec + heads;
    assert!((1.2e12..2.0e12).contains(&total), "{total}");
    assert_eq!(
        cfg.inference_params(),
        688_638_856 - 768 - 2 * 2 * (256 * 256 * 9 + 256)
    );
}
