//! Device types, nodes and the cluster specification.
//!
//! A cluster spec is either a compact string such as `16x4:t4` (16 nodes with
//! 4 T4 GPUs each) or `8x4:v100,8x4:k80` for several node groups, or a TOML
//! file (parsed by the CLI into [`ClusterSpec::from_groups`]).

use crate::ParseError;
use serde::{Deserialize, Serialize};

/// Index into [`ClusterSpec::device_types`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeviceTypeId(pub u16);

/// Index into [`ClusterSpec::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub u32);

/// One machine: `gpus` devices of one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub device_type: DeviceTypeId,
    pub gpus: u32,
}

/// A group of identical nodes, as written in a spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeGroup {
    pub count: u32,
    pub gpus_per_node: u32,
    pub device_type: String,
}

/// The most nodes a cluster may have (docs/limits.md).
pub const MAX_NODES: u32 = 1_000_000;
/// The most devices one node may have.
pub const MAX_GPUS_PER_NODE: u32 = 1024;
/// The most devices a cluster may have, 2^20 (docs/limits.md): the largest cluster any
/// policy is run on at a bounded cost per round. Checked from the node groups before
/// any node is built, so a short spec (`1000000x1024:t4`, 10^9 devices) costs nothing.
pub const MAX_DEVICES: u64 = 1 << 20;

/// The machines of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSpec {
    /// Device type names, lower case (`t4`, `v100`, ...).
    pub device_types: Vec<String>,
    pub nodes: Vec<NodeSpec>,
}

impl ClusterSpec {
    /// Parses `COUNTxGPUS:TYPE[,COUNTxGPUS:TYPE...]`, e.g. `16x4:t4`.
    ///
    /// ```
    /// let c = pacer_model::ClusterSpec::parse("16x4:t4", "--cluster").unwrap();
    /// assert_eq!(c.total_gpus(), 64);
    /// assert!(pacer_model::ClusterSpec::parse("16x:t4", "--cluster").is_err());
    /// ```
    pub fn parse(spec: &str, origin: &str) -> Result<Self, ParseError> {
        let mut groups = Vec::new();
        for part in spec.split(',').map(str::trim) {
            let bad = |why: &str| {
                ParseError::whole(
                    origin,
                    format!("bad node group `{part}`: {why}; expected COUNTxGPUS:TYPE such as `16x4:t4`"),
                )
            };
            let (shape, ty) = part.split_once(':').ok_or_else(|| bad("missing `:TYPE`"))?;
            let (count, gpus) = shape.split_once('x').ok_or_else(|| bad("missing `x`"))?;
            let count: u32 =
                crate::error::parse_whole(count, 0).map_err(|e| bad(&format!("COUNT {e}")))?;
            let gpus: u32 =
                crate::error::parse_whole(gpus, 0).map_err(|e| bad(&format!("GPUS {e}")))?;
            let ty = ty.trim().to_ascii_lowercase();
            if ty.is_empty()
                || !ty
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(bad("TYPE must be a name such as t4, v100, k80"));
            }
            groups.push(NodeGroup {
                count,
                gpus_per_node: gpus,
                device_type: ty,
            });
        }
        Self::from_groups(&groups, origin)
    }

    /// Builds a spec from node groups; rejects empty clusters, zero counts and
    /// clusters over [`MAX_NODES`], [`MAX_GPUS_PER_NODE`] or [`MAX_DEVICES`].
    ///
    /// ```
    /// let e = pacer_model::ClusterSpec::parse("10x2048:t4", "--cluster").unwrap_err();
    /// assert!(e.to_string().contains("at most 1024 devices per node"));
    /// let e = pacer_model::ClusterSpec::parse("200000x8:t4", "--cluster").unwrap_err();
    /// assert!(e.to_string().contains("1600000 devices; at most 1048576"));
    /// ```
    pub fn from_groups(groups: &[NodeGroup], origin: &str) -> Result<Self, ParseError> {
        // Saturating: two groups of 2^32 nodes × 2^32 devices overflow a u64.
        let nodes = groups
            .iter()
            .fold(0u64, |n, g| n.saturating_add(u64::from(g.count)));
        let devices = groups.iter().fold(0u64, |n, g| {
            n.saturating_add(u64::from(g.count) * u64::from(g.gpus_per_node))
        });
        if nodes > u64::from(MAX_NODES) || devices > MAX_DEVICES {
            return Err(ParseError::whole(
                origin,
                format!(
                    "cluster too large: {nodes} nodes, {devices} devices; at most {MAX_DEVICES} devices on at most {MAX_NODES} nodes"
                ),
            ));
        }
        let mut spec = ClusterSpec {
            device_types: Vec::new(),
            nodes: Vec::new(),
        };
        for g in groups {
            if g.count == 0 || g.gpus_per_node == 0 {
                return Err(ParseError::whole(
                    origin,
                    format!(
                        "node group {}x{}:{} has no devices; counts must be ≥ 1",
                        g.count, g.gpus_per_node, g.device_type
                    ),
                ));
            }
            // The limits are on the whole cluster (checked above): per group, a short
            // spec (`1000000x1:a,1000000x1:a,...`) would still build any number of nodes.
            if g.gpus_per_node > MAX_GPUS_PER_NODE {
                return Err(ParseError::whole(
                    origin,
                    format!(
                        "cluster too large: node group {}x{}:{} has {} devices per node; at most {MAX_GPUS_PER_NODE} devices per node",
                        g.count, g.gpus_per_node, g.device_type, g.gpus_per_node
                    ),
                ));
            }
            let ty = spec.type_id_or_insert(&g.device_type);
            spec.nodes.extend((0..g.count).map(|_| NodeSpec {
                device_type: ty,
                gpus: g.gpus_per_node,
            }));
        }
        if spec.nodes.is_empty() {
            return Err(ParseError::whole(origin, "cluster has no nodes"));
        }
        Ok(spec)
    }

    fn type_id_or_insert(&mut self, name: &str) -> DeviceTypeId {
        let name = name.to_ascii_lowercase();
        if let Some(i) = self.device_types.iter().position(|t| *t == name) {
            return DeviceTypeId(i as u16);
        }
        self.device_types.push(name);
        DeviceTypeId((self.device_types.len() - 1) as u16)
    }

    /// Device type by name, if the cluster has it.
    pub fn type_id(&self, name: &str) -> Option<DeviceTypeId> {
        self.device_types
            .iter()
            .position(|t| t.eq_ignore_ascii_case(name))
            .map(|i| DeviceTypeId(i as u16))
    }

    pub fn total_gpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.gpus).sum()
    }

    /// Total devices of one type.
    pub fn gpus_of_type(&self, ty: DeviceTypeId) -> u32 {
        self.nodes
            .iter()
            .filter(|n| n.device_type == ty)
            .map(|n| n.gpus)
            .sum()
    }

    /// The largest node's device count.
    pub fn max_gpus_per_node(&self) -> u32 {
        self.nodes.iter().map(|n| n.gpus).max().unwrap_or(0)
    }

    /// The compact textual form, grouping consecutive identical nodes.
    pub fn describe(&self) -> String {
        let mut parts: Vec<(u32, u32, DeviceTypeId)> = Vec::new();
        for n in &self.nodes {
            match parts.last_mut() {
                Some((c, g, t)) if *g == n.gpus && *t == n.device_type => *c += 1,
                _ => parts.push((1, n.gpus, n.device_type)),
            }
        }
        parts
            .iter()
            .map(|(c, g, t)| format!("{c}x{g}:{}", self.device_types[t.0 as usize]))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_groups() {
        let c = ClusterSpec::parse("2x4:V100, 3x2:k80", "x").unwrap();
        assert_eq!(c.nodes.len(), 5);
        assert_eq!(c.total_gpus(), 14);
        assert_eq!(c.device_types, vec!["v100", "k80"]);
        assert_eq!(c.describe(), "2x4:v100,3x2:k80");
    }

    #[test]
    fn rejects_bad_specs_with_the_flag_name() {
        for bad in [
            "", "4:t4", "ax4:t4", "4x4", "0x4:t4", "4x0:t4", "4x4:", "4x4:t 4",
        ] {
            let e = ClusterSpec::parse(bad, "--cluster").unwrap_err();
            assert!(e.to_string().starts_with("--cluster"), "{bad}: {e}");
        }
    }

    #[test]
    fn total_devices_and_nodes_are_bounded_before_nodes_are_built() {
        // Was: a 10^9-device cluster (`1000000x1000:t4`, or a TOML file saying so)
        // accepted and simulated for minutes.
        let c = ClusterSpec::parse("100000x8:t4", "--cluster").unwrap();
        assert_eq!(c.total_gpus(), 800_000);
        let c = ClusterSpec::parse("1024x1024:t4", "--cluster").unwrap();
        assert_eq!(u64::from(c.total_gpus()), MAX_DEVICES);
        let e = ClusterSpec::parse("1000000x1000:t4", "--cluster").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--cluster: cluster too large: 1000000 nodes, 1000000000 devices; at most 1048576 devices on at most 1000000 nodes"
        );
        let e = ClusterSpec::parse("1024x1024:t4,1x1:k80", "--cluster").unwrap_err();
        assert!(e.to_string().contains("1048577 devices"), "{e}");
        let e =
            ClusterSpec::parse("4294967295x4294967295:a,4294967295x4294967295:b", "c").unwrap_err();
        assert!(e.to_string().contains("cluster too large"), "{e}");
        let e = ClusterSpec::parse("1000001x1:t4", "--cluster").unwrap_err();
        assert!(e.to_string().contains("1000001 nodes"), "{e}");
    }
}
