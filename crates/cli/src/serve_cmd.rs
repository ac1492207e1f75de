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
                anyhow::anyhow!("no token: give --token-file FILE or set PACER_TOKEN")
            })?,
        };
        Client::new(&self.server, &token)
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
    a.run()
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
    for kv in &a.env {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--env `{kv}`: expected KEY=VALUE");
        };
        if k.is_empty() {
            bail!("--env `{kv}`: the name before `=` is empty");
        }
        spec.env.insert(k.to_string(), v.to_string());
    }
    Ok(spec)
}

/// Sends `spec` with its `cwd` resolved as sbatch does (none: this process's working
/// directory; relative: against it), as JSON; prints the job id.
fn submit_spec(spec: &mut pacer_serve::spec::JobSpec, client: &ClientArgs) -> anyhow::Result<()> {
    let here = std::env::current_dir().context("the current directory (the job's default cwd)")?;
    spec.resolve_cwd(&here)
        .map_err(|e| anyhow::anyhow!("{} (key `{}`)", e.message, e.field))?;
    let c = client.client()?;
    let v = runtime()?
        .block_on(c.post("/v1/jobs", serde_json::to_vec(spec)?, "application/json"))?
        .ok_json()?;
    putline!("{}", v["id"].as_str().unwrap_or("?"));
    Ok(())
}

pub fn run_jobs(a: JobsArgs) -> anyhow::Result<()> {
    let c = a.client.client()?;
    let v = runtime()?
        .block_on(c.get("/v1/jobs?limit=20000"))?
        .ok_json()?;
    if a.json {
        putline!("{}", pacer_cli::json::pretty(&v)?);
        return Ok(());
    }
    putline!(
        "{:<12} {:<24} {:<10} {:>8} {:>9} {:>12} {:>8}",
        "ID",
        "NAME",
        "STATE",
        "DEVICES",
        "RESTARTS",
        "SAMPLES",
        "REPORTS"
    );
    for j in v["jobs"].as_array().into_iter().flatten() {
        let devices: u64 = j["run"]["alloc"]
            .as_array()
            .map_or(0, |a| a.iter().filter_map(|p| p[1].as_u64()).sum());
        let name: String = j["spec"]["name"]
            .as_str()
            .unwrap_or("")
            .chars()
            .take(24)
            .collect();
        putline!(
            "{:<12} {:<24} {:<10} {:>8} {:>9} {:>12} {:>8}",
            j["id"].as_str().unwrap_or("?"),
            name,
            j["state"].as_str().unwrap_or("?"),
            devices,
            j["restarts"].to_string(),
            j["progress"]["samples"].to_string(),
            j["reports"].to_string(),
        );
    }
    Ok(())
}

pub fn run_job(a: JobArgs) -> anyhow::Result<()> {
    check_id(&a.id)?;
    let c = a.client.client()?;
    let rt = runtime()?;
    let mut v = rt
        .block_on(c.get(&format!("/v1/jobs/{}", a.id)))?
        .ok_json()?;
    let ev = rt
        .block_on(c.get(&format!("/v1/jobs/{}/events", a.id)))?
        .ok_json()?;
    v["events"] = ev["events"].clone();
    putline!("{}", pacer_cli::json::pretty(&v)?);
    Ok(())
}

pub fn run_cancel(a: JobArgs) -> anyhow::Result<()> {
    check_id(&a.id)?;
    let c = a.client.client()?;
    let v = runtime()?
        .block_on(c.post(&format!("/v1/jobs/{}/cancel", a.id), Vec::new(), ""))?
        .ok_json()?;
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
        let v = ans.ok_json()?;
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
