//! The load benchmark (`pacer-serve bench`): starts a service as a child process on a
//! loopback port with a fresh state directory, submits `--jobs` jobs, then posts
//! reports at `--rate` per second for `--seconds` seconds (open loop: each request has
//! a scheduled time, and its latency counts from then, so a slow service cannot hide
//! its queueing), and prints throughput, p50/p99/max latency and the policy's round
//! time at that job count (from `/v1/cluster`). Loopback only; every wait is bounded.

use crate::client::Client;
use anyhow::{bail, Context};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Jobs to submit.
    #[arg(long, default_value_t = 10_000)]
    pub jobs: usize,
    /// Reports per second after the submissions.
    #[arg(long, default_value_t = 1000)]
    pub rate: u32,
    /// Seconds of reports.
    #[arg(long, default_value_t = 60)]
    pub seconds: u32,
    /// Persistent connections the reports are spread over.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Policy of the service under load (a preemptive one stops the jobs that receive
    /// the reports, which then answer 409).
    #[arg(long, default_value = "fifo")]
    pub policy: String,
    /// Cluster of the service (its devices run `sleep` jobs that receive the reports).
    #[arg(long, default_value = "4x2:cpu")]
    pub cluster: String,
    #[arg(long, default_value_t = 1.0)]
    pub round_s: f64,
    /// Deadline jobs submitted one at a time after `--jobs` (their admission answer's
    /// latency; needs `--policy deadline` or `elasticflow`).
    #[arg(long, default_value_t = 0)]
    pub deadline_jobs: usize,
}

struct Pool {
    conns: Vec<Mutex<Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>>>,
    authority: String,
    token: String,
}

impl Pool {
    async fn post(&self, slot: usize, path: &str, body: Bytes) -> anyhow::Result<u16> {
        let mut guard = self.conns[slot % self.conns.len()].lock().await;
        if guard.as_ref().is_none_or(|s| s.is_closed()) {
            let stream = tokio::net::TcpStream::connect(&self.authority).await?;
            stream.set_nodelay(true)?;
            let (sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            *guard = Some(sender);
        }
        let sender = guard.as_mut().expect("set above");
        sender.ready().await?;
        let req = hyper::Request::post(path)
            .header(hyper::header::HOST, &self.authority)
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        let res = sender.send_request(req).await?;
        let status = res.status().as_u16();
        res.into_body().collect().await?;
        Ok(status)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Runs the benchmark; `exe` is the `pacer-serve` binary to start.
pub fn run(a: BenchArgs, exe: PathBuf) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("pacer-serve-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut child = std::process::Command::new(exe)
        .args(["run", "--listen", &format!("127.0.0.1:{port}"), "--state"])
        .arg(dir.join("state"))
        .args([
            "--cluster",
            &a.cluster,
            "--policy",
            &a.policy,
            "--round-s",
            &a.round_s.to_string(),
            "--grace-s",
            "2",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("starting the service")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(drive(&a, port, &dir));
    // Stop the service (SIGTERM), then the jobs it left running (their process groups).
    // SAFETY: kill(2) on our own child's pid; no memory involved.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let _ = child.wait();
    kill_leftover_runs(&dir.join("state/runs"));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn drive(a: &BenchArgs, port: u16, dir: &std::path::Path) -> anyhow::Result<()> {
    let base = format!("http://127.0.0.1:{port}");
    let t0 = Instant::now();
    let token = loop {
        if let Ok(t) = std::fs::read_to_string(dir.join("state/token")) {
            if Client::new(&base, "")?
                .get("/healthz")
                .await
                .is_ok_and(|r| r.status == 200)
            {
                break t.trim().to_string();
            }
        }
        if t0.elapsed() > Duration::from_secs(30) {
            bail!("the service did not come up in 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let pool = Arc::new(Pool {
        conns: (0..a.connections.max(1))
            .map(|_| Mutex::new(None))
            .collect(),
        authority: format!("127.0.0.1:{port}"),
        token: token.clone(),
    });
    // Submissions: `connections` workers, closed loop.
    let t_sub = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..a.connections.max(1) {
        let (pool, next, jobs) = (pool.clone(), next.clone(), a.jobs);
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if k >= jobs {
                    return Ok::<_, anyhow::Error>(lat);
                }
                let body = format!(
                    r#"{{"name":"bench-{k}","command":["sleep","3600"],"replicas":{}}}"#,
                    1 + k % 2
                );
                let t = Instant::now();
                let st = pool.post(w, "/v1/jobs", Bytes::from(body)).await?;
                if st != 201 {
                    bail!("submission {k} answered {st}");
                }
                lat.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }));
    }
    let mut sub_lat = Vec::new();
    for w in workers {
        sub_lat.extend(w.await??);
    }
    let sub_s = t_sub.elapsed().as_secs_f64();
    sub_lat.sort_by(f64::total_cmp);
    println!(
        "submissions: {} in {:.1} s = {:.0}/s; latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        a.jobs,
        sub_s,
        a.jobs as f64 / sub_s,
        percentile(&sub_lat, 0.5),
        percentile(&sub_lat, 0.99),
        sub_lat.last().copied().unwrap_or(f64::NAN)
    );
    if a.deadline_jobs > 0 {
        deadline_submissions(a.deadline_jobs, &pool).await?;
    }
    reports(a, &pool, &base, &token).await
}

/// Submits `n` deadline jobs one after another (each planned beside all admitted so
/// far) and prints their answers' latency and how many were admitted.
async fn deadline_submissions(n: usize, pool: &Pool) -> anyhow::Result<()> {
    let (mut lat, mut accepted, mut declined) = (Vec::with_capacity(n), 0, 0);
    for k in 0..n {
        // 10 min on 1 or 2 devices, due in 15 min to 2 h 15 min (deterministic spread).
        let body = format!(
            r#"{{"name":"ddl-{k}","command":["sleep","3600"],"replicas":{},"expected_runtime":"600","deadline":"{}s"}}"#,
            1 + k % 2,
            900 + (k * 937) % 7200
        );
        let t = Instant::now();
        match pool.post(0, "/v1/jobs", Bytes::from(body)).await? {
            201 => accepted += 1,
            409 => declined += 1,
            st => bail!("deadline submission {k} answered {st}"),
        }
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    lat.sort_by(f64::total_cmp);
    println!(
        "deadline submissions: {n} ({accepted} admitted, {declined} declined); answer latency \
         p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(f64::NAN)
    );
    Ok(())
}

async fn reports(a: &BenchArgs, pool: &Arc<Pool>, base: &str, token: &str) -> anyhow::Result<()> {
    let c = Client::new(base, token)?;
    // Reports go to the running jobs (the only ones that accept them).
    let t0 = Instant::now();
    let running: Vec<String> = loop {
        let v = c.get("/v1/jobs?state=running").await?.ok_json()?;
        let ids: Vec<String> = v["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|j| j["id"].as_str().map(String::from))
            .collect();
        if !ids.is_empty() {
            break ids;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("no job started within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let total = a.rate as usize * a.seconds as usize;
    let interval = Duration::from_secs_f64(1.0 / a.rate.max(1) as f64);
    let start = tokio::time::Instant::now() + Duration::from_millis(100);
    let mut handles = Vec::with_capacity(total);
    for i in 0..total {
        let (pool, id) = (pool.clone(), running[i % running.len()].clone());
        let at = start + interval * i as u32;
        handles.push(tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let body = format!(
                r#"{{"step":{i},"samples":{},"time_s":1.0,"replicas":1,"device_type":"cpu","global_batch":32,"local_batches":[32],"throughput":100.0,"step_time_s":0.32,"noise_scale":10.0,"loss":0.5}}"#,
                i * 32
            );
            let st = pool.post(i, &format!("/v1/jobs/{id}/reports"), Bytes::from(body)).await;
            (at.elapsed().as_secs_f64() * 1e3, st.ok())
        }));
    }
    let mut lat = Vec::with_capacity(total);
    let mut ok = 0usize;
    let mut other = 0usize;
    for h in handles {
        let (ms, st) = h.await?;
        lat.push(ms);
        match st {
            Some(202) => ok += 1,
            _ => other += 1,
        }
    }
    let wall = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    println!(
        "reports: {total} scheduled at {}/s over {} s on {} connections to {} running jobs: {ok} accepted (202), {other} not; \
         {:.0}/s achieved; latency from the scheduled time p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        a.rate,
        a.seconds,
        a.connections,
        running.len(),
        ok as f64 / wall,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(f64::NAN)
    );
    let v = c.get("/v1/cluster").await?.ok_json()?;
    let r = &v["last_round"];
    let ms = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "policy `{}` at {} active jobs: last round {:.2} ms of which the policy {:.2} ms \
         (reconcile {:.2} ms, views {:.2} ms, apply {:.2} ms)",
        a.policy,
        r["active_jobs"],
        ms("round_ms"),
        ms("policy_ms"),
        ms("reconcile_ms"),
        ms("views_ms"),
        ms("apply_ms")
    );
    Ok(())
}

/// SIGKILLs the process group of every run a benchmark service left (their pid files).
fn kill_leftover_runs(runs: &std::path::Path) {
    for job in std::fs::read_dir(runs).into_iter().flatten().flatten() {
        for attempt in std::fs::read_dir(job.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let pid = std::fs::read_to_string(attempt.path().join("pid"))
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok());
            if let Some(pid) = pid.filter(|&p| p > 1) {
                if !attempt.path().join("exit").exists() {
                    // SAFETY: kill(2) on a process group this benchmark's service started.
                    unsafe {
                        libc::kill(-pid, libc::SIGKILL);
                    }
                }
            }
        }
    }
}
