//! `pacer serve` and its clients: `pacer submit`, `pacer jobs`, `pacer job`,
//! `pacer cancel`, `pacer logs` (docs/serve.md).

use anyhow::{bail, Context};
use pacer_serve::client::Client;
use std::path::PathBuf;
use std::time::Duration;

/// Where the service is and how to authenticate.
#[derive(Debug, clap::Args)]
pub struct ClientArgs {
    /// Service URL.
    #[arg(long, env = "PACER_SERVER", default_value = "http://127.0.0.1:8470")]
    pub server: String,
    /// File holding the bearer token (else the PACER_TOKEN environment variable).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
}

impl ClientArgs {
    fn client(&self) -> anyhow::Result<Client> {
        let token = match &self.token_file {
            Some(f) => pacer_fsio::read_to_string_limited(f, pacer_fsio::limits::TOKEN)
                .with_context(|| format!("--token-file {}", f.display()))?
                .trim()
                .to_string(),
            None => std::env::var("PACER_TOKEN").map_err(|_| {
                anyhow::anyhow!("no token: give --token-file FILE or set PACER_TOKEN; {TOKEN_HINT}")
            })?,
        };
        Client::new(&self.server, &token)
    }

    /// Where the token this client sends came from.
    fn token_source(&self) -> String {
        match &self.token_file {
            Some(f) => format!("--token-file {}", f.display()),
            None => "PACER_TOKEN".into(),
        }
    }
}

/// Where a client's token comes from, said with every token error.
const TOKEN_HINT: &str = "the service's token is the file <state>/token in the directory it \
     runs with (`pacer serve --state DIR`; or the file its own --token-file names): give \
     --token-file <state>/token, or PACER_TOKEN=$(cat <state>/token)";

/// An answer's JSON, with a 401 said as where the token came from and where the
/// service's is.
trait AnswerExt {
    fn ok_from(&self, client: &ClientArgs) -> anyhow::Result<serde_json::Value>;
}

impl AnswerExt for pacer_serve::client::Answer {
    fn ok_from(&self, client: &ClientArgs) -> anyhow::Result<serde_json::Value> {
        if self.status == 401 {
            bail!(
                "the service at {} refused the token from {} (401: missing or wrong token); {TOKEN_HINT}",
                client.server,
                client.token_source()
            );
        }
        self.ok_json()
    }
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  pacer submit examples/jobs/hello.toml
  pacer submit --wrap 'python3 train.py --epochs 3' -n 2 --name mnist --env OMP_NUM_THREADS=4
The flags below --wrap also override a spec file's values, as sbatch's flags override
its #SBATCH lines. The job runs in the directory pacer submit runs in unless --cwd or
the spec's cwd says otherwise (a relative one is resolved against it).")]
pub struct SubmitArgs {
    /// Job spec (TOML); or give --wrap instead.
    #[arg(conflicts_with = "wrap")]
    pub spec: Option<PathBuf>,
    /// Run this shell command as the job (`sh -c CMD`), without a spec file (as sbatch --wrap).
    #[arg(long, value_name = "CMD")]
    pub wrap: Option<String>,
    /// Devices asked for (the spec's `replicas`; --wrap: default 1).
    #[arg(short = 'n', long = "replicas", value_name = "N")]
    pub replicas: Option<u32>,
    /// The job's name (--wrap: default `wrap`).
    #[arg(long)]
    pub name: Option<String>,
    /// Working directory of the job (relative: to this directory; default: this directory).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// An environment variable for the job, KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Finish by: an RFC 3339 time (2026-11-27T03:00:00Z) or a duration from submission
    /// (2h30m, 90m, 3600s, 3600); the service admits or declines the job (the spec's
    /// `deadline`; needs --expected-runtime or --app, or the spec's `expected_runtime`
    /// or `app`).
    #[arg(long, value_name = "TIME|DURATION")]
    pub deadline: Option<String>,
    /// How long the job runs on its replicas (45m, 3600): what admission plans with
    /// (the spec's `expected_runtime`).
    #[arg(long, value_name = "DURATION")]
    pub expected_runtime: Option<String>,
    /// Plan the deadline from a measured profile instead of --expected-runtime: an
    /// embedded one (bert, cifar10, deepspeech2, imagenet, ncf, yolov3) or an absolute
    /// path to a folder in the Pollux layout on the service's machine (the spec's `app`).
    #[arg(long, value_name = "NAME|DIR")]
    pub app: Option<String>,
    /// With --app: `accuracy` (Courier: --epochs at the best batch that meets the
    /// deadline; default), `time` (reach --target-metric soonest) or `cost` (in the
    /// fewest device-hours) (the spec's `goal`).
    #[arg(long, value_parser = ["accuracy", "time", "cost"])]
    pub goal: Option<String>,
    /// With --app and goal accuracy: epochs to train (the spec's `epochs`).
    #[arg(long)]
    pub epochs: Option<f64>,
    /// With --app and goal time or cost: the metric to reach (the spec's `target_metric`).
    #[arg(long)]
    pub target_metric: Option<f64>,
    /// A cost budget in device-hours: the job is stopped once it has held that much
    /// (the spec's `budget_device_hours`; with --expected-runtime, a job expected to
    /// cost more is declined).
    #[arg(long, value_name = "DEVICE_HOURS")]
    pub budget_device_hours: Option<f64>,
    /// A cost budget in US dollars at the service's prices (`pacer serve --price`): the
    /// job is stopped once it has spent that much (the spec's `budget_usd`; with
    /// --expected-runtime, a job expected to cost more even on the cheapest type is
    /// declined).
    #[arg(long, value_name = "USD")]
    pub budget_usd: Option<f64>,
    /// Where the job may run among the types it accepts: `cheapest` (where its work
    /// costs least at the service's prices) or `any` (the spec's `placement`; default
    /// `cheapest` with a dollar budget, else `any`).
    #[arg(long, value_name = "cheapest|any", value_parser = ["cheapest", "any"])]
    pub placement: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Args)]
pub struct JobsArgs {
    /// Print the service's JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Args)]
pub struct JobArgs {
    /// Job id (e.g. job-3).
    pub id: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Args)]
pub struct JobShowArgs {
    /// Job id (e.g. job-3).
    pub id: String,
    /// Print the service's JSON (the record and its events) instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// Job id.
    pub id: String,
    /// Keep printing what the job writes until it has finished.
    #[arg(long)]
    pub follow: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn check_id(id: &str) -> anyhow::Result<()> {
    if !pacer_serve::job::valid_id(id) {
        bail!("job id `{id}`: expected [a-z0-9-]{{1,64}}, e.g. job-3");
    }
    Ok(())
}

pub fn run_serve(a: pacer_serve::args::ServeArgs) -> anyhow::Result<()> {
    // The simulator's profiles, for deadline jobs planned from one (`app`).
    a.run_with(Some(std::sync::Arc::new(
        pacer_serve::goal::ProfileSource {
            embedded: pacer_sim::embedded_profiles(),
            folder: |dir| pacer_sim::load_app_dir(dir).map_err(|e| e.to_string()),
        },
    )))
}

/// The largest job spec `pacer submit` sends: what the service accepts in a request.
const JOB_SPEC: pacer_fsio::Limit = pacer_fsio::Limit {
    what: "a job spec (the service's request limit)",
    bytes: pacer_serve::api::MAX_BODY as u64,
};

pub fn run_submit(a: SubmitArgs) -> anyhow::Result<()> {
    let mut spec = submit_spec_of(&a)?;
    submit_spec(&mut spec, &a.client)
}

/// The spec `pacer submit` sends before its cwd is resolved: the file's, or the --wrap
/// job's, with the flags' values over it.
fn submit_spec_of(a: &SubmitArgs) -> anyhow::Result<pacer_serve::spec::JobSpec> {
    let mut spec = match (&a.spec, &a.wrap) {
        (Some(path), _) => {
            // Bounded: a spec larger than the service accepts is refused here, naming
            // the limit, rather than sent to be cut off (the service answers 413).
            let text = pacer_fsio::read_limited(path, JOB_SPEC)?;
            // Check locally first, so errors name the file.
            let s = std::str::from_utf8(&text)
                .with_context(|| format!("{}: not UTF-8", path.display()))?;
            pacer_serve::spec::JobSpec::from_toml(s, &path.display().to_string())
                .map_err(|e| anyhow::anyhow!("{} (key `{}`)", e.message, e.field))?
        }
        (None, Some(cmd)) => {
            if cmd.trim().is_empty() {
                bail!("--wrap: the command is empty");
            }
            serde_json::from_value(serde_json::json!({
                "name": "wrap",
                "command": ["sh", "-c", cmd],
            }))
            .context("--wrap: building the job spec")?
        }
        (None, None) => bail!("give a job spec FILE or --wrap CMD"),
    };
    if let Some(n) = a.replicas {
        spec.replicas = n;
    }
    if let Some(name) = &a.name {
        spec.name = name.clone();
    }
    if let Some(d) = &a.cwd {
        spec.cwd = Some(
            d.to_str()
                .ok_or_else(|| anyhow::anyhow!("--cwd {}: not UTF-8", d.display()))?
                .to_string(),
        );
    }
    if let Some(d) = &a.deadline {
        spec.deadline = Some(d.clone());
    }
    if let Some(r) = &a.expected_runtime {
        spec.expected_runtime = Some(r.clone());
    }
    if let Some(app) = &a.app {
        spec.app = Some(app.clone());
    }
    if let Some(g) = &a.goal {
        spec.goal = Some(g.clone());
    }
    if let Some(e) = a.epochs {
        spec.epochs = Some(e);
    }
    if let Some(t) = a.target_metric {
        spec.target_metric = Some(t);
    }
    if let Some(b) = a.budget_device_hours {
        spec.budget_device_hours = Some(b);
    }
    if let Some(b) = a.budget_usd {
        spec.budget_usd = Some(b);
    }
    if let Some(p) = &a.placement {
        spec.placement = Some(match p.as_str() {
            "cheapest" => pacer_serve::spec::Placement::Cheapest,
            _ => pacer_serve::spec::Placement::Any,
        });
    }
    for kv in &a.env {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--env `{kv}`: expected KEY=VALUE");
        };
        if k.is_empty() {
            bail!("--env `{kv}`: the name before `=` is empty");
        }
        spec.env.insert(k.to_string(), v.to_string());
    }
    // The service's own wording, as it would answer (its fields are the file's keys).
    spec.validate_goal()
        .map_err(|e| anyhow::anyhow!("{} (field `{}`)", e.message, e.field))?;
    Ok(spec)
}

/// Sends `spec` with its `cwd` resolved as sbatch does (none: this process's working
/// directory; relative: against it), as JSON; prints the job id.
fn submit_spec(spec: &mut pacer_serve::spec::JobSpec, client: &ClientArgs) -> anyhow::Result<()> {
    let here = std::env::current_dir().context("the current directory (the job's default cwd)")?;
    spec.resolve_cwd(&here)
        .map_err(|e| anyhow::anyhow!("{} (key `{}`)", e.message, e.field))?;
    let c = client.client()?;
    let answer =
        runtime()?.block_on(c.post("/v1/jobs", serde_json::to_vec(spec)?, "application/json"))?;
    if answer.status == 409 {
        // A declined deadline or budget job: the answer says why and what would fit.
        if let Ok(v) = answer.json() {
            if v["admission"]["decision"] == "declined" {
                bail!("{}", v["error"].as_str().unwrap_or("declined"));
            }
        }
    }
    let v = answer.ok_from(client)?;
    putline!("{}", v["id"].as_str().unwrap_or("?"));
    if let Some(line) = admission_line(&v["admission"]) {
        putline!("{line}");
    }
    Ok(())
}

/// The second line `pacer submit` prints for an accepted deadline job.
fn admission_line(a: &serde_json::Value) -> Option<String> {
    if a["decision"] != "accepted" {
        return None;
    }
    let now = pacer_serve::core::now_ms();
    let finish = a["planned_finish_ms"].as_u64()?;
    Some(format!(
        "accepted: deadline {}, planned finish {} (in {}), {} devices now; planned with {}",
        a["deadline"].as_str()?,
        a["planned_finish"].as_str()?,
        pacer_serve::deadline::human_s(finish.saturating_sub(now) as f64 / 1e3),
        a["share_now"].as_u64()?,
        a["model"].as_str().unwrap_or("?"),
    ))
}

pub fn run_jobs(a: JobsArgs) -> anyhow::Result<()> {
    let c = a.client.client()?;
    let v = runtime()?
        .block_on(c.get("/v1/jobs?limit=20000"))?
        .ok_from(&a.client)?;
    if a.json {
        putline!("{}", pacer_cli::json::pretty(&v)?);
        return Ok(());
    }
    let jobs: Vec<&serde_json::Value> = v["jobs"].as_array().into_iter().flatten().collect();
    crate::out::print(&jobs_table(&jobs, pacer_serve::core::now_ms()))?;
    Ok(())
}

/// `pacer jobs`' table: one row per job, columns as wide as their widest cell (names cut
/// at 32 characters, reasons at 60), times local (`MM-DD HH:MM:SS`), elapsed `H:MM:SS`.
fn jobs_table(jobs: &[&serde_json::Value], now_ms: u64) -> String {
    let header = [
        "ID",
        "NAME",
        "STATE",
        "REASON",
        "REPLICAS",
        "EXIT",
        "SUBMITTED",
        "START",
        "END",
        "ELAPSED",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for j in jobs {
        rows.push(vec![
            text(&j["id"]),
            cut(&text(&j["spec"]["name"]), 32),
            text(&j["state"]),
            cut(&reason(j), 60),
            replicas(j),
            j["exit_code"]
                .as_i64()
                .map_or("-".into(), |c| c.to_string()),
            time_cell(j["submitted_ms"].as_u64()),
            time_cell(j["first_start_ms"].as_u64()),
            time_cell(j["finished_ms"].as_u64()),
            elapsed(j, now_ms),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, &w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn text(v: &serde_json::Value) -> String {
    v.as_str().unwrap_or("-").to_string()
}

/// `s` cut to `n` characters (`…` marks a cut), control characters shown as `?`.
fn cut(s: &str, n: usize) -> String {
    let clean: String = s
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if clean.chars().count() <= n {
        return clean;
    }
    let mut t: String = clean.chars().take(n - 1).collect();
    t.push('…');
    t
}

/// Why the job is in its state (the record's `reason`; records from before it existed:
/// how the last run ended).
fn reason(j: &serde_json::Value) -> String {
    match j["reason"].as_str() {
        Some(r) => r.to_string(),
        None => match j["state"].as_str() {
            Some("queued") => "waiting for devices".into(),
            _ => j["last_exit"].as_str().unwrap_or("-").to_string(),
        },
    }
}

/// What the job has held and spent, against its budgets: `0.512 device-hours, 1.79
/// USD (budget 5 USD)`; dollars only where the service has prices (`spent_usd` > 0 or
/// a `budget_usd`).
fn cost(j: &serde_json::Value) -> String {
    let spec = &j["spec"];
    let device_h = j["attained_device_s"].as_f64().unwrap_or(0.0) / 3600.0;
    let mut out = format!("{device_h:.3} device-hours");
    if let Some(b) = spec["budget_device_hours"].as_f64() {
        out += &format!(" (budget {b})");
    }
    let usd = j["spent_usd"].as_f64().unwrap_or(0.0);
    let budget = spec["budget_usd"].as_f64();
    if usd > 0.0 || budget.is_some() {
        out += &format!(", {usd:.2} USD");
        if let Some(b) = budget {
            out += &format!(" (budget {b} USD)");
        }
    }
    out
}

/// `held/asked` devices (`-` when it holds none), with the range of an adaptive job.
fn replicas(j: &serde_json::Value) -> String {
    let held: u64 = j["run"]["alloc"]
        .as_array()
        .map_or(0, |a| a.iter().filter_map(|p| p[1].as_u64()).sum());
    let spec = &j["spec"];
    let asked = spec["replicas"].as_u64().unwrap_or(1);
    let held = if held == 0 {
        "-".to_string()
    } else {
        held.to_string()
    };
    if spec["adaptive"].as_bool().unwrap_or(false) {
        let min = spec["min_replicas"].as_u64().unwrap_or(1);
        let max = spec["max_replicas"].as_u64().unwrap_or(asked);
        format!("{held}/{asked} ({min}-{max})")
    } else {
        format!("{held}/{asked}")
    }
}

/// First start to the end (or now, while it has not ended), `H:MM:SS`; `-` before it started.
fn elapsed(j: &serde_json::Value, now_ms: u64) -> String {
    let Some(start) = j["first_start_ms"].as_u64() else {
        return "-".into();
    };
    let end = j["finished_ms"].as_u64().unwrap_or(now_ms);
    duration(end.saturating_sub(start))
}

fn duration(ms: u64) -> String {
    let s = ms / 1000;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

fn time_cell(ms: Option<u64>) -> String {
    ms.map_or("-".into(), |t| local_time(t, false))
}

/// `ms` since the epoch in the local time zone: `MM-DD HH:MM:SS`, or with the year and
/// the zone (`2026-11-26 16:58:18 UTC`) when `full`.
fn local_time(ms: u64, full: bool) -> String {
    let secs = (ms / 1000) as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which lives on this stack frame; the zone
    // name it points to is static (tzset's) and read before anything else runs here.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        return format!("@{}", ms / 1000);
    }
    let md = format!(
        "{:02}-{:02} {:02}:{:02}:{:02}",
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    );
    if !full {
        return md;
    }
    let zone = if tm.tm_zone.is_null() {
        String::new()
    } else {
        // SAFETY: tm_zone is a NUL-terminated static string set by localtime_r.
        let z = unsafe { std::ffi::CStr::from_ptr(tm.tm_zone) };
        format!(" {}", z.to_string_lossy())
    };
    format!("{}-{md}{zone}", tm.tm_year + 1900)
}

pub fn run_job(a: JobShowArgs) -> anyhow::Result<()> {
    check_id(&a.id)?;
    let c = a.client.client()?;
    let rt = runtime()?;
    let mut v = rt
        .block_on(c.get(&format!("/v1/jobs/{}", a.id)))?
        .ok_from(&a.client)?;
    let ev = rt
        .block_on(c.get(&format!("/v1/jobs/{}/events", a.id)))?
        .ok_from(&a.client)?;
    v["events"] = ev["events"].clone();
    if a.json {
        putline!("{}", pacer_cli::json::pretty(&v)?);
    } else {
        crate::out::print(&job_text(&v, pacer_serve::core::now_ms()))?;
    }
    Ok(())
}

/// `pacer job ID`: a `key: value` block, then the job's events.
fn job_text(j: &serde_json::Value, now_ms: u64) -> String {
    let spec = &j["spec"];
    let mut kv: Vec<(&str, String)> = vec![
        ("name", cut(&text(&spec["name"]), 128)),
        ("state", text(&j["state"])),
        ("reason", cut(&reason(j), 1000)),
        (
            "exit code",
            j["exit_code"]
                .as_i64()
                .map_or("-".into(), |c| c.to_string()),
        ),
    ];
    let what = if let Some(argv) = spec["command"].as_array() {
        let words: Vec<String> = argv
            .iter()
            .map(|a| shell_word(a.as_str().unwrap_or("")))
            .collect();
        let launcher = spec["launcher"]
            .as_str()
            .map_or(String::new(), |l| format!("{l} "));
        format!("{launcher}{}", words.join(" "))
    } else {
        format!("[trainer] dataset {}", text(&spec["trainer"]["dataset"]))
    };
    kv.push(("command", cut(&what, 400)));
    kv.push(("cwd", cut(&text(&spec["cwd"]), 4096)));
    let mut rep = format!("{} asked", spec["replicas"].as_u64().unwrap_or(1));
    if spec["adaptive"].as_bool().unwrap_or(false) {
        rep += &format!(
            " (adaptive {}-{})",
            spec["min_replicas"].as_u64().unwrap_or(1),
            spec["max_replicas"]
                .as_u64()
                .unwrap_or(spec["replicas"].as_u64().unwrap_or(1))
        );
    }
    kv.push(("replicas", rep));
    let run = &j["run"];
    if run.is_object() {
        let nodes: Vec<String> = run["alloc"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| format!("node {} ×{}", p[0], p[1]))
            .collect();
        let slots: Vec<String> = run["slots"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| s.to_string())
            .collect();
        kv.push((
            "allocation",
            format!(
                "{} {} ({}; slots {}), attempt {}",
                replicas(j).split('/').next().unwrap_or("-"),
                text(&run["device_type"]),
                nodes.join(", "),
                slots.join(","),
                run["attempt"]
            ),
        ));
    } else {
        kv.push(("allocation", "-".into()));
    }
    kv.push((
        "attempts",
        format!("{} (restarts {})", j["attempts"], j["restarts"]),
    ));
    kv.push(("cost", cost(j)));
    let t = |k: &str| j[k].as_u64().map_or("-".into(), |ms| local_time(ms, true));
    kv.push(("submitted", t("submitted_ms")));
    kv.push(("started", t("first_start_ms")));
    kv.push(("ended", t("finished_ms")));
    kv.push(("elapsed", elapsed(j, now_ms)));
    let p = &j["progress"];
    let reports = j["reports"].as_u64().unwrap_or(0);
    if reports > 0 {
        let mut prog = format!(
            "step {}, {} samples, {:.1} samples/s",
            p["step"],
            p["samples"],
            p["throughput"].as_f64().unwrap_or(0.0)
        );
        if let Some(l) = p["loss"].as_f64() {
            prog += &format!(", loss {l:.4}");
        }
        if p["done"].as_bool().unwrap_or(false) {
            prog += ", done";
        }
        kv.push(("progress", prog));
        let last = p["last_report_ms"].as_u64().unwrap_or(0);
        kv.push((
            "last report",
            format!(
                "{} ago ({reports} reports)",
                duration(now_ms.saturating_sub(last))
            ),
        ));
    } else {
        kv.push(("progress", "no reports".into()));
    }
    kv.push((
        "log",
        j["log_path"].as_str().map_or_else(
            || format!("pacer logs {}", text(&j["id"])),
            |p| format!("{p} (pacer logs {})", text(&j["id"])),
        ),
    ));
    let mut out = format!("{}\n", text(&j["id"]));
    for (k, v) in kv {
        out += &format!("  {:<12} {v}\n", format!("{k}:"));
    }
    let events = j["events"].as_array().map_or(&[][..], |e| e.as_slice());
    out += &format!("events ({}):\n", events.len());
    for e in events {
        out += &format!(
            "  {}  {:<10} {}\n",
            e["t_ms"]
                .as_u64()
                .map_or("-".into(), |ms| local_time(ms, false)),
            cut(&text(&e["kind"]), 16),
            cut(e["detail"].as_str().unwrap_or(""), 200)
        );
    }
    out
}

/// `w` as a shell would need it written (quoted when it has anything but plain characters).
fn shell_word(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

pub fn run_cancel(a: JobArgs) -> anyhow::Result<()> {
    check_id(&a.id)?;
    let c = a.client.client()?;
    let v = runtime()?
        .block_on(c.post(&format!("/v1/jobs/{}/cancel", a.id), Vec::new(), ""))?
        .ok_from(&a.client)?;
    putline!("{} {}", a.id, v["state"].as_str().unwrap_or("?"));
    Ok(())
}

pub fn run_logs(a: LogsArgs) -> anyhow::Result<()> {
    check_id(&a.id)?;
    let c = a.client.client()?;
    let rt = runtime()?;
    let mut offset = 0u64;
    loop {
        let ans = rt.block_on(c.get(&format!("/v1/jobs/{}/logs?offset={offset}", a.id)))?;
        // The service rotates a log that outgrows its cap: it starts again, shorter
        // than where this reader was.
        if a.follow
            && offset > 0
            && ans.status == 400
            && ans.json().is_ok_and(|v| v["field"] == "offset")
        {
            eprintln!(
                "pacer logs: the log of {} was rotated; following it from its new start",
                a.id
            );
            offset = 0;
            continue;
        }
        let v = ans.ok_from(&a.client)?;
        let data = v["data"].as_str().unwrap_or("");
        crate::out::print(data)?;
        offset = v["next_offset"].as_u64().unwrap_or(offset);
        let eof = v["eof"].as_bool().unwrap_or(true);
        if !a.follow || (eof && v["finished"].as_bool().unwrap_or(false)) {
            return Ok(());
        }
        if eof {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}
