//! The server: an accept loop, one thread per connection (a page, a screenshot, or a WebSocket
//! client that stays), and one renderer thread that owns the GPU.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rand::RngCore;
use rust3r_gpu::Gpu;
use rust3r_io::Splats;
use rust3r_splat::{Camera, GpuSplats};
use serde::{Deserialize, Serialize};
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

use crate::ViewerError;
use crate::frame::{FrameRequest, RenderMode, RenderedFrame, Renderer};
use crate::http::{Request, html_escape, read_request, respond};
use crate::scene::{Overlay, Scene};

const PAGE: &str = include_str!("page/index.html");

/// Where and how the viewer listens.
#[derive(Clone, Debug)]
pub struct ViewerConfig {
    pub addr: SocketAddr,
    /// Access token every request must carry as `?token=` (`None`: no check).
    pub token: Option<String>,
    /// Connections served at once; more are answered 503.
    pub max_connections: usize,
    /// Largest share of wall time the renderer may spend rendering (`None`: no limit). Live
    /// views of a run set it so that frames never take more than this share of a GPU the run
    /// needs: after a frame that took `t`, the next starts no sooner than `t / share - t` later.
    pub gpu_share: Option<f32>,
}

impl ViewerConfig {
    /// Listen on `addr`; an access token is generated when `addr` is not a loopback address,
    /// because then other machines can reach the viewer.
    pub fn new(addr: SocketAddr) -> Self {
        let token = (!addr.ip().is_loopback()).then(random_token);
        Self {
            addr,
            token,
            max_connections: 64,
            gpu_share: None,
        }
    }
}

/// 128 random bits as hex (the thread-local generator is a CSPRNG seeded by the OS).
pub fn random_token() -> String {
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What the viewer serves: a scene rendered on `gpu`, or an error page (a missing or malformed
/// file, no GPU) that says what went wrong.
#[allow(clippy::large_enum_variant)] // one per server
pub enum Content {
    Scene { gpu: Gpu, scene: Scene },
    Error(String),
}

/// Progress of a live run, shown on the page.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Steps (or frames) in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    /// Gaussians in the run (the page's own count is that of the splats it renders).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub splats: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psnr: Option<f64>,
    /// Free text (e.g. "training", "done").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A live run's current camera image: a small JPEG with the frame it shows.
#[derive(Clone, Debug, Serialize)]
pub struct CurrentFrame {
    /// Frames processed when this one was (1-based).
    pub frame: u64,
    /// Frames in all.
    pub total: u64,
    /// The frame's timestamp (s).
    pub timestamp: f64,
    /// The image file's name (no directory).
    pub name: String,
    pub width: u32,
    pub height: u32,
    /// The JPEG, base64-encoded.
    #[serde(serialize_with = "as_base64")]
    pub jpeg: Vec<u8>,
}

fn as_base64<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&base64(bytes))
}

/// Standard base64 with padding (RFC 4648).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[allow(clippy::large_enum_variant)] // a handful in flight at a time
enum Job {
    Render {
        req: FrameRequest,
        reply: Sender<Result<RenderedFrame, String>>,
    },
    SetSplats(Splats),
    SetDeviceSplats(GpuSplats),
}

/// Points kept per curve; past it every other point is dropped (the curve keeps its shape).
const MAX_CURVE_POINTS: usize = 2000;

/// A curve of the page's plots: `(x, y)` points in order of `x`.
#[derive(Clone, Debug, Default)]
struct Curve {
    points: Vec<[f64; 2]>,
    /// Only every `stride`-th point offered is kept (doubled each time the curve is thinned).
    stride: u64,
    offered: u64,
}

impl Curve {
    fn push(&mut self, x: f64, y: f64) {
        self.stride = self.stride.max(1);
        self.offered += 1;
        if !(self.offered - 1).is_multiple_of(self.stride) || !y.is_finite() {
            return;
        }
        self.points.push([x, y]);
        if self.points.len() > MAX_CURVE_POINTS {
            let mut i = 0;
            self.points.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stride *= 2;
        }
    }
}

/// What the page is told about the scene.
#[derive(Clone, Debug, Serialize)]
struct SceneInfo {
    splats: usize,
    sh_degree: u32,
    description: String,
    /// Pose of `rust3r render`'s default camera at 16:9 (see [`default_view`]) and its
    /// horizontal field of view in radians.
    default_world_to_camera: [[f64; 4]; 4],
    default_fov_x: f64,
    /// Median depth of the splats from the default camera: the page's orbit distance and the
    /// scale of its fly speed and frusta.
    default_distance: f64,
    overlay: Overlay,
    stats: Stats,
    error: Option<String>,
    /// Changes when the default camera does (a live run's first splats): the page moves to it
    /// unless its user has moved the camera.
    view_epoch: u64,
}

struct Shared {
    config: ViewerConfig,
    jobs: Mutex<Option<Sender<Job>>>,
    info: Mutex<SceneInfo>,
    /// Bumped when the splats or the overlay change (clients re-render).
    version: AtomicU64,
    /// Bumped when the stats change.
    stats_version: AtomicU64,
    shutdown: AtomicBool,
    connections: AtomicUsize,
    /// WebSocket clients connected now.
    clients: AtomicUsize,
    /// The page's plots, by name.
    curves: Mutex<std::collections::BTreeMap<String, Curve>>,
    /// A live SLAM run's newest camera image, as its `current_frame` message.
    current_frame: Mutex<Option<Arc<String>>>,
    /// Bumped when the current frame changes (0: none yet).
    current_frame_version: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn submit(
        &self,
        req: FrameRequest,
    ) -> Result<Receiver<Result<RenderedFrame, String>>, ViewerError> {
        let (tx, rx) = mpsc::channel();
        let jobs = lock(&self.jobs);
        let Some(jobs) = jobs.as_ref() else {
            let error = lock(&self.info).error.clone();
            return Err(ViewerError::NoScene(
                error.unwrap_or_else(|| "shutting down".into()),
            ));
        };
        jobs.send(Job::Render { req, reply: tx })
            .map_err(|_| ViewerError::Stopped)?;
        Ok(rx)
    }

    fn scene_json(&self) -> String {
        let info = lock(&self.info);
        let mut v = serde_json::to_value(&*info).unwrap_or_default();
        v["type"] = "scene".into();
        v["version"] = self.version.load(Ordering::SeqCst).into();
        v.to_string()
    }

    fn authorized(&self, req: &Request) -> bool {
        match &self.config.token {
            None => true,
            Some(token) => req
                .param("token")
                .is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes())),
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A running viewer. Dropping it (or [`ViewerHandle::shutdown`]) stops the server.
pub struct ViewerHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: Option<JoinHandle<()>>,
    renderer: Option<JoinHandle<()>>,
}

impl ViewerHandle {
    /// Bind `config.addr` and serve `content` from background threads.
    pub fn start(config: ViewerConfig, content: Content) -> Result<Self, ViewerError> {
        let listener = TcpListener::bind(config.addr).map_err(|source| ViewerError::Bind {
            addr: config.addr,
            source,
        })?;
        let addr = listener.local_addr().map_err(|source| ViewerError::Bind {
            addr: config.addr,
            source,
        })?;
        let (info, renderer) = match content {
            Content::Error(message) => (
                SceneInfo {
                    splats: 0,
                    sh_degree: 0,
                    description: String::new(),
                    default_world_to_camera: Camera::look_at(
                        [0.0, 0.0, -1.0],
                        [0.0; 3],
                        [0.0, -1.0, 0.0],
                        1.0,
                        1,
                        1,
                    )
                    .world_to_camera,
                    default_fov_x: 60f64.to_radians(),
                    default_distance: 1.0,
                    overlay: Overlay::default(),
                    stats: Stats::default(),
                    error: Some(message),
                    view_epoch: 0,
                },
                None,
            ),
            Content::Scene { gpu, scene } => {
                let (default_world_to_camera, default_distance) = default_view(&scene.splats.means);
                let info = SceneInfo {
                    splats: scene.splats.len(),
                    sh_degree: scene.splats.sh_degree,
                    description: scene.description.clone(),
                    default_distance,
                    default_world_to_camera,
                    default_fov_x: 60f64.to_radians(),
                    overlay: scene.overlay,
                    stats: Stats::default(),
                    error: None,
                    view_epoch: 0,
                };
                (info, Some(Renderer::new(gpu, &scene.splats)?))
            }
        };
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            config,
            jobs: Mutex::new(renderer.is_some().then_some(tx)),
            info: Mutex::new(info),
            version: AtomicU64::new(1),
            stats_version: AtomicU64::new(1),
            shutdown: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            clients: AtomicUsize::new(0),
            curves: Mutex::new(Default::default()),
            current_frame: Mutex::new(None),
            current_frame_version: AtomicU64::new(0),
        });
        let renderer = renderer.map(|r| {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("viewer-render".into())
                .spawn(move || render_loop(r, rx, &shared))
                .map_err(|e| ViewerError::Request(format!("cannot start the renderer thread: {e}")))
        });
        let renderer = renderer.transpose()?;
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("viewer-accept".into())
                .spawn(move || accept_loop(listener, shared))
                .map_err(|e| ViewerError::Request(format!("cannot start the server thread: {e}")))?
        };
        Ok(Self {
            shared,
            addr,
            accept: Some(accept),
            renderer,
        })
    }

    /// The address listened on (with the real port when the config asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The access token, when one is required.
    pub fn token(&self) -> Option<&str> {
        self.shared.config.token.as_deref()
    }

    /// The page's URL (with the token when one is required).
    pub fn url(&self) -> String {
        match self.token() {
            Some(t) => format!("http://{}/?token={t}", self.addr),
            None => format!("http://{}/", self.addr),
        }
    }

    /// Replace the splats (a live view of a run); clients re-render once they are on the GPU.
    pub fn set_splats(&self, splats: Splats) -> Result<(), ViewerError> {
        self.send(Job::SetSplats(splats))
    }

    /// Render these device buffers from now on: a live training run passes a handle copy of its
    /// parameters (`Trainer::splats.clone()`, no data copied), so taking a snapshot costs the
    /// run nothing. The buffers must live on the viewer's GPU.
    pub fn set_device_splats(&self, splats: GpuSplats) -> Result<(), ViewerError> {
        self.send(Job::SetDeviceSplats(splats))
    }

    fn send(&self, job: Job) -> Result<(), ViewerError> {
        let jobs = lock(&self.shared.jobs);
        let jobs = jobs.as_ref().ok_or(ViewerError::Stopped)?;
        jobs.send(job).map_err(|_| ViewerError::Stopped)
    }

    /// WebSocket clients (open pages) connected now.
    pub fn clients(&self) -> usize {
        self.shared.clients.load(Ordering::SeqCst)
    }

    /// Add a point to the page's plot `curve` (e.g. `"loss"` over the step). Long curves are
    /// thinned to at most 2000 points.
    pub fn add_point(&self, curve: &str, x: f64, y: f64) {
        let mut curves = lock(&self.shared.curves);
        match curves.get_mut(curve) {
            Some(c) => c.push(x, y),
            None => {
                let mut c = Curve::default();
                c.push(x, y);
                curves.insert(curve.to_owned(), c);
            }
        }
        drop(curves);
        self.shared.stats_version.fetch_add(1, Ordering::SeqCst);
    }

    /// Replace the cameras and trajectory drawn over the image.
    pub fn set_overlay(&self, overlay: Overlay) {
        lock(&self.shared.info).overlay = overlay;
        self.shared.version.fetch_add(1, Ordering::SeqCst);
    }

    /// Show `frame` as the run's current camera image (the page's inset); it replaces the one
    /// before, and a client that connects later gets the newest.
    pub fn set_current_frame(&self, frame: &CurrentFrame) {
        let mut v = serde_json::to_value(frame).unwrap_or_default();
        v["type"] = "current_frame".into();
        *lock(&self.shared.current_frame) = Some(Arc::new(v.to_string()));
        self.shared
            .current_frame_version
            .fetch_add(1, Ordering::SeqCst);
    }

    /// Show new progress figures.
    pub fn set_stats(&self, stats: Stats) {
        lock(&self.shared.info).stats = stats;
        self.shared.stats_version.fetch_add(1, Ordering::SeqCst);
    }

    /// Block until the server stops (it runs until the process ends or [`Self::shutdown`]).
    pub fn wait(mut self) {
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
    }

    /// Stop accepting, close every client and the renderer.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&wake_addr(self.addr), Duration::from_secs(1));
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        lock(&self.shared.jobs).take();
        if let Some(r) = self.renderer.take() {
            let _ = r.join();
        }
    }
}

impl Drop for ViewerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `rust3r render`'s default camera pose for `means` at a 16:9 image, and the median depth in
/// front of it (a camera at -z looking at the origin when there are none yet). The page keeps
/// the horizontal field of view whatever its size, so the pose is the one that frames the
/// splats in a landscape window: a tall subject fits the narrower vertical field of view.
fn default_view(means: &[[f32; 3]]) -> ([[f64; 4]; 4], f64) {
    if means.is_empty() {
        return (
            Camera::look_at([0.0, 0.0, -3.0], [0.0; 3], [0.0, -1.0, 0.0], 1.0, 1, 1)
                .world_to_camera,
            3.0,
        );
    }
    let cam = Camera::default_for_points(means, 16, 9);
    (cam.world_to_camera, median_depth(&cam, means))
}

/// Median camera-space depth of the points in front of `cam` (at most 100k sampled); 1 when none.
fn median_depth(cam: &Camera, points: &[[f32; 3]]) -> f64 {
    let m = &cam.world_to_camera;
    let step = (points.len() / 100_000).max(1);
    let mut z: Vec<f64> = points
        .iter()
        .step_by(step)
        .map(|p| m[2][0] * p[0] as f64 + m[2][1] * p[1] as f64 + m[2][2] * p[2] as f64 + m[2][3])
        .filter(|z| z.is_finite() && *z > 0.0)
        .collect();
    if z.is_empty() {
        return 1.0;
    }
    let mid = z.len() / 2;
    *z.select_nth_unstable_by(mid, f64::total_cmp).1
}

/// Where to connect to reach a listener on `addr` (an unspecified address through loopback).
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let mut a = addr;
    if a.ip().is_unspecified() {
        a.set_ip(match a {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    a
}

fn render_loop(mut renderer: Renderer, jobs: Receiver<Job>, shared: &Shared) {
    // Earliest start of the next frame under `gpu_share`.
    let mut next_frame = std::time::Instant::now();
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Render { req, reply } => {
                if let Some(wait) = next_frame.checked_duration_since(std::time::Instant::now()) {
                    std::thread::sleep(wait);
                }
                let start = std::time::Instant::now();
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    renderer.render(&req)
                }));
                let out = match out {
                    Ok(r) => r.map_err(|e| e.to_string()),
                    Err(_) => Err("the renderer panicked on this frame".to_owned()),
                };
                if let Some(share) = shared.config.gpu_share.filter(|s| *s > 0.0 && *s < 1.0) {
                    let took = start.elapsed();
                    next_frame = std::time::Instant::now() + took.mul_f32(1.0 / share - 1.0);
                }
                // The client may have gone: nothing to do then.
                let _ = reply.send(out);
            }
            Job::SetSplats(splats) => match renderer.set_splats(&splats) {
                Ok(()) => splats_changed(&renderer, shared, Some(&splats.means)),
                Err(e) => tracing::error!("viewer: cannot upload the new splats: {e}"),
            },
            Job::SetDeviceSplats(splats) => {
                renderer.set_device_splats(splats);
                splats_changed(&renderer, shared, None);
            }
        }
    }
}

/// After new splats: the page's counts, and the default camera when these are the first.
fn splats_changed(renderer: &Renderer, shared: &Shared, means: Option<&[[f32; 3]]>) {
    let first = lock(&shared.info).splats == 0 && !renderer.is_empty();
    let default = if first {
        let read;
        let means = match means {
            Some(m) => m,
            None => {
                read = renderer.means().unwrap_or_default();
                &read
            }
        };
        Some(default_view(means))
    } else {
        None
    };
    let mut info = lock(&shared.info);
    info.splats = renderer.len();
    info.sh_degree = renderer.sh_degree();
    if let Some((pose, distance)) = default {
        info.default_world_to_camera = pose;
        info.default_distance = distance;
        info.view_epoch += 1;
    }
    drop(info);
    shared.version.fetch_add(1, Ordering::SeqCst);
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        let Ok(mut stream) = conn else { continue };
        if shared.connections.load(Ordering::SeqCst) >= shared.config.max_connections {
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = respond(&mut stream, 503, "text/plain", b"too many connections\n");
            continue;
        }
        shared.connections.fetch_add(1, Ordering::SeqCst);
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("viewer-conn".into())
            .spawn(move || {
                handle_connection(stream, &s);
                s.connections.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// The host part of a `Host` header or an origin's authority (`[::1]:80` -> `::1`).
fn host_name(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

fn handle_connection(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let _ = stream.set_nodelay(true);
    let Some(req) = read_request(&mut stream) else {
        return;
    };
    if req.method != "GET" {
        let _ = respond(&mut stream, 405, "text/plain", b"only GET\n");
        return;
    }
    if !shared.authorized(&req) {
        let _ = respond(
            &mut stream,
            403,
            "text/plain; charset=utf-8",
            b"forbidden: this viewer needs the access token that `rust3r view` printed (?token=...)\n",
        );
        return;
    }
    // Without a token the viewer is for this machine only: refuse pages that reach it under
    // another name (DNS rebinding) and WebSockets opened by other sites' pages.
    let host = req.header("host").unwrap_or("");
    if shared.config.token.is_none() {
        let name = host_name(host);
        let local = name.eq_ignore_ascii_case("localhost")
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !local {
            let _ = respond(
                &mut stream,
                403,
                "text/plain",
                b"forbidden: host is not a loopback name\n",
            );
            return;
        }
    }
    if let Some(origin) = req.header("origin") {
        let authority = origin.split_once("://").map_or(origin, |(_, a)| a);
        if !authority.eq_ignore_ascii_case(host) {
            let _ = respond(
                &mut stream,
                403,
                "text/plain",
                b"forbidden: cross-origin request\n",
            );
            return;
        }
    }
    let error = lock(&shared.info).error.clone();
    let result = match req.path.as_str() {
        "/" | "/index.html" => match &error {
            Some(e) => respond(
                &mut stream,
                500,
                "text/html; charset=utf-8",
                error_page(e).as_bytes(),
            ),
            None => respond(
                &mut stream,
                200,
                "text/html; charset=utf-8",
                PAGE.as_bytes(),
            ),
        },
        "/scene.json" => respond(
            &mut stream,
            200,
            "application/json",
            shared.scene_json().as_bytes(),
        ),
        "/screenshot.png" => screenshot(&mut stream, &req, shared),
        "/ws" if req.header_has("upgrade", "websocket") => {
            if let Some(e) = &error {
                let _ = respond(&mut stream, 503, "text/plain; charset=utf-8", e.as_bytes());
                return;
            }
            let Some(key) = req.header("sec-websocket-key") else {
                let _ = respond(&mut stream, 400, "text/plain", b"no Sec-WebSocket-Key\n");
                return;
            };
            let accept = tungstenite::handshake::derive_accept_key(key.trim().as_bytes());
            let head = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
            );
            if std::io::Write::write_all(&mut stream, head.as_bytes()).is_err() {
                return;
            }
            serve_websocket(stream, req.rest, shared);
            return;
        }
        _ => respond(&mut stream, 404, "text/plain", b"not found\n"),
    };
    if let Err(e) = result {
        tracing::debug!("viewer: client went away: {e}");
    }
}

fn error_page(message: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>rust3r view: error</title></head>\
         <body style=\"font-family:sans-serif;background:#222;color:#eee;padding:2em\">\
         <h1>rust3r view cannot show this</h1><pre id=\"error\" style=\"white-space:pre-wrap;color:#f88\">{}</pre>\
         <p>Fix the path or the file and start <code>rust3r view</code> again.</p></body></html>",
        html_escape(message)
    )
}

/// Parse a frame request from URL parameters: `camera` (JSON, required), `mode`,
/// `background` (`r,g,b`), `splat_scale`.
fn request_from_params(req: &Request) -> Result<FrameRequest, ViewerError> {
    let camera = req
        .param("camera")
        .ok_or_else(|| ViewerError::Request("no camera parameter".into()))?;
    let mut frame = FrameRequest::new(Camera::from_json(camera)?);
    if let Some(m) = req.param("mode") {
        frame.mode = serde_json::from_value::<RenderMode>(m.into())
            .map_err(|_| ViewerError::Request(format!("mode '{m}' is not rgb, depth or alpha")))?;
    }
    if let Some(b) = req.param("background") {
        frame.background = rust3r_splat::parse_background(b)?;
    }
    if let Some(s) = req.param("splat_scale") {
        frame.splat_scale = s
            .parse()
            .map_err(|_| ViewerError::Request(format!("splat_scale '{s}' is not a number")))?;
    }
    frame.validate()?;
    Ok(frame)
}

/// `/screenshot.png?camera=...`: a lossless frame at the camera's full size.
fn screenshot(stream: &mut TcpStream, req: &Request, shared: &Shared) -> std::io::Result<()> {
    let frame = request_from_params(req)
        .and_then(|f| shared.submit(f))
        .and_then(|rx| {
            rx.recv()
                .map_err(|_| ViewerError::Stopped)?
                .map_err(ViewerError::Request)
        })
        .and_then(|f| f.png());
    match frame {
        Ok(png) => respond(stream, 200, "image/png", &png),
        Err(e) => respond(
            stream,
            400,
            "text/plain; charset=utf-8",
            format!("{e}\n").as_bytes(),
        ),
    }
}

/// A render request from the page.
#[derive(Deserialize)]
struct RenderMessage {
    id: u64,
    /// JPEG quality, 1-100.
    #[serde(default = "default_quality")]
    quality: u8,
    #[serde(flatten)]
    frame: FrameRequest,
}

fn default_quality() -> u8 {
    90
}

fn error_message(id: Option<u64>, message: &str) -> Message {
    Message::text(serde_json::json!({"type": "error", "id": id, "message": message}).to_string())
}

/// A frame as one binary message: header length (u32, little-endian), the JSON header, the JPEG.
fn frame_message(id: u64, frame: &RenderedFrame, jpeg: &[u8]) -> Message {
    let header = serde_json::json!({
        "id": id, "width": frame.width, "height": frame.height,
        "render_ms": frame.render_ms, "visible": frame.visible,
    })
    .to_string();
    let mut bytes = Vec::with_capacity(4 + header.len() + jpeg.len());
    bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(jpeg);
    Message::binary(bytes)
}

/// Parse a client message: a valid render request becomes `pending` (replacing an older one);
/// anything else is answered with an error message.
fn take_request(text: &str, pending: &mut Option<(u64, u8, FrameRequest)>) -> Option<Message> {
    match serde_json::from_str::<RenderMessage>(text) {
        Ok(m) => match m.frame.validate() {
            Ok(()) => {
                *pending = Some((m.id, m.quality, m.frame));
                None
            }
            Err(e) => Some(error_message(Some(m.id), &e.to_string())),
        },
        Err(e) => {
            let id = serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .and_then(|v| v["id"].as_u64());
            Some(error_message(id, &format!("invalid request: {e}")))
        }
    }
}

fn is_timeout(e: &tungstenite::Error) -> bool {
    matches!(e, tungstenite::Error::Io(io) if matches!(io.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
}

/// One WebSocket client: read its camera requests (the newest replaces any not yet started),
/// keep at most one frame of it in the renderer, send frames, scene changes and stats.
fn serve_websocket(stream: TcpStream, rest: Vec<u8>, shared: &Shared) {
    let config = WebSocketConfig::default()
        .max_message_size(Some(1 << 20))
        .max_frame_size(Some(1 << 20));
    let mut ws = WebSocket::from_partially_read(stream, rest, Role::Server, Some(config));
    shared.clients.fetch_add(1, Ordering::SeqCst);
    serve_client(&mut ws, shared);
    shared.clients.fetch_sub(1, Ordering::SeqCst);
}

/// Stats (with the curves) go to a client at most this often.
const STATS_INTERVAL: Duration = Duration::from_millis(250);

fn serve_client(ws: &mut WebSocket<TcpStream>, shared: &Shared) {
    let mut last_stats = std::time::Instant::now() - STATS_INTERVAL;
    let mut seen_version = 0;
    let mut seen_stats = 0;
    let mut seen_current_frame = 0;
    let mut pending: Option<(u64, u8, FrameRequest)> = None;
    #[allow(clippy::type_complexity)] // (request id, kind, the render thread's answer)
    let mut in_flight: Option<(u64, u8, Receiver<Result<RenderedFrame, String>>)> = None;
    loop {
        if shared.shutdown.load(Ordering::SeqCst) {
            let _ = ws.close(None);
            let _ = ws.flush();
            return;
        }
        let version = shared.version.load(Ordering::SeqCst);
        if version != seen_version {
            seen_version = version;
            if ws.send(Message::text(shared.scene_json())).is_err() {
                return;
            }
        }
        let stats = shared.stats_version.load(Ordering::SeqCst);
        if stats != seen_stats && last_stats.elapsed() >= STATS_INTERVAL {
            seen_stats = stats;
            last_stats = std::time::Instant::now();
            let mut v = serde_json::to_value(&lock(&shared.info).stats).unwrap_or_default();
            v["type"] = "stats".into();
            let curves: std::collections::BTreeMap<String, Vec<[f64; 2]>> = lock(&shared.curves)
                .iter()
                .map(|(k, c)| (k.clone(), c.points.clone()))
                .collect();
            v["curves"] = serde_json::to_value(curves).unwrap_or_default();
            if ws.send(Message::text(v.to_string())).is_err() {
                return;
            }
        }
        let current_frame = shared.current_frame_version.load(Ordering::SeqCst);
        if current_frame != seen_current_frame {
            seen_current_frame = current_frame;
            let msg = lock(&shared.current_frame).clone();
            if let Some(msg) = msg
                && ws.send(Message::text(msg.as_str())).is_err()
            {
                return;
            }
        }
        // Short reads while a frame renders, so it goes out as soon as it is done; then drain
        // whatever else has arrived, so only the newest camera is kept.
        let mut timeout = if in_flight.is_some() { 1 } else { 50 };
        for _ in 0..256 {
            let _ = ws
                .get_mut()
                .set_read_timeout(Some(Duration::from_millis(timeout)));
            timeout = 1;
            match ws.read() {
                Ok(Message::Text(text)) => {
                    if let Some(reply) = take_request(text.as_str(), &mut pending)
                        && ws.send(reply).is_err()
                    {
                        return;
                    }
                }
                Ok(Message::Close(_)) => {
                    let _ = ws.flush();
                    return;
                }
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {
                    // Pending control replies (pongs, close) go out when the socket takes them.
                    if let Err(e) = ws.flush()
                        && !is_timeout(&e)
                    {
                        return;
                    }
                    break;
                }
                Err(_) => return,
            }
        }
        if let Some((id, quality, rx)) = &in_flight {
            match rx.recv_timeout(Duration::from_millis(3)) {
                Ok(Ok(frame)) => {
                    let msg = match frame.jpeg(*quality) {
                        Ok(jpeg) => frame_message(*id, &frame, &jpeg),
                        Err(e) => error_message(Some(*id), &e.to_string()),
                    };
                    in_flight = None;
                    if ws.send(msg).is_err() {
                        return;
                    }
                }
                Ok(Err(e)) => {
                    let id = *id;
                    in_flight = None;
                    if ws.send(error_message(Some(id), &e)).is_err() {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => in_flight = None,
            }
        }
        if in_flight.is_none()
            && let Some((id, quality, frame)) = pending.take()
        {
            match shared.submit(frame) {
                Ok(rx) => in_flight = Some((id, quality, rx)),
                Err(e) => {
                    if ws.send(error_message(Some(id), &e.to_string())).is_err() {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_only_beyond_loopback() {
        assert!(
            ViewerConfig::new("127.0.0.1:0".parse().unwrap())
                .token
                .is_none()
        );
        assert!(
            ViewerConfig::new("[::1]:0".parse().unwrap())
                .token
                .is_none()
        );
        let t = ViewerConfig::new("0.0.0.0:0".parse().unwrap())
            .token
            .unwrap();
        assert_eq!(t.len(), 32);
        assert_ne!(t, random_token());
        assert!(
            ViewerConfig::new("192.168.1.2:80".parse().unwrap())
                .token
                .is_some()
        );
    }

    #[test]
    fn base64_of_rfc4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn host_names() {
        assert_eq!(host_name("127.0.0.1:8080"), "127.0.0.1");
        assert_eq!(host_name("[::1]:8080"), "::1");
        assert_eq!(host_name("localhost"), "localhost");
        assert!(
            constant_time_eq(b"abc", b"abc")
                && !constant_time_eq(b"abc", b"abd")
                && !constant_time_eq(b"ab", b"abc")
        );
    }
}
