//! A local OAuth token endpoint (in the test process) that serves the token
//! exchange grant (RFC 8693): it authenticates its client with HTTP Basic,
//! exchanges a subject token for the token of the first unused entry given
//! for it (each entry serves one exchange: a subject exchanged as often as
//! it has entries is refused after, as a caller's token that expired),
//! refuses every other with `invalid_grant`, and records every request it
//! saw.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The client id the issuer knows the gateway by.
pub const EXCHANGE_CLIENT_ID: &str = "gateway";
/// Its secret.
pub const EXCHANGE_CLIENT_SECRET: &str = "gateway-secret-0123456789";

/// One token request as the issuer saw it (its form fields).
#[derive(Debug, Clone)]
pub struct SeenExchange {
    /// Every form field, by name.
    pub form: HashMap<String, String>,
    /// Whether the client authenticated as [`EXCHANGE_CLIENT_ID`].
    pub client_ok: bool,
}

#[derive(Default)]
struct IssuerState {
    /// (subject token, the token it is exchanged for), each used once.
    exchanges: Vec<(String, String)>,
    seen: Vec<SeenExchange>,
}

/// See the module docs.
pub struct TokenIssuer {
    /// `http://127.0.0.1:PORT/token`
    pub token_endpoint: String,
    state: Arc<Mutex<IssuerState>>,
    server: tokio::task::JoinHandle<()>,
}

impl TokenIssuer {
    /// Serve on a free port, exchanging each `(subject, exchanged)` entry
    /// once, in order.
    pub async fn start(exchanges: &[(&str, &str)]) -> Self {
        let state = Arc::new(Mutex::new(IssuerState {
            exchanges: exchanges
                .iter()
                .map(|(s, x)| (s.to_string(), x.to_string()))
                .collect(),
            ..Default::default()
        }));
        let app = axum::Router::new()
            .route("/token", axum::routing::post(token))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the token issuer");
        let addr = listener.local_addr().expect("issuer address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TokenIssuer {
            token_endpoint: format!("http://{addr}/token"),
            state,
            server,
        }
    }

    /// Every token request seen so far.
    pub fn seen(&self) -> Vec<SeenExchange> {
        self.state.lock().unwrap().seen.clone()
    }
}

impl Drop for TokenIssuer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn refuse(status: StatusCode, error: &str) -> Response {
    (status, axum::Json(json!({"error": error}))).into_response()
}

async fn token(
    State(state): State<Arc<Mutex<IssuerState>>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    use base64::Engine as _;
    let form: HashMap<String, String> = url::form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect();
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD
            .encode(format!("{EXCHANGE_CLIENT_ID}:{EXCHANGE_CLIENT_SECRET}"))
    );
    let client_ok = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(expected.as_str());
    let mut s = state.lock().unwrap();
    s.seen.push(SeenExchange {
        form: form.clone(),
        client_ok,
    });
    if !client_ok {
        return refuse(StatusCode::UNAUTHORIZED, "invalid_client");
    }
    if form.get("grant_type").map(String::as_str)
        != Some("urn:ietf:params:oauth:grant-type:token-exchange")
    {
        return refuse(StatusCode::BAD_REQUEST, "unsupported_grant_type");
    }
    let subject = form.get("subject_token").cloned().unwrap_or_default();
    match s.exchanges.iter().position(|(from, _)| *from == subject) {
        Some(entry) => {
            let (_, token) = s.exchanges.remove(entry);
            axum::Json(json!({
                "access_token": token,
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "token_type": "Bearer",
                "expires_in": 3600,
            }))
            .into_response()
        }
        None => refuse(StatusCode::BAD_REQUEST, "invalid_grant"),
    }
}
