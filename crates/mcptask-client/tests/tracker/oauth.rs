//! OAuth to an upstream server, end to end against a real protected MCP
//! task server (mcptask-server over Streamable HTTP) with its own
//! authorization server, both in process: the token is obtained on the
//! server's 401, kept sealed in the tracker's database, refreshed before it
//! expires (time is a `ManualClock`), shared with another replica, and a
//! tracked task keeps being polled across token rotations; a failing
//! refresh marks the server unhealthy with its reason until it works again.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use mcptask_client::oauth::{OAuthRuntime, OAuthSettings, SecretKey};
use mcptask_client::remote::Timeouts;
use mcptask_client::{CallOptions, CallOutcome, ServerDef, ServerRegistry, Tracker, TrackerConfig};
use mcptask_core::{ManualClock, TaskStatus};
use mcptask_server::{DurableTaskServer, RuntimeConfig, TaskRuntime};
use mcptask_testkit::TestDatabase;
use mcptask_testkit::fixtures::client::*;
use mcptask_testkit::tracker::fast_config;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;

const T0: i64 = 1_700_000_000_000;
/// Token lifetime the authorization server grants.
const LIFETIME_S: i64 = 600;

/// The authorization server and the resource's view of valid tokens.
#[derive(Default)]
struct Auth {
    base: Mutex<String>,
    valid: Mutex<HashSet<String>>,
    issued: AtomicUsize,
    /// 401s the resource answered.
    refused: AtomicUsize,
    /// The token endpoint fails while set.
    down: AtomicBool,
}

type Shared = Arc<Auth>;

async fn as_metadata(State(auth): State<Shared>) -> Response {
    let base = auth.base.lock().unwrap().clone();
    axum::Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["client_credentials"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
    }))
    .into_response()
}

async fn resource_metadata(State(auth): State<Shared>) -> Response {
    let base = auth.base.lock().unwrap().clone();
    axum::Json(json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": [base],
        "scopes_supported": ["tasks"],
    }))
    .into_response()
}

/// client_credentials for svc:s3cret; each new token replaces the old ones
/// (a rotation: an old token is refused from then on).
async fn token(State(auth): State<Shared>, request: Request) -> Response {
    let basic = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
        .map(|v| String::from_utf8_lossy(&v).to_string());
    let body = axum::body::to_bytes(request.into_body(), 64 * 1024)
        .await
        .unwrap();
    let form: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    let field = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    if auth.down.load(Ordering::SeqCst) {
        return (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(
                json!({"error": "temporarily_unavailable", "error_description": "maintenance"}),
            ),
        )
            .into_response();
    }
    if basic.as_deref() != Some("svc:s3cret")
        || field("grant_type").as_deref() != Some("client_credentials")
        || field("resource").is_none()
    {
        return (
            axum::http::StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    let n = auth.issued.fetch_add(1, Ordering::SeqCst) + 1;
    let token = format!("secret-access-token-{n}");
    {
        let mut valid = auth.valid.lock().unwrap();
        valid.clear();
        valid.insert(token.clone());
    }
    axum::Json(json!({
        "access_token": token,
        "token_type": "Bearer",
        "expires_in": LIFETIME_S,
        "scope": "tasks",
    }))
    .into_response()
}

async fn require_bearer(State(auth): State<Shared>, request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let ok = token.is_some_and(|t| auth.valid.lock().unwrap().contains(&t));
    if ok {
        return next.run(request).await;
    }
    auth.refused.fetch_add(1, Ordering::SeqCst);
    let base = auth.base.lock().unwrap().clone();
    let mut response = (
        axum::http::StatusCode::UNAUTHORIZED,
        axum::Json(json!({"error": "invalid_token"})),
    )
        .into_response();
    response.headers_mut().insert(
        "www-authenticate",
        format!(
            "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\", scope=\"tasks\""
        )
        .parse()
        .unwrap(),
    );
    response
}

/// A task server whose /mcp needs a token, with its authorization server on
/// the same origin.
struct Protected {
    auth: Shared,
    url: String,
    _runtime: TaskRuntime,
    _dir: tempfile::TempDir,
}

impl Protected {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = mcptask_sql::open(&format!(
            "sqlite:{}",
            dir.path().join("server.db").display()
        ))
        .await
        .unwrap();
        let runtime = TaskRuntime::builder(store.server_tasks(), tools())
            .config(RuntimeConfig {
                default_poll_interval_ms: 50,
                lease_ms: 1_000,
                ..Default::default()
            })
            .start()
            .await
            .unwrap();
        let handler = DurableTaskServer::new(runtime.clone());
        let service = StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default().with_json_response(true),
        );
        let auth: Shared = Arc::default();
        let mcp = axum::Router::new().nest_service("/mcp", service).layer(
            axum::middleware::from_fn_with_state(auth.clone(), require_bearer),
        );
        let app = axum::Router::new()
            .route("/.well-known/oauth-authorization-server", get(as_metadata))
            .route(
                "/.well-known/oauth-protected-resource/mcp",
                get(resource_metadata),
            )
            .route("/token", post(token))
            .with_state(auth.clone())
            .merge(mcp);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        *auth.base.lock().unwrap() = base.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Protected {
            auth,
            url: format!("{base}/mcp"),
            _runtime: runtime,
            _dir: dir,
        }
    }

    fn issued(&self) -> usize {
        self.auth.issued.load(Ordering::SeqCst)
    }

    fn refused(&self) -> usize {
        self.auth.refused.load(Ordering::SeqCst)
    }

    fn def(&self, runtime: &OAuthRuntime) -> ServerDef {
        ServerDef::http("remote", &self.url).with_oauth(
            OAuthSettings::client_credentials("svc", "s3cret").with_runtime(runtime.clone()),
        )
    }
}

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(10),
        call: Duration::from_secs(10),
    }
}

/// Every byte of the files in `dir` (the database, its WAL).
fn bytes_under(dir: &std::path::Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.path().is_file() {
            all.extend(std::fs::read(entry.path()).unwrap_or_default());
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_obtained_on_401_sealed_in_the_store_refreshed_before_expiry_and_shared() {
    let server = Protected::start().await;
    let db = TestDatabase::sqlite();
    let store = db.open().await;
    let clock = ManualClock::new(T0);
    let key = SecretKey::generate().unwrap();
    let runtime = OAuthRuntime::new(store.oauth_tokens(), key.clone(), Arc::new(clock.clone()));
    let registry = ServerRegistry::new();
    registry.upsert(server.def(&runtime));

    let connection = registry.connect("remote", None, timeouts()).await.unwrap();
    let tools = connection.peer.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "hold"));
    assert_eq!(server.issued(), 1, "one token, bought on the first 401");
    assert_eq!(server.refused(), 1);

    // Sealed at rest: the row is there, the token is not readable in any
    // file of the database.
    let row = store
        .oauth_tokens()
        .load_token("remote")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.expires_at_ms, Some(T0 + LIFETIME_S * 1000));
    assert_eq!(
        row.issuer.as_deref(),
        Some(server.url.trim_end_matches("/mcp"))
    );
    let path = db.url.trim_start_matches("sqlite:");
    let files = bytes_under(std::path::Path::new(path).parent().unwrap());
    assert!(
        contains(&files, "oauth_tokens"),
        "the table is in these files"
    );
    assert!(
        !contains(&files, "secret-access-token-1"),
        "the token is sealed"
    );
    assert!(!contains(&files, "s3cret"), "so is nothing else secret");
    let described = runtime.describe("remote").await.unwrap();
    assert!(
        described.starts_with("oauth: token valid until"),
        "{described}"
    );
    assert!(!described.contains("secret-access-token"), "{described}");

    // Still fresh: no new token.
    clock.advance((LIFETIME_S - 120) * 1000);
    connection.peer.list_all_tools().await.unwrap();
    assert_eq!(server.issued(), 1);
    // Within the refresh margin: a new token before the old one expires,
    // without a 401.
    clock.advance(90 * 1000);
    connection.peer.list_all_tools().await.unwrap();
    assert_eq!(server.issued(), 2, "refreshed ahead of expiry");
    assert_eq!(server.refused(), 1, "no request was refused for it");

    // Another replica on the same store uses the fresh token as it is.
    let other = OAuthRuntime::new(store.oauth_tokens(), key, Arc::new(clock.clone()));
    let replica = ServerRegistry::new();
    replica.upsert(server.def(&other));
    let c2 = replica.connect("remote", None, timeouts()).await.unwrap();
    c2.peer.list_all_tools().await.unwrap();
    assert_eq!(server.issued(), 2, "the replica bought no token");
    assert_eq!(server.refused(), 1, "and sent none that was refused");
}

/// Two replicas (an OAuth runtime and a server registry each, on `stores`)
/// connected to `server` with the one token the first bought (the
/// registries are returned to keep them alive).
async fn two_replicas(
    server: &Protected,
    stores: [Arc<dyn mcptask_core::store::OAuthTokenStore>; 2],
    clock: &ManualClock,
) -> ([mcptask_client::remote::Connection; 2], Vec<ServerRegistry>) {
    let key = SecretKey::generate().unwrap();
    let (mut connections, mut registries) = (Vec::new(), Vec::new());
    for store in stores {
        let runtime = OAuthRuntime::new(store, key.clone(), Arc::new(clock.clone()));
        let registry = ServerRegistry::new();
        registry.upsert(server.def(&runtime));
        let connection = registry.connect("remote", None, timeouts()).await.unwrap();
        connection.peer.list_all_tools().await.unwrap();
        connections.push(connection);
        registries.push(registry);
    }
    assert_eq!(server.issued(), 1);
    let connections = connections.try_into().unwrap_or_else(|_| unreachable!());
    (connections, registries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_refreshing_at_once_buy_one_token() {
    let server = Protected::start().await;
    let db = TestDatabase::sqlite();
    let store = db.open().await;
    let clock = ManualClock::new(T0);
    let ([first, second], _registries) = two_replicas(
        &server,
        [store.oauth_tokens(), store.oauth_tokens()],
        &clock,
    )
    .await;
    // Both find the token due at the same moment.
    clock.advance((LIFETIME_S - 10) * 1000);
    let (a, b) = tokio::join!(first.peer.list_all_tools(), second.peer.list_all_tools());
    a.unwrap();
    b.unwrap();
    assert_eq!(
        server.issued(),
        2,
        "one refresh, under the lease; the other replica read it"
    );
    assert_eq!(server.refused(), 1, "neither broke the other's token");
}

/// A token store that lets a peer replica finish a whole refresh between
/// this replica's read of the row and its bid for the refresh lease (the
/// window a loaded machine opens at random).
struct PeerFinishesFirst {
    store: Arc<dyn mcptask_core::store::OAuthTokenStore>,
    peer: Mutex<Option<futures::future::BoxFuture<'static, ()>>>,
}

#[async_trait::async_trait]
impl mcptask_core::store::OAuthTokenStore for PeerFinishesFirst {
    async fn load_token(
        &self,
        server: &str,
    ) -> Result<Option<mcptask_core::oauth::StoredToken>, mcptask_core::StoreError> {
        self.store.load_token(server).await
    }
    async fn save_token(
        &self,
        token: &mcptask_core::oauth::NewToken,
        now: i64,
    ) -> Result<i64, mcptask_core::StoreError> {
        self.store.save_token(token, now).await
    }
    async fn delete_token(&self, server: &str) -> Result<bool, mcptask_core::StoreError> {
        self.store.delete_token(server).await
    }
    async fn try_lease_refresh(
        &self,
        server: &str,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<bool, mcptask_core::StoreError> {
        let peer = self.peer.lock().unwrap().take();
        if let Some(peer) = peer {
            peer.await;
        }
        self.store
            .try_lease_refresh(server, holder, now, until)
            .await
    }
    async fn release_refresh(
        &self,
        server: &str,
        holder: &str,
    ) -> Result<(), mcptask_core::StoreError> {
        self.store.release_refresh(server, holder).await
    }
    async fn fail_refresh(
        &self,
        server: &str,
        holder: &str,
        error: &str,
        now: i64,
    ) -> Result<(), mcptask_core::StoreError> {
        self.store.fail_refresh(server, holder, error, now).await
    }
}

/// Regression: a replica that read the row due, then found the lease free
/// because a peer had just refreshed and saved (saving frees the lease),
/// bought a second token with what it had read. It reads the row again once
/// it holds the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_wins_the_lease_after_a_peer_refreshed_uses_the_peers_token() {
    let server = Protected::start().await;
    let db = TestDatabase::sqlite();
    let store = db.open().await;
    let clock = ManualClock::new(T0);
    let racing = Arc::new(PeerFinishesFirst {
        store: store.oauth_tokens(),
        peer: Mutex::new(None),
    });
    let ([peer, late], _registries) =
        two_replicas(&server, [store.oauth_tokens(), racing.clone()], &clock).await;
    clock.advance((LIFETIME_S - 10) * 1000);
    // The late replica reads the row due; before it bids for the lease, the
    // peer refreshes and saves.
    let peer_peer = peer.peer.clone();
    *racing.peer.lock().unwrap() = Some(Box::pin(async move {
        peer_peer.list_all_tools().await.unwrap();
    }));
    late.peer.list_all_tools().await.unwrap();
    assert!(
        racing.peer.lock().unwrap().is_none(),
        "the peer refreshed first"
    );
    assert_eq!(server.issued(), 2, "the late replica used the peer's token");
    let row = store
        .oauth_tokens()
        .load_token("remote")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.lease_owner, None, "the unused lease was released");
}

async fn start_hold(tracker: &Tracker) -> String {
    match tracker
        .call_tool("remote", "hold", json!({}), CallOptions::default())
        .await
        .unwrap()
    {
        CallOutcome::Task(t) => t.id,
        CallOutcome::Completed(r) => panic!("hold completed synchronously: {r:?}"),
    }
}

async fn until_health(tracker: &Tracker, state: &str, what: &str) -> mcptask_client::Health {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let health = tracker.servers().health("remote").unwrap();
        if health.state == state {
            return health;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("the server never became {what}: {health:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracked_tasks_keep_polling_across_rotations_and_a_failed_refresh_is_unhealthy_until_it_works()
 {
    let server = Protected::start().await;
    let db = TestDatabase::sqlite();
    let store = db.open().await;
    let clock = ManualClock::new(T0);
    let runtime = OAuthRuntime::new(
        store.oauth_tokens(),
        SecretKey::generate().unwrap(),
        Arc::new(clock.clone()),
    );
    let def = server.def(&runtime);
    // A connect includes buying a token: give it more than fast_config's 2 s
    // on a loaded machine.
    let config = TrackerConfig {
        connect_timeout: Duration::from_secs(10),
        ..fast_config()
    };
    let tracker = Tracker::builder(store.remote_tasks())
        .server(def.clone())
        .config(config)
        .start()
        .await
        .unwrap();
    let first = start_hold(&tracker).await;
    let second = start_hold(&tracker).await;
    assert_eq!(server.issued(), 1);
    let hash = tracker.get(&first).await.unwrap().server_hash;
    assert_eq!(
        hash,
        ServerDef::http("remote", &server.url).hash(),
        "tokens are not the server's identity"
    );

    // The token expires; the server rotated it away. Polls go on with a new one.
    clock.advance(LIFETIME_S * 1000 + 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while server.issued() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "never refreshed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracker.cancel(&first).await.unwrap();
    until(&tracker, &first, "cancelled", |r| {
        r.status == TaskStatus::Cancelled
    })
    .await;

    // The authorization server fails: once the token expires, polls fail
    // with the reason and the server is unhealthy.
    server.auth.down.store(true, Ordering::SeqCst);
    clock.advance(LIFETIME_S * 1000 + 1);
    let health = until_health(&tracker, "error", "unhealthy").await;
    let reason = health.last_error.unwrap_or_default();
    assert!(
        reason.contains("refreshing the OAuth token of \"remote\" failed")
            && reason.contains("temporarily_unavailable"),
        "{reason}"
    );
    let row = store
        .oauth_tokens()
        .load_token("remote")
        .await
        .unwrap()
        .unwrap();
    assert!(
        row.last_error
            .unwrap_or_default()
            .contains("temporarily_unavailable")
    );
    // The task is still tracked, not failed.
    assert_eq!(
        tracker.get(&second).await.unwrap().status,
        TaskStatus::Working
    );

    // It works again: the next refresh succeeds and the server is healthy.
    server.auth.down.store(false, Ordering::SeqCst);
    clock.advance(10_000);
    until_health(&tracker, "ok", "healthy again").await;
    tracker.cancel(&second).await.unwrap();
    until(&tracker, &second, "cancelled", |r| {
        r.status == TaskStatus::Cancelled
    })
    .await;
    assert_eq!(server.issued(), 3);
    tracker.shutdown(Duration::from_secs(2)).await;
}
