//! `rust3r view`: the binary serves the page and, in Debian's headless chromium driven through
//! the DevTools protocol, the page's first frame matches `rust3r render` at the same camera, a
//! drag changes it, a second tab gets frames too; a bad file is an error page.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rust3r_testdata::data;
use tungstenite::Message;

fn rust3r(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rust3r"))
        .args(args)
        .output()
        .expect("run rust3r");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A child process killed when the test ends, however it ends.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every k-th Gaussian of biker.spz (about 4000), written as a PLY.
fn tiny_biker(dir: &Path) -> PathBuf {
    let s = rust3r_io::load_splats(&data("splats/biker.spz")).unwrap();
    let k = (s.len() / 4000).max(1);
    let per = s.sh.len() / s.len();
    let rows: Vec<usize> = (0..s.len()).step_by(k).collect();
    let tiny = rust3r_io::Splats {
        means: rows.iter().map(|&i| s.means[i]).collect(),
        log_scales: rows.iter().map(|&i| s.log_scales[i]).collect(),
        rotations: rows.iter().map(|&i| s.rotations[i]).collect(),
        opacity_logits: rows.iter().map(|&i| s.opacity_logits[i]).collect(),
        sh: rows
            .iter()
            .flat_map(|&i| s.sh[i * per..(i + 1) * per].iter().copied())
            .collect(),
        sh_degree: s.sh_degree,
    };
    let path = dir.join("tiny_biker.ply");
    rust3r_io::save_splats(&path, &tiny).unwrap();
    path
}

/// Start `rust3r view PATH --port 0 ARGS` (its stderr into `stderr`); the process, its URL once
/// it prints it, and the lines it printed before.
fn start_view(path: &Path, args: &[&str], stderr: &Path) -> (Kill, String, Vec<String>) {
    let child = Command::new(env!("CARGO_BIN_EXE_rust3r"))
        .arg("view")
        .arg(path)
        .args(["--port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .expect("run rust3r view");
    let mut child = Kill(child);
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let mut lines = Vec::new();
    while let Some(Ok(line)) = stdout.next() {
        lines.push(line.clone());
        if let Some(i) = line.find("http://") {
            let url = line[i..].split_whitespace().next().unwrap().to_owned();
            // Keep reading what it prints, as a terminal would.
            std::thread::spawn(move || stdout.for_each(drop));
            return (child, url, lines);
        }
    }
    let err = std::fs::read_to_string(stderr).unwrap_or_default();
    panic!("rust3r view printed no URL; stdout {lines:?}, stderr {err}");
}

/// GET over plain HTTP: status and body.
fn get(url: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_owned()), |(h, p)| (h, format!("/{p}")));
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let status = buf.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
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

#[test]
fn bad_file_is_an_error_page_and_a_terminal_message() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.ply");
    std::fs::write(
        &bad,
        b"ply\nformat binary_little_endian 1.0\nelement vertex 5\nend_header\n",
    )
    .unwrap();
    for path in [bad, dir.path().join("missing.spz")] {
        let log = dir.path().join("stderr.txt");
        let (_child, url, _) = start_view(&path, &[], &log);
        let (status, body) = get(&url);
        assert_eq!(status, 500, "{body}");
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(
            body.contains(name),
            "the error page does not name {name}: {body}"
        );
        // The terminal says it too, and the server keeps running after serving the page.
        let err = std::fs::read_to_string(&log).unwrap();
        assert!(err.contains("error") && err.contains(name), "{err}");
        assert_eq!(get(&url).0, 500);
    }
    // Bad flags are errors before anything is served.
    let (ok, _, err) = rust3r(&["view", "x.ply", "--host", "no such host name.invalid"]);
    assert!(!ok && err.contains("--host"), "{err}");
}

/// The DevTools protocol over one WebSocket (flattened sessions).
struct DevTools {
    ws: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl DevTools {
    fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: serde_json::Value,
    ) -> serde_json::Value {
        match self.try_call(session, method, params) {
            Ok(v) => v,
            Err(e) => panic!("{method}: {e}"),
        }
    }

    fn try_call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, serde_json::Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = serde_json::json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = s.into();
        }
        self.ws.send(Message::text(msg.to_string())).unwrap();
        loop {
            let Message::Text(t) = self.ws.read().unwrap() else {
                continue;
            };
            let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
            if v["id"] == id {
                return match v.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(v["result"].clone()),
                };
            }
        }
    }

    /// Open `url` in a new tab of w x h CSS pixels (scale 1); its session id.
    fn open(&mut self, url: &str, w: u32, h: u32) -> String {
        let target = self.call(
            None,
            "Target.createTarget",
            serde_json::json!({"url": "about:blank"}),
        );
        let session = self.call(
            None,
            "Target.attachToTarget",
            serde_json::json!({"targetId": target["targetId"], "flatten": true}),
        )["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
        self.call(
            Some(&session),
            "Emulation.setDeviceMetricsOverride",
            serde_json::json!({"width": w, "height": h, "deviceScaleFactor": 1, "mobile": false}),
        );
        self.call(Some(&session), "Page.enable", serde_json::json!({}));
        self.call(
            Some(&session),
            "Page.navigate",
            serde_json::json!({"url": url}),
        );
        session
    }

    /// The value of `expr` in the tab; null while the tab navigates.
    fn eval(&mut self, session: &str, expr: &str) -> serde_json::Value {
        self.try_call(
            Some(session),
            "Runtime.evaluate",
            serde_json::json!({"expression": expr, "returnByValue": true}),
        )
        .map(|r| r["result"]["value"].clone())
        .unwrap_or_default()
    }

    /// Wait until the page has drawn more than `frames` frames and is settled; the frame count.
    fn wait_settled(&mut self, session: &str, frames: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let v = self.eval(
                session,
                "document.body ? [document.body.dataset.frames, document.body.dataset.settled, document.body.dataset.error || ''] : null",
            );
            if let Some(a) = v.as_array() {
                let n: u64 = a[0].as_str().unwrap_or("0").parse().unwrap_or(0);
                if n > frames && a[1] == "1" {
                    return n;
                }
                assert!(Instant::now() < deadline, "page not settled: {v}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The top-left w x h CSS pixels of the tab as RGB.
    fn screenshot(&mut self, session: &str, w: u32, h: u32) -> image::RgbImage {
        let r = self.call(
            Some(session),
            "Page.captureScreenshot",
            serde_json::json!({"format": "png", "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}}),
        );
        let png = base64_decode(r["data"].as_str().unwrap());
        image::load_from_memory_with_format(&png, image::ImageFormat::Png)
            .unwrap()
            .to_rgb8()
    }

    fn mouse(&mut self, session: &str, kind: &str, x: f64, y: f64) {
        self.call(
            Some(session),
            "Input.dispatchMouseEvent",
            serde_json::json!({"type": kind, "x": x, "y": y, "button": "left", "buttons": if kind == "mouseReleased" { 0 } else { 1 }, "clickCount": 1}),
        );
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let bytes: Vec<u8> = s
        .bytes()
        .filter(|&c| c != b'=' && !c.is_ascii_whitespace())
        .map(val)
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &b) in chunk.iter().enumerate() {
            n |= (b as u32) << (18 - 6 * i);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// Start headless chromium with remote debugging; `None` when there is no `chromium` program.
fn chromium(profile: &Path) -> Option<(Kill, DevTools)> {
    let spawned = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-port=0",
            "--remote-debugging-address=127.0.0.1",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => Kill(c),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("cannot start chromium: {e}"),
    };
    // Read its stderr for the DevTools address, and keep draining it so chromium never blocks.
    let stderr = BufReader::new(child.0.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if let Some(i) = line.find("ws://") {
                let _ = tx.send(line[i..].trim().to_owned());
            }
        }
    });
    let address = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("chromium printed no DevTools address");
    let (ws, _) = tungstenite::connect(address).unwrap();
    Some((child, DevTools { ws, next_id: 1 }))
}

#[test]
fn browser_shows_the_splat_like_render_and_follows_a_drag() {
    let dir = tempfile::tempdir().unwrap();
    let splats = tiny_biker(dir.path());
    let (w, h) = (160u32, 120u32);
    // rust3r render's default camera for this size, nudged so the test does not rest on it.
    let means = rust3r_io::load_splats(&splats).unwrap().means;
    let mut camera = rust3r_splat::Camera::default_for_points(&means, w, h);
    camera.intrinsics.fx *= 1.1;
    camera.intrinsics.fy *= 1.1;
    let cam_path = dir.path().join("cam.json");
    std::fs::write(&cam_path, serde_json::to_string(&camera).unwrap()).unwrap();
    let png = dir.path().join("render.png");
    let (ok, _, err) = rust3r(&[
        "render",
        splats.to_str().unwrap(),
        "--camera",
        cam_path.to_str().unwrap(),
        "--background",
        "0.1,0.2,0.3",
        "--out",
        png.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let want = image::open(&png).unwrap().to_rgb8();

    let (_server, url, lines) = start_view(&splats, &[], &dir.path().join("stderr.txt"));
    assert!(lines.iter().any(|l| l.contains("splats")), "{lines:?}");
    let (status, page) = get(&url);
    assert_eq!(status, 200);
    assert!(page.contains("<canvas"));

    let Some((_browser, mut dt)) = chromium(&dir.path().join("profile")) else {
        eprintln!(
            "SKIPPED: no `chromium` program (apt-get install chromium); the browser half of this test did not run"
        );
        return;
    };
    let page_url = format!(
        "{url}?width={w}&height={h}&ui=0&background=0.1,0.2,0.3&camera={}",
        url_encode(&serde_json::to_string(&camera).unwrap())
    );
    let tab = dt.open(&page_url, 400, 300);
    let frames = dt.wait_settled(&tab, 0);
    let got = dt.screenshot(&tab, w, h);
    let p = psnr(got.as_raw(), want.as_raw());
    eprintln!("page vs rust3r render: {p:.2} dB");
    assert!(p >= 30.0, "page vs rust3r render: {p:.2} dB");
    // ui=0: nothing but the frame; the canvas is exactly w x h CSS pixels at the top-left.
    let rect = dt.eval(
        &tab,
        "(() => { const r = document.getElementById('frame').getBoundingClientRect(); \
         return [r.left, r.top, r.width, r.height, getComputedStyle(document.getElementById('panel')).display]; })()",
    );
    assert_eq!(rect, serde_json::json!([0, 0, w, h, "none"]));

    // A drag orbits the camera: more frames, settled again, a different picture.
    dt.mouse(&tab, "mousePressed", 40.0, 60.0);
    for i in 1..=5 {
        dt.mouse(&tab, "mouseMoved", 40.0 + 20.0 * i as f64, 60.0);
    }
    dt.mouse(&tab, "mouseReleased", 140.0, 60.0);
    let after = dt.wait_settled(&tab, frames);
    assert!(after > frames);
    let dragged = dt.screenshot(&tab, w, h);
    // Pixels that moved: the orbit (0.5 rad) turns the biker; JPEG noise alone moves none
    // this far.
    let changed = |a: &image::RgbImage| {
        a.pixels()
            .zip(want.pixels())
            .filter(|(p, q)| p.0.iter().zip(q.0).any(|(x, y)| x.abs_diff(y) > 40))
            .count()
    };
    let (noise, moved) = (changed(&got), changed(&dragged));
    eprintln!("pixels changed by more than 40: {noise} before the drag, {moved} after");
    assert!(
        noise < 50 && moved > 400,
        "pixels changed by more than 40: {noise} before the drag, {moved} after"
    );

    // A second tab at the same time gets frames too.
    let second = dt.open(
        &format!("{url}?width=96&height=72&ui=0&background=1,1,1"),
        300,
        200,
    );
    dt.wait_settled(&second, 0);
    let img = dt.screenshot(&second, 96, 72);
    let biker = img
        .pixels()
        .filter(|p| p.0.iter().any(|&c| c < 200))
        .count();
    assert!(
        biker > 200,
        "second tab shows too little of the biker: {biker} pixels"
    );
}
