//! Errors as OpenAI's API answers them: an HTTP status and
//! `{"error": {"message", "type", "param", "code"}}`, the message naming the problem.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `server_error`, …
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// OpenAI's `code`: `context_length_exceeded`, `model_not_found`, …
    pub code: Option<&'static str>,
    /// Seconds a client should wait before retrying (429 and 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// 400: the request is malformed or a field is out of range.
    pub fn invalid(param: Option<&str>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_owned),
            code: None,
            retry_after: None,
        }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// 429 or 503 with Retry-After: the server cannot take the request now.
    pub fn unavailable(status: StatusCode, message: impl Into<String>, retry_after: u64) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind: match status {
                StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
                _ => "server_error",
            },
            param: None,
            code: None,
            retry_after: Some(retry_after),
        }
    }

    /// 500: the engine failed on this request.
    pub fn server(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
            retry_after: None,
        }
    }

    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message, "type": self.kind, "param": self.param, "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
