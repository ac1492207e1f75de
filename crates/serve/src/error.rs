//! Errors: what the API answers (a status and `{"error", "field"}`) and what the
//! service itself can fail with.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An API error: HTTP status, the field (or header, path part) it is about, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ApiError {
    pub status: u16,
    pub field: String,
    pub message: String,
    /// More of the answer, merged into the body beside `error` and `field` (a declined
    /// deadline job's `admission`).
    pub detail: Option<serde_json::Value>,
}

impl ApiError {
    /// 400: bad input in `field`.
    pub fn bad(field: &str, message: String) -> Self {
        ApiError {
            status: 400,
            field: field.to_string(),
            message,
            detail: None,
        }
    }
    pub fn with_status(status: u16, field: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            field: field.to_string(),
            message: message.into(),
            detail: None,
        }
    }
    pub fn not_found(field: &str, message: impl Into<String>) -> Self {
        Self::with_status(404, field, message)
    }
    pub fn conflict(field: &str, message: impl Into<String>) -> Self {
        Self::with_status(409, field, message)
    }
    pub fn unauthorized() -> Self {
        Self::with_status(401, "authorization", "missing or wrong bearer token")
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::with_status(500, "server", message)
    }
}

impl From<ServeError> for ApiError {
    fn from(e: ServeError) -> Self {
        ApiError::internal(e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = serde_json::json!({ "error": self.message, "field": self.field });
        if let Some(serde_json::Value::Object(more)) = self.detail {
            body.as_object_mut()
                .expect("built as an object")
                .extend(more);
        }
        (status, axum::Json(body)).into_response()
    }
}

/// A failure of the service (state database, executor, I/O).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("state database: {0}")]
    Db(#[from] redb::Error),
    #[error("state record {key}: {source}")]
    Record {
        key: String,
        source: serde_json::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("executor: {0}")]
    Exec(String),
    /// The state database cannot be read (damaged, truncated, not a redb file).
    #[error("state database {}: cannot be opened ({detail}). If the file is damaged, move it aside and start again: `mv {} {}.corrupt` (the service then starts with no jobs: the ones it held are forgotten; their logs stay in the state directory, and runs still alive keep running unmanaged until you stop them)", path.display(), path.display(), path.display())]
    Corrupt {
        path: std::path::PathBuf,
        detail: String,
    },
}

impl ServeError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        ServeError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Converts any redb error into [`ServeError::Db`].
pub fn db<E: Into<redb::Error>>(e: E) -> ServeError {
    ServeError::Db(e.into())
}
