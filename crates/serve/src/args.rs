//! The service's command-line arguments, shared by `pacer serve` and the
//! `pacer-serve` binary (tests, benchmark).

use crate::ServeConfig;
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address of the API (port 0: any free port; printed at start).
    #[arg(long, default_value = "127.0.0.1:8470")]
    pub listen: String,
    /// State directory: database, token, logs, checkpoints. Created with mode 0700 when
    /// missing; refused when another user owns it or group/others can access it.
    /// Default: $XDG_STATE_HOME/pacer, else ~/.local/state/pacer.
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Cluster: COUNTxSLOTS:TYPE[,…] (e.g. 4x2:cpu) or a TOML file with [[nodes]].
    #[arg(long)]
    pub cluster: String,
    /// Cluster policy (fifo, fair, tiresias, pollux, gavel-maxmin, …).
    #[arg(long, default_value = "fair")]
    pub policy: String,
    /// Seconds between scheduling rounds.
    #[arg(long, default_value_t = 5.0)]
    pub round_s: f64,
    /// Seconds a job has between SIGTERM and SIGKILL.
    #[arg(long, default_value_t = 30.0)]
    pub grace_s: f64,
    /// Seconds a run keeps its devices before the policy may stop or resize it
    /// (default: three rounds), so policies that rotate devices do not thrash restarts.
    #[arg(long)]
    pub min_run_s: Option<f64>,
    /// Executor: `local` or `slurm[:PARTITION]` (the list: `--help`).
    #[arg(long, default_value = "local", long_help = crate::executors::help())]
    pub executor: String,
    /// A job's log (`<state>/logs/<job>.log`) is rotated when it passes this many MiB:
    /// its last MiBs move to `<job>.log.1` and the log starts again.
    #[arg(long, default_value_t = 64)]
    pub log_max_mib: u64,
    /// Bearer token file (default <state>/token, generated with mode 0600 if absent).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// A device type's price, `TYPE=USD_PER_DEVICE_H` (e.g. `a100=2.93`), repeatable: one
    /// for every device type of the cluster, or none. Jobs may then carry a budget in
    /// dollars (`budget_usd`), spent at these prices while they hold devices.
    #[arg(long = "price", value_name = "TYPE=USD_PER_DEVICE_H")]
    pub prices: Vec<String>,
    /// The pacer binary that runs `[trainer]` jobs (default: this executable when it is
    /// `pacer`, else `pacer` on PATH).
    #[arg(long)]
    pub pacer_bin: Option<String>,
}

impl ServeArgs {
    pub fn config(&self) -> anyhow::Result<ServeConfig> {
        let slurm_partition =
            match crate::executors::parse(&self.executor).map_err(|e| anyhow::anyhow!(e))? {
                crate::executors::ExecutorChoice::Local => None,
                crate::executors::ExecutorChoice::Slurm(p) => Some(p),
            };
        let slurm_partition = slurm_partition.as_deref();
        anyhow::ensure!(
            (slurm_partition.is_some()) == (self.cluster == "slurm"),
            "--cluster {} with --executor {}: `--cluster slurm` (read the cluster from Slurm) goes with `--executor slurm`, and only with it",
            self.cluster,
            self.executor
        );
        let (slurm, cluster) = match slurm_partition {
            Some(p) => {
                let (ex, cluster) = crate::executor_slurm::SlurmExecutor::discover(
                    pacer_slurm::SlurmClient::new(),
                    p,
                )?;
                (Some(std::sync::Arc::new(ex)), cluster)
            }
            None => (None, crate::spec::load_cluster(&self.cluster)?),
        };
        let prices = crate::budget::parse_prices(&self.prices, &cluster)?;
        let pacer_bin = match &self.pacer_bin {
            Some(b) => b.clone(),
            None => std::env::current_exe()
                .ok()
                .filter(|p| p.file_name().is_some_and(|n| n == "pacer"))
                .map_or_else(|| "pacer".to_string(), |p| p.display().to_string()),
        };
        Ok(ServeConfig {
            listen: self.listen.clone(),
            state_dir: match &self.state {
                Some(d) => d.clone(),
                None => crate::trust::default_state_dir().map_err(|e| anyhow::anyhow!(e))?,
            },
            cluster,
            policy: self.policy.clone(),
            round_s: self.round_s,
            grace_s: self.grace_s,
            min_run_s: self.min_run_s.unwrap_or(3.0 * self.round_s),
            token_file: self.token_file.clone(),
            log_max_mib: self.log_max_mib,
            prices,
            pacer_bin,
            slurm,
            profiles: None,
        })
    }

    /// Runs the service on a new tokio runtime until SIGINT/SIGTERM.
    pub fn run(&self) -> anyhow::Result<()> {
        self.run_with(None)
    }

    /// [`ServeArgs::run`] with the profiles deadline jobs may name (`app`).
    pub fn run_with(
        &self,
        profiles: Option<std::sync::Arc<crate::goal::ProfileSource>>,
    ) -> anyhow::Result<()> {
        let mut cfg = self.config()?;
        cfg.profiles = profiles;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        rt.block_on(crate::serve(cfg, |addr| {
            println!("pacer serve: listening on http://{addr}");
        }))
    }
}
