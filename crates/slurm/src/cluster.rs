//! What pacer reads from Slurm at start and every round: nodes, their state, CPUs, GPUs
//! (GRES types and counts, or a node feature naming the device type), partitions, and the
//! GPUs held by jobs pacer did not submit.

use std::collections::BTreeMap;

use crate::job::{JobInfo, JobRequest};
use crate::SlurmError;

/// One generic resource entry, e.g. `gpu:t4:4` (name `gpu`, type `t4`, count 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gres {
    /// Resource name (`gpu`).
    pub name: String,
    /// Type (`t4`), if the site gives one.
    pub kind: Option<String>,
    /// How many.
    pub count: u32,
}

/// Parses a GRES list as Slurm prints it: `gpu:t4:4`, `gpu:2(S:0-1),gpu:v100:1`,
/// `gpu:t4:2(IDX:0,2)`; `(null)`, `N/A` and the empty string are no GRES.
///
/// ```
/// let g = pacer_slurm::parse_gres_list("gpu:t4:2(IDX:0,2),gpu:3").unwrap();
/// assert_eq!((g[0].kind.as_deref(), g[0].count), (Some("t4"), 2));
/// assert_eq!((g[1].kind.as_deref(), g[1].count), (None, 3));
/// ```
pub fn parse_gres_list(s: &str) -> Result<Vec<Gres>, String> {
    let s = s.trim();
    if s.is_empty() || s == "(null)" || s == "N/A" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    let mut items = Vec::new();
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&s[start..]);
    for item in items {
        let bare = item.split('(').next().unwrap_or("").trim();
        let parts: Vec<&str> = bare.split(':').collect();
        let bad = || format!("GRES `{item}` is not name[:type][:count]");
        let (name, kind, count) = match parts.as_slice() {
            [name] => (*name, None, 1),
            [name, last] => match last.parse::<u32>() {
                Ok(c) => (*name, None, c),
                Err(_) => (*name, Some(*last), 1),
            },
            [name, kind, count] => (*name, Some(*kind), count.parse().map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        if name.is_empty() || kind == Some("") {
            return Err(bad());
        }
        out.push(Gres {
            name: name.to_string(),
            kind: kind.map(String::from),
            count,
        });
    }
    Ok(out)
}

/// Sum of `gpu` entries, of type `kind` when given.
pub fn count_gpus(gres: &[Gres], kind: Option<&str>) -> u32 {
    gres.iter()
        .filter(|g| g.name == "gpu" && (kind.is_none() || g.kind.as_deref() == kind))
        .map(|g| g.count)
        .sum()
}

/// A node's state: Slurm's base state (`idle`, `mixed`, `allocated`, `down`, …) and flags
/// (`DRAIN`, `NOT_RESPONDING`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// Base state, lower case.
    pub base: String,
    /// Flags, upper case.
    pub flags: Vec<String>,
}

/// Flags under which a node takes no new jobs.
const UNAVAILABLE_FLAGS: &[&str] = &[
    "DRAIN",
    "DRAINING",
    "DRAINED",
    "NOT_RESPONDING",
    "FAIL",
    "MAINTENANCE",
    "POWERED_DOWN",
    "POWERING_DOWN",
    "POWER_DOWN",
    "REBOOT_REQUESTED",
    "REBOOT_ISSUED",
    "RESERVED",
];

impl NodeState {
    /// From the JSON's `state` and `state_flags`.
    pub fn new(base: &str, flags: Vec<String>) -> Self {
        NodeState {
            base: base.to_ascii_lowercase(),
            flags: flags.into_iter().map(|f| f.to_ascii_uppercase()).collect(),
        }
    }

    /// Whether the node can take jobs now.
    pub fn is_up(&self) -> bool {
        matches!(
            self.base.as_str(),
            "idle" | "mixed" | "allocated" | "completing"
        ) && !self
            .flags
            .iter()
            .any(|f| UNAVAILABLE_FLAGS.contains(&f.as_str()))
    }
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.base)?;
        for flag in &self.flags {
            write!(f, "+{}", flag.to_ascii_lowercase())?;
        }
        Ok(())
    }
}

/// One Slurm node.
#[derive(Debug, Clone)]
pub struct Node {
    /// Node name (`n1`).
    pub name: String,
    /// Where the node is reached (`NodeAddr`; the name when Slurm gives none): what a job's
    /// processes on other nodes connect to for rendezvous.
    pub address: String,
    /// State.
    pub state: NodeState,
    /// Configured CPUs.
    pub cpus: u32,
    /// CPUs held by jobs.
    pub alloc_cpus: u32,
    /// Configured GRES.
    pub gres: Vec<Gres>,
    /// GRES held by jobs (all users').
    pub gres_used: Vec<Gres>,
    /// `gres` as Slurm printed it (for messages).
    pub gres_text: String,
    /// Partitions the node is in.
    pub partitions: Vec<String>,
    /// Active features.
    pub features: Vec<String>,
    /// Why the node is down or drained, if Slurm says.
    pub reason: String,
}

impl Node {
    /// Configured GPUs (of type `kind` when given).
    pub fn gpus(&self, kind: Option<&str>) -> u32 {
        count_gpus(&self.gres, kind)
    }

    /// GPUs held by any job now.
    pub fn gpus_used(&self) -> u32 {
        count_gpus(&self.gres_used, None)
    }

    /// GPUs not held by any job.
    pub fn gpus_free(&self) -> u32 {
        self.gpus(None).saturating_sub(self.gpus_used())
    }

    /// The node's device type: its GPUs' GRES type when they have exactly one, else its
    /// first feature (sites that type nodes by feature), else `None`.
    pub fn device_type(&self) -> Option<String> {
        let mut kinds: Vec<&str> = self
            .gres
            .iter()
            .filter(|g| g.name == "gpu")
            .filter_map(|g| g.kind.as_deref())
            .collect();
        kinds.dedup();
        match kinds.as_slice() {
            [one] => Some(one.to_string()),
            _ => self.features.first().cloned(),
        }
    }
}

/// A snapshot of the cluster: nodes, partitions, and the jobs Slurm knows.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// All nodes.
    pub nodes: Vec<Node>,
    /// All partition names.
    pub partitions: Vec<String>,
    /// All jobs squeue reports (any user, any state Slurm still remembers).
    pub jobs: Vec<JobInfo>,
}

impl Cluster {
    /// The nodes of `partition`, or [`SlurmError::NoSuchPartition`].
    pub fn partition_nodes(&self, partition: &str) -> Result<Vec<&Node>, SlurmError> {
        if !self.partitions.iter().any(|p| p == partition) {
            return Err(SlurmError::NoSuchPartition {
                partition: partition.into(),
                known: self.partitions.join(", "),
            });
        }
        Ok(self
            .nodes
            .iter()
            .filter(|n| n.partitions.iter().any(|p| p == partition))
            .collect())
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// GPUs per node that pacer must treat as taken: those held by running jobs that
    /// are not pacer's (name without `prefix`), and what pacer's own jobs hold beyond
    /// its plan (an uneven placement holds its largest count on every node, as
    /// `--gres` is per node; [`JobInfo::planned_gpus`]).
    pub fn foreign_gpus(&self, prefix: &str) -> BTreeMap<String, u32> {
        let mut out = BTreeMap::new();
        for j in self.jobs.iter().filter(|j| j.state.holds_resources()) {
            let own = j.name.starts_with(prefix);
            let plan = if own { j.planned_gpus() } else { None };
            for (node, gres) in &j.gres_per_node {
                let held = count_gpus(gres, None);
                let taken = match (own, &plan) {
                    (false, _) => held,
                    (true, Some(p)) => held.saturating_sub(p.get(node).copied().unwrap_or(held)),
                    (true, None) => 0,
                };
                if taken > 0 {
                    *out.entry(node.clone()).or_insert(0) += taken;
                }
            }
        }
        out
    }

    /// Jobs pacer submitted (name starts with `prefix`).
    pub fn own_jobs<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a JobInfo> + 'a {
        self.jobs.iter().filter(move |j| j.name.starts_with(prefix))
    }

    /// Checks a request against the cluster before submitting it: the partition exists, each
    /// node is in it, and each has the GPUs (of the type) asked for. Names what is missing.
    pub fn validate(&self, req: &JobRequest) -> Result<(), SlurmError> {
        req.check()?;
        let nodes = self.partition_nodes(&req.partition)?;
        let known = || {
            nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        for name in &req.nodes {
            let node =
                nodes
                    .iter()
                    .find(|n| &n.name == name)
                    .ok_or_else(|| SlurmError::NoSuchNode {
                        node: name.clone(),
                        scope: format!("partition `{}`", req.partition),
                        known: known(),
                    })?;
            if req.gpus_per_node == 0 {
                continue;
            }
            let have = node.gpus(req.gpu_type.as_deref());
            if have < req.gpus_per_node {
                let of_type = |n: u32| match &req.gpu_type {
                    Some(t) => format!("{n} GPUs of type {t}"),
                    None => format!("{n} GPUs"),
                };
                return Err(SlurmError::NotEnoughGpus {
                    node: name.clone(),
                    have: if node.gpus(None) == 0 {
                        "no GPUs".into()
                    } else {
                        of_type(have)
                    },
                    gres: node.gres_text.clone(),
                    need: of_type(req.gpus_per_node),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_forms() {
        assert_eq!(parse_gres_list("(null)").unwrap(), vec![]);
        assert_eq!(parse_gres_list("").unwrap(), vec![]);
        let g = parse_gres_list("gpu:t4:0(IDX:N/A)").unwrap();
        assert_eq!(count_gpus(&g, None), 0);
        let g = parse_gres_list("gpu:t4:4(S:0-1),gpu:v100:2,gpu").unwrap();
        assert_eq!(count_gpus(&g, None), 7);
        assert_eq!(count_gpus(&g, Some("v100")), 2);
        assert_eq!(g[2].kind, None);
        assert!(parse_gres_list("gpu:a:b:c")
            .unwrap_err()
            .contains("gpu:a:b:c"));
        assert!(parse_gres_list("gpu:t4:x").is_err());
    }

    #[test]
    fn node_state_availability() {
        assert!(NodeState::new("idle", vec![]).is_up());
        assert!(NodeState::new("MIXED", vec![]).is_up());
        assert!(!NodeState::new("idle", vec!["DRAIN".into()]).is_up());
        assert!(!NodeState::new("down", vec![]).is_up());
        assert_eq!(
            NodeState::new("idle", vec!["DRAIN".into()]).to_string(),
            "idle+drain"
        );
    }
}
