//! `rust3r train --view` and `rust3r slam --view`: the page's WebSocket serves frames of the
//! run's current splats (or SLAM map) and its progress while the run works; a client that leaves
//! changes nothing for the run, and the run finishes normally with a client still attached.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rust3r_testdata::data;
use tungstenite::Message;
use tungstenite::stream::MaybeTlsStream;

type Ws = tungstenite::WebSocket<MaybeTlsStream<TcpStream>>;

/// A child process killed when the test ends, however it ends.
struct Kill(Option<Child>);

impl Drop for Kill {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Start `rust3r ARGS --view --view-port 0`; the process, the page's URL, and a thread that
/// collects the rest of its output.
fn start(args: &[&str]) -> (Kill, String, std::thread::JoinHandle<Vec<String>>) {
    let child = Command::new(env!("CARGO_BIN_EXE_rust3r"))
        .args(args)
        .args(["--view", "--view-port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run rust3r");
    let mut child = Kill(Some(child));
    let mut stdout = BufReader::new(child.0.as_mut().unwrap().stdout.take().unwrap()).lines();
    let mut lines = Vec::new();
    while let Some(Ok(line)) = stdout.next() {
        lines.push(line.clone());
        if let Some(i) = line.find("live view: open http://") {
            let url = line[i + "live view: open ".len()..].trim().to_owned();
            let rest = std::thread::spawn(move || {
                let mut all = lines;
                all.extend(stdout.map_while(Result::ok));
                all
            });
            return (child, url, rest);
        }
    }
    panic!("no live view URL in {lines:?}");
}

fn connect(url: &str) -> Ws {
    let ws_url = format!("{}ws", url.replacen("http://", "ws://", 1));
    let (ws, _) = tungstenite::connect(ws_url).expect("WebSocket connects");
    if let MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    }
    ws
}

/// What a client has seen.
#[derive(Default)]
struct Seen {
    splats: u64,
    pose: Option<serde_json::Value>,
    fov: f64,
    step: u64,
    frames: usize,
    frames_with_splats: usize,
    curves: Vec<String>,
    cameras: usize,
    /// SLAM's `current_frame` messages: (header without the image, the JPEG).
    current_frames: Vec<(serde_json::Value, Vec<u8>)>,
}

/// Standard base64 with padding, strictly.
fn unbase64(s: &str) -> Vec<u8> {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    assert!(s.len().is_multiple_of(4), "base64 of length {}", s.len());
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for chunk in s.as_bytes().chunks(4) {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        assert!(pad <= 2);
        let mut n = 0u32;
        for &c in chunk {
            let v = if c == b'=' {
                0
            } else {
                ABC.iter()
                    .position(|&a| a == c)
                    .expect("a base64 character") as u32
            };
            n = n << 6 | v;
        }
        out.extend_from_slice(&n.to_be_bytes()[1..4 - pad]);
    }
    out
}

/// Read one message and record what it says; `false` once the server has closed the connection.
fn read(ws: &mut Ws, seen: &mut Seen) -> bool {
    match ws.read() {
        Ok(Message::Text(t)) => {
            let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
            match v["type"].as_str() {
                Some("scene") => {
                    seen.splats = v["splats"].as_u64().unwrap();
                    seen.pose = Some(v["default_world_to_camera"].clone());
                    seen.fov = v["default_fov_x"].as_f64().unwrap();
                    seen.cameras = v["overlay"]["cameras"].as_array().map_or(0, Vec::len);
                }
                Some("stats") => {
                    seen.step = seen.step.max(v["step"].as_u64().unwrap_or(0));
                    if let Some(c) = v["curves"].as_object() {
                        seen.curves = c.keys().cloned().collect();
                    }
                }
                Some("current_frame") => {
                    let jpeg = unbase64(v["jpeg"].as_str().unwrap());
                    let mut header = v.clone();
                    header["jpeg"] = serde_json::Value::Null;
                    seen.current_frames.push((header, jpeg));
                }
                Some("error") => panic!("server error: {v}"),
                _ => {}
            }
            true
        }
        Ok(Message::Binary(b)) => {
            let n = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
            let header: serde_json::Value = serde_json::from_slice(&b[4..4 + n]).unwrap();
            let img = image::load_from_memory(&b[4 + n..])
                .expect("a JPEG frame")
                .to_rgb8();
            assert_eq!((img.width(), img.height()), (64, 48), "{header}");
            seen.frames += 1;
            if header["visible"].as_u64().unwrap() > 0 {
                seen.frames_with_splats += 1;
            }
            true
        }
        Ok(_) => true,
        Err(_) => false,
    }
}

/// A render request at the scene's default camera, 64x48.
fn request(ws: &mut Ws, seen: &Seen, id: u64) {
    let fx = 32.0 / (seen.fov / 2.0).tan();
    let camera = serde_json::json!({
        "fx": fx, "fy": fx, "cx": 32.0, "cy": 24.0, "width": 64, "height": 48,
        "world_to_camera": seen.pose.clone().unwrap(),
    });
    let msg = serde_json::json!({"type": "render", "id": id, "camera": camera, "quality": 80});
    ws.send(Message::text(msg.to_string())).unwrap();
}

/// Read until `done(seen)`, asking for a frame after every frame (a page whose user drags).
fn watch(ws: &mut Ws, seen: &mut Seen, done: impl Fn(&Seen) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut id = 0;
    while !done(seen) {
        assert!(
            Instant::now() < deadline,
            "no progress: {} splats, step {}, {} frames",
            seen.splats,
            seen.step,
            seen.frames_with_splats
        );
        let frames = seen.frames;
        assert!(read(ws, seen), "the server closed the connection early");
        if seen.pose.is_some() && (id == 0 || seen.frames != frames) {
            id += 1;
            request(ws, seen, id);
        }
    }
}

#[test]
fn train_view_serves_frames_and_the_run_finishes_after_and_with_a_client() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lego");
    let lego = data("lego");
    let steps = 600;
    let steps_s = steps.to_string();
    let (mut child, url, rest) = start(&[
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--steps",
        &steps_s,
        "--downscale",
        "20",
        "--init-count",
        "800",
        "--sh-degree",
        "1",
        "--eval-at",
        "100",
    ]);
    // A first page: frames of the live splats, the training cameras, the curves; then it goes
    // away mid-frame.
    let mut first = Seen::default();
    let mut ws = connect(&url);
    watch(&mut ws, &mut first, |s| {
        s.frames_with_splats >= 2 && s.splats > 0 && s.cameras == 87
    });
    request(&mut ws, &first, 999);
    drop(ws);
    // A second page sees the run go on, and stays until the run ends.
    let mut second = Seen::default();
    let mut ws = connect(&url);
    // The curves get their first points when training logs (loss) and evaluates (PSNR, step
    // 100): wait for them rather than for a fixed time.
    watch(&mut ws, &mut second, |s| {
        s.step > first.step
            && s.frames_with_splats >= 1
            && s.curves.iter().any(|c| c == "loss")
            && s.curves.iter().any(|c| c.contains("PSNR"))
    });
    assert!(
        second.curves.iter().any(|c| c == "loss")
            && second.curves.iter().any(|c| c.contains("PSNR")),
        "{:?}",
        second.curves
    );
    while read(&mut ws, &mut second) {}
    let status = child.0.take().unwrap().wait().unwrap();
    let lines = rest.join().unwrap();
    assert!(status.success(), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("done: {steps} steps"))),
        "{lines:?}"
    );
    let eval: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("eval.json")).unwrap()).unwrap();
    assert_eq!(eval.as_array().unwrap().last().unwrap()["step"], steps);
    assert!(out.join("splats.ply").is_file());
}

#[test]
fn train_view_without_a_client_and_train_sog() {
    // No page ever opens: the run is as without --view; --sog writes the bundle too.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lego");
    let lego = data("lego");
    let (mut child, _url, rest) = start(&[
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--steps",
        "20",
        "--downscale",
        "20",
        "--init-count",
        "800",
        "--sh-degree",
        "1",
        "--eval-at",
        "10",
        "--sog",
    ]);
    let status = child.0.take().unwrap().wait().unwrap();
    let lines = rest.join().unwrap();
    assert!(status.success(), "{lines:?}");
    let ply = rust3r_io::load_splats(&out.join("splats.ply")).unwrap();
    let sog = rust3r_io::load_splats(&out.join("splats.sog")).unwrap();
    assert_eq!((sog.len(), sog.sh_degree), (ply.len(), ply.sh_degree));
}

#[test]
fn slam_view_serves_the_map_and_the_trajectory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("slam");
    let kitchen = data("redkitchen");
    let (mut child, url, rest) = start(&[
        "slam",
        kitchen.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--mode",
        "rgbd",
        "--max-frames",
        "300",
        "--quiet",
    ]);
    let mut seen = Seen::default();
    let mut ws = connect(&url);
    // Keyframe points as splats, frusta (keyframes and the current frame), frames of them.
    // And the current frame's colour image.
    watch(&mut ws, &mut seen, |s| {
        s.splats > 1000
            && s.cameras >= 2
            && s.frames_with_splats >= 1
            && !s.current_frames.is_empty()
    });
    while read(&mut ws, &mut seen) {}
    let status = child.0.take().unwrap().wait().unwrap();
    let lines = rest.join().unwrap();
    assert!(status.success(), "{lines:?}");
    assert!(out.join("trajectory.txt").is_file());
    // Each image is the named source frame, shrunk to at most 320 wide: its aspect ratio, and
    // its mean colour within 2 levels of the source's shrunk by the test (its own resize).
    let mean = |img: &image::RgbImage| -> [f64; 3] {
        let n = (img.width() * img.height()) as f64;
        std::array::from_fn(|c| img.pixels().map(|p| p[c] as f64).sum::<f64>() / n)
    };
    let mut last_frame = 0;
    let mut worst = 0f64;
    for (header, jpeg) in &seen.current_frames {
        let img = image::load_from_memory_with_format(jpeg, image::ImageFormat::Jpeg)
            .expect("a JPEG current frame")
            .to_rgb8();
        assert_eq!(
            (img.width() as u64, img.height() as u64),
            (
                header["width"].as_u64().unwrap(),
                header["height"].as_u64().unwrap()
            ),
            "{header}"
        );
        let frame = header["frame"].as_u64().unwrap();
        assert!(
            frame > last_frame && frame <= 300 && header["total"].as_u64() == Some(300),
            "{header}"
        );
        last_frame = frame;
        assert!(
            header["timestamp"].as_f64().is_some_and(f64::is_finite),
            "{header}"
        );
        let name = header["name"].as_str().unwrap();
        assert!(!name.contains('/') && !name.contains('\\'), "{header}");
        let src = image::open(kitchen.join(name)).unwrap().to_rgb8();
        assert!(img.width() <= 320, "{header}");
        let aspect = |w: u32, h: u32| w as f64 / h as f64;
        assert!(
            (aspect(img.width(), img.height()) - aspect(src.width(), src.height())).abs() < 0.01,
            "{header}: source {}x{}",
            src.width(),
            src.height()
        );
        let small = image::imageops::resize(
            &src,
            img.width(),
            img.height(),
            image::imageops::FilterType::CatmullRom,
        );
        let (got, want) = (mean(&img), mean(&small));
        assert!(
            (0..3).all(|c| (got[c] - want[c]).abs() < 2.0),
            "{header}: mean {got:?}, source {want:?}"
        );
        worst = (0..3)
            .map(|c| (got[c] - want[c]).abs())
            .fold(worst, f64::max);
    }
    eprintln!(
        "{} current frames, {}x{}, mean colour at most {worst:.2} levels off",
        seen.current_frames.len(),
        seen.current_frames[0].0["width"],
        seen.current_frames[0].0["height"]
    );
}
