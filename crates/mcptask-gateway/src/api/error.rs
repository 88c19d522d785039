//! JSON errors with stable codes.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mcptask_client::TrackerError;

use crate::failure::Failure;
use serde_json::json;

/// An API error: HTTP status, stable machine code, human message.
#[derive(Debug)]
pub struct ApiError {
    /// The response's HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code (`error.code`), what clients match on.
    pub code: &'static str,
    /// Human-readable explanation (`error.message`), already redacted.
    pub message: String,
    /// Structured context (`error.details`): the invalid field of an
    /// answer, an upstream's JSON-RPC error, an incident id.
    pub details: Option<serde_json::Value>,
    /// Seconds a client should wait before trying again (`Retry-After`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with no details and no `Retry-After`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 400 `bad_request`: the request itself is wrong.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404 `not_found`: "`what` not found".
    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    /// 403 `forbidden`: the caller may not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 401 `unauthorized`: no token, or one the gateway does not know.
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

/// A failure as REST renders it: its stable code, an HTTP status, the
/// caller's message (`crate::failure` decided both, and redacted).
impl From<Failure> for ApiError {
    fn from(f: Failure) -> Self {
        let status = match &f {
            Failure::BadRequest(_) | Failure::InvalidAnswer { .. } => StatusCode::BAD_REQUEST,
            Failure::TaskNotFound
            | Failure::NotFound(_)
            | Failure::UnknownServer(_)
            | Failure::UnknownTool { .. } => StatusCode::NOT_FOUND,
            Failure::Forbidden(_) => StatusCode::FORBIDDEN,
            Failure::Remote(_)
            | Failure::Protocol(_)
            | Failure::UpstreamRefused { .. }
            | Failure::Unreachable { .. } => StatusCode::BAD_GATEWAY,
            Failure::InputNeeded { .. } | Failure::Cancelled => StatusCode::CONFLICT,
            Failure::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Failure::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            Failure::MissingCapability => StatusCode::BAD_REQUEST,
            Failure::Busy(_) | Failure::NotReady(_) | Failure::ShuttingDown | Failure::Store(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Failure::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut error = ApiError::new(status, f.code(), f.message());
        match f {
            Failure::InvalidAnswer {
                key, field, reason, ..
            } => error.details = Some(json!({"key": key, "field": field, "reason": reason})),
            Failure::Remote(data) => {
                error.details =
                    Some(json!({"code": data.code.0, "message": data.message, "data": data.data}))
            }
            Failure::InputNeeded {
                requests,
                request_state,
                ..
            } => {
                error.details =
                    Some(json!({"inputRequests": requests, "requestState": request_state}))
            }
            Failure::RateLimited(busy) => {
                // 0 once a held refusal has waited its time out.
                error.retry_after = Some(((busy.retry_after_ms + 999) / 1000).max(0) as u64);
                error.details = Some(json!({
                    "limit": busy.limit.key(),
                    "retryAfterMs": busy.retry_after_ms,
                }));
            }
            Failure::Busy(_) => error.retry_after = Some(1),
            Failure::Unreachable { redacted: r, .. } | Failure::Store(r) | Failure::Internal(r) => {
                error.details = Some(json!({"incident": r.incident}))
            }
            _ => {}
        }
        error
    }
}

impl From<TrackerError> for ApiError {
    fn from(e: TrackerError) -> Self {
        Failure::from(e).into()
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
        Failure::from(e).into()
    }
}

impl From<crate::calls::CallError> for ApiError {
    fn from(e: crate::calls::CallError) -> Self {
        Failure::from(e).into()
    }
}
