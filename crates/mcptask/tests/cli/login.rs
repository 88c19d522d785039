//! `mcptask login SERVER` end to end: the binary prints the authorization
//! URL, a "browser" follows it to an in-process authorization server that
//! approves at once and redirects to the loopback callback, the code is
//! exchanged with PKCE, and the tokens land sealed in the configured
//! database, where the gateway's OAuth layer finds them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use serde_json::json;
use sha2::Digest as _;
use tokio::io::AsyncBufReadExt as _;

#[derive(Default)]
struct As {
    base: Mutex<String>,
    challenge: Mutex<Option<String>>,
    resource: Mutex<Option<String>>,
}

type Shared = Arc<As>;

async fn as_metadata(State(s): State<Shared>) -> Response {
    let base = s.base.lock().unwrap().clone();
    axum::Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "authorization_response_iss_parameter_supported": true,
    }))
    .into_response()
}

async fn resource_metadata(State(s): State<Shared>) -> Response {
    let base = s.base.lock().unwrap().clone();
    axum::Json(json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]}))
        .into_response()
}

/// Approves at once (the user said yes) and sends the browser back.
async fn authorize(
    State(s): State<Shared>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    assert_eq!(q.get("client_id").map(String::as_str), Some("cli"));
    assert_eq!(
        q.get("code_challenge_method").map(String::as_str),
        Some("S256")
    );
    *s.challenge.lock().unwrap() = q.get("code_challenge").cloned();
    *s.resource.lock().unwrap() = q.get("resource").cloned();
    let base = s.base.lock().unwrap().clone();
    let mut back = reqwest::Url::parse(&q["redirect_uri"]).unwrap();
    back.query_pairs_mut()
        .append_pair("code", "the-code")
        .append_pair("state", &q["state"])
        .append_pair("iss", &base);
    Redirect::to(back.as_str()).into_response()
}

async fn token(State(s): State<Shared>, body: String) -> Response {
    let form: std::collections::HashMap<String, String> = url_decode(&body).into_iter().collect();
    if form.get("grant_type").map(String::as_str) == Some("refresh_token") {
        let ok = form.get("refresh_token").map(String::as_str) == Some("login-refresh-token")
            && form.get("client_id").map(String::as_str) == Some("cli")
            && form.get("resource") == s.resource.lock().unwrap().as_ref();
        if !ok {
            return (
                axum::http::StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": "invalid_grant"})),
            )
                .into_response();
        }
        return axum::Json(json!({
            "access_token": "refreshed-access-token",
            "token_type": "Bearer",
            "expires_in": 3600,
        }))
        .into_response();
    }
    let verifier = form.get("code_verifier").cloned().unwrap_or_default();
    let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()));
    let ok = form.get("grant_type").map(String::as_str) == Some("authorization_code")
        && form.get("code").map(String::as_str) == Some("the-code")
        && s.challenge.lock().unwrap().as_deref() == Some(computed.as_str())
        && form.get("resource") == s.resource.lock().unwrap().as_ref();
    if !ok {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "invalid_grant"})),
        )
            .into_response();
    }
    axum::Json(json!({
        "access_token": "login-access-token",
        "refresh_token": "login-refresh-token",
        "token_type": "Bearer",
        "expires_in": 3600,
    }))
    .into_response()
}

fn url_decode(body: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_stores_sealed_tokens_that_the_gateway_uses() {
    let state: Shared = Arc::default();
    let app = axum::Router::new()
        .route("/.well-known/oauth-authorization-server", get(as_metadata))
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(resource_metadata),
        )
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    *state.base.lock().unwrap() = base.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let dir = tempfile::tempdir().unwrap();
    let key = mcptask_client::oauth::SecretKey::generate().unwrap();
    std::fs::write(dir.path().join("k.key"), key.to_base64()).unwrap();
    let db = format!("sqlite:{}", dir.path().join("gw.db").display());
    let config = dir.path().join("mcptask.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{db}\"\n[api]\nauth = \"none\"\n[oauth]\nsecret_key_file = \"k.key\"\n\n[[servers]]\nname = \"remote\"\nurl = \"{base}/mcp\"\n\n[servers.oauth]\ngrant = \"authorization_code\"\nclient_id = \"cli\"\n"
        ),
    )
    .unwrap();

    let port = free_port();
    let mut login = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcptask"))
        .args(["login", "remote", "--config"])
        .arg(&config)
        .args(["--callback-port", &port.to_string()])
        .env_remove("MCPTASK_SECRET_KEY")
        .env("MCPTASK_LOG", "warn")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(login.stderr.take().unwrap()).lines();
    let mut said = Vec::new();
    let url = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            said.push(line.clone());
            if let Some(url) = line.trim().strip_prefix(&format!("{base}/authorize")) {
                return format!("{base}/authorize{url}");
            }
        }
        panic!("login printed no authorization URL: {said:?}");
    })
    .await
    .expect("the authorization URL in time");
    assert!(
        url.contains(&format!(
            "redirect_uri=http%3A%2F%2F127.0.0.1%3A{port}%2Fcallback"
        )),
        "{url}"
    );

    // The browser: follow the URL to the callback.
    mcptask_client::tls::install_crypto_provider();
    let browser = reqwest::Client::new();
    let mut answered = None;
    for _ in 0..50 {
        match browser.get(&url).send().await {
            Ok(r) => {
                answered = Some(r);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let page = answered
        .expect("the callback answered")
        .text()
        .await
        .unwrap();
    assert!(page.contains("authorized"), "{page}");
    let rest = tokio::time::timeout(Duration::from_secs(30), async {
        let mut out = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            out.push(line);
        }
        out
    })
    .await
    .unwrap();
    let status = login.wait().await.unwrap();
    assert!(status.success(), "login failed: {rest:?}");
    assert!(
        rest.iter().any(
            |l| l.contains("logged in to \"remote\": oauth: token valid until")
                && l.contains("(refreshable)")
        ),
        "{rest:?}"
    );

    // Sealed in the database, readable with the key only.
    let files: Vec<u8> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("gw.db"))
        .flat_map(|e| std::fs::read(e.path()).unwrap())
        .collect();
    for secret in ["login-access-token", "login-refresh-token"] {
        assert!(
            !files.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{secret} is sealed"
        );
    }
    let store = mcptask_sql::open(&db).await.unwrap();
    let runtime = mcptask_client::oauth::OAuthRuntime::new(
        store.oauth_tokens(),
        key,
        Arc::new(mcptask_client::SystemClock),
    );
    let settings = mcptask_client::oauth::OAuthSettings {
        client_id: Some("cli".into()),
        ..mcptask_client::oauth::OAuthSettings::authorization_code()
    };
    let def = mcptask_client::ServerDef::http("remote", format!("{base}/mcp"));
    let auth = runtime.server("remote", &format!("{base}/mcp"), &def.hash(), &settings);
    assert_eq!(
        auth.bearer().await.unwrap().as_deref(),
        Some("login-access-token"),
        "the gateway sends the token login stored"
    );

    // Two hours later, another process refreshes it with the refresh token,
    // from what login stored alone (no discovery, no user).
    use mcptask_client::Clock as _;
    let later = mcptask_core::ManualClock::new(mcptask_client::SystemClock.now_ms() + 7_200_000);
    let key = mcptask_client::oauth::SecretKey::parse(
        &std::fs::read_to_string(dir.path().join("k.key")).unwrap(),
    )
    .unwrap();
    let runtime =
        mcptask_client::oauth::OAuthRuntime::new(store.oauth_tokens(), key, Arc::new(later));
    let auth = runtime.server("remote", &format!("{base}/mcp"), &def.hash(), &settings);
    assert_eq!(
        auth.bearer().await.unwrap().as_deref(),
        Some("refreshed-access-token"),
        "an expired token is refreshed before use"
    );
    let row = store
        .oauth_tokens()
        .load_token("remote")
        .await
        .unwrap()
        .unwrap();
    assert!(
        row.refreshable,
        "the refresh token is kept when none comes back"
    );

    // The gateway on this configuration says where the token stands, and
    // never shows it.
    let config = mcptask_gateway::config::Config::load(&config).unwrap();
    let gateway = mcptask_gateway::Gateway::start(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}", listener.local_addr().unwrap());
    let router = gateway.router(None);
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    let servers = browser
        .get(format!("{api}/api/v1/servers"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let view: serde_json::Value = serde_json::from_str(&servers).unwrap();
    let oauth = view["servers"][0]["oauth"].as_str().unwrap_or_default();
    assert!(oauth.starts_with("oauth: token valid until"), "{view:#}");
    for secret in ["access-token", "refresh-token"] {
        assert!(!servers.contains(secret), "{servers}");
    }
    gateway.stop();
    gateway.shutdown().await;
}
