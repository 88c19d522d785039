//! JSON errors with stable codes.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mcptask_client::TrackerError;
use serde_json::json;

/// An API error: HTTP status, stable machine code, human message.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Option<serde_json::Value>,
    /// Seconds a client should wait before trying again (`Retry-After`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or unknown API token: send Authorization: Bearer <token>",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"error": {"code": self.code, "message": self.message}});
        if let Some(d) = self.details {
            body["error"]["details"] = d;
        }
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

impl From<TrackerError> for ApiError {
    fn from(e: TrackerError) -> Self {
        let message = e.to_string();
        match e {
            TrackerError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", message),
            TrackerError::InvalidInput(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
            }
            TrackerError::AnswerRejected {
                ref key,
                ref field,
                ref reason,
            } => ApiError {
                details: Some(json!({"key": key, "field": field, "reason": reason})),
                ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_answer", message)
            },
            TrackerError::UnknownServer(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "unknown_server", message)
            }
            TrackerError::Remote(data) => ApiError {
                details: Some(
                    json!({"code": data.code.0, "message": data.message, "data": data.data}),
                ),
                ..ApiError::new(StatusCode::BAD_GATEWAY, "remote_error", message)
            },
            TrackerError::Unavailable(_) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "unavailable", message)
            }
            TrackerError::Busy(_) => ApiError {
                retry_after: Some(1),
                ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", message)
            },
            TrackerError::AlreadyTracked(_) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "protocol_error", message)
            }
            TrackerError::Protocol(_) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "protocol_error", message)
            }
            TrackerError::InputNeeded {
                requests,
                request_state,
                ..
            } => ApiError {
                details: Some(json!({"inputRequests": requests, "requestState": request_state})),
                ..ApiError::new(StatusCode::CONFLICT, "input_needed", message)
            },
            TrackerError::Timeout(_) => {
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, "timeout", message)
            }
            TrackerError::ShuttingDown => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", message)
            }
            // The driver's text names tables, constraints and file paths:
            // it goes to the log, never to the client.
            TrackerError::Store(e) => {
                tracing::warn!(error = %e, "API request failed in the task store");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "the task store is unavailable or busy; retry later",
                )
            }
            // `TrackerError` is non-exhaustive: a kind added later is an
            // internal error until it is given its own code here.
            _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message),
        }
    }
}

/// JSON body extraction whose failures are API errors (400 / 413 / 415).
pub struct JsonBody<T>(pub T);

impl<S, T> axum::extract::FromRequest<S> for JsonBody<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        use axum::extract::rejection::JsonRejection;
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(JsonBody(v)),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send Content-Type: application/json",
            )),
            Err(JsonRejection::BytesRejection(e))
                if e.status() == StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    "the request body is larger than [api] max_body_bytes",
                ))
            }
            Err(e) => Err(ApiError::bad_request(format!(
                "invalid JSON body: {}",
                e.body_text()
            ))),
        }
    }
}

impl From<crate::auth::NotAllowed> for ApiError {
    fn from(e: crate::auth::NotAllowed) -> Self {
        ApiError::forbidden(e.0)
    }
}

impl From<crate::calls::CallError> for ApiError {
    fn from(e: crate::calls::CallError) -> Self {
        use mcptask_server::TaskError;
        match e {
            crate::calls::CallError::Tracker(e) => e.into(),
            crate::calls::CallError::Busy(busy) => ApiError {
                // 0 once a held refusal has waited its time out.
                retry_after: Some(((busy.retry_after_ms + 999) / 1000).max(0) as u64),
                details: Some(json!({"retryAfterMs": busy.retry_after_ms})),
                ..ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    busy.to_string(),
                )
            },
            e @ crate::calls::CallError::UnknownTool { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "unknown_tool", e.to_string())
            }
            crate::calls::CallError::Runtime(TaskError::Overloaded(why)) => ApiError {
                retry_after: Some(1),
                ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", why)
            },
            crate::calls::CallError::Runtime(TaskError::InvalidParams(why)) => {
                ApiError::bad_request(why)
            }
            crate::calls::CallError::Runtime(other) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                other.to_string(),
            ),
        }
    }
}
