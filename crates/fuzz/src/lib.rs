//! # pacer-fuzz
//!
//! Fuzzing on stable Rust for every parser of user input and the wire protocol
//! (issue #19): proptest strategies generate arbitrary bytes and structure-aware
//! mutations of valid seeds; every input is checked for no panic, bounded time, a
//! bounded heap peak (a counting global allocator) and an error that names its
//! origin and a place. See `crates/fuzz/README.md`.
//!
//! Dev-only: nothing in the workspace depends on this crate. It installs its own
//! `#[global_allocator]`, which is why it must stay a leaf.

pub mod alloc;
pub mod harness;
pub mod mutate;
mod serve_targets;
pub mod targets;

pub use harness::{
    check, fuzz, Budget, Failure, Limits, Outcome, Place, Report, RunConfig, Target,
};
