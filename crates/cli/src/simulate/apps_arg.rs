//! `--apps` / `--app-dir` / `--shared-fabric`: the applications a simulation runs.

use anyhow::{bail, Context, Result};
use pacer_model::ClusterSpec;
use pacer_sim::{embedded_profiles, load_app_dir, AppModel};
use std::path::{Path, PathBuf};

/// Applications for `--apps KIND:DIR` (`sia:` or `sia-uncalibrated:`), or the
/// embedded Pollux ones plus `--app-dir` folders when it is absent; `fabric`: the
/// `--shared-fabric` what-if, which needs `sia:` applications and a type of `cluster`.
pub fn load_apps_arg(
    apps: Option<&str>,
    extra: &[PathBuf],
    fabric: Option<&str>,
    cluster: &ClusterSpec,
) -> Result<Vec<AppModel>> {
    if let Some(f) = fabric {
        if apps.is_none() {
            bail!("--shared-fabric {f}: needs per-type applications (--apps sia:DIR)");
        }
        if cluster.type_id(f).is_none() {
            bail!(
                "--shared-fabric {f}: not a device type of the cluster (it has {})",
                cluster.device_types.join(", ")
            );
        }
    }
    let Some(spec) = apps else {
        return load_apps(extra);
    };
    let (calibrate, dir) = match spec.split_once(':') {
        Some(("sia", d)) => (true, d),
        Some(("sia-uncalibrated", d)) => (false, d),
        _ => bail!("--apps {spec}: expected sia:DIR or sia-uncalibrated:DIR"),
    };
    if !extra.is_empty() {
        bail!("--apps {spec}: cannot be combined with --app-dir");
    }
    pacer_sim::apps::load_sia_dir_with(Path::new(dir), calibrate, fabric)
        .with_context(|| format!("--apps {spec}"))
}

pub fn load_apps(extra: &[PathBuf]) -> Result<Vec<AppModel>> {
    let mut profiles = embedded_profiles();
    for dir in extra {
        let p = load_app_dir(dir).with_context(|| format!("--app-dir {}", dir.display()))?;
        profiles.retain(|q| q.name != p.name);
        profiles.push(p);
    }
    Ok(profiles.into_iter().map(AppModel::new).collect())
}
