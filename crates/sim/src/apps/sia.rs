//! Sia's trace folders: per-device-type tables, calibration slowdowns and restart
//! penalties.

use super::{AppError, AppModel, TypeProfile};
use pacer_model::profile::{self, AppProfile};
use pacer_model::ParseError;
use std::path::Path;

/// Sia's per-application settings (its `simulator_config.py` and `applications.py`):
/// the calibration slowdown its simulator multiplies step times by (fitted to its
/// real runs) and the restart penalty (`rescale_time`, s).
pub const SIA_APPS: &[(&str, f64, f64)] = &[
    ("bert", 1.2, 120.0),
    ("cifar10", 1.8, 50.0),
    ("deepspeech2", 1.2, 25.0),
    ("imagenet", 1.2, 250.0),
    ("ncf", 1.5, 15.0),
    ("yolov3", 1.2, 80.0),
];

/// Applications of Sia's layout Pacer does not model: `gpt_pmp` is a
/// pipeline-parallel job whose tables hold per-stage times, not data-parallel steps.
const SIA_SKIPPED: &[&str] = &["gpt_pmp"];

/// Reads Sia's trace folder (`DIR/<app>/placements-<type>.csv`,
/// `scalability-<type>.csv`, `validation-<batch>.csv`): every application with its
/// tables on every device type it has them for (the untyped Pollux tables are not
/// read). With `calibrate`, step and sync times are multiplied by Sia's calibration
/// slowdowns ([`SIA_APPS`]), as Sia's simulator does, so JCTs compare with its
/// numbers. Each application also takes Sia's restart penalty.
pub fn load_sia_dir(root: &Path, calibrate: bool) -> Result<Vec<AppModel>, AppError> {
    load_sia_dir_with(root, calibrate, None)
}

/// [`load_sia_dir`], with `fabric`: the what-if that every type's cross-node sync is
/// that type's ([`super::fabric::share_fabric`]); an application without tables for
/// it is an error naming its folder.
pub fn load_sia_dir_with(
    root: &Path,
    calibrate: bool,
    fabric: Option<&str>,
) -> Result<Vec<AppModel>, AppError> {
    fn io(p: &Path) -> impl Fn(std::io::Error) -> AppError {
        let path = p.display().to_string();
        move |source| AppError::Io {
            path: path.clone(),
            source,
        }
    }
    let read = |p: &Path| pacer_fsio::read_to_string_limited(p, pacer_fsio::limits::TABLE);
    let mut dirs: Vec<std::path::PathBuf> = Vec::new();
    for e in std::fs::read_dir(root).map_err(io(root))? {
        let e = e.map_err(io(root))?;
        if e.path().is_dir() {
            dirs.push(e.path());
        }
    }
    dirs.sort();
    let mut out = Vec::new();
    for dir in dirs {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("app")
            .to_string();
        if SIA_SKIPPED.contains(&name.as_str()) {
            continue;
        }
        let mut type_names: Vec<String> = Vec::new();
        let mut curves = Vec::new();
        for e in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let e = e.map_err(io(&dir))?;
            let file = e.file_name();
            let Some(file) = file.to_str() else { continue };
            if let Some(ty) = file
                .strip_prefix("placements-")
                .and_then(|f| f.strip_suffix(".csv"))
            {
                type_names.push(ty.to_string());
            } else if let Some(batch) = profile::validation_batch_from_name(file) {
                let p = e.path();
                curves.push(profile::parse_validation(
                    &read(&p)?,
                    batch,
                    &p.display().to_string(),
                )?);
            }
        }
        if type_names.is_empty() {
            return Err(ParseError::whole(
                &dir.display().to_string(),
                "no placements-<type>.csv: an application needs a table for at least one device type",
            )
            .into());
        }
        type_names.sort();
        let slowdown = match (calibrate, SIA_APPS.iter().find(|a| a.0 == name)) {
            (true, Some(a)) => a.1,
            _ => 1.0,
        };
        let mut types = Vec::new();
        for ty in type_names {
            let pl = dir.join(format!("placements-{ty}.csv"));
            let sc = dir.join(format!("scalability-{ty}.csv"));
            let (pl_o, sc_o) = (pl.display().to_string(), sc.display().to_string());
            let mut placements = profile::parse_placements(&read(&pl)?, &pl_o)?;
            if !sc.exists() {
                return Err(ParseError::whole(
                    &sc_o,
                    format!("missing: device type `{ty}` has {pl_o} but no scalability table"),
                )
                .into());
            }
            let mut scalability = profile::parse_scalability(&read(&sc)?, &sc_o)?;
            for (o, n) in [(&pl_o, placements.len()), (&sc_o, scalability.len())] {
                if n < 2 {
                    return Err(ParseError::whole(
                        o,
                        format!(
                            "{n} data row(s); a step-time table needs at least 2 to interpolate"
                        ),
                    )
                    .into());
                }
            }
            for r in &mut placements {
                r.step_time_s *= slowdown;
                r.sync_time_s *= slowdown;
            }
            for r in &mut scalability {
                r.step_time_s *= slowdown;
                r.sync_time_s *= slowdown;
            }
            types.push(TypeProfile {
                device_type: ty,
                placements,
                scalability,
            });
        }
        if let Some(f) = fabric {
            super::fabric::share_fabric(&mut types, f).map_err(|why| {
                ParseError::whole(
                    &dir.display().to_string(),
                    format!("--shared-fabric: {why}"),
                )
            })?;
        }
        let mut base = AppProfile::new(
            &dir.display().to_string(),
            types[0].placements.clone(),
            types[0].scalability.clone(),
            curves,
        )?;
        base.name = name.clone();
        let mut m = AppModel::with_types(base, types);
        m.restart_s = SIA_APPS.iter().find(|a| a.0 == name).map(|a| a.2);
        out.push((dir, m));
    }
    check_same_types(&out)?;
    Ok(out.into_iter().map(|(_, m)| m).collect())
}

/// Every application of a Sia folder must have tables for every device type any of
/// them has (Sia's simulator runs each application on each type): the first gap is
/// an error naming the missing file.
fn check_same_types(apps: &[(std::path::PathBuf, AppModel)]) -> Result<(), AppError> {
    let mut all: Vec<&str> = apps
        .iter()
        .flat_map(|(_, m)| m.typed().iter().map(|t| t.device_type.as_str()))
        .collect();
    all.sort_unstable();
    all.dedup();
    for (dir, m) in apps {
        if let Some(ty) = all.iter().find(|ty| m.type_index(ty).is_none()) {
            let having: Vec<&str> = apps
                .iter()
                .filter(|(_, o)| o.type_index(ty).is_some())
                .map(|(_, o)| o.name())
                .collect();
            let file = dir.join(format!("placements-{ty}.csv"));
            return Err(ParseError::whole(
                &file.display().to_string(),
                format!(
                    "missing: application `{}` has no table for device type `{ty}`, which {} \
                     ha{} (every application needs a table for every device type of the folder)",
                    m.name(),
                    having.join(", "),
                    if having.len() == 1 { "s" } else { "ve" }
                ),
            )
            .into());
        }
    }
    Ok(())
}
