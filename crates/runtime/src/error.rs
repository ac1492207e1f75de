//! Errors of the runtime. Every message names the place (file, field, peer, frame) and
//! what was expected, because these reach a person through the CLI.

use std::path::PathBuf;

/// Anything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A dataset file that cannot be read or parsed.
    #[error("{path}: {message}")]
    Data { path: PathBuf, message: String },
    /// A dataset spec (`mnist:DIR`, `libsvm:TRAIN[,TEST]`, `tiny`) that does not parse.
    #[error("dataset `{spec}`: {message}")]
    DatasetSpec { spec: String, message: String },
    /// A configuration value that cannot be used. `field` names the configuration
    /// field ([`crate::train::TrainConfig`], [`crate::ControllerConfig`],
    /// [`crate::worker::WorkerConfig`]) or the environment variable, never a command-line
    /// flag; a message names other fields in backticks (`` `global_batch` ``), so that a
    /// front end can say them its own way (the CLI's flags).
    #[error("{field}: {message}")]
    Config { field: String, message: String },
    /// A peer broke the protocol (bad frame, wrong version, wrong dataset).
    #[error(transparent)]
    Protocol(#[from] crate::protocol::ProtocolError),
    /// A peer refused us, with its reason.
    #[error("{peer} rejected the connection: {reason}")]
    Rejected { peer: String, reason: String },
    /// Socket errors, with what we were doing (the OS error is the `source`, which
    /// `anyhow`'s `{:#}` appends).
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// Training could not continue (no workers left, nothing joined in time).
    #[error("training stopped: {0}")]
    Stopped(String),
}

impl RuntimeError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        RuntimeError::Io {
            context: context.into(),
            source,
        }
    }
    pub(crate) fn config(field: &str, message: impl Into<String>) -> Self {
        RuntimeError::Config {
            field: field.to_string(),
            message: message.into(),
        }
    }
}
