//! The fields pacer reads from `sinfo --json` and `squeue --json` (Slurm 22.05, OpenAPI
//! v0.0.38), and their conversion into [`Node`] and [`JobInfo`]. Every other field is
//! ignored, so newer Slurm versions that add fields still parse.

use serde::Deserialize;

use crate::cluster::{parse_gres_list, Node, NodeState};
use crate::job::{JobInfo, JobState};
use crate::{expand_hostlist, SlurmError};

#[derive(Deserialize)]
struct SinfoJson {
    #[serde(default)]
    errors: Vec<serde_json::Value>,
    nodes: Vec<NodeJson>,
}

#[derive(Deserialize)]
struct NodeJson {
    name: String,
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    state: String,
    #[serde(default)]
    state_flags: Vec<String>,
    #[serde(default)]
    cpus: Option<u32>,
    #[serde(default)]
    alloc_cpus: Option<u32>,
    #[serde(default)]
    gres: Option<String>,
    #[serde(default)]
    gres_used: Option<String>,
    #[serde(default)]
    partitions: Vec<String>,
    #[serde(default)]
    active_features: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
struct SqueueJson {
    #[serde(default)]
    errors: Vec<serde_json::Value>,
    jobs: Vec<JobJson>,
}

#[derive(Deserialize)]
struct JobJson {
    job_id: u64,
    #[serde(default)]
    name: String,
    #[serde(default)]
    user_name: String,
    #[serde(default)]
    job_state: String,
    #[serde(default)]
    state_reason: Option<String>,
    #[serde(default)]
    partition: Option<String>,
    #[serde(default)]
    nodes: Option<String>,
    #[serde(default)]
    job_resources: Option<JobResourcesJson>,
    #[serde(default)]
    gres_detail: Vec<String>,
    #[serde(default)]
    comment: Option<String>,
    #[serde(default)]
    tres_per_node: Option<String>,
    #[serde(default)]
    restart_cnt: Option<u32>,
    #[serde(default)]
    submit_time: Option<i64>,
    #[serde(default)]
    eligible_time: Option<i64>,
    #[serde(default)]
    start_time: Option<i64>,
    #[serde(default)]
    end_time: Option<i64>,
    #[serde(default)]
    exit_code: Option<i64>,
    #[serde(default)]
    requeue: Option<bool>,
    #[serde(default)]
    batch_host: Option<String>,
}

#[derive(Deserialize)]
struct JobResourcesJson {
    #[serde(default)]
    allocated_nodes: Vec<AllocatedNodeJson>,
}

#[derive(Deserialize)]
struct AllocatedNodeJson {
    nodename: String,
}

fn parse_err(what: &str, why: impl ToString) -> SlurmError {
    SlurmError::Parse {
        what: what.to_string(),
        why: why.to_string(),
    }
}

/// With `--json`, sinfo and squeue exit 0 even when the controller does not answer; the
/// failure is only in `errors` (`"Unspecified error"` from `slurm_load_jobs`).
fn check_errors(command: &str, errors: &[serde_json::Value]) -> Result<(), SlurmError> {
    match errors.first() {
        None => Ok(()),
        Some(e) => Err(SlurmError::Unreachable {
            command: command.to_string(),
            stderr: format!("it reported {e} and no data"),
        }),
    }
}

/// Parses `sinfo --json` into its nodes.
pub fn parse_sinfo(json: &str) -> Result<Vec<Node>, SlurmError> {
    const WHAT: &str = "`sinfo --json` output";
    let v: SinfoJson = serde_json::from_str(json).map_err(|e| parse_err(WHAT, e))?;
    check_errors("sinfo --json", &v.errors)?;
    v.nodes
        .into_iter()
        .map(|n| {
            let place = format!("{WHAT}, node `{}`", n.name);
            let gres_text = n.gres.unwrap_or_default();
            let used_text = n.gres_used.unwrap_or_default();
            Ok(Node {
                gres: parse_gres_list(&gres_text).map_err(|e| parse_err(&place, e))?,
                gres_used: parse_gres_list(&used_text).map_err(|e| parse_err(&place, e))?,
                gres_text,
                state: NodeState::new(&n.state, n.state_flags),
                cpus: n.cpus.unwrap_or(0),
                alloc_cpus: n.alloc_cpus.unwrap_or(0),
                partitions: n.partitions,
                features: split_features(n.active_features.as_deref().unwrap_or("")),
                reason: n.reason.unwrap_or_default(),
                address: n
                    .address
                    .filter(|a| !a.is_empty())
                    .unwrap_or_else(|| n.name.clone()),
                name: n.name,
            })
        })
        .collect()
}

fn split_features(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty() && *f != "(null)")
        .map(String::from)
        .collect()
}

/// Parses `squeue --json` into its jobs (Slurm 22.05 ignores squeue's filters with
/// `--json`: every job the controller still remembers is in the output).
pub fn parse_squeue(json: &str) -> Result<Vec<JobInfo>, SlurmError> {
    const WHAT: &str = "`squeue --json` output";
    let v: SqueueJson = serde_json::from_str(json).map_err(|e| parse_err(WHAT, e))?;
    check_errors("squeue --json", &v.errors)?;
    v.jobs.into_iter().map(job_from_json).collect()
}

fn job_from_json(j: JobJson) -> Result<JobInfo, SlurmError> {
    let place = format!("`squeue --json` output, job {}", j.job_id);
    // The allocated nodes, in the order gres_detail follows; a pending job has none.
    let nodes: Vec<String> = match &j.job_resources {
        Some(r) if !r.allocated_nodes.is_empty() => r
            .allocated_nodes
            .iter()
            .map(|n| n.nodename.clone())
            .collect(),
        _ => expand_hostlist(j.nodes.as_deref().unwrap_or(""))?,
    };
    let mut gres_per_node = Vec::new();
    if j.gres_detail.len() == nodes.len() {
        for (node, detail) in nodes.iter().zip(&j.gres_detail) {
            let gres = parse_gres_list(detail).map_err(|e| parse_err(&place, e))?;
            gres_per_node.push((node.clone(), gres));
        }
    }
    let requested = j
        .tres_per_node
        .as_deref()
        .unwrap_or("")
        .split(',')
        .filter_map(|t| t.strip_prefix("gres:"))
        .map(|g| parse_gres_list(g).map_err(|e| parse_err(&place, e)))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    Ok(JobInfo {
        id: j.job_id,
        name: j.name,
        user: j.user_name,
        state: JobState::parse(&j.job_state),
        reason: j.state_reason.unwrap_or_default(),
        partition: j.partition.unwrap_or_default(),
        nodes,
        gres_per_node,
        gres_requested_per_node: requested,
        restart_count: j.restart_cnt.unwrap_or(0),
        submit_time: j.submit_time.unwrap_or(0),
        eligible_time: j.eligible_time.unwrap_or(0),
        start_time: j.start_time.unwrap_or(0),
        end_time: j.end_time.unwrap_or(0),
        exit_code: j.exit_code.unwrap_or(0),
        requeue: j.requeue.unwrap_or(false),
        batch_host: j.batch_host.filter(|h| !h.is_empty()),
        comment: j.comment.unwrap_or_default(),
    })
}

/// Parses `scontrol show partition --oneliner` into partition names.
pub fn parse_partitions(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("PartitionName="))
        })
        .map(String::from)
        .collect()
}

/// Parses `squeue --steps --noheader --format=%i` for job `id` into its step names (the
/// part after `ID.`: `batch`, `extern`, `0`, …); lines of other jobs are skipped, a line
/// that is not `JOB.STEP` is an error naming it.
pub fn parse_steps(text: &str, id: u64) -> Result<Vec<String>, SlurmError> {
    let mut steps = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (job, step) = line
            .split_once('.')
            .filter(|(j, s)| {
                !s.is_empty() && !j.is_empty() && j.bytes().all(|b| b.is_ascii_digit())
            })
            .ok_or_else(|| {
                parse_err(
                    "`squeue --steps` output",
                    format!("expected JOB.STEP, got `{line}`"),
                )
            })?;
        if job == id.to_string() {
            steps.push(step.to_string());
        }
    }
    Ok(steps)
}

/// Parses `squeue --format="%T %D"` of one job (`RUNNING 3`) into its state and node count;
/// `None` for no line (the job is not listed). A malformed line is an error naming it.
pub fn parse_state_nodes(text: &str) -> Result<Option<(JobState, u32)>, SlurmError> {
    let Some(line) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return Ok(None);
    };
    let bad = || {
        parse_err(
            "`squeue --format=\"%T %D\"` output",
            format!("expected STATE NODES, got `{line}`"),
        )
    };
    let (state, nodes) = line.split_once(' ').ok_or_else(bad)?;
    let nodes: u32 = nodes.trim().parse().map_err(|_| bad())?;
    if state.is_empty() || !state.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
        return Err(bad());
    }
    Ok(Some((JobState::parse(state), nodes)))
}
