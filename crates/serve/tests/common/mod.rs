//! A `pacer-serve` process for tests: started on a loopback port, killed with
//! SIGKILL or SIGTERM, restarted on the same state directory and port.

#![allow(dead_code)]

use pacer_serve::client::{Answer, Client};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Service {
    pub dir: PathBuf,
    pub port: u16,
    pub args: Vec<String>,
    /// A limit on the service's open files (soft and hard), as under `ulimit -n`.
    pub nofile: Option<u64>,
    child: Option<Child>,
    pub rt: tokio::runtime::Runtime,
}

/// Polls `f` every 50 ms until it holds; fails the test after `secs` seconds.
pub fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "{what}: not within {secs} s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A fresh directory for one test, `pacer-serve-test-<name>-<random>` under the system's
/// temporary folder; it and all in it are removed when the guard drops (also when the
/// test panics), so bind it before the [`Service`] that uses it (which then stops first).
pub fn test_dir(name: &str) -> TestDir {
    TestDir(
        tempfile::Builder::new()
            .prefix(&format!("pacer-serve-test-{name}-"))
            .tempdir()
            .unwrap(),
    )
}

/// What [`test_dir`] returns: the directory's path, by `Deref`.
pub struct TestDir(tempfile::TempDir);

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

/// A free port below the kernel's ephemeral range (32768–60999 on Linux), so that
/// no outgoing connection or `:0` bind of another process is handed it while the
/// service is down between a kill and its restart (restarts reuse the port: the jobs
/// it re-adopts report to it). Chosen from the process id, probed for freedom.
fn free_port() -> u16 {
    // Tests of one binary run in parallel in one process: each call starts elsewhere.
    static CALLS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let base = 20_000 + ((std::process::id() + 613 * call as u32) % 10_000) as u16;
    (0..2_000u16)
        .map(|i| 20_000 + (base - 20_000 + i * 7) % 12_000)
        .find(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        .expect("no free port in 20000..32000")
}

/// How many times the service has said where it listens in `log`.
fn ready_lines(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .map(|s| s.matches("listening on").count())
        .unwrap_or(0)
}

impl Service {
    /// Starts a service on `dir/state` with `args` (cluster, policy, …) and waits for it.
    pub fn start(dir: &Path, args: &[&str]) -> Service {
        let mut s = Service {
            dir: dir.to_path_buf(),
            port: free_port(),
            args: args.iter().map(|a| a.to_string()).collect(),
            nofile: None,
            child: None,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        };
        s.restart();
        s
    }

    /// Starts like [`Service::start`] with the service's open files limited to `nofile`.
    pub fn start_with_nofile(dir: &Path, args: &[&str], nofile: u64) -> Service {
        let mut s = Service {
            dir: dir.to_path_buf(),
            port: free_port(),
            args: args.iter().map(|a| a.to_string()).collect(),
            nofile: Some(nofile),
            child: None,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        };
        s.restart();
        s
    }

    /// The running service's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// (Re)starts the process and waits (≤ 30 s) until it has said it listens and
    /// `/healthz` answers (both: a `/healthz` alone might be another process's).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let ready_before = ready_lines(&self.dir.join("service.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("service.log"))
            .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pacer-serve"));
        if let Some(n) = self.nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: only setrlimit (async-signal-safe) between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let r = libc::rlimit {
                        rlim_cur: n as libc::rlim_t,
                        rlim_max: n as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .arg("run")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--state")
            .arg(self.state())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting pacer-serve");
        self.child = Some(child);
        let c = Client::new(&format!("http://127.0.0.1:{}", self.port), "").unwrap();
        let t0 = Instant::now();
        loop {
            let ours = ready_lines(&self.dir.join("service.log")) > ready_before;
            if ours {
                if let Ok(a) = self.rt.block_on(c.get("/healthz")) {
                    if a.status == 200 {
                        return;
                    }
                }
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "pacer-serve exited with {st}; see {}",
                    self.dir.join("service.log").display()
                );
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "pacer-serve did not come up in 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.state().join("token"))
            .unwrap()
            .trim()
            .to_string()
    }

    pub fn client(&self) -> Client {
        self.client_with(&self.token())
    }

    pub fn client_with(&self, token: &str) -> Client {
        let mut c = Client::new(&format!("http://127.0.0.1:{}", self.port), token).unwrap();
        c.timeout = Duration::from_secs(10);
        c
    }

    pub fn call(
        &self,
        c: &Client,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        ct: &str,
    ) -> Answer {
        self.rt
            .block_on(c.request(method, path, body.map(<[u8]>::to_vec), ct))
            .unwrap_or_else(|e| panic!("{method} {path}: {e:#}"))
    }

    /// `POST /v1/jobs` with a TOML spec.
    pub fn submit_toml(&self, c: &Client, spec: &str) -> Answer {
        self.call(
            c,
            "POST",
            "/v1/jobs",
            Some(spec.as_bytes()),
            "application/toml",
        )
    }

    pub fn get_json(&self, path: &str) -> serde_json::Value {
        let a = self.call(&self.client(), "GET", path, None, "");
        assert_eq!(
            a.status,
            200,
            "GET {path}: {}",
            String::from_utf8_lossy(&a.body)
        );
        a.json().unwrap()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// An answer read off the wire: status, header lines (lower-cased names) and body.
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Service {
    /// One HTTP/1.1 request with exactly the given extra header lines (no token added),
    /// on its own connection, under a 10 s timeout; the answer's headers kept.
    pub fn raw(&self, method: &str, path: &str, headers: &[&str], body: &[u8]) -> Raw {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.port,
            body.len()
        );
        for h in headers {
            req.push_str(h);
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        // The service may answer (413) before reading a large body: ignore a reset.
        let _ = s.write_all(body);
        let mut out = Vec::new();
        let _ = s.take(1 << 22).read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("{method} {path}: no status line in {text:?}"));
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Raw {
            status,
            headers,
            body: body.to_string(),
        }
    }
}
