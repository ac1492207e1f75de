//! The runtime's errors name its config fields (`global_batch`, in backticks inside a
//! message); a person at the command line set them as flags (`--global-batch`). This is
//! the one map between the two, applied to every runtime error `controller`, `worker`
//! and `train` report.

use pacer_runtime::train::TrainError;
use pacer_runtime::RuntimeError;

/// Config field → the flag that sets it, for every field a runtime error may name.
const FLAGS: &[(&str, &str)] = &[
    ("dataset", "--dataset"),
    ("model", "--model"),
    ("hidden", "--hidden"),
    ("clusters", "--clusters"),
    ("global_batch", "--global-batch"),
    ("max_global_batch", "--max-global-batch"),
    ("controller", "--controller"),
    ("predictor", "--predictor"),
    ("controller/predictor", "--controller/--predictor"),
    ("optimizer", "--optimizer"),
    ("lr", "--lr"),
    ("momentum", "--momentum"),
    ("target_accuracy", "--target-accuracy"),
    ("max_time_s", "--max-time-s"),
    ("max_iterations", "--max-iterations"),
    ("eval_every", "--eval-every"),
    ("worker_timeout_s", "--worker-timeout-s"),
    ("join_timeout_s", "--join-timeout-s"),
    ("rejoin_timeout_s", "--rejoin-timeout-s"),
    ("hello_timeout_s", "--hello-timeout-s"),
    ("max_pending", "--max-pending"),
    ("max_pre_hello_per_addr", "--max-pre-hello-per-addr"),
    ("min_workers", "--min-workers"),
    ("checkpoint_dir", "--checkpoint-dir"),
    ("workers", "--workers"),
    ("speeds", "--speeds"),
    ("time_scale", "--time-scale"),
    ("interference", "--interference"),
    ("load_signal", "--load-signal"),
    ("kills", "--kill"),
    ("joins", "--join"),
    ("listen", "--listen"),
    ("worker_ips", "--worker-ips"),
    ("compute_slots", "--compute-slots"),
    ("bind", "--bind"),
    ("welcome_timeout_s", "--welcome-timeout-s"),
    ("idle_timeout_s", "--idle-timeout-s"),
    ("stall_timeout_s", "--stall-timeout-s"),
    ("retry_for_s", "--retry-for-s"),
    ("retry_max_delay_s", "--retry-max-delay-s"),
];

/// The flag of config field `field`; a field no flag sets keeps its name.
pub(crate) fn flag(field: &str) -> &str {
    FLAGS
        .iter()
        .find(|(f, _)| *f == field)
        .map_or(field, |(_, flag)| flag)
}

/// `text` with every config field named in backticks (`` `global_batch` ``) written as
/// its flag (`--global-batch`).
pub(crate) fn with_flags(text: &str) -> String {
    let mut out = text.to_string();
    for (field, flag) in FLAGS {
        let named = format!("`{field}`");
        if out.contains(&named) {
            out = out.replace(&named, flag);
        }
    }
    out
}

/// A runtime error as the command line says it: config fields named by their flags.
pub(crate) fn runtime_error(e: RuntimeError) -> anyhow::Error {
    match e {
        RuntimeError::Config { field, message } => {
            anyhow::anyhow!("{}: {}", flag(&field), with_flags(&message))
        }
        RuntimeError::Io { context, source } => {
            anyhow::Error::new(source).context(with_flags(&context))
        }
        RuntimeError::Stopped(m) => anyhow::anyhow!("training stopped: {}", with_flags(&m)),
        e => e.into(),
    }
}

/// A runtime error that the command line only prints (a worker's end), said the same way.
pub(crate) fn said(e: &RuntimeError) -> String {
    match e {
        RuntimeError::Config { field, message } => {
            format!("{}: {}", flag(field), with_flags(message))
        }
        e => with_flags(&e.to_string()),
    }
}

/// A training run's error as the command line says it.
pub(crate) fn train_error(e: TrainError) -> anyhow::Error {
    match e {
        TrainError::Config { field, message } => {
            anyhow::anyhow!("{}: {}", flag(&field), with_flags(&message))
        }
        TrainError::Runtime(e) => runtime_error(e),
        e => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_become_flags() {
        let e = runtime_error(RuntimeError::Config {
            field: "max_global_batch".into(),
            message: "must be at least `global_batch`".into(),
        });
        assert_eq!(
            e.to_string(),
            "--max-global-batch: must be at least --global-batch"
        );
        let e = train_error(TrainError::Config {
            field: "joins".into(),
            message: "5:0: the speed must be a positive number".into(),
        });
        assert!(e.to_string().starts_with("--join: 5:0"), "{e}");
        let e = runtime_error(RuntimeError::Stopped(
            "none joined within 0.5 s (`rejoin_timeout_s`)".into(),
        ));
        assert!(e.to_string().ends_with("(--rejoin-timeout-s)"), "{e}");
        // A field no flag sets keeps its name.
        assert_eq!(flag("fixed_batches"), "fixed_batches");
    }
}
