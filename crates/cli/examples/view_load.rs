//! A page that never stops dragging: connects to a `rust3r view` / `--view` URL, asks for a
//! new camera (orbiting the default one) as soon as each frame arrives, and prints the frame
//! rate and the latency from request to decoded frame. Used for the viewer's measurements
//! (docs/benchmarks/journal.md): `cargo run --release --example view_load -- URL [WIDTH HEIGHT [SECONDS]]`.
//! Runs until SECONDS have passed (default: until the server closes).

use std::time::{Duration, Instant};

use tungstenite::Message;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(url) = args.get(1) else {
        eprintln!("usage: view_load URL [WIDTH HEIGHT [SECONDS]]");
        std::process::exit(2);
    };
    let width: u32 = args.get(2).map_or(640, |v| v.parse().expect("WIDTH"));
    let height: u32 = args.get(3).map_or(480, |v| v.parse().expect("HEIGHT"));
    let seconds: Option<f64> = args.get(4).map(|v| v.parse().expect("SECONDS"));
    let (base, query) = url
        .split_once('?')
        .map_or((url.as_str(), ""), |(b, q)| (b, q));
    let ws_url = format!(
        "{}ws{}{}",
        base.replacen("http://", "ws://", 1),
        if query.is_empty() { "" } else { "?" },
        query
    );
    let (mut ws, _) = tungstenite::connect(ws_url).expect("connect");
    let start = Instant::now();
    let (mut pose, mut fov, mut splats) = (None::<serde_json::Value>, 1.0f64, 0u64);
    let mut sent: Option<(u64, Instant)> = None;
    let mut id = 0u64;
    let mut latencies: Vec<f64> = Vec::new();
    let mut render_ms: Vec<f64> = Vec::new();
    let mut first_frame: Option<Instant> = None;
    loop {
        if seconds.is_some_and(|s| start.elapsed().as_secs_f64() > s) {
            break;
        }
        if sent.is_none()
            && let Some(p) = &pose
        {
            // Orbit: turn the default pose about the camera's own vertical axis by a small
            // angle that grows with each request.
            id += 1;
            let a = 0.01 * id as f64;
            let (c, s) = (a.cos(), a.sin());
            let m: Vec<Vec<f64>> = serde_json::from_value(p.clone()).unwrap();
            let rot = [[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]];
            let mut w2c = m.clone();
            for r in 0..3 {
                for k in 0..4 {
                    w2c[r][k] = (0..3).map(|j| rot[r][j] * m[j][k]).sum();
                }
            }
            let fx = 0.5 * width as f64 / (0.5 * fov).tan();
            let camera = serde_json::json!({"fx": fx, "fy": fx, "cx": width as f64 / 2.0, "cy": height as f64 / 2.0,
                "width": width, "height": height, "world_to_camera": w2c});
            let msg =
                serde_json::json!({"type": "render", "id": id, "camera": camera, "quality": 90});
            ws.send(Message::text(msg.to_string())).expect("send");
            sent = Some((id, Instant::now()));
        }
        match ws.read() {
            Ok(Message::Text(t)) => {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                if v["type"] == "scene" {
                    pose = Some(v["default_world_to_camera"].clone());
                    fov = v["default_fov_x"].as_f64().unwrap_or(1.0);
                    splats = v["splats"].as_u64().unwrap_or(0);
                } else if v["type"] == "error" {
                    eprintln!("error: {v}");
                    sent = None;
                }
            }
            Ok(Message::Binary(b)) => {
                let n = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
                let header: serde_json::Value = serde_json::from_slice(&b[4..4 + n]).unwrap();
                let _img = image::load_from_memory(&b[4 + n..]).expect("JPEG");
                if let Some((sid, t)) = sent
                    && header["id"].as_u64() == Some(sid)
                {
                    if splats > 0 {
                        first_frame.get_or_insert_with(Instant::now);
                        latencies.push(t.elapsed().as_secs_f64() * 1e3);
                        render_ms.push(header["render_ms"].as_f64().unwrap_or(f64::NAN));
                    }
                    sent = None;
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let n = latencies.len();
    if n == 0 {
        println!("no frames");
        return;
    }
    let span = first_frame
        .map_or(Duration::ZERO, |t| t.elapsed())
        .as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    render_ms.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    println!(
        "{width}x{height}, {splats} splats: {n} frames in {span:.1} s = {:.1} fps; latency request->decoded frame median {:.1} ms, p90 {:.1} ms; server render+read-back median {:.1} ms",
        n as f64 / span.max(1e-9),
        pct(&latencies, 0.5),
        pct(&latencies, 0.9),
        pct(&render_ms, 0.5)
    );
}
