//! `rust3r view`: the browser viewer (`rust3r_viewer`) on a splat file or an output folder.

use std::io::Write;
use std::net::ToSocketAddrs;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use rust3r_viewer::{Content, ViewerConfig, ViewerHandle};

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

pub fn run(a: &ViewArgs) -> Result<()> {
    let addr = (a.host.as_str(), a.port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve --host {}", a.host))?
        .next()
        .with_context(|| format!("--host {} has no address", a.host))?;
    // A file that cannot be shown is an error page (and this message), not an exit: the page
    // says what is wrong to whoever opens it.
    let content = match rust3r_viewer::load_scene(&a.path).map_err(anyhow::Error::from).and_then(|scene| {
        let gpu = a.device.open()?;
        Ok((gpu, scene))
    }) {
        Ok((gpu, scene)) => {
            println!("{}: {} splats, SH degree {}", scene.description, scene.splats.len(), scene.splats.sh_degree);
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
        let _ = writeln!(out, "(listening on every interface: put this machine's name or address in place of {})", addr.ip());
    }
    if let Some(token) = handle.token() {
        let _ = writeln!(out, "access token: {token} (every request needs it; the URL above carries it)");
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
        std::process::Command::new("cmd").args(["/C", "start", "", url]).spawn()
    } else {
        std::process::Command::new("xdg-open").arg(url).spawn()
    };
    if let Err(e) = result {
        eprintln!("warning: cannot open a browser ({e}); open the URL above by hand");
    }
}
