//! The crate's error type: every failure a request, the engine or the server can meet.

use std::time::Duration;

use sluice_llm::LlmError;

/// Errors of the serving stack. Request errors carry the HTTP status and the OpenAI
/// error `type` / `code` they are answered with.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The request is malformed or asks for something impossible (HTTP 400).
    #[error("{message}")]
    BadRequest {
        /// What is wrong, with the numbers.
        message: String,
        /// OpenAI-style machine-readable code.
        code: &'static str,
    },
    /// Missing or wrong bearer token (HTTP 401).
    #[error("invalid API key: send `Authorization: Bearer <key>`")]
    Unauthorized,
    /// Too many requests are queued (HTTP 429).
    #[error("server busy: {queued} requests queued (limit {limit}); retry later")]
    QueueFull {
        /// Requests waiting now.
        queued: usize,
        /// The queue limit.
        limit: usize,
    },
    /// The server is shutting down or its engine stopped (HTTP 503).
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// The request ran past its deadline (HTTP 504 before any output, an error event after).
    #[error("request timed out after {:.1} s", .0.as_secs_f64())]
    Timeout(Duration),
    /// The model failed while running this sequence (HTTP 500).
    #[error("model error: {0}")]
    Model(String),
    /// Loading the model or another model-library failure.
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// A runtime failure (device creation, GPU).
    #[error(transparent)]
    Gpu(#[from] sluice::Error),
    /// Socket or file I/O.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: String,
        /// The cause.
        source: std::io::Error,
    },
    /// An HTTP exchange failed (client side: load generator, tests).
    #[error("http: {0}")]
    Http(String),
}

impl ServeError {
    /// A 400 with code `invalid_request`.
    pub fn bad_request(message: impl Into<String>) -> ServeError {
        ServeError::BadRequest {
            message: message.into(),
            code: "invalid_request",
        }
    }

    /// An I/O error with what was being done.
    pub fn io(op: impl Into<String>, source: std::io::Error) -> ServeError {
        ServeError::Io {
            op: op.into(),
            source,
        }
    }

    /// HTTP status code this error is answered with.
    pub fn status(&self) -> u16 {
        match self {
            ServeError::BadRequest { .. } => 400,
            ServeError::Unauthorized => 401,
            ServeError::QueueFull { .. } => 429,
            ServeError::Unavailable(_) => 503,
            ServeError::Timeout(_) => 504,
            _ => 500,
        }
    }

    /// OpenAI error `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            ServeError::BadRequest { .. } => "invalid_request_error",
            ServeError::Unauthorized => "authentication_error",
            ServeError::QueueFull { .. } => "rate_limit_error",
            ServeError::Unavailable(_) => "service_unavailable",
            ServeError::Timeout(_) => "timeout",
            _ => "server_error",
        }
    }

    /// OpenAI error `code`.
    pub fn code(&self) -> &'static str {
        match self {
            ServeError::BadRequest { code, .. } => code,
            ServeError::Unauthorized => "invalid_api_key",
            ServeError::QueueFull { .. } => "queue_full",
            ServeError::Unavailable(_) => "unavailable",
            ServeError::Timeout(_) => "timeout",
            _ => "internal_error",
        }
    }

    /// The OpenAI error body `{"error": {"message", "type", "code", "param"}}`.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.to_string(),
                "type": self.kind(),
                "param": null,
                "code": self.code(),
            }
        })
    }
}

/// Result with [`ServeError`].
pub type Result<T, E = ServeError> = std::result::Result<T, E>;
