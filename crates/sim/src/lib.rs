//! # pacer-sim
//!
//! The trace-driven cluster simulator: one of pacer's two drivers (the other is
//! the real runtime). It owns simulated time and the ground truth of how fast a
//! job trains, and calls the same `pacer-policy` and `pacer-predict` code a real
//! cluster would.
//!
//! - [`admit`]: whether a workload can run on a cluster (device types it was
//!   measured on, requests within the cluster's size), checked before a run;
//! - [`apps`]: the measured application profiles (six Pollux applications
//!   embedded) and the ground-truth performance model interpolated from them;
//! - [`trace`]: workload loaders (Pollux workloads, Philly, Gavel traces, synthetic);
//! - [`engine`]: the round-based simulation loop;
//! - [`hetero`]: Gavel traces on heterogeneous clusters (speed per device type);
//! - [`quality`]: recorded loss curves (SLAQ job-quality profiles);
//! - [`metrics`]: JCT, makespan, queueing, utilisation, finish-time fairness.
//!
//! Architecture invariant: the engine never reads a wall clock except to report
//! its own run time (`wall_ms`); simulated time comes only from the round loop.

pub mod admit;
pub mod apps;
pub mod engine;
pub mod hetero;
pub mod metrics;
pub mod quality;
pub mod trace;

pub use apps::{embedded_profiles, load_app_dir, AppModel};
pub use engine::{ArrivalReplan, ProfileMode, SimConfig, SimJob, Simulation, TypeRate, Work};
pub use metrics::{SimResult, Summary};
