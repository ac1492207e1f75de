//! The library half of `pacer-cli`: what the `pacer` binary shares with the research
//! binary `pacer-lab` (crates/lab) — writing output people read, to standard output
//! and to files ([`out`]) — and the types of every `pacer … --json` output ([`json`]).
//! The commands themselves live in the binary (`src/main.rs`).

pub mod json;
pub mod out;
