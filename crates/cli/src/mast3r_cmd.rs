//! `rust3r mast3r-infer` (the fixture parity tool) and `rust3r bench mast3r` (timing of the
//! network per tracked frame, random weights).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use burn::tensor::{DType, Device, DeviceKind, Distribution, Tensor};
use clap::Args;
use rust3r_gpu::BackendKind;
use rust3r_gpu::profile::Profiler;
use rust3r_mast3r::parity::{run_cases, write_outputs};
use rust3r_mast3r::{Mast3r, Mast3rConfig, Precision, Replayer};

use crate::DeviceArgs;

/// `rust3r mast3r-infer`.
#[derive(Args, Debug)]
pub struct InferArgs {
    /// MASt3R checkpoint (.pth or safetensors).
    #[arg(long)]
    checkpoint: PathBuf,
    /// Inputs laid out like shared/fixtures/mast3r_tiny/inputs.safetensors.
    #[arg(long)]
    inputs: PathBuf,
    /// Output safetensors: the tensor names and shapes of the fixture's outputs.safetensors.
    #[arg(long)]
    out: PathBuf,
    /// Take the pixel/token sampling grids from this reference outputs file instead of the
    /// fixture's rule (every 5th/3rd row and column plus the last).
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Constructor string for safetensors checkpoints that have none (e.g. the fixture's copy).
    #[arg(long)]
    model_string: Option<String>,
    /// f32 or f16. On CUDA, f32 matrix products use TF32 tensor cores unless RUST3R_CUDA_TF32=0
    /// or the tuning file's gpu.cuda.tf32 is false (binary32, for parity checks).
    #[arg(long, default_value = "f32")]
    precision: String,
    #[command(flatten)]
    device: DeviceArgs,
}

/// The Burn device for `--backend` / `--adapter` (wgpu; adapter indices as in `rust3r info`).
/// Refuses a model / image size whose largest buffer exceeds the adapter's storage binding limit
/// (otherwise wgpu fails on the device, far from the cause).
fn check_fits(
    name: &str,
    cuda: bool,
    cfg: &Mast3rConfig,
    h: usize,
    w: usize,
    precision: Precision,
) -> Result<()> {
    let need = Mast3r::largest_buffer_bytes(cfg, h, w, precision);
    // Only wgpu adapters have a binding limit (a CUDA device may share its name with one).
    if cuda {
        return Ok(());
    }
    if let Some(a) = rust3r_gpu::list_adapters()
        .into_iter()
        .find(|a| a.name == name)
    {
        ensure!(
            need <= a.max_storage_binding_size,
            "{name} binds at most {} MiB per buffer, this model at {w}x{h} needs {} MiB (the largest weight \
             or DPT im2col matrix); use a GPU adapter or a smaller model/size",
            a.max_storage_binding_size >> 20,
            need.div_ceil(1 << 20)
        );
    }
    Ok(())
}

fn is_cuda(args: &DeviceArgs) -> bool {
    args.backend
        .parse::<BackendKind>()
        .is_ok_and(|b| b == BackendKind::Cuda)
}

pub fn burn_device(args: &DeviceArgs) -> Result<(Device, String)> {
    let backend: BackendKind = args.backend.parse()?;
    if backend == BackendKind::Cuda {
        // Opening it checks the driver and the index and names the device.
        let gpu = rust3r_gpu::Gpu::new(&args.options()?)?;
        return Ok((Device::from(gpu.device().clone()), gpu.name()));
    }
    let adapters = rust3r_gpu::list_adapters();
    ensure!(
        !adapters.is_empty(),
        "no GPU adapter found (on Linux without a GPU: apt-get install mesa-vulkan-drivers)"
    );
    let Some(index) = args.adapter else {
        let name = rust3r_gpu::Gpu::default_device()
            .map(|g| g.name())
            .unwrap_or_else(|_| "default adapter".into());
        return Ok((Device::wgpu(DeviceKind::DefaultDevice), name));
    };
    let (slot, info) = rust3r_gpu::adapter_slot(index)?;
    let kind = match slot {
        rust3r_gpu::AdapterSlot::DiscreteGpu(i) => DeviceKind::DiscreteGpu(i),
        rust3r_gpu::AdapterSlot::IntegratedGpu(i) => DeviceKind::IntegratedGpu(i),
        rust3r_gpu::AdapterSlot::VirtualGpu(i) => DeviceKind::VirtualGpu(i),
        rust3r_gpu::AdapterSlot::Cpu => DeviceKind::Cpu,
        rust3r_gpu::AdapterSlot::Other(_) => bail!(
            "adapter {index} ({}) has an unsupported device type {}",
            info.name,
            info.device_type
        ),
    };
    Ok((Device::wgpu(kind), info.name.clone()))
}

/// `--precision` (f32 or f16) for `device`: f16 needs the adapter's f16 support.
pub fn precision(s: &str, device: &Device) -> Result<Precision> {
    let p: Precision = s.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    if p == Precision::F16 && !device.supports_dtype(DType::F16) {
        bail!("this adapter has no f16 shader support (wgpu SHADER_F16); use --precision f32");
    }
    Ok(p)
}

pub fn infer(args: &InferArgs) -> Result<()> {
    let (device, name) = burn_device(&args.device)?;
    let precision = precision(&args.precision, &device)?;
    let opts = rust3r_mast3r::LoadOptions {
        model_string: args.model_string.clone(),
    };
    let ckpt = rust3r_mast3r::Checkpoint::load_with(&args.checkpoint, &opts)?;
    check_fits(
        &name,
        is_cuda(&args.device),
        ckpt.config(),
        512,
        512,
        precision,
    )?;
    let model = Mast3r::from_checkpoint(&ckpt, &device, precision)?;
    drop(ckpt);
    let t = Instant::now();
    let out = run_cases(&model, &args.inputs, args.reference.as_deref())?;
    write_outputs(&args.out, &out)?;
    println!(
        "{} -> {}: {} tensors ({:.1} s on {name})",
        args.inputs.display(),
        args.out.display(),
        out.len(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `rust3r bench mast3r`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Architecture: full (the released ViT-L/ViT-B model) or tiny (the fixture's).
    #[arg(long, default_value = "full")]
    size: String,
    /// f32 or f16 (weights and activations; LayerNorm and softmax in f32).
    #[arg(long, default_value = "f32")]
    precision: String,
    /// Image size WxH (multiples of 16).
    #[arg(long, default_value = "512x384")]
    res: String,
    /// Timed iterations per measurement (the median is reported).
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Untimed iterations first.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Run the two heads one after the other (the network's layout before they were stacked),
    /// for A/B runs.
    #[arg(long)]
    no_stacked_heads: bool,
    /// Also time the per-frame work recorded once and replayed (`Replayer`: CUDA graphs on the
    /// CUDA backend): `mono_rp` / `pair_rp` on stdout, `replay.mono` / `replay.pair` in the JSON.
    #[arg(long)]
    graph: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    device: DeviceArgs,
}

fn stats(mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    let n = ms.len();
    let median = if n % 2 == 1 {
        ms[n / 2]
    } else {
        0.5 * (ms[n / 2 - 1] + ms[n / 2])
    };
    serde_json::json!({
        "median_ms": median,
        "mean_ms": ms.iter().sum::<f64>() / n as f64,
        "min_ms": ms[0],
        "max_ms": ms[n - 1],
        "fps": 1000.0 / median,
        "samples_ms": ms,
    })
}

pub fn bench(a: &BenchArgs) -> Result<()> {
    let (device, name) = burn_device(&a.device)?;
    let precision = precision(&a.precision, &device)?;
    let cfg = match a.size.as_str() {
        "full" => Mast3rConfig::released(),
        "tiny" => Mast3rConfig::tiny_fixture(),
        other => bail!("--size {other}: expected full or tiny"),
    };
    let (w, h) = a
        .res
        .split_once('x')
        .and_then(|(w, h)| Some((w.parse::<usize>().ok()?, h.parse::<usize>().ok()?)))
        .with_context(|| format!("--res '{}' is not WxH", a.res))?;
    ensure!(
        w % 16 == 0 && h % 16 == 0 && w > 0 && h > 0,
        "--res {w}x{h}: both sides must be positive multiples of 16"
    );
    ensure!(a.iters > 0, "--iters must be at least 1");

    check_fits(&name, is_cuda(&a.device), &cfg, h, w, precision)?;
    let t = Instant::now();
    let mut model = Mast3r::random(&cfg, &device, precision, 0);
    model.set_stacked_heads(!a.no_stacked_heads);
    model.set_profiler(Profiler::new(a.device.tuning()?.gpu.profile));
    let model = std::sync::Arc::new(model);
    device.sync().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let params = cfg.inference_params();
    let bytes_per = if precision == Precision::F16 { 2 } else { 4 };
    eprintln!(
        "MASt3R {} ({:.1} M parameters, {:?}) on {name}: random weights in {:.1} s; {w}x{h}, {} warm-up + {} timed",
        a.size,
        params as f64 / 1e6,
        precision,
        t.elapsed().as_secs_f64(),
        a.warmup,
        a.iters
    );
    let image = || Tensor::<4>::random([1, 3, h, w], Distribution::Uniform(-1.0, 1.0), &device);
    let keyframe = model.encode(image());

    let sync = || {
        device
            .sync()
            .map_err(|e| anyhow::anyhow!("device error: {e:?}"))
    };
    let mut peak = 0u64;
    let mut measure =
        |what: &str, f: &mut dyn FnMut(Tensor<4>) -> Result<()>| -> Result<serde_json::Value> {
            let mut ms = Vec::with_capacity(a.iters);
            for i in 0..a.warmup + a.iters {
                let img = image();
                sync()?;
                // Profiled phases (--profile): the timed iterations of the per-frame (mono) run only, so
                // first-use kernel compilation in the warm-ups does not count.
                if what == "mono" && i == a.warmup {
                    model.profiler().reset();
                }
                let t = Instant::now();
                f(img)?;
                sync()?;
                if i >= a.warmup {
                    ms.push(t.elapsed().as_secs_f64() * 1e3);
                }
                if let Some(u) = device.memory_pool_usage() {
                    peak = peak.max(u.bytes_reserved);
                }
            }
            let s = stats(ms);
            eprintln!(
                "  {what:8} median {:8.2} ms  ({:.2} FPS)",
                s["median_ms"].as_f64().unwrap_or(0.0),
                s["fps"].as_f64().unwrap_or(0.0)
            );
            Ok(s)
        };
    // Per tracked frame as MASt3R-SLAM runs it: the new frame is encoded once, then decoded with
    // itself (mono: initialisation / keyframe pointmaps) or against the cached keyframe encoding
    // (pair: tracking), both heads and the post-processing included.
    let encoder = measure("encoder", &mut |img| {
        let _ = model.encode(img);
        Ok(())
    })?;
    let mono = measure("mono", &mut |img| {
        let e = model.encode(img);
        let _ = model.mono(&e);
        Ok(())
    })?;
    let mono_phases = model.profiler().phases();
    let pair = measure("pair", &mut |img| {
        let e = model.encode(img);
        let _ = model.decode(&e, &keyframe);
        Ok(())
    })?;
    // The same work recorded once per input size and replayed (the first warm-up records).
    let mut replay = serde_json::Value::Null;
    if a.graph {
        let mut runner = Replayer::new(model.clone());
        // One tracked frame, replayed: encoded, then decoded with itself or with the keyframe.
        let mut frame = |img: Tensor<4>, pair: bool| -> Result<()> {
            let e = runner.encode(img).map_err(anyhow::Error::msg)?;
            if pair {
                runner.decode(&e, &keyframe)
            } else {
                runner.mono(&e)
            }
            .map_err(anyhow::Error::msg)?;
            Ok(())
        };
        let t = Instant::now();
        frame(image(), false)?;
        sync()?;
        let recorded_s = t.elapsed().as_secs_f64();
        let mono_replay = measure("mono_rp", &mut |img| frame(img, false))?;
        let pair_replay = measure("pair_rp", &mut |img| frame(img, true))?;
        eprintln!(
            "  replay: hardware graphs {}, first frame (recording) {recorded_s:.2} s",
            runner.is_hardware()
        );
        replay = serde_json::json!({
            "hardware": runner.is_hardware(),
            "record_s": recorded_s,
            "mono": mono_replay,
            "pair": pair_replay,
        });
    }
    // Matrix-product and convolution work per measurement, and the rate it implies.
    let [fe, fd, fh] = Mast3r::flops(&cfg, h, w);
    let add_rate = |v: &mut serde_json::Value, flop: f64| {
        let ms = v["median_ms"].as_f64().unwrap_or(f64::NAN);
        v["gflop"] = serde_json::json!(flop / 1e9);
        v["tflop_per_s"] = serde_json::json!(flop / (ms * 1e-3) / 1e12);
    };
    let (mut encoder, mut mono, mut pair) = (encoder, mono, pair);
    add_rate(&mut encoder, fe);
    add_rate(&mut mono, fe + fd + fh);
    add_rate(&mut pair, fe + fd + fh);
    let doc = serde_json::json!({
        "implementation": if is_cuda(&a.device) { "rust3r (Burn 0.22.1, CUDA)" } else { "rust3r (Burn 0.22.1, wgpu)" },
        "device": name,
        "size": a.size,
        "precision": format!("{precision:?}").to_lowercase(),
        "width": w,
        "height": h,
        "params": params,
        "warmup": a.warmup,
        "iters": a.iters,
        "encoder": encoder,
        "mono": mono,
        "pair": pair,
        "replay": replay,
        "weights_bytes": params * bytes_per,
        "peak_memory_bytes": peak,
        "peak_memory_note": "largest bytes reserved by Burn's device memory pool after any iteration (weights included)",
    });
    if model.profiler().enabled() {
        eprintln!("  profile of the timed mono iterations (synchronised per phase), ms per frame:");
        for (phase, (secs, n)) in mono_phases {
            eprintln!(
                "  profile {phase:12} {:9.2} ms ({n} calls)",
                secs * 1e3 / a.iters as f64
            );
        }
    }
    eprintln!(
        "  peak device memory reserved: {:.2} GiB",
        peak as f64 / (1u64 << 30) as f64
    );
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("cannot write {}", p.display()))?;
    } else {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    Ok(())
}
