//! The architecture's invariants, checked on this repository. Each rule's ability to fail is
//! shown by the unit tests in `src/lib.rs`, on synthetic violations.

use std::path::{Path, PathBuf};
use std::process::Command;

use pacer_tidy::*;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Files under `dir` (relative to the root), skipping build output, VCS data and hidden or
/// virtual-environment folders; `.ci/` is kept.
fn files(root: &Path, dir: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let rel = if dir.is_empty() {
            name.clone()
        } else {
            format!("{dir}/{name}")
        };
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            let skip = matches!(
                name.as_str(),
                "target" | "node_modules" | "__pycache__" | "venv" | "results"
            ) || (name.starts_with('.') && name != ".ci");
            if !skip {
                files(root, &rel, out);
            }
        } else if ft.is_file() {
            out.push(rel);
        }
    }
}

fn all_files() -> (PathBuf, Vec<String>) {
    let root = repo_root();
    let mut out = Vec::new();
    files(&root, "", &mut out);
    (root, out)
}

fn crate_dir_of(root: &Path, file: &str) -> Option<String> {
    let mut p = Path::new(file).parent();
    while let Some(d) = p {
        if d.as_os_str().is_empty() {
            return None;
        }
        if root.join(d).join("Cargo.toml").is_file() {
            return Some(d.to_string_lossy().into_owned());
        }
        p = d.parent();
    }
    None
}

fn report(violations: Vec<Violation>) {
    if !violations.is_empty() {
        let lines: Vec<String> = violations.iter().map(|v| v.to_string()).collect();
        panic!("{} violation(s):\n{}", lines.len(), lines.join("\n"));
    }
}

#[test]
fn crate_graph_points_down() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(repo_root())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crates = crate_deps_from_metadata(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert!(crates.len() >= 8, "found only {} crates", crates.len());
    report(check_layers(&crates, LAYERS));
}

#[test]
fn decision_crates_do_no_io() {
    let (root, all) = all_files();
    let mut v = Vec::new();
    for krate in IO_FREE_CRATES {
        let prefix = format!("crates/{krate}/src/");
        for f in all
            .iter()
            .filter(|f| f.starts_with(&prefix) && f.ends_with(".rs"))
        {
            let src = std::fs::read_to_string(root.join(f)).unwrap();
            v.extend(check_no_io(f, &src));
        }
    }
    report(v);
}

#[test]
fn job_decisions_have_one_home() {
    let (root, all) = all_files();
    let mut v = Vec::new();
    for f in all
        .iter()
        .filter(|f| f.ends_with(".rs") && JOB_DRIVER_DIRS.iter().any(|d| f.starts_with(d)))
    {
        let src = std::fs::read_to_string(root.join(f)).unwrap();
        v.extend(check_job_decisions(f, &src));
    }
    report(v);
}

#[test]
fn job_views_have_one_builder() {
    let (root, all) = all_files();
    let mut v = Vec::new();
    for f in all.iter().filter(|f| {
        f.ends_with(".rs")
            && (f.starts_with("python/src/") || (f.starts_with("crates/") && f.contains("/src/")))
            && !f.starts_with("crates/tidy/")
    }) {
        let src = std::fs::read_to_string(root.join(f)).unwrap();
        v.extend(check_job_view_literals(f, &src));
    }
    report(v);
}

#[test]
fn cited_paths_exist() {
    let (root, all) = all_files();
    let exists = |p: &str| !p.is_empty() && root.join(p).exists();
    let mut v = Vec::new();
    for f in &all {
        let citing = f.ends_with(".md")
            || f.ends_with(".rs")
            || f.ends_with(".sh")
            || f.ends_with(".toml")
            || f.ends_with(".py")
            || f == ".ci/run";
        // The rules' own unit tests cite missing paths on purpose.
        if !citing || f.starts_with("crates/tidy/src/") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(f)) else {
            continue;
        };
        let dir = Path::new(f)
            .parent()
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default();
        let krate = crate_dir_of(&root, f);
        v.extend(check_cited_paths(f, &text, &dir, krate.as_deref(), &exists));
    }
    report(v);
}

#[test]
fn no_path_attribute_leaves_its_crate() {
    let (root, all) = all_files();
    let mut v = Vec::new();
    for f in all.iter().filter(|f| f.ends_with(".rs")) {
        let Some(krate) = crate_dir_of(&root, f) else {
            continue;
        };
        let src = std::fs::read_to_string(root.join(f)).unwrap();
        v.extend(check_path_attrs(f, &krate, &src));
    }
    report(v);
}

#[test]
fn every_declared_dependency_is_used() {
    let (root, all) = all_files();
    let mut v = Vec::new();
    for manifest in all
        .iter()
        .filter(|f| f.starts_with("crates/") && f.ends_with("/Cargo.toml"))
    {
        let dir = manifest.trim_end_matches("Cargo.toml");
        let deps = declared_deps(&std::fs::read_to_string(root.join(manifest)).unwrap())
            .unwrap_or_else(|e| panic!("{manifest}: {e}"));
        let (mut product, mut tests) = (String::new(), String::new());
        for f in all
            .iter()
            .filter(|f| f.starts_with(dir) && f.ends_with(".rs"))
        {
            // A nested crate's files belong to it, not to this one.
            if crate_dir_of(&root, f).as_deref() != Some(dir.trim_end_matches('/')) {
                continue;
            }
            let src = std::fs::read_to_string(root.join(f)).unwrap();
            let rel = &f[dir.len()..];
            if rel.starts_with("src/") || rel == "build.rs" {
                // A file's `#[cfg(test)]` tail is test code: what it alone uses belongs in
                // [dev-dependencies].
                let cut = src
                    .lines()
                    .position(|l| l.trim_start().starts_with("#[cfg(test)]"))
                    .map(|n| src.lines().take(n).map(|l| l.len() + 1).sum::<usize>())
                    .unwrap_or(src.len())
                    .min(src.len());
                product.push_str(&src[..cut]);
                product.push('\n');
                tests.push_str(&src[cut..]);
                tests.push('\n');
            } else {
                tests.push_str(&src);
                tests.push('\n');
            }
        }
        v.extend(check_unused_deps(manifest, &deps, &product, &tests));
    }
    report(v);
}
