//! # pacer-model
//!
//! The plain data every other pacer crate speaks: device types and nodes
//! ([`cluster`]), jobs and their requests ([`job`]), which devices a job holds
//! ([`alloc`]), and the measured application profiles the performance models are
//! built from ([`profile`]), and what a running job reports to a service ([`report`]).
//!
//! Architecture invariant: this crate does no I/O and reads no clock. Parsers
//! here take text that a driver has already read, plus an `origin` string
//! (usually the file path) so that errors can name `file:line`.

pub mod alloc;
pub mod civil;
pub mod cluster;
pub mod cluster_file;
pub mod error;
pub mod job;
pub mod profile;
pub mod report;
pub mod rng;

pub use alloc::Allocation;
pub use cluster::{ClusterSpec, DeviceTypeId, NodeId, NodeSpec};
pub use error::ParseError;
pub use job::{JobId, JobSpec};
pub use profile::{AppProfile, PlacementRow, ScalabilityRow, ValidationCurve, ValidationRow};
pub use report::JobReport;
