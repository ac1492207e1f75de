//! Running one Slurm command with a time limit and bounded output.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::SlurmError;

/// The most bytes read from a command's stdout or stderr; the rest is dropped, so a runaway
/// command cannot take unbounded memory (`squeue --json` of a large site is a few MB).
pub const MAX_OUTPUT_BYTES: u64 = 256 << 20;

/// A command that takes this long (ms) is logged as a warning (`squeue` takes ~40 ms).
const SLOW_MS: f64 = 1000.0;

/// How a command is run: where Slurm's programs are, which `slurm.conf`, the time limit.
#[derive(Debug, Clone)]
pub struct Runner {
    /// Directory holding sbatch/squeue/...; `None` searches `PATH`.
    pub bin_dir: Option<PathBuf>,
    /// `SLURM_CONF` for every command; `None` leaves the environment's (or Slurm's default).
    pub slurm_conf: Option<PathBuf>,
    /// Time limit of one command.
    pub timeout: Duration,
}

impl Runner {
    /// The full path of `program`, or [`SlurmError::NotInstalled`].
    pub fn locate(&self, program: &str) -> Result<PathBuf, SlurmError> {
        match &self.bin_dir {
            Some(dir) => {
                let p = dir.join(program);
                if is_executable(&p) {
                    Ok(p)
                } else {
                    Err(SlurmError::NotInstalled {
                        program: program.into(),
                        place: format!("in {}", dir.display()),
                    })
                }
            }
            None => std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths)
                .map(|d| d.join(program))
                .find(|p| is_executable(p))
                .ok_or_else(|| SlurmError::NotInstalled {
                    program: program.into(),
                    place: "on PATH".into(),
                }),
        }
    }

    /// Runs `program args…` with extra environment `env` and returns its stdout; a non-zero
    /// exit is an error classified by [`classify_failure`].
    pub fn run(
        &self,
        program: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<String, SlurmError> {
        let path = self.locate(program)?;
        let line = command_line(program, args);
        let mut cmd = Command::new(&path);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(conf) = &self.slurm_conf {
            cmd.env("SLURM_CONF", conf);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let started = Instant::now();
        let child = cmd.spawn().map_err(|source| SlurmError::Spawn {
            command: line.clone(),
            source,
        })?;
        let waited = wait_bounded(child, self.timeout, &line);
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let (status, stdout, stderr) = match waited {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(command = %line, ms, "slurm command timed out and was killed");
                return Err(e);
            }
        };
        if ms >= SLOW_MS {
            tracing::warn!(command = %line, ms, %status, "slow slurm command");
        } else {
            tracing::debug!(command = %line, ms, %status, "slurm command");
        }
        if status.success() {
            Ok(stdout)
        } else {
            Err(classify_failure(&line, &status.to_string(), &stderr))
        }
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The command as a user would type it (for messages).
pub fn command_line(program: &str, args: &[String]) -> String {
    let mut s = program.to_string();
    for a in args {
        s.push(' ');
        if a.contains(|c: char| c.is_whitespace() || c == '\'') || a.is_empty() {
            s.push_str(&crate::job::shell_quote(a));
        } else {
            s.push_str(a);
        }
    }
    s
}

fn wait_bounded(
    mut child: Child,
    timeout: Duration,
    line: &str,
) -> Result<(std::process::ExitStatus, String, String), SlurmError> {
    let read_all = |r: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(r) = r {
                let _ = r.take(MAX_OUTPUT_BYTES).read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = read_all(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = read_all(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < timeout => thread::sleep(Duration::from_millis(5)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SlurmError::Timeout {
                    command: line.to_string(),
                    after: timeout,
                });
            }
        }
    };
    // The pipes close when the child exits (Slurm's commands do not leave children behind).
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok((status, stdout, stderr))
}

/// Turns a failed command's stderr into the error that names what is missing.
pub fn classify_failure(line: &str, status: &str, stderr: &str) -> SlurmError {
    let s = stderr.trim().to_string();
    let lower = s.to_ascii_lowercase();
    let unreachable = [
        "unable to contact slurm controller",
        "connection refused",
        "socket timed out",
        "unable to establish controller",
        "could not establish a configuration source",
        "unable to process configuration file",
    ];
    if unreachable.iter().any(|m| lower.contains(m)) {
        return SlurmError::Unreachable {
            command: line.to_string(),
            stderr: s,
        };
    }
    SlurmError::Command {
        command: line.to_string(),
        status: status.to_string(),
        stderr: s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner(bin: Option<&str>) -> Runner {
        Runner {
            bin_dir: bin.map(PathBuf::from),
            slurm_conf: None,
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn a_missing_program_names_itself_and_where_it_was_looked_for() {
        let err = runner(Some("/nonexistent-dir"))
            .locate("sbatch")
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, SlurmError::NotInstalled { .. }), "{msg}");
        assert!(
            msg.contains("`sbatch`") && msg.contains("/nonexistent-dir"),
            "{msg}"
        );
    }

    #[test]
    fn a_command_past_its_limit_is_killed() {
        let r = Runner {
            timeout: Duration::from_millis(200),
            ..runner(Some("/bin"))
        };
        let t = Instant::now();
        let err = r.run("sleep", &["5".into()], &[]).unwrap_err();
        assert!(matches!(err, SlurmError::Timeout { .. }), "{err}");
        assert!(t.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn output_and_environment_pass_through() {
        let r = runner(Some("/bin"));
        let out = r
            .run(
                "sh",
                &["-c".into(), "echo $X; echo e >&2".into()],
                &[("X".into(), "a b".into())],
            )
            .unwrap();
        assert_eq!(out, "a b\n");
        let err = r
            .run("sh", &["-c".into(), "echo boom >&2; exit 3".into()], &[])
            .unwrap_err();
        assert!(
            err.to_string().contains("boom") && err.to_string().contains('3'),
            "{err}"
        );
    }

    #[test]
    fn controller_errors_are_classified() {
        let e = classify_failure(
            "squeue --json",
            "exit status: 1",
            "squeue: error: Unable to contact slurm controller (connect failure)",
        );
        assert!(matches!(e, SlurmError::Unreachable { .. }), "{e}");
        let e = classify_failure(
            "sbatch",
            "exit status: 1",
            "sbatch: error: Batch job submission failed: Invalid partition name specified",
        );
        assert!(matches!(e, SlurmError::Command { .. }), "{e}");
    }
}
