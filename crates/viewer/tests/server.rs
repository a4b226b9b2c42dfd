//! The viewer's protocol end to end on the GPU (lavapipe in CI): a WebSocket client asks for
//! frames and checks them against the rasterizer's own image, with several clients, bad
//! requests, disconnects, a resize storm, the token, the error page and the live-update API.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rust3r_gpu::Gpu;
use rust3r_io::Splats;
use rust3r_splat::{Camera, GpuSplats, RenderOptions, render_chunks};
use rust3r_testdata::data;
use rust3r_viewer::{Content, CurrentFrame, Scene, Stats, ViewerConfig, ViewerHandle};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

type Client = WebSocket<MaybeTlsStream<TcpStream>>;

/// Every k-th Gaussian of biker.spz: about `n` of them.
fn tiny_biker(n: usize) -> Splats {
    let s = rust3r_io::load_splats(&data("splats/biker.spz")).unwrap();
    let k = (s.len() / n).max(1);
    let per = s.sh.len() / s.len();
    let rows: Vec<usize> = (0..s.len()).step_by(k).collect();
    Splats {
        means: rows.iter().map(|&i| s.means[i]).collect(),
        log_scales: rows.iter().map(|&i| s.log_scales[i]).collect(),
        rotations: rows.iter().map(|&i| s.rotations[i]).collect(),
        opacity_logits: rows.iter().map(|&i| s.opacity_logits[i]).collect(),
        sh: rows
            .iter()
            .flat_map(|&i| s.sh[i * per..(i + 1) * per].iter().copied())
            .collect(),
        sh_degree: s.sh_degree,
    }
}

fn start(splats: &Splats, token: Option<&str>) -> ViewerHandle {
    let gpu = Gpu::default_device().unwrap();
    let mut config = ViewerConfig::new("127.0.0.1:0".parse().unwrap());
    config.token = token.map(str::to_owned);
    let scene = Scene {
        splats: splats.clone(),
        overlay: Default::default(),
        description: "tiny biker".into(),
    };
    ViewerHandle::start(config, Content::Scene { gpu, scene }).unwrap()
}

/// `rust3r render`'s image of `splats` from `camera` (its code path: chunks, forward only), 8 bit.
fn reference(splats: &Splats, camera: &Camera, background: [f32; 3]) -> Vec<u8> {
    let gpu = Gpu::default_device().unwrap();
    let chunks = GpuSplats::chunks_from_host(&gpu, splats, None).unwrap();
    let opts = RenderOptions {
        background,
        forward_only: true,
        ..Default::default()
    };
    let (out, _) = render_chunks(&gpu, &chunks, camera, &opts).unwrap();
    gpu.read(&out.rgb)
        .unwrap()
        .iter()
        .map(|v| (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8)
        .collect()
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mse = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
        .sum::<f64>()
        / a.len() as f64;
    10.0 * (255.0f64 * 255.0 / mse.max(1e-12)).log10()
}

fn connect(addr: SocketAddr, query: &str) -> Client {
    let (mut ws, _) = tungstenite::connect(format!("ws://{addr}/ws{query}")).unwrap();
    if let MaybeTlsStream::Plain(s) = ws.get_mut() {
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    }
    ws
}

enum Reply {
    Json(serde_json::Value),
    Frame {
        header: serde_json::Value,
        rgb: image::RgbImage,
    },
}

fn next(ws: &mut Client) -> Reply {
    loop {
        match ws.read().unwrap() {
            Message::Text(t) => return Reply::Json(serde_json::from_str(t.as_str()).unwrap()),
            Message::Binary(b) => {
                let n = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
                let header: serde_json::Value = serde_json::from_slice(&b[4..4 + n]).unwrap();
                let img =
                    image::load_from_memory_with_format(&b[4 + n..], image::ImageFormat::Jpeg)
                        .unwrap();
                return Reply::Frame {
                    header,
                    rgb: img.to_rgb8(),
                };
            }
            _ => {}
        }
    }
}

/// The next frame, skipping scene and stats messages; panics on an error message.
fn next_frame(ws: &mut Client) -> (serde_json::Value, image::RgbImage) {
    loop {
        match next(ws) {
            Reply::Frame { header, rgb } => return (header, rgb),
            Reply::Json(v) if v["type"] == "error" => panic!("error message: {v}"),
            Reply::Json(_) => {}
        }
    }
}

/// The next error message, skipping others.
fn next_error(ws: &mut Client) -> serde_json::Value {
    loop {
        match next(ws) {
            Reply::Json(v) if v["type"] == "error" => return v,
            Reply::Json(_) => {}
            Reply::Frame { header, .. } => panic!("a frame where an error was due: {header}"),
        }
    }
}

fn request(id: u64, camera: &Camera, background: [f32; 3]) -> Message {
    Message::text(
        serde_json::json!({"type": "render", "id": id, "camera": camera, "background": background, "quality": 95})
            .to_string(),
    )
}

/// GET `path` over plain HTTP: status and body.
fn get(addr: SocketAddr, path: &str, extra_headers: &str) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{extra_headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let head_end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head")
        + 4;
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, buf[head_end..].to_vec())
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn frames_match_the_rasterizer_for_two_clients_and_the_screenshot_is_exact() {
    let splats = tiny_biker(3000);
    let viewer = start(&splats, None);
    let addr = viewer.local_addr();
    let camera = Camera::default_for_points(&splats.means, 160, 120);
    let bg = [0.2, 0.3, 0.4];
    let want = reference(&splats, &camera, bg);
    // The (dark) biker covers about 8% of the frame.
    let bg8 = bg.map(|v| (v * 255.0 + 0.5) as u8);
    let covered = want
        .chunks(3)
        .filter(|p| p.iter().zip(bg8).any(|(a, b)| a.abs_diff(b) > 30))
        .count();
    assert!(
        covered > 1000,
        "the reference shows too little of the biker ({covered} pixels)"
    );

    let mut a = connect(addr, "");
    let mut b = connect(addr, "");
    match next(&mut a) {
        Reply::Json(v) => {
            assert_eq!(v["type"], "scene");
            assert_eq!(v["splats"], splats.len());
            let pose: [[f64; 4]; 4] =
                serde_json::from_value(v["default_world_to_camera"].clone()).unwrap();
            assert_eq!(
                pose,
                Camera::default_for_points(&splats.means, 16, 9).world_to_camera,
                "the page's default camera is rust3r render's at 16:9"
            );
        }
        Reply::Frame { .. } => panic!("a frame before the scene"),
    }
    a.send(request(1, &camera, bg)).unwrap();
    b.send(request(7, &camera, bg)).unwrap();
    for ws in [&mut a, &mut b] {
        let (header, img) = next_frame(ws);
        assert_eq!(img.dimensions(), (160, 120));
        assert!(header["id"] == 1 || header["id"] == 7, "{header}");
        let p = psnr(img.as_raw(), &want);
        assert!(
            p >= 30.0,
            "frame PSNR {p:.2} dB against the rasterizer's image"
        );
    }

    // A different camera gives a different frame.
    let mut moved = camera.clone();
    moved.world_to_camera[0][3] += 0.3 * moved.world_to_camera[2][3].abs().max(1.0);
    a.send(request(2, &moved, bg)).unwrap();
    let (header, img) = next_frame(&mut a);
    assert_eq!(header["id"], 2);
    assert!(
        psnr(img.as_raw(), &want) < 25.0,
        "moving the camera did not change the frame"
    );

    // Screenshot: lossless, exactly the rasterizer's image.
    let cam_json = serde_json::to_string(&camera).unwrap();
    let (status, png) = get(
        addr,
        &format!(
            "/screenshot.png?camera={}&background=0.2,0.3,0.4",
            url_encode(&cam_json)
        ),
        "",
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&png));
    let shot = image::load_from_memory_with_format(&png, image::ImageFormat::Png)
        .unwrap()
        .to_rgb8();
    assert_eq!(shot.dimensions(), (160, 120));
    let worst = shot
        .as_raw()
        .iter()
        .zip(&want)
        .map(|(x, y)| x.abs_diff(*y))
        .max()
        .unwrap();
    assert!(
        worst <= 1,
        "screenshot differs from the rasterizer by {worst}"
    );
    let (status, _) = get(addr, "/screenshot.png?camera=%7B%22fx%22%3Anull%7D", "");
    assert_eq!(status, 400);

    // The page itself.
    let (status, page) = get(addr, "/", "");
    assert_eq!(status, 200);
    let page = String::from_utf8(page).unwrap();
    assert!(
        page.contains("dataset.settled") && page.contains("<canvas"),
        "not the viewer page"
    );
    assert_eq!(get(addr, "/nothing", "").0, 404);
}

#[test]
fn bad_requests_are_answered_and_the_connection_survives() {
    let splats = tiny_biker(1000);
    let viewer = start(&splats, None);
    let addr = viewer.local_addr();
    let camera = Camera::default_for_points(&splats.means, 64, 48);
    let mut ws = connect(addr, "");
    // NaN is not JSON; a NaN that parses (as null) or a non-positive focal length is not a camera.
    let cam = serde_json::to_value(&camera).unwrap();
    let text = cam
        .to_string()
        .replacen(&format!("\"fx\":{}", cam["fx"]), "\"fx\":NaN", 1);
    assert!(text.contains("NaN"));
    ws.send(Message::text(format!(
        r#"{{"type":"render","id":3,"camera":{text}}}"#
    )))
    .unwrap();
    let e = next_error(&mut ws);
    assert!(
        e["message"].as_str().unwrap().contains("invalid request"),
        "{e}"
    );
    let mut bad = cam.clone();
    bad["fx"] = serde_json::json!(-5.0);
    ws.send(Message::text(
        serde_json::json!({"type": "render", "id": 4, "camera": bad}).to_string(),
    ))
    .unwrap();
    let e = next_error(&mut ws);
    assert_eq!(e["id"], 4);
    assert!(e["message"].as_str().unwrap().contains("focal"), "{e}");
    let mut big = camera.clone();
    big.intrinsics.width = 100_000;
    ws.send(request(5, &big, [0.0; 3])).unwrap();
    assert_eq!(next_error(&mut ws)["id"], 5);
    ws.send(Message::text("not json")).unwrap();
    next_error(&mut ws);
    ws.send(request(6, &camera, [0.0; 3])).unwrap();
    assert_eq!(next_frame(&mut ws).0["id"], 6);

    // A client that leaves mid-frame does not stop the server.
    let mut gone = connect(addr, "");
    gone.send(request(1, &camera, [0.0; 3])).unwrap();
    drop(gone);
    ws.send(request(8, &camera, [0.0; 3])).unwrap();
    assert_eq!(next_frame(&mut ws).0["id"], 8);
}

#[test]
fn latest_camera_wins_in_a_resize_storm() {
    let splats = tiny_biker(1000);
    let viewer = start(&splats, None);
    let mut ws = connect(viewer.local_addr(), "");
    let n = 60;
    for i in 1..=n {
        let (w, h) = (16 + (i * 37) % 200, 16 + (i * 53) % 150);
        let camera = Camera::default_for_points(&splats.means, w, h);
        ws.send(request(u64::from(i), &camera, [0.0; 3])).unwrap();
    }
    let mut frames = 0;
    loop {
        let (header, img) = next_frame(&mut ws);
        frames += 1;
        if header["id"] == n {
            let (w, h) = (16 + (n * 37) % 200, 16 + (n * 53) % 150);
            assert_eq!(img.dimensions(), (w, h));
            break;
        }
    }
    // Without latest-wins every request would be rendered.
    assert!(
        frames <= 5,
        "{frames} frames rendered for {n} requests sent at once"
    );
}

#[test]
fn token_origin_and_host_checks() {
    let splats = tiny_biker(500);
    let viewer = start(&splats, Some("s3cret"));
    let addr = viewer.local_addr();
    assert_eq!(get(addr, "/", "").0, 403);
    assert_eq!(get(addr, "/?token=wrong", "").0, 403);
    assert_eq!(get(addr, "/?token=s3cret", "").0, 200);
    assert_eq!(get(addr, "/scene.json", "").0, 403);
    let camera = Camera::default_for_points(&splats.means, 32, 24);
    let shot = format!(
        "/screenshot.png?camera={}",
        url_encode(&serde_json::to_string(&camera).unwrap())
    );
    assert_eq!(get(addr, &shot, "").0, 403);
    assert_eq!(get(addr, &format!("{shot}&token=s3cret"), "").0, 200);
    match tungstenite::connect(format!("ws://{addr}/ws")) {
        Err(tungstenite::Error::Http(r)) => assert_eq!(r.status(), 403),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a WebSocket without the token was accepted"),
    }
    let mut ws = connect(addr, "?token=s3cret");
    ws.send(request(1, &camera, [0.0; 3])).unwrap();
    assert_eq!(next_frame(&mut ws).0["id"], 1);
    drop(viewer);

    // Without a token: another site's page cannot open the WebSocket, another host name
    // (DNS rebinding) gets nothing.
    let viewer = start(&splats, None);
    let addr = viewer.local_addr();
    use tungstenite::client::IntoClientRequest;
    let mut req = format!("ws://{addr}/ws").into_client_request().unwrap();
    req.headers_mut()
        .insert("Origin", "http://evil.example".parse().unwrap());
    assert!(
        tungstenite::connect(req).is_err(),
        "a cross-origin WebSocket was accepted"
    );
    let mut req = format!("ws://{addr}/ws").into_client_request().unwrap();
    req.headers_mut()
        .insert("Origin", format!("http://{addr}").parse().unwrap());
    assert!(
        tungstenite::connect(req).is_ok(),
        "the page's own origin was refused"
    );
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET / HTTP/1.1\r\nHost: evil.example:80\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    assert!(buf.starts_with("HTTP/1.1 403"), "{buf}");
}

#[test]
fn error_content_is_an_error_page() {
    let config = ViewerConfig::new("127.0.0.1:0".parse().unwrap());
    let err = rust3r_viewer::load_scene(std::path::Path::new("/nonexistent/x.ply"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/x.ply"), "{err}");
    let viewer = ViewerHandle::start(config, Content::Error(format!("{err} <script>"))).unwrap();
    let (status, body) = get(viewer.local_addr(), "/", "");
    assert_eq!(status, 500);
    let body = String::from_utf8(body).unwrap();
    assert!(
        body.contains("/nonexistent/x.ply") && body.contains("&lt;script&gt;"),
        "{body}"
    );
    assert!(tungstenite::connect(format!("ws://{}/ws", viewer.local_addr())).is_err());
}

#[test]
fn live_updates_reach_connected_clients() {
    let splats = tiny_biker(1000);
    let viewer = start(&splats, None);
    let mut ws = connect(viewer.local_addr(), "");
    let first = match next(&mut ws) {
        Reply::Json(v) => v,
        Reply::Frame { .. } => panic!("frame first"),
    };
    assert_eq!(first["splats"], splats.len());
    let fewer = tiny_biker(300);
    viewer.set_splats(fewer.clone()).unwrap();
    viewer.set_stats(Stats {
        step: Some(42),
        loss: Some(0.5),
        ..Default::default()
    });
    let (mut got_scene, mut got_stats) = (false, false);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(got_scene && got_stats) {
        assert!(Instant::now() < deadline, "no live update");
        if let Reply::Json(v) = next(&mut ws) {
            if v["type"] == "scene" && v["splats"] == fewer.len() {
                assert!(v["version"].as_u64().unwrap() > first["version"].as_u64().unwrap());
                got_scene = true;
            }
            if v["type"] == "stats" && v["step"] == 42 {
                got_stats = true;
            }
        }
    }
    // Frames now show the new splats.
    let camera = Camera::default_for_points(&splats.means, 96, 72);
    ws.send(request(1, &camera, [0.0; 3])).unwrap();
    let (_, img) = next_frame(&mut ws);
    let p = psnr(img.as_raw(), &reference(&fewer, &camera, [0.0; 3]));
    assert!(
        p >= 30.0,
        "frame after set_splats: {p:.2} dB against the new splats"
    );
    // A live SLAM run's current image: connected clients get each, a later client the newest.
    let current = |frame: u64, jpeg: &[u8]| CurrentFrame {
        frame,
        total: 10,
        timestamp: frame as f64 * 0.5,
        name: format!("frame-{frame}.png"),
        width: 4,
        height: 3,
        jpeg: jpeg.to_vec(),
    };
    let wait_current = |ws: &mut Client, frame: u64| -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            assert!(Instant::now() < deadline, "no current_frame {frame}");
            if let Reply::Json(v) = next(ws)
                && v["type"] == "current_frame"
                && v["frame"] == frame
            {
                return v;
            }
        }
    };
    viewer.set_current_frame(&current(1, b"foob"));
    let v = wait_current(&mut ws, 1);
    assert_eq!(
        (
            v["jpeg"].as_str(),
            v["width"].as_u64(),
            v["height"].as_u64(),
            v["total"].as_u64()
        ),
        (Some("Zm9vYg=="), Some(4), Some(3), Some(10)),
        "{v}"
    );
    assert_eq!(
        (v["name"].as_str(), v["timestamp"].as_f64()),
        (Some("frame-1.png"), Some(0.5))
    );
    viewer.set_current_frame(&current(2, b"foobar"));
    viewer.set_current_frame(&current(3, b"fooba"));
    assert_eq!(wait_current(&mut ws, 3)["jpeg"], "Zm9vYmE=");
    let mut late = connect(viewer.local_addr(), "");
    let v = loop {
        if let Reply::Json(v) = next(&mut late)
            && v["type"] == "current_frame"
        {
            break v;
        }
    };
    assert_eq!(
        (v["frame"].as_u64(), v["jpeg"].as_str()),
        (Some(3), Some("Zm9vYmE=")),
        "a later client gets the newest only"
    );
}
