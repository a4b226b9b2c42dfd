//! `rust3r view`: the browser viewer (`rust3r_viewer`) on a splat file or an output folder.

use std::io::Write;
use std::net::ToSocketAddrs;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use rust3r_viewer::{Content, LiveOptions, LiveView, ViewerConfig, ViewerHandle};

use crate::DeviceArgs;

#[derive(Args, Debug)]
pub struct ViewArgs {
    /// Splat file (.ply, .spz, .splat, .compressed.ply) or an output folder of `rust3r train` /
    /// `rust3r slam` (its splats or point cloud, cameras and trajectory).
    path: PathBuf,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Address to listen on. Any address but loopback needs the access token printed at start.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Open the page in the default browser.
    #[arg(long)]
    open: bool,
    #[command(flatten)]
    device: DeviceArgs,
}

/// `--view` and its address, for `rust3r train / run / slam`.
#[derive(Args, Debug, Clone)]
pub struct LiveFlags {
    /// Serve the browser viewer while this runs (the page of `rust3r view`, with the current
    /// splats or SLAM map and the progress; docs/viewer.md). Closing the page never stops the run.
    #[arg(long)]
    pub view: bool,
    /// Port of the --view page (0: any free port).
    #[arg(long, default_value_t = 8080)]
    pub view_port: u16,
    /// Address of the --view page; any address but loopback needs the access token printed.
    #[arg(long, default_value = "127.0.0.1")]
    pub view_host: String,
}

impl LiveFlags {
    /// With `--view`: start serving on `gpu` and print the URL.
    pub fn start(&self, gpu: &rust3r_gpu::Gpu, description: &str) -> Result<Option<LiveView>> {
        if !self.view {
            return Ok(None);
        }
        let addr = resolve(&self.view_host, self.view_port)?;
        let live = LiveView::start(
            ViewerConfig::new(addr),
            gpu.clone(),
            description,
            LiveOptions::default(),
        )?;
        println!("live view: open {}", live.url());
        if let Some(token) = live.handle().token() {
            println!("access token: {token} (every request needs it; the URL above carries it)");
        }
        Ok(Some(live))
    }
}

fn resolve(host: &str, port: u16) -> Result<std::net::SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?
        .next()
        .with_context(|| format!("{host} has no address"))
}

pub fn run(a: &ViewArgs) -> Result<()> {
    let addr = resolve(&a.host, a.port).context("--host")?;
    // A file that cannot be shown is an error page (and this message), not an exit: the page
    // says what is wrong to whoever opens it.
    let content = match rust3r_viewer::load_scene(&a.path)
        .map_err(anyhow::Error::from)
        .and_then(|scene| {
            let gpu = a.device.open()?;
            Ok((gpu, scene))
        }) {
        Ok((gpu, scene)) => {
            println!(
                "{}: {} splats, SH degree {}",
                scene.description,
                scene.splats.len(),
                scene.splats.sh_degree
            );
            if !scene.overlay.cameras.is_empty() || !scene.overlay.trajectory.is_empty() {
                println!(
                    "overlay: {} cameras, {} trajectory points",
                    scene.overlay.cameras.len(),
                    scene.overlay.trajectory.len()
                );
            }
            Content::Scene { gpu, scene }
        }
        Err(e) => {
            let msg = format!("{e:#}");
            eprintln!("error: {msg}");
            Content::Error(msg)
        }
    };
    let handle = ViewerHandle::start(ViewerConfig::new(addr), content)?;
    let url = handle.url();
    // Write errors are ignored from here on: the viewer keeps serving when its output is closed
    // (`rust3r view x | head -1`).
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "rust3r view: open {url}");
    if handle.local_addr().ip().is_unspecified() {
        let _ = writeln!(
            out,
            "(listening on every interface: put this machine's name or address in place of {})",
            addr.ip()
        );
    }
    if let Some(token) = handle.token() {
        let _ = writeln!(
            out,
            "access token: {token} (every request needs it; the URL above carries it)"
        );
    }
    let _ = writeln!(out, "Ctrl-C stops the viewer.");
    let _ = out.flush();
    drop(out);
    if a.open {
        open_browser(&url);
    }
    handle.wait();
    Ok(())
}

/// Open `url` with the desktop's default browser; a failure is a warning.
fn open_browser(url: &str) {
    let result = if cfg!(target_os = "macos") {
        std::process::Command::new("open").arg(url).spawn()
    } else if cfg!(target_os = "windows") {
        std::process::Command::new("cmd")
            .args(["/C", "start", "", url])
            .spawn()
    } else {
        std::process::Command::new("xdg-open").arg(url).spawn()
    };
    if let Err(e) = result {
        eprintln!("warning: cannot open a browser ({e}); open the URL above by hand");
    }
}
