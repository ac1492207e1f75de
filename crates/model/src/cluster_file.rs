//! The cluster TOML file (`--cluster FILE.toml`), parsed from text:
//!
//! ```toml
//! [[nodes]]
//! count = 8
//! gpus = 4
//! type = "v100"
//! ```

use crate::{ClusterSpec, ParseError};

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    nodes: Vec<NodeGroupFile>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeGroupFile {
    count: u32,
    gpus: u32,
    #[serde(rename = "type")]
    device_type: String,
}

/// Parses a cluster TOML file; errors name `origin:line` when TOML says where.
///
/// ```
/// let c = pacer_model::cluster_file::parse_cluster_toml(
///     "[[nodes]]\ncount = 2\ngpus = 4\ntype = \"V100\"\n", "c.toml").unwrap();
/// assert_eq!((c.total_gpus(), c.device_types[0].as_str()), (8, "v100"));
/// let e = pacer_model::cluster_file::parse_cluster_toml("[[nodes]]\ncount = 2\n", "c.toml");
/// assert!(e.unwrap_err().to_string().starts_with("c.toml:1: "));
/// ```
pub fn parse_cluster_toml(text: &str, origin: &str) -> Result<ClusterSpec, ParseError> {
    let file: ClusterFile = toml::from_str(text).map_err(|e| {
        let message = e.to_string().trim_end().to_string();
        match e.span() {
            Some(s) => {
                let at = s.start.min(text.len());
                let line = text.as_bytes()[..at]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count()
                    + 1;
                ParseError::at(origin, line, message)
            }
            None => ParseError::whole(origin, message),
        }
    })?;
    let groups: Vec<crate::cluster::NodeGroup> = file
        .nodes
        .into_iter()
        .map(|g| crate::cluster::NodeGroup {
            count: g.count,
            gpus_per_node: g.gpus,
            device_type: g.device_type.to_ascii_lowercase(),
        })
        .collect();
    ClusterSpec::from_groups(&groups, origin)
}
