//! # pacer-tidy
//!
//! The architecture's invariants (ARCHITECTURE.md) as checks that run under `cargo test`, in
//! the spirit of rust-analyzer's `tidy`: a broken rule fails CI instead of waiting for a
//! reviewer.
//!
//! Each rule is a pure function from text (a manifest, a source file, a document) to the
//! violations it finds, so each can be shown to fail on a synthetic violation (the unit tests
//! below); `tests/tidy.rs` applies them to this repository.
//!
//! Rules:
//! - [`check_layers`]: workspace crates depend only on crates of a lower layer.
//! - [`check_no_io`]: the decision crates (model, predict, control, policy) read no clock and
//!   touch no file system, network, process or environment.
//! - [`check_cited_paths`]: every repository path cited in a document or a code comment
//!   exists.
//! - [`check_path_attrs`]: no `#[path]` attribute reaches outside its own crate.
//! - [`check_unused_deps`]: every dependency a manifest declares is named in the code that
//!   can use it.
//! - [`check_job_decisions`]: the job drivers (sim, workersim, serve, runtime, cli, the
//!   Python package's native module) take the job-level decisions from
//!   `pacer_control::job::decide` and re-implement none of them.
//!
//! Architecture invariant: dev-only; no product crate depends on this one.

use std::fmt;
use std::path::{Component, Path, PathBuf};

/// One broken rule, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule's name, e.g. `layers`.
    pub rule: &'static str,
    /// The file (relative to the repository root where known) and line, e.g. `crates/x/src/a.rs:3`.
    pub place: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}: {}", self.rule, self.place, self.message)
    }
}

fn violation(rule: &'static str, place: String, message: String) -> Violation {
    Violation {
        rule,
        place,
        message,
    }
}

// ---------------------------------------------------------------------------------------
// Layers
// ---------------------------------------------------------------------------------------

/// The layer of every workspace crate: a crate may depend (normally or for builds) only on
/// crates of a strictly lower layer; dev-dependencies may also reach the same layer's tools.
/// A crate missing from the table is itself a violation, so a new crate gets a place.
pub const LAYERS: &[(&str, u8)] = &[
    ("pacer-model", 0),
    ("pacer-predict", 1),
    ("pacer-control", 2),
    // The cluster level reads the job level: a job's view is built once, in
    // `pacer_policy::job_view`, from the job level's decisions (the exploration cap, the
    // balanced step of a mix), so policy sits above control (issue 26).
    ("pacer-policy", 3),
    ("pacer-sim", 4),
    ("pacer-workersim", 4),
    ("pacer-runtime", 4),
    ("pacer-serve", 4),
    // An I/O client of Slurm's command line, depending on no pacer crate; below the
    // drivers so that the service (serve) can run jobs through it.
    ("pacer-slurm", 2),
    // Files named by users (the one writer, bounded reads): below every driver that
    // reads or writes them; depends on no pacer crate.
    ("pacer-fsio", 2),
    ("pacer-cli", 5),
    // Dev-only crates: nothing may depend on them.
    ("pacer-fuzz", 9),
    ("pacer-lab", 9),
    ("pacer-tidy", 9),
];

/// Layer at or above which a crate is dev-only: no other crate may depend on it at all.
pub const DEV_ONLY_LAYER: u8 = 9;

/// A workspace crate and the workspace crates it depends on.
#[derive(Debug, Clone)]
pub struct CrateDeps {
    /// Package name.
    pub name: String,
    /// Manifest path (for messages).
    pub manifest: String,
    /// `(dependency name, kind)` with kind `normal`, `build` or `dev`.
    pub deps: Vec<(String, String)>,
}

/// Parses `cargo metadata --format-version 1 --no-deps` output into the workspace crates and
/// their dependencies on other workspace crates.
pub fn crate_deps_from_metadata(json: &str) -> Result<Vec<CrateDeps>, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("cargo metadata output: {e}"))?;
    let packages = v["packages"]
        .as_array()
        .ok_or("cargo metadata output: no `packages` array")?;
    let names: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut out = Vec::new();
    for p in packages {
        let name = p["name"].as_str().unwrap_or("?").to_string();
        let manifest = p["manifest_path"].as_str().unwrap_or("?").to_string();
        let mut deps = Vec::new();
        for d in p["dependencies"].as_array().into_iter().flatten() {
            let dn = d["name"].as_str().unwrap_or("");
            if names.contains(&dn) {
                let kind = d["kind"].as_str().unwrap_or("normal").to_string();
                deps.push((dn.to_string(), kind));
            }
        }
        out.push(CrateDeps {
            name,
            manifest,
            deps,
        });
    }
    Ok(out)
}

/// Rule `layers`: dependencies point down ([`LAYERS`]).
pub fn check_layers(crates: &[CrateDeps], layers: &[(&str, u8)]) -> Vec<Violation> {
    let layer = |n: &str| layers.iter().find(|(k, _)| *k == n).map(|(_, l)| *l);
    let mut out = Vec::new();
    for c in crates {
        let Some(own) = layer(&c.name) else {
            out.push(violation(
                "layers",
                c.manifest.clone(),
                format!(
                    "crate `{}` has no layer: add it to pacer_tidy::LAYERS",
                    c.name
                ),
            ));
            continue;
        };
        for (dep, kind) in &c.deps {
            let Some(theirs) = layer(dep) else { continue };
            let ok = if theirs >= DEV_ONLY_LAYER {
                false
            } else if kind == "dev" {
                theirs <= own
            } else {
                theirs < own
            };
            if !ok {
                out.push(violation(
                    "layers",
                    c.manifest.clone(),
                    format!(
                        "`{}` (layer {own}) depends on `{dep}` (layer {theirs}, {kind}): \
                         dependencies must point to lower layers, never to dev-only crates",
                        c.name
                    ),
                ));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// No I/O in the decision crates
// ---------------------------------------------------------------------------------------

/// Crates whose product code must not read a clock or do I/O.
pub const IO_FREE_CRATES: &[&str] = &["model", "predict", "control", "policy"];

/// What I/O looks like in source: clocks, file system, network, processes, environment,
/// async runtimes, printing.
const FORBIDDEN_IO: &[&str] = &[
    "Instant",
    "SystemTime",
    "std::time",
    "std::fs",
    "std::net",
    "std::process",
    "std::env",
    "std::io::stdin",
    "tokio",
    "File::",
    "println!",
    "eprintln!",
    "print!",
    "eprint!",
];

/// Splits a source line into code (the part before a `//` comment) — string literals are
/// not parsed; a forbidden token inside a string literal is rare enough to rename.
fn code_part(line: &str) -> &str {
    match line.find("//") {
        Some(i) => &line[..i],
        None => line,
    }
}

fn has_token(code: &str, token: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut start = 0;
    while let Some(i) = code[start..].find(token) {
        let at = start + i;
        let before = code[..at].chars().next_back();
        let after = code[at + token.len()..].chars().next();
        let left_ok = before.is_none_or(|c| !ident(c));
        let right_ok = token.ends_with(|c: char| !ident(c)) || after.is_none_or(|c| !ident(c));
        if left_ok && right_ok {
            return true;
        }
        start = at + token.len();
    }
    false
}

/// Rule `no-io`: product code of an I/O-free crate (everything before the first
/// `#[cfg(test)]` of a file) names no clock, file system, network, process or environment.
pub fn check_no_io(place: &str, src: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    for (i, line) in src.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = code_part(line);
        for tok in FORBIDDEN_IO {
            if has_token(code, tok) {
                out.push(violation(
                    "no-io",
                    format!("{place}:{}", i + 1),
                    format!(
                        "`{tok}` in an I/O-free crate: time and I/O belong to the drivers \
                         (sim, workersim, runtime, cli), which pass values in"
                    ),
                ));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Job-level decisions have one home
// ---------------------------------------------------------------------------------------

/// The folders whose product code drives jobs and must take every job-level decision from
/// `pacer_control::job::decide` (issue 26): the simulator, the scenario simulator, the
/// service, the runtime, the CLI, and the Python package's native module.
pub const JOB_DRIVER_DIRS: &[&str] = &[
    "crates/sim/src/",
    "crates/workersim/src/",
    "crates/serve/src/",
    "crates/runtime/src/",
    "crates/cli/src/",
    "python/src/",
];

/// The estimators under the job-level decisions, which only `pacer-predict` (their
/// definition) and `pacer-control` (`job::decide`, their one caller for a job) may call.
pub const JOB_DECISION_INTERNALS: &[(&str, &str)] = &[
    (
        "best_global_batch",
        "decide::global_batch_and_gain` or `decide::running_job_batch",
    ),
    ("fit_perf_params", "decide::fit_step_model"),
    ("fit_perf_params_from", "decide::fit_step_model"),
    ("fit_step_times", "decide::fit_step_model_from_step_times"),
    (".optimize(", "decide::batch_on_allocation"),
];

/// The decisions' own names: a function of one of these names outside `pacer-control` is
/// a second home.
pub const JOB_DECISIONS: &[&str] = &[
    "global_batch_and_gain",
    "running_job_batch",
    "adascale_gain",
    "batch_on_allocation",
    "exploration_cap",
    "fit_step_model",
    "fit_step_model_from_step_times",
];

/// `2 * PATH` where PATH's last name starts with `max` and names replicas (the exploration
/// cap, "twice the most replicas run", written out again), e.g.
/// `2 * st.max_profiled_replicas` or `2 * job.model.max_measured_replicas()`.
fn doubles_max_replicas(code: &str) -> bool {
    let mut rest = code;
    while let Some(i) = rest.find("2 *") {
        let before = rest[..i].chars().next_back();
        let tail = rest[i + 3..].trim_start();
        rest = &rest[i + 3..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        // The path up to its first call or operator: `job.model.max_measured_replicas`.
        let path: String = tail
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.'))
            .collect();
        let last = path.rsplit('.').next().unwrap_or_default();
        if last.starts_with("max") && last.contains("replicas") {
            return true;
        }
    }
    false
}

/// Rule `job-decisions`: product code of a job driver ([`JOB_DRIVER_DIRS`]; everything before
/// the first `#[cfg(test)]` of a file) calls none of [`JOB_DECISION_INTERNALS`], defines no
/// function named as one of [`JOB_DECISIONS`], and does not write the exploration cap out
/// again (`2 * ...max...replicas`): each job-level decision lives once, in
/// `pacer_control::job::decide`, and every driver calls it there. A Python-facing
/// function may keep an internal's name (`fn best_global_batch` of the native module): a
/// definition is not a call.
pub fn check_job_decisions(place: &str, src: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut add = |i: usize, message: String| {
        out.push(violation(
            "job-decisions",
            format!("{place}:{}", i + 1),
            message,
        ))
    };
    for (i, line) in src.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        // An attribute may spell an internal's name (`#[pyfunction(name = "...")]`).
        if line.trim_start().starts_with("#[") {
            continue;
        }
        let code = code_part(line);
        for (internal, instead) in JOB_DECISION_INTERNALS {
            // A method (`.optimize(`) follows its receiver; a function stands alone.
            let used = if internal.starts_with('.') {
                code.contains(internal)
            } else {
                has_token(code, internal) && !has_token(code, &format!("fn {internal}"))
            };
            if used {
                add(
                    i,
                    format!(
                        "`{}` called by a job driver: call `pacer_control::job::{instead}` instead",
                        internal.trim_matches(['.', '('])
                    ),
                );
            }
        }
        for name in JOB_DECISIONS {
            if has_token(code, &format!("fn {name}")) {
                add(
                    i,
                    format!(
                        "`fn {name}` outside pacer-control, a second home of a job-level decision: call `pacer_control::job::decide::{name}`"
                    ),
                );
            }
        }
        if doubles_max_replicas(code) {
            add(
                i,
                "the exploration cap (twice the most replicas run) written out again: call `pacer_control::job::decide::exploration_cap`"
                    .to_string(),
            );
        }
    }
    out
}

/// The one builder of `pacer_policy::JobView` (issue 26): every driver translates what it
/// knows of a job into `JobFacts` and calls `JobFacts::view` there.
pub const JOB_VIEW_BUILDER: &str = "crates/policy/src/job_view.rs";

/// The other place a `JobView` is assembled: `JobView::basic`, a job with no models (tests,
/// benchmarks), in the file that defines the type.
pub const JOB_VIEW_DEFINITION: &str = "crates/policy/src/lib.rs";

/// Rule `job-view`: product code (everything before the first `#[cfg(test)]` of a file)
/// writes no `JobView { … }` struct literal outside [`JOB_VIEW_BUILDER`] and
/// `JobView::basic` ([`JOB_VIEW_DEFINITION`]): a driver that built its own view would
/// drift from the others (the service once gave no job a mixed-types goodput). The
/// type's definition, its `impl` and a function returning one (`-> JobView {`) are not
/// literals.
pub fn check_job_view_literals(place: &str, src: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    if place == JOB_VIEW_BUILDER {
        return out;
    }
    let mut in_fn: Option<String> = None;
    for (i, line) in src.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = code_part(line);
        if let Some(at) = code.find("fn ") {
            let name: String = code[at + 3..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            in_fn = Some(name);
        }
        let mut start = 0;
        while let Some(k) = code[start..].find("JobView {") {
            let at = start + k;
            start = at + "JobView {".len();
            let before = code[..at].trim_end();
            let ident_before = code[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            let not_literal = ident_before
                || before.ends_with("struct")
                || before.ends_with("impl")
                || before.ends_with("for")
                || before.ends_with("->");
            let basic = place == JOB_VIEW_DEFINITION && in_fn.as_deref() == Some("basic");
            if !not_literal && !basic {
                out.push(violation(
                    "job-view",
                    format!("{place}:{}", i + 1),
                    format!(
                        "a `JobView` struct literal outside its one builder: fill \
                         `pacer_policy::job_view::JobFacts` and call `.view()` ({JOB_VIEW_BUILDER})"
                    ),
                ));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Cited paths exist
// ---------------------------------------------------------------------------------------

/// Top-level folders of this repository: a cited token starting with one of these is a path
/// into the repository.
pub const REPO_DIRS: &[&str] = &[
    "crates/",
    "docs/",
    "experiments/",
    "scenarios/",
    "bench/",
    "data/",
    ".ci/",
    "deploy/",
    "python/",
];

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// Path-like tokens of one line that name something in the repository: tokens starting with
/// a [`REPO_DIRS`] folder, and bare upper-case Markdown names (`ARCHITECTURE.md`).
/// Placeholders (`<app>`, `*`, `{..}`, `$X`, `N`) and paths outside the repository
/// (`../shared/…`, `/tmp/…`, URLs) are not checked.
pub fn cited_paths(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (start, c) = chars[i];
        let prev = if i == 0 { None } else { Some(chars[i - 1].1) };
        if !is_path_char(c) || prev.is_some_and(is_path_char) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && is_path_char(chars[j].1) {
            j += 1;
        }
        let end = if j < chars.len() {
            chars[j].0
        } else {
            line.len()
        };
        let next = chars.get(j).map(|&(_, c)| c);
        let raw = &line[start..end];
        i = j;
        // A placeholder continues the token (`data/<app>/x.csv`, `*.json`, `{a,b}`), or the
        // token is the tail of something else (`~/x`, `$DIR/x`, `user@host`).
        if matches!(next, Some('<' | '*' | '{' | '$' | '[' | '%'))
            || matches!(prev, Some('~' | '$' | '<' | '@' | '\\'))
        {
            continue;
        }
        let token = raw.trim_end_matches(['.', ',']);
        let repo_path = REPO_DIRS.iter().any(|d| token.starts_with(d));
        let bare_md = !token.contains('/')
            && token.ends_with(".md")
            && token.len() > 3
            && token[..token.len() - 3]
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '_' || c == '-');
        // Build output (`…/target/release/x`) exists only after a build.
        if (repo_path || bare_md) && !token.contains("..") && !token.contains("/target/") {
            out.push(token.to_string());
        }
    }
    out
}

/// Lines of a file that may cite paths: every line of a Markdown file; comment lines of Rust
/// (`//`, `///`, `//!`), shell, TOML and Python files.
pub fn citing_lines(file_name: &str, text: &str) -> Vec<(usize, String)> {
    let md = file_name.ends_with(".md");
    let hash_comments = file_name.ends_with(".sh")
        || file_name.ends_with(".toml")
        || file_name.ends_with(".py")
        || file_name.ends_with("/run");
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if md {
            out.push((i + 1, line.to_string()));
        } else if let Some(p) = line.find("//").filter(|_| file_name.ends_with(".rs")) {
            out.push((i + 1, line[p..].to_string()));
        } else if hash_comments {
            if let Some(p) = line.find('#') {
                out.push((i + 1, line[p..].to_string()));
            }
        }
    }
    out
}

/// Rule `cited-paths`: every repository path a document or comment cites exists. `exists`
/// answers for a path relative to the repository root; a citation may also be relative to
/// the citing file's folder or to its crate's folder (`crate_dir`).
pub fn check_cited_paths(
    place: &str,
    text: &str,
    file_dir: &str,
    crate_dir: Option<&str>,
    exists: &dyn Fn(&str) -> bool,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for (line_no, line) in citing_lines(place, text) {
        for p in cited_paths(&line) {
            let mut candidates = vec![p.clone(), join(file_dir, &p)];
            if let Some(c) = crate_dir {
                candidates.push(join(c, &p));
            }
            if !candidates.iter().any(|c| exists(c)) {
                out.push(violation(
                    "cited-paths",
                    format!("{place}:{line_no}"),
                    format!("cites `{p}`, which is not in the repository"),
                ));
            }
        }
    }
    out
}

fn join(dir: &str, rel: &str) -> String {
    if dir.is_empty() {
        rel.to_string()
    } else {
        normalize(&format!("{dir}/{rel}"))
    }
}

fn normalize(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            x => parts.push(x),
        }
    }
    parts.join("/")
}

// ---------------------------------------------------------------------------------------
// #[path] across crates
// ---------------------------------------------------------------------------------------

/// Rule `path-attr`: a `#[path = "…"]` in `file` (a path relative to the repository root,
/// inside `crate_dir`) must resolve inside `crate_dir`.
pub fn check_path_attrs(file: &str, crate_dir: &str, src: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    let dir = Path::new(file).parent().unwrap_or(Path::new(""));
    for (i, line) in src.lines().enumerate() {
        let code = code_part(line).trim();
        let Some(rest) = code.strip_prefix("#[path") else {
            continue;
        };
        let Some(q1) = rest.find('"') else { continue };
        let Some(q2) = rest[q1 + 1..].find('"') else {
            continue;
        };
        let target = &rest[q1 + 1..q1 + 1 + q2];
        let resolved = lexical_join(dir, target);
        if !resolved.starts_with(crate_dir) {
            out.push(violation(
                "path-attr",
                format!("{file}:{}", i + 1),
                format!(
                    "#[path = \"{target}\"] compiles `{}` from outside the crate `{crate_dir}`: \
                     depend on the crate that owns it instead",
                    resolved.display()
                ),
            ));
        }
    }
    out
}

fn lexical_join(dir: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for c in dir.join(rel).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Unused dependencies
// ---------------------------------------------------------------------------------------

/// A dependency a manifest declares: its name in code (`-` as `_`, or the rename) and
/// whether it is a dev-dependency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredDep {
    /// The name as written in the manifest.
    pub key: String,
    /// The identifier code uses for it.
    pub ident: String,
    /// Declared under `[dev-dependencies]`.
    pub dev: bool,
}

/// The dependencies a `Cargo.toml` declares (`[dependencies]`, `[dev-dependencies]`,
/// `[build-dependencies]` and their `[target.'cfg(..)'.…]` forms).
pub fn declared_deps(manifest: &str) -> Result<Vec<DeclaredDep>, String> {
    let v: toml::Table = manifest.parse().map_err(|e| format!("{e}"))?;
    let mut out = Vec::new();
    let mut take = |t: &toml::Value, dev: bool| {
        if let Some(t) = t.as_table() {
            for (k, _) in t {
                out.push(DeclaredDep {
                    key: k.clone(),
                    ident: k.replace('-', "_"),
                    dev,
                });
            }
        }
    };
    for (section, dev) in [
        ("dependencies", false),
        ("build-dependencies", false),
        ("dev-dependencies", true),
    ] {
        if let Some(t) = v.get(section) {
            take(t, dev);
        }
    }
    if let Some(targets) = v.get("target").and_then(|t| t.as_table()) {
        for (_, t) in targets {
            for (section, dev) in [
                ("dependencies", false),
                ("build-dependencies", false),
                ("dev-dependencies", true),
            ] {
                if let Some(s) = t.get(section) {
                    take(s, dev);
                }
            }
        }
    }
    Ok(out)
}

/// Rule `unused-deps`: each declared dependency's identifier appears as a path
/// (`ident::…`, `use ident`, `extern crate ident`) in the code that can use it: product
/// code (`product_src`: `src/`, `build.rs`) for normal dependencies, product or test code
/// (`test_src`: `tests/`, `examples/`, `benches/`) for dev-dependencies. Both texts are
/// the concatenated sources.
pub fn check_unused_deps(
    manifest_place: &str,
    deps: &[DeclaredDep],
    product_src: &str,
    test_src: &str,
) -> Vec<Violation> {
    let used_in = |ident: &str, src: &str| {
        src.lines().any(|l| {
            let code = code_part(l);
            has_token(code, &format!("{ident}::"))
                || has_token(code, &format!("use {ident}"))
                || has_token(code, &format!("extern crate {ident}"))
        })
    };
    let mut out = Vec::new();
    for d in deps {
        let used = if d.dev {
            used_in(&d.ident, product_src) || used_in(&d.ident, test_src)
        } else {
            used_in(&d.ident, product_src)
        };
        let only_in_tests = !d.dev && !used && used_in(&d.ident, test_src);
        if !used {
            let hint = if only_in_tests {
                "; it is used only by tests: move it to [dev-dependencies]"
            } else {
                ""
            };
            out.push(violation(
                "unused-deps",
                manifest_place.to_string(),
                format!("dependency `{}` is declared but never used{hint}", d.key),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn krate(name: &str, deps: &[(&str, &str)]) -> CrateDeps {
        CrateDeps {
            name: name.into(),
            manifest: format!("{name}/Cargo.toml"),
            deps: deps
                .iter()
                .map(|(d, k)| (d.to_string(), k.to_string()))
                .collect(),
        }
    }

    #[test]
    fn job_view_literals_live_in_the_builder_alone() {
        let literal =
            "fn job_view(x: u32) -> JobView {\n    JobView {\n        id: JobId(x),\n    }\n}\n";
        let v = check_job_view_literals("crates/serve/src/job.rs", literal);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].place, "crates/serve/src/job.rs:2");
        let update = "let v = JobView { max_replicas: 2, ..JobView::basic(JobId(1), 0.0, 1) };";
        assert_eq!(
            check_job_view_literals("crates/cli/src/bench.rs", update).len(),
            1
        );
        assert!(check_job_view_literals(JOB_VIEW_BUILDER, literal).is_empty());
        let defined = "pub struct JobView {\n}\nimpl JobView {\n    pub fn basic() -> Self {\n        JobView {\n            id,\n        }\n    }\n    fn other() -> Self {\n        JobView { id }\n    }\n}\n";
        let v = check_job_view_literals(JOB_VIEW_DEFINITION, defined);
        assert_eq!(v.len(), 1, "only `other`'s literal: {v:?}");
        assert_eq!(v[0].place, format!("{JOB_VIEW_DEFINITION}:10"));
        let tests = "fn f() {}\n#[cfg(test)]\nmod tests {\n    fn j() -> JobView {\n        JobView { id }\n    }\n}\n";
        assert!(check_job_view_literals("crates/policy/src/pollux.rs", tests).is_empty());
        let other_type = "let m = MyJobView { id };\n// a JobView { in a comment\n";
        assert!(check_job_view_literals("crates/sim/src/x.rs", other_type).is_empty());
    }

    #[test]
    fn layers_catch_an_upward_edge_a_dev_only_dependency_and_an_unknown_crate() {
        let ok = [
            krate("pacer-policy", &[("pacer-model", "normal")]),
            krate("pacer-sim", &[("pacer-policy", "normal")]),
        ];
        assert!(check_layers(&ok, LAYERS).is_empty());
        let up = [krate("pacer-policy", &[("pacer-sim", "normal")])];
        let v = check_layers(&up, LAYERS);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].message.contains("pacer-sim"));
        let sideways = [krate("pacer-control", &[("pacer-policy", "normal")])];
        assert_eq!(check_layers(&sideways, LAYERS).len(), 1);
        let dev_only = [krate("pacer-cli", &[("pacer-tidy", "dev")])];
        assert_eq!(check_layers(&dev_only, LAYERS).len(), 1);
        let unknown = [krate("pacer-new", &[])];
        assert!(check_layers(&unknown, LAYERS)[0]
            .message
            .contains("no layer"));
    }

    #[test]
    fn metadata_is_read_for_workspace_edges_only() {
        let json = r#"{"packages":[
            {"name":"pacer-model","manifest_path":"/r/model/Cargo.toml","dependencies":[{"name":"serde","kind":null}]},
            {"name":"pacer-sim","manifest_path":"/r/sim/Cargo.toml","dependencies":[{"name":"pacer-model","kind":null},{"name":"pacer-model","kind":"dev"}]}
        ]}"#;
        let c = crate_deps_from_metadata(json).unwrap();
        assert_eq!(c.len(), 2);
        assert!(c[0].deps.is_empty());
        assert_eq!(
            c[1].deps,
            vec![
                ("pacer-model".to_string(), "normal".to_string()),
                ("pacer-model".to_string(), "dev".to_string())
            ]
        );
    }

    #[test]
    fn no_io_catches_a_clock_but_not_comments_tests_or_longer_names() {
        let bad = "fn f() {\n    let t0 = std::time::Instant::now();\n}\n";
        let v = check_no_io("x.rs", bad);
        assert!(v.iter().any(|v| v.place == "x.rs:2"), "{v:?}");
        let ok = "// Instant::now would be wrong here\nfn f(now_s: f64) {}\nstruct InstantView;\n\
                  #[cfg(test)]\nmod tests { fn g() { std::fs::read(\"x\"); } }\n";
        assert!(check_no_io("x.rs", ok).is_empty());
        assert_eq!(check_no_io("y.rs", "use std::fs;\n").len(), 1);
        assert_eq!(check_no_io("y.rs", "    println!(\"x\");\n").len(), 1);
    }

    #[test]
    fn job_decisions_catch_a_second_home_but_not_calls_of_the_first() {
        // The drivers as they are: calls of `decide`, a Python-facing name kept.
        let ok = "use pacer_control::job::decide;\n\
                  let c = decide::batch_on_allocation(&g, nodes, replicas);\n\
                  let explore = decide::exploration_cap(st.max_profiled_replicas);\n\
                  fn best_global_batch(sqr: f64) -> f64 { sqr }\n\
                  // g.optimize(1, 2) in a comment\n\
                  let x = 2 * replicas_max;\n\
                  #[cfg(test)]\nmod tests { fn t() { g.optimize(1, 2); } }\n";
        assert_eq!(check_job_decisions("ok.rs", ok), vec![]);
        // The exploration cap written out again, as serve and sim had it.
        let v = check_job_decisions(
            "serve.rs",
            "        let explore = (2 * job.model.max_measured_replicas()).max(1);\n",
        );
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].place, "serve.rs:1");
        assert!(v[0].message.contains("exploration_cap"), "{v:?}");
        assert_eq!(
            check_job_decisions("sim.rs", "let e = (2 * st.max_profiled_replicas).max(1);\n").len(),
            1
        );
        // The estimators called directly.
        let direct = "use pacer_predict::goodput::{fit_perf_params_from, GoodputFn};\n\
                      let p = fit_perf_params_from(&obs, None);\n\
                      let c = g.optimize(nodes, replicas);\n\
                      goodput::best_global_batch(&grad, 1.0, 2.0, |b| b);\n\
                      let q = fit_step_times(&obs, None);\n";
        let v = check_job_decisions("drv.rs", direct);
        let lines: Vec<&str> = v.iter().map(|x| x.place.as_str()).collect();
        assert_eq!(
            lines,
            ["drv.rs:1", "drv.rs:2", "drv.rs:3", "drv.rs:4", "drv.rs:5"],
            "{v:?}"
        );
        // A decision defined again.
        let v = check_job_decisions("x.rs", "pub fn exploration_cap(r: u32) -> u32 { r }\n");
        assert_eq!(v.len(), 1);
        assert!(v[0].message.contains("second home"), "{v:?}");
    }

    #[test]
    fn cited_paths_are_found_and_placeholders_skipped() {
        assert_eq!(
            cited_paths("see `crates/sim/src/engine/` and docs/simulator.md."),
            vec!["crates/sim/src/engine/", "docs/simulator.md"]
        );
        assert_eq!(
            cited_paths("(ALGORITHMS.md §3a) and README.md"),
            vec!["ALGORITHMS.md", "README.md"]
        );
        assert!(
            cited_paths("data/<app>/placements.csv ../shared/data/x.csv /tmp/docs/x.md").is_empty()
        );
        assert!(cited_paths("experiments/*.json https://x.org/docs/a.md").is_empty());
        assert!(cited_paths("Readme.md notes.md").is_empty());
    }

    #[test]
    fn cited_paths_check_fails_on_a_missing_file_and_resolves_relative_ones() {
        let have = ["docs/a.md", "crates/x/src/lib.rs", "crates/x/README.md"];
        let exists = |p: &str| have.contains(&p);
        let text = "See docs/a.md and docs/missing.md.\n";
        let v = check_cited_paths("README.md", text, "", None, &exists);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].place, "README.md:1");
        assert!(v[0].message.contains("docs/missing.md"));
        let rs = "//! the algorithm (ALGORITHMS.md §1a)\nlet s = \"docs/missing.md\";\n";
        let v = check_cited_paths(
            "crates/x/src/lib.rs",
            rs,
            "crates/x/src",
            Some("crates/x"),
            &exists,
        );
        assert_eq!(v.len(), 1, "only comments count in Rust: {v:?}");
        assert!(v[0].message.contains("ALGORITHMS.md"));
        let ok = "//! see README.md\n";
        assert!(check_cited_paths(
            "crates/x/src/lib.rs",
            ok,
            "crates/x/src",
            Some("crates/x"),
            &exists
        )
        .is_empty());
    }

    #[test]
    fn path_attrs_may_not_leave_the_crate() {
        let src = "#[path = \"../../cli/src/batching.rs\"]\nmod batching;\n";
        let v = check_path_attrs("crates/workersim/examples/eval.rs", "crates/workersim", src);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].message.contains("crates/cli/src/batching.rs"));
        let inside = "#[path = \"experiment/plot.rs\"]\nmod plot;\n";
        assert!(check_path_attrs("crates/cli/src/experiment.rs", "crates/cli", inside).is_empty());
    }

    #[test]
    fn unused_deps_are_caught_and_test_only_ones_pointed_to_dev() {
        let manifest = "[package]\nname='x'\n[dependencies]\nserde = '1'\nthiserror = '2'\n\
                        pacer-model = { path = '../model' }\n[dev-dependencies]\nproptest = '1'\n\
                        [target.'cfg(unix)'.dependencies]\nlibc = '0.2'\n";
        let deps = declared_deps(manifest).unwrap();
        assert_eq!(deps.len(), 5);
        let product =
            "use serde::Serialize;\nfn f() { unsafe { libc::getpid(); } }\n// thiserror::Error\n";
        let tests = "use pacer_model::JobId;\nproptest::proptest! {}\n";
        let v = check_unused_deps("x/Cargo.toml", &deps, product, tests);
        let keys: Vec<&str> = v.iter().map(|v| v.message.as_str()).collect();
        assert_eq!(v.len(), 2, "{keys:?}");
        assert!(keys.iter().any(|k| k.contains("`thiserror`")));
        assert!(keys
            .iter()
            .any(|k| k.contains("`pacer-model`") && k.contains("dev-dependencies")));
    }
}
