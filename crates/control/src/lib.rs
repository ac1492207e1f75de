//! # pacer-control
//!
//! Controllers that turn predictions into decisions for one job: per-worker
//! local batches (worker level) and batch / replicas / machine type (job level).
//!
//! - [`worker`]: per-worker local batches under a fixed global batch (uniform BSP,
//!   LB-BSP, P/PI dynamic batching) behind the [`worker::BatchController`] trait.
//! - [`session`]: the job session — one job's membership, speed predictions, per-worker
//!   batches and observations, the one place these decisions are made; every driver
//!   (workersim, the runtime, the PyTorch binding) runs it.
//! - [`job`]: Courier (best-metric batch under a time SLO) and configuration search
//!   (time-/cost-optimal and Pareto placement × batch × machine, offline and online).
//!
//! Architecture invariant: no I/O, no clocks, no knowledge of which driver calls it.

pub mod job;
pub mod session;
pub mod worker;
