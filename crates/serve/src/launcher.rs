//! How a job's command is started on its allocation: as it is (`launcher = "none"`), or
//! under `torchrun` (`launcher = "torchrun"`), which gets the process count and the
//! rendezvous from the allocation instead of from a hand-written
//! `sh -c 'torchrun --nproc_per_node=$PACER_REPLICAS …'`.
//!
//! The torchrun line is assembled on the node by a small `sh` script ([`TORCHRUN_SH`]),
//! because under Slurm every node of a run executes the same command and only the node
//! knows which one it is:
//! `torchrun --nproc_per_node=<devices on this node> --nnodes=<nodes> --node_rank=<rank>
//! --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT <command…>`.
//! - Local executor (and any run without `PACER_NODE_NAMES`): one node, every allocated
//!   device on it (`PACER_REPLICAS`), node rank 0.
//! - Slurm executor: it sets `PACER_NODE_NAMES` and `PACER_NODE_DEVICES` (the run's nodes
//!   and their device counts, in allocation order, whose first node is `MASTER_ADDR`); a
//!   node finds its rank by its Slurm name (`SLURMD_NODENAME`), so node rank 0 is the
//!   node at `MASTER_ADDR` whatever order Slurm numbers its tasks in.
//!
//! Which torchrun: the `torchrun` on the job's `PATH` (the service's, or the spec's `env`
//! `PATH`), or, when the spec names `python = "/path/to/python"`, that interpreter's
//! `-m torch.distributed.run` (the same program; a venv's python needs no `PATH`).

use serde::{Deserialize, Serialize};

/// How the command is started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    /// The command itself, once per run (per node under Slurm).
    #[default]
    None,
    /// `torchrun … <command…>`: the command is what follows torchrun's options (a
    /// script and its arguments, or `-m module …`, or `--no-python prog …`).
    Torchrun,
}

impl Launcher {
    pub fn is_none(&self) -> bool {
        *self == Launcher::None
    }
}

/// `$0` of the script (shown by `ps` and in its error messages).
const NAME: &str = "pacer-torchrun";

/// Arguments: `N`, then the `N` words that start torchrun, then the job's command. The
/// flags go between the two; `for a do shift; set -- "$@" "$a"; done` rebuilds the
/// argument list in place (POSIX sh has no arrays), so no argument is ever re-split.
pub const TORCHRUN_SH: &str = r#"n=$1; shift
if [ -z "${PACER_NODE_NAMES:-}" ]; then
  nnodes=1; rank=0; nproc=${PACER_REPLICAS:-1}
else
  me=${SLURMD_NODENAME:-}; rank=; nproc=; old_ifs=$IFS; IFS=,; set -f
  i=0; for x in $PACER_NODE_NAMES; do [ "$x" = "$me" ] && rank=$i; i=$((i+1)); done; nnodes=$i
  i=0; for x in ${PACER_NODE_DEVICES:-}; do [ "$i" = "$rank" ] && nproc=$x; i=$((i+1)); done
  IFS=$old_ifs; set +f
  if [ -z "$rank" ] || [ -z "$nproc" ]; then
    echo "$0: this node ('$me', SLURMD_NODENAME) is not one of the run's nodes ($PACER_NODE_NAMES)" >&2
    exit 2
  fi
fi
echo "$0: $nnodes node(s), $nproc process(es) on this one, node rank $rank, master $MASTER_ADDR:$MASTER_PORT" >&2
i=0
for a do
  shift
  if [ "$i" = "$n" ]; then
    set -- "$@" "--nproc_per_node=$nproc" "--nnodes=$nnodes" "--node_rank=$rank" "--master_addr=$MASTER_ADDR" "--master_port=$MASTER_PORT"
  fi
  set -- "$@" "$a"; i=$((i+1))
done
exec "$@""#;

/// The argument vector that runs `command` under torchrun (see the module docs).
pub fn torchrun_argv(python: Option<&str>, command: &[String]) -> Vec<String> {
    let prog: Vec<String> = match python {
        Some(p) => vec![p.into(), "-m".into(), "torch.distributed.run".into()],
        None => vec!["torchrun".into()],
    };
    let mut v = vec![
        "/bin/sh".to_string(),
        "-c".into(),
        TORCHRUN_SH.into(),
        NAME.into(),
        prog.len().to_string(),
    ];
    v.extend(prog);
    v.extend(command.iter().cloned());
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A directory with a fake `torchrun` and a fake python that print their arguments,
    /// one per line. The directory is removed when the returned guard drops.
    fn fakes(name: &str) -> tempfile::TempDir {
        let tmp = crate::scratch_dir(&format!("pacer-launcher-{name}-"));
        let dir = tmp.path();
        for prog in ["torchrun", "py"] {
            let p = dir.join(prog);
            std::fs::write(&p, "#!/bin/sh\necho \"$0\"\nfor a do echo \"$a\"; done\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        tmp
    }

    fn run(argv: &[String], env: &[(&str, &str)], dir: &std::path::Path) -> (i32, String, String) {
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", dir.display()))
            .env("MASTER_ADDR", "10.0.0.2")
            .env("MASTER_PORT", "29511")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn cmd() -> Vec<String> {
        ["train.py", "--name", "two words", "--glob", "*", "$HOME"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn one_node_gets_every_allocated_device() {
        let tmp = fakes("local");
        let dir = tmp.path().to_path_buf();
        let (code, out, err) = run(
            &torchrun_argv(None, &cmd()),
            &[("PACER_REPLICAS", "3")],
            &dir,
        );
        assert_eq!(code, 0, "{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[1..],
            [
                "--nproc_per_node=3",
                "--nnodes=1",
                "--node_rank=0",
                "--master_addr=10.0.0.2",
                "--master_port=29511",
                "train.py",
                "--name",
                "two words",
                "--glob",
                "*",
                "$HOME"
            ]
        );
        assert!(lines[0].ends_with("/torchrun"), "{out}");
        assert!(err.contains("1 node(s), 3 process(es)"), "{err}");
    }

    #[test]
    fn each_slurm_node_finds_its_rank_and_devices_by_name() {
        let tmp = fakes("slurm");
        let dir = tmp.path().to_path_buf();
        let py = dir.join("py").display().to_string();
        let argv = torchrun_argv(Some(&py), &cmd());
        let env = |me| {
            [
                ("PACER_REPLICAS", "4"),
                ("PACER_NODE_NAMES", "n2,n1"),
                ("PACER_NODE_DEVICES", "3,1"),
                ("SLURMD_NODENAME", me),
            ]
        };
        let (code, out, err) = run(&argv, &env("n1"), &dir);
        assert_eq!(code, 0, "{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[..8],
            [
                py.as_str(),
                "-m",
                "torch.distributed.run",
                "--nproc_per_node=1",
                "--nnodes=2",
                "--node_rank=1",
                "--master_addr=10.0.0.2",
                "--master_port=29511",
            ]
        );
        assert_eq!(
            lines[8..],
            cmd().iter().map(String::as_str).collect::<Vec<_>>()[..]
        );
        let (_, out, _) = run(&argv, &env("n2"), &dir);
        assert!(
            out.contains("--nproc_per_node=3\n--nnodes=2\n--node_rank=0\n"),
            "{out}"
        );
        // A node that is not one of the run's: a clear error, torchrun never started.
        let (code, out, err) = run(&argv, &env("n9"), &dir);
        assert_eq!(code, 2);
        assert!(out.is_empty(), "{out}");
        assert!(err.contains("'n9'") && err.contains("n2,n1"), "{err}");
    }
}
