//! Reports to a scheduler service (`PACER_SERVER`): posted about once per second
//! and at the end, in the contract's shape, with the job's token; a service that
//! fails or is not there never stops training. Servers here are on 127.0.0.1 and
//! every loop is bounded in time.

mod common;

use common::{config, tiny};
use pacer_runtime::service::ServiceEnv;
use pacer_runtime::{train_local, LocalLaunch};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request as the test server saw it: request line, Authorization, body.
type Request = (String, String, String);

struct Recorder {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Recorder {
    /// A server answering every request with `status` (e.g. `202 Accepted`).
    fn start(status: &'static str) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let requests: Arc<Mutex<Vec<Request>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !s.load(Ordering::SeqCst) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((conn, _)) => {
                        if let Some(req) = answer(conn, status) {
                            r.lock().unwrap().push(req);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Recorder {
            addr,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Vec<Request> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap();
        std::mem::take(&mut self.requests.lock().unwrap())
    }
}

/// Reads one HTTP/1.1 request (at most 64 KiB, 2 s per read) and answers it.
fn answer(mut conn: TcpStream, status: &str) -> Option<Request> {
    conn.set_nonblocking(false).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 || buf.len() > 64 << 10 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let len: usize = header("content-length").parse().ok()?;
    while buf.len() < head_end + len.min(64 << 10) {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + len]).to_string();
    let reply = "{\"accepted\":true}";
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    );
    let line = head.lines().next().unwrap_or_default().to_string();
    Some((line, header("authorization"), body))
}

fn env(server: &str) -> ServiceEnv {
    let table = [
        ("PACER_SERVER", server.to_string()),
        ("PACER_JOB_ID", "job-7".to_string()),
        ("PACER_TOKEN", "s3cret".to_string()),
        ("PACER_DEVICE_TYPE", "cpu".to_string()),
    ];
    ServiceEnv::from_lookup(|k| table.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
        .unwrap()
        .unwrap()
}

const KEYS: [&str; 12] = [
    "device_type",
    "done",
    "global_batch",
    "local_batches",
    "loss",
    "noise_scale",
    "replicas",
    "samples",
    "step",
    "step_time_s",
    "throughput",
    "time_s",
];

#[test]
fn the_controller_reports_about_once_per_second_and_at_the_end() {
    let server = Recorder::start("202 Accepted");
    let d = tiny();
    let b = 64;
    let mut cfg = config(&d, "mlp", 16, b, 1_000_000);
    // About 2.5 s of training: two or three periodic reports, then the last.
    cfg.max_time_s = 2.5;
    cfg.service = Some(env(&format!("http://{}", server.addr)));
    let (r, _) = train_local(d, cfg, LocalLaunch::new(2), None).unwrap();
    let reqs = server.finish();
    assert!(reqs.len() >= 2, "{} reports", reqs.len());
    // At most about one per second (plus the last one).
    assert!(
        reqs.len() as f64 <= r.train_time_s + 2.0,
        "{} reports in {} s",
        reqs.len(),
        r.train_time_s
    );
    let mut last_step = 0;
    for (i, (line, auth, body)) in reqs.iter().enumerate() {
        assert_eq!(line, "POST /v1/jobs/job-7/reports HTTP/1.1");
        assert_eq!(auth, "Bearer s3cret");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        let o = v.as_object().unwrap();
        let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, KEYS, "{body}");
        for k in [
            "samples",
            "step",
            "time_s",
            "throughput",
            "step_time_s",
            "global_batch",
        ] {
            let x = o[k].as_f64().unwrap();
            assert!(x.is_finite() && x >= 0.0, "{k}: {body}");
        }
        for k in ["noise_scale", "loss"] {
            assert!(
                o[k].is_null() || o[k].as_f64().is_some_and(|x| x >= 0.0),
                "{body}"
            );
        }
        let step = o["step"].as_u64().unwrap();
        assert!(step >= last_step);
        last_step = step;
        assert_eq!(o["samples"].as_u64().unwrap(), step * b, "{body}");
        assert_eq!(o["replicas"].as_u64().unwrap(), 2);
        assert_eq!(o["device_type"], "cpu");
        let local: u64 = o["local_batches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .sum();
        assert_eq!(local, b);
        let last = i + 1 == reqs.len();
        assert_eq!(o["done"].as_bool().unwrap(), last, "{body}");
        if !last {
            assert!(o["throughput"].as_f64().unwrap() > 0.0, "{body}");
        }
    }
    assert_eq!(last_step, r.iterations);
}

#[test]
fn a_failing_or_missing_service_never_stops_training() {
    let failing = Recorder::start("500 Internal Server Error");
    // A port nobody listens on any more: connections are refused.
    let gone = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for server in [format!("http://{}", failing.addr), format!("http://{gone}")] {
        let d = tiny();
        let mut cfg = config(&d, "mlp", 16, 64, 1_000_000);
        cfg.max_time_s = 1.5;
        cfg.service = Some(env(&server));
        let t = Instant::now();
        let (r, _) = train_local(d, cfg, LocalLaunch::new(1), None).unwrap();
        assert!(
            !r.interrupted && r.iterations > 10,
            "{server}: {}",
            r.iterations
        );
        // Bounded: training time plus at most a request timeout or two for the end.
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    }
    assert!(!failing.finish().is_empty());
}

#[test]
fn the_service_environment_is_checked_naming_the_variable() {
    let get = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    assert!(ServiceEnv::from_lookup(get(&[])).unwrap().is_none());
    // A shell set up for the `pacer submit` client is not a job of the service.
    assert!(ServiceEnv::from_lookup(get(&[
        ("PACER_SERVER", "http://127.0.0.1:8470"),
        ("PACER_TOKEN", "t")
    ]))
    .unwrap()
    .is_none());
    let ok = ServiceEnv::from_lookup(get(&[
        ("PACER_SERVER", "http://127.0.0.1:8470/"),
        ("PACER_JOB_ID", "a-1"),
        ("PACER_TOKEN", "t0k"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(ok.url, "http://127.0.0.1:8470/v1/jobs/a-1/reports");
    assert_eq!(ok.device_type, "cpu");
    assert!(
        !format!("{ok:?}").contains("t0k"),
        "the token stays out of logs"
    );
    // A run across device types (`mixed_types`) is named by its types joined by `+`.
    let mixed = ServiceEnv::from_lookup(get(&[
        ("PACER_SERVER", "http://127.0.0.1:8470"),
        ("PACER_JOB_ID", "a-1"),
        ("PACER_TOKEN", "t0k"),
        ("PACER_DEVICE_TYPE", "t4+a100"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(mixed.device_type, "t4+a100");
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[
                ("PACER_SERVER", "http://x:1"),
                ("PACER_JOB_ID", "j"),
                ("PACER_TOKEN", "t"),
                ("PACER_DEVICE_TYPE", "a b"),
            ],
            "PACER_DEVICE_TYPE",
        ),
        (
            &[("PACER_SERVER", "https://x:1"), ("PACER_JOB_ID", "j")],
            "PACER_SERVER",
        ),
        (&[("PACER_JOB_ID", "j")], "PACER_SERVER"),
        (
            &[("PACER_SERVER", "http://x:1"), ("PACER_JOB_ID", "../etc")],
            "PACER_JOB_ID",
        ),
        (
            &[("PACER_SERVER", "http://x:1"), ("PACER_JOB_ID", "j")],
            "PACER_TOKEN",
        ),
    ];
    for (pairs, var) in cases {
        let table: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let e =
            ServiceEnv::from_lookup(|k| table.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
                .unwrap_err()
                .to_string();
        assert!(e.starts_with(var), "{var}: {e}");
    }
}
