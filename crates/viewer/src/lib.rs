//! `rust3r view`: a browser viewer whose frames rust3r renders on its own GPU with its own
//! rasterizer, so it shows scenes of any size the rasterizer handles (browser-side splat
//! renderers stop at a few million Gaussians) and works from another machine's browser.
//!
//! The server ([`ViewerHandle::start`]) serves one plain HTML/JS page (embedded, no build step)
//! and a WebSocket. The page sends the camera it wants as JSON (the `rust3r render --camera`
//! format); the server answers with a JPEG of that view. Each client has at most one frame in
//! flight: camera requests that arrive meanwhile replace each other (latest camera wins), so a
//! fast mouse or a resize storm never builds a queue. One renderer thread owns the GPU; each
//! client has a thread that reads its requests, encodes its frames and writes them.
//!
//! Crates: `httparse` (request parsing) and `tungstenite` (the WebSocket protocol) over std's
//! blocking sockets. Both are small, synchronous and actively maintained (tungstenite is the
//! protocol layer under tokio-tungstenite and axum's WebSocket). Each client needs a read
//! timeout on its socket to take the newest camera while a frame renders, which plain sockets
//! give directly; tiny_http hides its upgraded socket behind a trait object without timeouts,
//! and axum + tokio would add an async runtime (tokio, hyper, tower, axum and their
//! dependencies) around work that is synchronous GPU rendering anyway.
//!
//! Page URL parameters (the test contract of issue #23): `width`, `height`, `camera` (URL-encoded
//! camera JSON), `background` (`r,g,b`), `ui=0` (the frame alone at the top-left corner at
//! exactly `width` x `height` CSS pixels), `token`. The page keeps the count of frames drawn in
//! `document.body.dataset.frames` and sets `document.body.dataset.settled` to `"1"` once the frame
//! shown is the full-resolution one for the current camera. See `docs/viewer.md`.
// Library code returns errors; `expect` states the invariant that makes it unreachable.
#![warn(clippy::unwrap_used)]

mod frame;
mod http;
pub mod live;
mod scene;
mod server;

pub use frame::{FrameRequest, RenderMode, RenderedFrame, Renderer};
pub use live::{LiveOptions, LiveView};
pub use scene::{Overlay, Scene, load_scene, points_to_splats, read_tum_trajectory};
pub use server::{Content, CurrentFrame, Stats, ViewerConfig, ViewerHandle, random_token};

/// Errors of the viewer.
#[derive(Debug, thiserror::Error)]
pub enum ViewerError {
    #[error(transparent)]
    Io(#[from] rust3r_io::IoError),
    #[error(transparent)]
    Splat(#[from] rust3r_splat::SplatError),
    #[error(transparent)]
    Gpu(#[from] rust3r_gpu::GpuError),
    #[error("{path}: {message}")]
    Scene {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("invalid request: {0}")]
    Request(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot encode the frame: {0}")]
    Encode(String),
    #[error("the viewer has no scene: {0}")]
    NoScene(String),
    #[error("the renderer has stopped")]
    Stopped,
}
