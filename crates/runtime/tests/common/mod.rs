//! Helpers shared by the runtime's integration tests.

use pacer_runtime::controller::ControllerConfig;
use pacer_runtime::data::{self, Data};
use pacer_runtime::model::ModelSpec;
use std::sync::Arc;

/// The shipped `tiny` dataset.
pub fn tiny() -> Arc<Data> {
    Arc::new(data::load("tiny").expect("shipped dataset"))
}

/// A job of `model` (hidden width `width`) at global batch `b` for `iters`
/// iterations, evaluating rarely, with generous timeouts.
pub fn config(d: &Data, model: &str, width: usize, b: u64, iters: u64) -> ControllerConfig {
    let spec = ModelSpec::new(model, d.train.dim, d.train.classes, width).unwrap();
    let mut c = ControllerConfig::new(spec).unwrap();
    c.global_batch = b;
    c.max_iterations = Some(iters);
    c.eval_every = 1000;
    c.join_timeout_s = 60.0;
    c.worker_timeout_s = 60.0;
    c
}
