//! # pacer-control
//!
//! Controllers that turn predictions into decisions for one job: per-worker
//! local batches (worker level) and batch / replicas / machine type (job level).
//!
//! Architecture invariant: no I/O, no clocks, no knowledge of which driver calls it.
