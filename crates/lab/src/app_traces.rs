//! The folder layout the trace-driven evaluations read: one sub-folder per
//! application, each with a `placements.csv`.

use std::path::{Path, PathBuf};

/// The application folders under `dir` (those holding a `placements.csv`), sorted
/// by path; an error naming `dir` when it is not a readable folder.
pub fn app_folders(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    anyhow::ensure!(
        dir.is_dir(),
        "{}: not a folder of application traces (each with placements.csv)",
        dir.display()
    );
    let mut apps: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("placements.csv").is_file())
        .collect();
    apps.sort();
    Ok(apps)
}
