//! The fixture of the authorization tests: a local issuer that serves its
//! metadata and keys and signs tokens (and can be made to hang), and a
//! gateway in this process, with the demo server behind its front, that
//! trusts it.

use std::sync::{Arc, Mutex};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcptask_gateway::{Config, Gateway};
use serde_json::{Value, json};

pub const OPERATOR: &str = "operator-token-0123456789";

/// A signing key of the test issuer: PEM fixtures generated once with
/// `openssl genpkey` (test-only keys).
pub struct Key {
    pub alg: Algorithm,
    pub encoding: EncodingKey,
    pub jwk: Jwk,
}

pub fn key(kid: &'static str, alg: Algorithm) -> Key {
    let (file, encoding) = match alg {
        Algorithm::RS256 => {
            let pem = std::fs::read(keys_dir().join(format!("rsa-{kid}.pem"))).unwrap();
            ("rsa", EncodingKey::from_rsa_pem(&pem).unwrap())
        }
        Algorithm::ES256 => {
            let pem = std::fs::read(keys_dir().join(format!("ec-{kid}.pem"))).unwrap();
            ("ec", EncodingKey::from_ec_pem(&pem).unwrap())
        }
        Algorithm::EdDSA => {
            let pem = std::fs::read(keys_dir().join(format!("ed-{kid}.pem"))).unwrap();
            ("ed", EncodingKey::from_ed_pem(&pem).unwrap())
        }
        other => panic!("no test key for {other:?}"),
    };
    let mut jwk = Jwk::from_encoding_key(&encoding, alg).unwrap();
    jwk.common.key_id = Some(format!("{file}-{kid}"));
    Key { alg, encoding, jwk }
}

pub fn keys_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/keys")
}

/// A local authorization server: metadata, a rotatable key set, tokens.
pub struct Issuer {
    pub base: String,
    pub published: Arc<Mutex<Vec<Jwk>>>,
    /// While set, it accepts connections and never answers.
    hang: Arc<std::sync::atomic::AtomicBool>,
    /// The requests it was sent (metadata and keys).
    pub requests: Arc<std::sync::atomic::AtomicUsize>,
}

impl Issuer {
    pub async fn start() -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let published: Arc<Mutex<Vec<Jwk>>> = Arc::default();
        let hang: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let requests: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let meta = json!({"issuer": base, "jwks_uri": format!("{base}/jwks"),
            "authorization_endpoint": format!("{base}/authorize"), "token_endpoint": format!("{base}/token"),
            "response_types_supported": ["code"]});
        let keys = published.clone();
        let app = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(move || {
                    let meta = meta.clone();
                    async move { axum::Json(meta) }
                }),
            )
            .route(
                "/jwks",
                axum::routing::get(move || {
                    let set = JwkSet {
                        keys: keys.lock().unwrap().clone(),
                    };
                    async move { axum::Json(set) }
                }),
            )
            .layer(axum::middleware::from_fn({
                let hang = hang.clone();
                let requests = requests.clone();
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let hang = hang.load(std::sync::atomic::Ordering::SeqCst);
                    requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async move {
                        if hang {
                            std::future::pending::<()>().await;
                        }
                        next.run(request).await
                    }
                }
            }));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Issuer {
            base,
            published,
            hang,
            requests,
        }
    }

    /// From now on, accept connections and never answer (or answer again).
    pub fn set_hanging(&self, hang: bool) {
        self.hang.store(hang, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn publish(&self, key: &Key) {
        self.published.lock().unwrap().push(key.jwk.clone());
    }

    pub fn withdraw(&self, key: &Key) {
        self.published
            .lock()
            .unwrap()
            .retain(|k| k.common.key_id != key.jwk.common.key_id);
    }

    /// A token signed with `key`, with these claims over sensible defaults.
    pub fn token(&self, key: &Key, audience: &str, claims: Value) -> String {
        let now = jsonwebtoken::get_current_timestamp();
        let mut all = json!({"iss": self.base, "aud": audience, "sub": "alice",
            "scope": "mcp", "iat": now, "nbf": now - 5, "exp": now + 300});
        for (k, v) in claims.as_object().unwrap() {
            all[k] = v.clone();
        }
        let mut header = Header::new(key.alg);
        header.kid = key.jwk.common.key_id.clone();
        jsonwebtoken::encode(&header, &all, &key.encoding).unwrap()
    }
}

/// A gateway (API and front) on a fresh SQLite file, with the demo server
/// (in this process) behind its front and `issuer` trusted.
pub struct Setup {
    pub base: String,
    pub resource: String,
    pub gateway: Gateway,
    _dirs: Vec<tempfile::TempDir>,
}

pub async fn setup(issuer: &Issuer) -> Setup {
    setup_with(issuer, "").await
}

/// [`setup`] with more TOML (e.g. `[[policy]]` rules).
pub async fn setup_with(issuer: &Issuer, extra: &str) -> Setup {
    let demo_dir = tempfile::tempdir().unwrap();
    let options = mcptask_demo::DemoServerOptions::new(format!(
        "sqlite:{}",
        demo_dir.path().join("demo.db").display()
    ));
    let runtime = mcptask_demo::start_runtime(&options).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let app = mcptask_demo::router(runtime, &options, stop);
    let demo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let demo_url = format!("http://{}/mcp", demo.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(demo, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let config = Config::parse(
        "(test)",
        &format!(
            r#"
            [database]
            url = "sqlite:{db}"
            [api]
            public_url = "{base}"
            [[api.tokens]]
            token = "{OPERATOR}"
            [[api.oauth]]
            issuer = "{issuer}"
            scopes = ["mcp"]
            operator_scope = "mcptask:admin"
            leeway_s = 5
            [proxy]
            enabled = true
            [[servers]]
            name = "demo"
            url = "{demo_url}"
            {extra}
            "#,
            db = dir.path().join("gw.db").display(),
            issuer = issuer.base,
        ),
    )
    .unwrap();
    let gateway = Gateway::start(config).await.unwrap();
    let serving = gateway.clone();
    tokio::spawn(async move { serving.serve(listener, None).await.unwrap() });
    Setup {
        resource: format!("{base}/mcp"),
        base,
        gateway,
        _dirs: vec![dir, demo_dir],
    }
}

pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub async fn get(url: &str, bearer: Option<&str>) -> reqwest::Response {
    let mut request = http().get(url);
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

pub fn challenge(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

pub fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |acc, b| (acc << 8) | *b as u32) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}
