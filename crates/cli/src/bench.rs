//! `rust3r bench raster`: the rasterizer on the gsplat anchor scene
//! (`shared/bench/gsplat/raster_bench.py`), rebuilt bit for bit from the
//! garden SfM points with the same SplitMix64 streams.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use rust3r_splat::train::adam::{AdamConfig, MomentPrecision};
use rust3r_splat::train::init::{self, knn_mean_dist, splitmix_normal};
use rust3r_splat::train::{AdcConfig, Strategy, TrainConfig, Trainer};
use rust3r_splat::{
    BackwardKernel, Camera, GpuSplats, RenderOptions, ShPrecision, render_backward_chunks,
    render_chunks,
};

use crate::DeviceArgs;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Rasterizer forward and forward+backward, gsplat's anchor configurations.
    Raster(RasterArgs),
    /// Time and device memory of full training steps (render, loss, backward, Adam) on the
    /// garden scene tiled to N Gaussians.
    TrainStep(TrainStepArgs),
    /// MASt3R per tracked frame (encoder + mono or pair decode + heads), random weights.
    Mast3r(crate::mast3r_cmd::BenchArgs),
    /// The monocular (MASt3R) SLAM system end to end on an RGB-D sequence with ground truth:
    /// the network (random weights unless --checkpoint) and learned retrieval run on every
    /// frame, the pointmaps come from depth + ground truth; frames per second, memory, ATE.
    SlamMono(crate::bench_slam::SlamMonoArgs),
    /// Host cost of one small GPU operation (an allocation and one launch of a 256-element
    /// kernel): the floor under every pass made of many launches.
    Launch(LaunchArgs),
    /// Host <-> device copies of one buffer (MASt3R-SLAM's pair descriptors are 19 MB): the
    /// host copy alone, an upload through CubeCL's `create_from_slice` (two host copies before
    /// the runtime's staging), through `Gpu::upload` (one) and a read back, in GB/s.
    Transfer(TransferArgs),
    /// The radix sort alone (random 32-bit pairs, the low `--bits` bits set), whole and stage by
    /// stage; the result is checked against the host's stable sort.
    Sort(SortArgs),
    /// Write the garden scene tiled to N Gaussians (the splats `bench raster` renders) as a
    /// splat file, e.g. for `rust3r view` measurements.
    Scene(SceneArgs),
}

#[derive(Args)]
pub struct TransferArgs {
    /// Buffer size in MB (10^6 bytes); the default is one 512x384 view's 24-channel f32
    /// descriptors.
    #[arg(long, default_value_t = 18.9)]
    mb: f64,
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    #[command(flatten)]
    device: DeviceArgs,
}

fn transfer(a: &TransferArgs) -> Result<()> {
    let gpu = a.device.open()?;
    let n = ((a.mb * 1e6) as usize / 4).max(1);
    let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let gbs = |secs: f64| (n * 4) as f64 / secs.max(1e-12) / 1e9;
    for round in 0..a.rounds.max(1) {
        let t = Instant::now();
        let copy = std::hint::black_box(data.clone());
        let host = gbs(t.elapsed().as_secs_f64());
        drop(std::hint::black_box(copy));
        gpu.sync()?;
        let t = Instant::now();
        let old = gpu.client().create_from_slice(&bytes);
        gpu.sync()?;
        let via_slice = gbs(t.elapsed().as_secs_f64());
        drop(old);
        let t = Instant::now();
        let buf = gpu.upload(&data);
        gpu.sync()?;
        let upload = gbs(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let back = gpu.read(&buf)?;
        let read = gbs(t.elapsed().as_secs_f64());
        anyhow::ensure!(back == data, "the read-back differs from the upload");
        println!(
            "round {round} on {}, {:.1} MB: host copy {host:.2} GB/s, create_from_slice {via_slice:.2} GB/s, Gpu::upload {upload:.2} GB/s, read back {read:.2} GB/s",
            gpu.name(),
            (n * 4) as f64 / 1e6
        );
    }
    Ok(())
}

#[derive(Args)]
pub struct SceneArgs {
    #[arg(long, default_value = "../shared/data/garden_points/test_garden.npz")]
    npz: PathBuf,
    /// Gaussian count (base|1m|10m|...).
    #[arg(long, default_value = "1m")]
    n: String,
    /// Output splat file (format by extension).
    #[arg(long)]
    out: PathBuf,
}

fn scene(a: &SceneArgs) -> Result<()> {
    let garden = load_garden(&a.npz)?;
    let nn = knn_mean_dist(&garden.means);
    let n = parse_n(&a.n, garden.means.len())?;
    let set = build_set(&garden, &nn, n);
    let triples = |v: &[f32]| {
        v.chunks_exact(3)
            .map(|c| [c[0], c[1], c[2]])
            .collect::<Vec<_>>()
    };
    let splats = rust3r_io::Splats {
        means: triples(&set.means),
        log_scales: triples(&set.log_scales),
        rotations: set
            .quats
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
        opacity_logits: vec![0.0; n],
        sh_degree: 3,
        sh: set.sh,
    };
    rust3r_io::save_splats(&a.out, &splats)
        .with_context(|| format!("cannot write {}", a.out.display()))?;
    println!("wrote {} ({n} Gaussians)", a.out.display());
    Ok(())
}

#[derive(Args)]
pub struct SortArgs {
    /// Number of key-value pairs (the rasterizer's tile sort at 10M Gaussians, 1080p: 17.3M).
    #[arg(long, default_value_t = 17_344_962)]
    n: usize,
    /// Key bits to sort by (tile ids at 1080p: 13; depth keys: 32).
    #[arg(long, default_value_t = 13)]
    bits: u32,
    #[arg(long, default_value_t = 9)]
    iters: usize,
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Before those, sorts until this many milliseconds have passed (see `bench raster`).
    #[arg(long, default_value_t = 1000)]
    warmup_ms: u64,
    #[command(flatten)]
    device: DeviceArgs,
}

fn sort(a: &SortArgs) -> Result<()> {
    use rust3r_gpu::sort::{STAGES, sort_pairs, sort_pairs_staged};
    anyhow::ensure!(
        (1..=32).contains(&a.bits),
        "--bits must be 1..=32, got {}",
        a.bits
    );
    let gpu = a.device.open()?;
    let mask = if a.bits == 32 {
        u32::MAX
    } else {
        (1u32 << a.bits) - 1
    };
    // Reproducible keys: the initialisation's SplitMix64 stream.
    let keys: Vec<u32> = (1..=a.n as u64)
        .map(|i| init::splitmix(0, i) as u32 & mask)
        .collect();
    let values: Vec<u32> = (0..a.n as u32).collect();
    let (kb, vb) = (gpu.upload(&keys), gpu.upload(&values));
    // Correctness once: stable order of the host sort.
    let (sk, sv) = sort_pairs(&gpu, &kb, &vb, a.bits);
    let (sk, sv) = (gpu.read(&sk)?, gpu.read(&sv)?);
    let mut order: Vec<u32> = values.clone();
    order.sort_by_key(|&i| keys[i as usize]);
    anyhow::ensure!(
        sv == order,
        "the device sort's values differ from the host's stable sort"
    );
    anyhow::ensure!(
        sk.iter().zip(&order).all(|(&k, &i)| k == keys[i as usize]),
        "the device sort's keys are wrong"
    );
    let warm_start = Instant::now();
    while warm_start.elapsed().as_millis() < a.warmup_ms as u128 {
        drop(sort_pairs(&gpu, &kb, &vb, a.bits));
        gpu.sync()?;
    }
    let mut whole = Vec::new();
    let mut staged: Vec<[f64; 3]> = Vec::new();
    for it in 0..a.warmup + a.iters {
        gpu.sync()?;
        let t = Instant::now();
        drop(sort_pairs(&gpu, &kb, &vb, a.bits));
        gpu.sync()?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        // Stage by stage, in the device's own time (a profiling window per stage: timestamp
        // queries through wgpu, events through CUDA).
        let mut per = [0.0f64; 3];
        let mut laps = rust3r_gpu::profile::DeviceLaps::start(&gpu);
        drop(sort_pairs_staged(&gpu, &kb, &vb, a.bits, |stage| {
            per[stage] += laps.lap(&gpu).map_or(f64::NAN, |s| s * 1e3);
        }));
        laps.stop(&gpu);
        if it >= a.warmup {
            whole.push(ms);
            staged.push(per);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let whole_ms = median(whole);
    println!(
        "sort of {} pairs by {} bits on {}: median {:.3} ms ({:.2} Gkeys/s); device time by stage: {}",
        a.n,
        a.bits,
        gpu.name(),
        whole_ms,
        a.n as f64 / whole_ms / 1e6,
        STAGES
            .iter()
            .enumerate()
            .map(|(i, s)| format!(
                "{s} {:.3} ms",
                median(staged.iter().map(|p| p[i]).collect())
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

#[derive(Args)]
pub struct LaunchArgs {
    /// Operations per measurement.
    #[arg(long, default_value_t = 2000)]
    ops: usize,
    #[command(flatten)]
    device: DeviceArgs,
}

fn launch(a: &LaunchArgs) -> Result<()> {
    let gpu = a.device.open()?;
    let n = a.ops.max(1);
    let src = gpu.upload(&(0..256u32).collect::<Vec<_>>());
    let per_op_us = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / n as f64;
    for round in 0..3 {
        gpu.sync()?;
        let t = Instant::now();
        for _ in 0..n {
            drop(gpu.alloc::<u32>(256));
        }
        let alloc = per_op_us(t);
        gpu.sync()?;
        let t = Instant::now();
        for _ in 0..n {
            drop(rust3r_gpu::gather::gather(&gpu, &src, &src));
        }
        let enqueue = per_op_us(t);
        gpu.sync()?;
        let queued = per_op_us(t);
        let t = Instant::now();
        for _ in 0..n / 10 {
            drop(rust3r_gpu::gather::gather(&gpu, &src, &src));
            gpu.sync()?;
        }
        let synced = t.elapsed().as_secs_f64() * 1e6 / (n / 10).max(1) as f64;
        println!(
            "round {round} on {}: alloc {alloc:.2} us, alloc+launch enqueue {enqueue:.2} us, until done {queued:.2} us per op; launch+sync {synced:.2} us",
            gpu.name()
        );
    }
    Ok(())
}

#[derive(Args)]
pub struct TrainStepArgs {
    #[arg(long, default_value = "../shared/data/garden_points/test_garden.npz")]
    npz: PathBuf,
    /// Comma list of Gaussian counts (base|1m|10m|...).
    #[arg(long, default_value = "1m,10m")]
    ns: String,
    #[arg(long, default_value = "1920x1080")]
    res: String,
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Storage of the Adam moments (bf16 or f32).
    #[arg(long, default_value = "bf16")]
    adam_moments: MomentPrecision,
    /// Storage of the SH coefficients (f16 or f32).
    #[arg(long, default_value = "f16")]
    sh_precision: ShPrecision,
    #[command(flatten)]
    device: DeviceArgs,
}

#[derive(Args)]
pub struct RasterArgs {
    #[arg(long, default_value = "../shared/data/garden_points/test_garden.npz")]
    npz: PathBuf,
    /// Comma list of Gaussian counts: base|138766|1m|4m|10m ...
    #[arg(long, default_value = "base,1m,4m,10m")]
    ns: String,
    #[arg(long, default_value = "648x420,1920x1080")]
    res: String,
    #[arg(long, default_value_t = 25)]
    iters: usize,
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Before those, forward+backward passes until this many milliseconds have passed: through
    /// Vulkan on an H100 every kernel ran 3-4x slower in device time until the GPU had been
    /// busy for a while (0.1-1 s), and again after 3 s idle (not the SM clock, which sat at its
    /// maximum; docs/benchmarks/journal.md, 2026-11-27).
    #[arg(long, default_value_t = 1000)]
    warmup_ms: u64,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also compare the backward pass's gradients with subgroup (plane) reductions against the
    /// portable shared-memory path on each scene (only meaningful where the adapter has subgroups).
    #[arg(long)]
    check_backward: bool,
    /// Also compute the camera-pose gradient in the timed backward (gsplat's benchmark does not).
    #[arg(long)]
    pose_grad: bool,
    /// Backward kernel to time: auto (the renderer's choice), subgroup or portable.
    #[arg(long, default_value = "auto", value_parser = parse_backward_kernel)]
    backward_kernel: BackwardKernel,
    /// Forward checkpoint spacing in batches of 256 intersections (the backward pass's chunk).
    #[arg(long, default_value_t = RenderOptions::default().checkpoint_every)]
    checkpoint_every: u32,
    #[command(flatten)]
    device: DeviceArgs,
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Raster(a) => raster(&a),
        BenchCommand::TrainStep(a) => train_step(&a),
        BenchCommand::Mast3r(a) => crate::mast3r_cmd::bench(&a),
        BenchCommand::SlamMono(a) => crate::bench_slam::slam_mono(&a),
        BenchCommand::Launch(a) => launch(&a),
        BenchCommand::Transfer(a) => transfer(&a),
        BenchCommand::Sort(a) => sort(&a),
        BenchCommand::Scene(a) => scene(&a),
    }
}

const SH_C0: f64 = init::SH_C0;

fn read_npy<T: npyz::Deserialize>(
    zip: &mut zip::ZipArchive<std::fs::File>,
    name: &str,
    path: &Path,
) -> Result<Vec<T>> {
    let mut f = zip
        .by_name(&format!("{name}.npy"))
        .with_context(|| format!("{}: no array '{name}'", path.display()))?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    let npy = npyz::NpyFile::new(&bytes[..])
        .with_context(|| format!("{}: '{name}' is not a valid .npy", path.display()))?;
    npy.into_vec::<T>()
        .with_context(|| format!("{}: '{name}' has an unexpected dtype", path.display()))
}

pub struct Garden {
    means: Vec<[f64; 3]>,
    colors: Vec<[f64; 3]>,
    viewmat: [[f64; 4]; 4],
    k: [[f64; 3]; 3],
    width: u32,
    height: u32,
}

pub fn load_garden(path: &Path) -> Result<Garden> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut zip = zip::ZipArchive::new(file)
        .with_context(|| format!("{}: not a .npz archive", path.display()))?;
    let m: Vec<f32> = read_npy(&mut zip, "means3d", path)?;
    let c: Vec<u8> = read_npy(&mut zip, "colors", path)?;
    let v: Vec<f32> = read_npy(&mut zip, "viewmats", path)?;
    let k: Vec<f32> = read_npy(&mut zip, "Ks", path)?;
    let w: Vec<i64> = read_npy(&mut zip, "width", path)?;
    let h: Vec<i64> = read_npy(&mut zip, "height", path)?;
    anyhow::ensure!(
        m.len().is_multiple_of(3) && c.len() == m.len() && v.len() >= 16 && k.len() >= 9,
        "{}: bad shapes",
        path.display()
    );
    let mut viewmat = [[0.0; 4]; 4];
    let mut kk = [[0.0; 3]; 3];
    for i in 0..16 {
        viewmat[i / 4][i % 4] = v[i] as f64;
    }
    for i in 0..9 {
        kk[i / 3][i % 3] = k[i] as f64;
    }
    Ok(Garden {
        means: m
            .chunks(3)
            .map(|p| [p[0] as f64, p[1] as f64, p[2] as f64])
            .collect(),
        colors: c
            .chunks(3)
            .map(|p| {
                [
                    p[0] as f64 / 255.0,
                    p[1] as f64 / 255.0,
                    p[2] as f64 / 255.0,
                ]
            })
            .collect(),
        viewmat,
        k: kk,
        width: *w.first().context("width")? as u32,
        height: *h.first().context("height")? as u32,
    })
}

pub struct BenchSet {
    pub means: Vec<f32>,
    pub quats: Vec<f32>,
    pub log_scales: Vec<f32>,
    pub sh: Vec<f32>,
    pub checks: serde_json::Value,
}

/// raster_bench.py `build_base` + `build_set`.
pub fn build_set(g: &Garden, nn: &[f64], n_target: usize) -> BenchSet {
    let base = g.means.len();
    let k = n_target.div_ceil(base).max(1);
    let shrink = (k as f64).powf(-1.0 / 3.0);
    let rest = splitmix_normal(2, base * 45);
    let mut sh_base = vec![0f32; base * 48];
    for i in 0..base {
        for c in 0..3 {
            sh_base[i * 48 + c] = ((g.colors[i][c] - 0.5) / SH_C0) as f32;
        }
        for j in 0..45 {
            sh_base[i * 48 + 3 + j] = (0.01 * rest[i * 45 + j]) as f32;
        }
    }
    let mut means = Vec::with_capacity(n_target * 3);
    let mut quats = Vec::with_capacity(n_target * 4);
    for j in 0..k {
        if means.len() >= n_target * 3 {
            break;
        }
        let jitter = if j == 0 {
            vec![]
        } else {
            splitmix_normal(1000 + j as u64, base * 3)
        };
        let q = splitmix_normal(if j == 0 { 1 } else { 2000 + j as u64 }, base * 4);
        for i in 0..base {
            for a in 0..3 {
                let m = if j == 0 {
                    g.means[i][a]
                } else {
                    g.means[i][a] + jitter[i * 3 + a] * nn[i]
                };
                means.push(m as f32);
            }
            let qq = &q[i * 4..i * 4 + 4];
            let norm = qq.iter().map(|v| v * v).sum::<f64>().sqrt();
            quats.extend(qq.iter().map(|v| (v / norm) as f32));
        }
    }
    means.truncate(n_target * 3);
    quats.truncate(n_target * 4);
    let mut log_scales = Vec::with_capacity(n_target * 3);
    let mut sh = Vec::with_capacity(n_target * 48);
    for i in 0..n_target {
        let r = i % base;
        let ls = (nn[r] * shrink).ln() as f32;
        log_scales.extend([ls; 3]);
        sh.extend_from_slice(&sh_base[r * 48..r * 48 + 48]);
    }
    let sum = |v: &[f32]| v.iter().map(|&x| x as f64).sum::<f64>();
    let checks = serde_json::json!({
        "k_copies": k,
        "sum_means": sum(&means),
        "sum_quats": sum(&quats),
        "sum_log_scales": sum(&log_scales),
        "sum_sh": sum(&sh),
    });
    BenchSet {
        means,
        quats,
        log_scales,
        sh,
        checks,
    }
}

/// raster_bench.py `scaled_K`, as a camera.
fn camera_for(g: &Garden, w: u32, h: u32) -> Camera {
    let s = w as f64 / g.width as f64;
    Camera {
        intrinsics: rust3r_geometry::PinholeCamera::new(
            g.k[0][0] * s,
            g.k[1][1] * s,
            w as f64 / 2.0 + (g.k[0][2] - g.width as f64 / 2.0) * s,
            h as f64 / 2.0 + (g.k[1][2] - g.height as f64 / 2.0) * s,
            w,
            h,
        ),
        world_to_camera: g.viewmat,
    }
}

fn parse_backward_kernel(s: &str) -> Result<BackwardKernel, String> {
    match s {
        "auto" => Ok(BackwardKernel::Auto),
        "subgroup" => Ok(BackwardKernel::Subgroup),
        "portable" => Ok(BackwardKernel::Portable),
        other => Err(format!(
            "unknown backward kernel '{other}' (auto, subgroup or portable)"
        )),
    }
}

fn parse_n(s: &str, base: usize) -> Result<usize> {
    let s = s.trim().to_ascii_lowercase();
    if s == "base" || s == "garden" {
        return Ok(base);
    }
    let (num, mult) = if let Some(v) = s.strip_suffix('k') {
        (v, 1e3)
    } else if let Some(v) = s.strip_suffix('m') {
        (v, 1e6)
    } else {
        (s.as_str(), 1.0)
    };
    Ok((num
        .parse::<f64>()
        .with_context(|| format!("bad count '{s}'"))?
        * mult) as usize)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

fn raster(a: &RasterArgs) -> Result<()> {
    let gpu = a.device.open()?;
    let raster_tuning = a.device.tuning()?.raster;
    let garden = load_garden(&a.npz)?;
    let t = Instant::now();
    let nn = knn_mean_dist(&garden.means);
    eprintln!(
        "garden: {} points, knn {:.1}s",
        garden.means.len(),
        t.elapsed().as_secs_f64()
    );
    let base = garden.means.len();
    let ns: Vec<usize> =
        a.ns.split(',')
            .filter(|s| !s.is_empty())
            .map(|s| parse_n(s, base))
            .collect::<Result<_>>()?;
    let res: Vec<(u32, u32)> = a
        .res
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|r| {
            let (w, h) = r.split_once('x').context("resolution must be WxH")?;
            Ok((w.parse()?, h.parse()?))
        })
        .collect::<Result<_>>()?;
    let mut results = vec![];
    println!("| N | resolution | visible | tile isects | fwd ms | fwd+bwd ms | pool peak GiB |");
    println!("|---|---|---|---|---|---|---|");
    for &n in &ns {
        let set = build_set(&garden, &nn, n);
        let opac = vec![0f32; n];
        // Split past the adapter's binding limit (wgpu: 2 GiB, about 11M Gaussians at SH 3).
        let splats = GpuSplats::chunks_from_slices(
            &gpu,
            &set.means,
            &set.log_scales,
            &set.quats,
            &opac,
            &set.sh,
            3,
            None,
        )?;
        for &(w, h) in &res {
            let cam = camera_for(&garden, w, h);
            let opts = RenderOptions {
                backward_kernel: a.backward_kernel,
                checkpoint_every: a.checkpoint_every,
                tuning: raster_tuning,
                ..Default::default()
            };
            let npix = (w * h) as usize;
            let ones = gpu.upload(&vec![1f32; npix * 3]);
            let zeros = gpu.upload(&vec![0f32; npix]);
            gpu.sync()?;
            gpu.memory_cleanup();
            let mut peak = gpu.memory_reserved();
            let mut fwd = vec![];
            let mut both = vec![];
            let mut stats = (0, 0);
            let mut rgb_mean = f64::NAN;
            // Timed iterations in which the pool's reservation changed (pages created or dropped).
            let mut pool_changes = 0usize;
            // One forward+backward pass, finished on the device.
            let fwd_bwd = || -> Result<()> {
                let (out, state) = render_chunks(&gpu, &splats, &cam, &opts)?;
                let grads = render_backward_chunks(
                    &gpu,
                    &splats,
                    &out,
                    &state,
                    &ones,
                    &zeros,
                    &zeros,
                    a.pose_grad,
                )?;
                gpu.sync()?;
                drop((grads, out, state));
                Ok(())
            };
            let warm_start = Instant::now();
            while warm_start.elapsed().as_millis() < a.warmup_ms as u128 {
                fwd_bwd()?;
            }
            for i in 0..a.warmup + a.iters {
                let reserved_before = gpu.memory_reserved();
                if i == a.warmup {
                    gpu.profiler().reset();
                }
                gpu.sync()?;
                rust3r_gpu::profile::start(&gpu);
                let t0 = Instant::now();
                let (out, _) = render_chunks(&gpu, &splats, &cam, &opts)?;
                gpu.sync()?;
                let dt = t0.elapsed().as_secs_f64() * 1e3;
                stats = (out.num_visible, out.num_intersections);
                if i + 1 == a.warmup + a.iters {
                    // Image checksum (after timing): compares backends and chunkings of one scene.
                    let rgb = gpu.read(&out.rgb)?;
                    rgb_mean = rgb.iter().map(|&v| v as f64).sum::<f64>() / rgb.len().max(1) as f64;
                }
                drop(out);
                gpu.sync()?;
                rust3r_gpu::profile::start(&gpu);
                let t1 = Instant::now();
                fwd_bwd()?;
                let dt2 = t1.elapsed().as_secs_f64() * 1e3;
                peak = peak.max(gpu.memory_reserved());
                if i >= a.warmup {
                    fwd.push(dt);
                    both.push(dt2);
                    pool_changes += usize::from(gpu.memory_reserved() != reserved_before);
                }
            }
            if a.check_backward {
                check_backward(&gpu, &splats, &cam, &opts, &ones, &zeros)?;
            }
            let tiles = render_chunks(&gpu, &splats, &cam, &opts)?
                .1
                .tile_stats(&gpu)?;
            let (fm, bm) = (median(fwd.clone()), median(both.clone()));
            if let Some(r) = gpu.profiler().report() {
                println!(
                    "profile {n} {w}x{h} ({:?}; forward phases counted in both passes):\n{r}",
                    gpu.profiler().mode()
                );
            }
            eprintln!("tiles {n} {w}x{h}: {tiles:?}");
            eprintln!(
                "samples {n} {w}x{h}: fwd {fwd:.2?} ms, fwd+bwd {both:.2?} ms; pool reservation changed in {pool_changes} of {} timed iterations",
                a.iters
            );
            println!(
                "| {n} | {w}x{h} | {} | {} | {fm:.3} | {bm:.3} | {:.2} |",
                stats.0,
                stats.1,
                peak as f64 / (1u64 << 30) as f64
            );
            results.push(serde_json::json!({
                "n": n, "width": w, "height": h, "visible": stats.0, "isects": stats.1,
                "fwd_median_ms": fm, "fwd_min_ms": fwd.iter().copied().fold(f64::MAX, f64::min),
                "fwdbwd_median_ms": bm, "fwdbwd_min_ms": both.iter().copied().fold(f64::MAX, f64::min),
                "fwd_samples_ms": fwd, "fwdbwd_samples_ms": both, "pool_changes": pool_changes,
                "pool_peak_bytes": peak, "inputs": set.checks,
                "tile_len_p50": tiles.len_p50, "tile_len_p99": tiles.len_p99, "tile_len_max": tiles.len_max,
                "tile_walked_total": tiles.walked_total, "tile_walked_max": tiles.walked_max, "rgb_mean": rgb_mean, "chunks": splats.len(),
            }));
        }
    }
    if let Some(p) = &a.json {
        let doc = serde_json::json!({
            "device": gpu.name(),
            "date_utc": format!("{:?}", std::time::SystemTime::now()),
            "iters": a.iters, "warmup": a.warmup, "warmup_ms": a.warmup_ms, "pose_grad": a.pose_grad,
            "configs": results,
        });
        std::fs::write(p, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}

/// Gradients of the plane-reduction backward vs the shared-memory backward (max |diff| / max |ref|).
fn check_backward(
    gpu: &rust3r_gpu::Gpu,
    splats: &[GpuSplats],
    cam: &rust3r_splat::Camera,
    opts: &RenderOptions,
    ones: &rust3r_gpu::GpuBuffer<f32>,
    zeros: &rust3r_gpu::GpuBuffer<f32>,
) -> Result<()> {
    let grads = |kernel: BackwardKernel| -> Result<Vec<(&'static str, Vec<f32>)>> {
        let opts = RenderOptions {
            absgrad: true,
            backward_kernel: kernel,
            ..opts.clone()
        };
        let (out, state) = render_chunks(gpu, splats, cam, &opts)?;
        let g = render_backward_chunks(gpu, splats, &out, &state, ones, zeros, zeros, false)?;
        let mut rows = vec![
            (
                "means2d_abs",
                gpu.read(g.means2d_abs.as_ref().expect("absgrad"))?,
            ),
            ("projected", gpu.read(&g.projected)?),
        ];
        for (name, i) in [
            ("means", 0),
            ("log_scales", 1),
            ("quats", 2),
            ("opacity", 3),
            ("sh", 4),
        ] {
            let mut all = vec![];
            for p in &g.params {
                all.extend(
                    gpu.read([&p.means, &p.log_scales, &p.quats, &p.opacity_logits, &p.sh][i])?,
                );
            }
            rows.push((name, all));
        }
        Ok(rows)
    };
    let (with, without) = (
        grads(BackwardKernel::Subgroup)?,
        grads(BackwardKernel::Portable)?,
    );
    println!(
        "backward check (plane vs shared), adapter planes {:?}:",
        gpu.plane_sizes()
    );
    for ((name, a), (_, b)) in with.iter().zip(&without) {
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, |m, d| if d > m || d.is_nan() { d } else { m });
        let nonfinite = a.iter().filter(|v| !v.is_finite()).count();
        println!(
            "  {name}: max|diff| {diff:.3e} / max|ref| {scale:.3e} = {:.2e}, non-finite {nonfinite}",
            diff / scale.max(1e-30)
        );
    }
    Ok(())
}

fn train_step(a: &TrainStepArgs) -> Result<()> {
    let gpu = a.device.open()?;
    let garden = load_garden(&a.npz)?;
    let nn = knn_mean_dist(&garden.means);
    let base = garden.means.len();
    let (w, h) = a.res.split_once('x').context("resolution must be WxH")?;
    let (w, h): (u32, u32) = (w.parse()?, h.parse()?);
    let cam = camera_for(&garden, w, h);
    let ledger = Trainer::memory_ledger(3, a.adam_moments, a.sh_precision).persistent();
    println!(
        "Adam moments {}, SH {}; persistent bytes / Gaussian from the layout: {ledger}",
        a.adam_moments, a.sh_precision
    );
    println!(
        "| N | resolution | step ms (median) | persistent bytes / Gaussian | peak reserved GB | in use after a step GB | peak in use inside a step GB |"
    );
    println!("|---|---|---|---|---|---|---|");
    for n in a.ns.split(',').filter(|s| !s.is_empty()) {
        let n = parse_n(n, base)?;
        let set = build_set(&garden, &nn, n);
        let init = init::InitSplats {
            means: set.means,
            log_scales: set.log_scales,
            quats: set.quats,
            opacity_logits: vec![0.0; n],
            sh: set.sh,
            sh_degree: 3,
        };
        gpu.sync()?;
        gpu.memory_cleanup();
        let before = gpu.memory_in_use();
        // No densification inside the measured steps: memory is that of a fixed count.
        let adc = AdcConfig {
            refine_start: u64::MAX,
            ..Default::default()
        };
        let adam = AdamConfig {
            moments: a.adam_moments,
            ..Default::default()
        };
        let cfg = TrainConfig {
            strategy: Strategy::Adc(adc),
            scene_scale: 1.0,
            adam,
            sh_precision: a.sh_precision,
            ..Default::default()
        };
        let mut t = Trainer::new(&gpu, cfg, &init)?;
        t.set_raster_tuning(a.device.tuning()?.raster);
        drop(init);
        let target = gpu.upload(&vec![0.5f32; (w * h * 3) as usize]);
        gpu.sync()?;
        let persistent = gpu.memory_in_use().saturating_sub(before) - (w as u64 * h as u64 * 12);
        let (mut peak_res, mut peak_use) = (0u64, 0u64);
        let mut times = vec![];
        for i in 0..a.steps + 2 {
            gpu.sync()?;
            let t0 = Instant::now();
            t.step(&cam, &target)?;
            gpu.sync()?;
            if i >= 2 {
                times.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            peak_res = peak_res.max(gpu.memory_reserved());
            peak_use = peak_use.max(gpu.memory_in_use());
        }
        // Two more steps, untimed, sampling the memory in use inside them (a memory report
        // waits for the device).
        t.track_memory();
        for _ in 0..2 {
            t.step(&cam, &target)?;
        }
        gpu.sync()?;
        peak_res = peak_res.max(gpu.memory_reserved());
        let inside = t.peak_in_use().unwrap_or(0);
        if let Some(r) = gpu.profiler().report() {
            println!("profile {n} {w}x{h} ({:?}):\n{r}", gpu.profiler().mode());
        }
        println!(
            "| {n} | {w}x{h} | {:.2} | {:.0} | {:.2} | {:.2} | {:.2} |",
            median(times),
            persistent as f64 / n as f64,
            peak_res as f64 / 1e9,
            peak_use as f64 / 1e9,
            inside as f64 / 1e9
        );
        drop(t);
        gpu.sync()?;
        gpu.memory_cleanup();
    }
    Ok(())
}
