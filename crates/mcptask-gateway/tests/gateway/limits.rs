//! Fair limits: one principal's flood is refused with `Retry-After` (each
//! refusal held a while, the time held taken off), and every call of
//! another principal goes through.

use std::time::Duration;

use mcptask_gateway::{Config, Gateway};
use serde_json::{Value, json};

const FLOOD: &str = "flood-token-0123456789";
const CALM: &str = "calm-token-0123456789";

/// A gateway before the demo server with `limits` (TOML) in force: its base
/// URL, and what must live as long as it.
async fn gateway(limits: &str) -> (String, Gateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let options = mcptask_demo::DemoServerOptions::new(format!(
        "sqlite:{}",
        dir.path().join("demo.db").display()
    ));
    let runtime = mcptask_demo::start_runtime(&options).await.unwrap();
    let app = mcptask_demo::router(runtime, &options, Default::default());
    let demo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let demo_url = format!("http://{}/mcp", demo.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(demo, app).await.unwrap() });

    let config = Config::parse(
        "(test)",
        &format!(
            r#"
            [database]
            url = "sqlite:{db}"
            [api]
            [[api.tokens]]
            token = "{FLOOD}"
            principal = "flood"
            [[api.tokens]]
            token = "{CALM}"
            principal = "calm"
            {limits}
            [[servers]]
            name = "demo"
            url = "{demo_url}"
            "#,
            db = dir.path().join("gw.db").display()
        ),
    )
    .unwrap();
    let gateway = Gateway::start(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let serving = gateway.clone();
    tokio::spawn(async move { serving.serve(listener, None).await.unwrap() });
    let _ = rustls::crypto::ring::default_provider().install_default();
    (base, gateway, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_is_refused_with_retry_after_and_the_other_principals_calls_all_pass() {
    let (base, _gateway, _dir) = gateway(
        "[limits]\nper_principal_rate = 5\nper_principal_burst = 5\nper_principal_in_flight = 4",
    )
    .await;
    let http = reqwest::Client::new();
    let call = move |token: &'static str| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            http.post(format!("{base}/api/v1/calls"))
                .bearer_auth(token)
                .json(&json!({"server": "demo", "tool": "greet", "arguments": {"name": "x"}}))
                .send()
                .await
                .unwrap()
        }
    };

    // The flood: 60 calls at once.
    let flood = tokio::spawn({
        let call = call.clone();
        async move { futures::future::join_all((0..60).map(|_| call(FLOOD))).await }
    });
    // Meanwhile the calm principal calls within its own budget.
    let mut calm = Vec::new();
    for _ in 0..4 {
        calm.push(call(CALM).await.status().as_u16());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let flood = flood.await.unwrap();
    assert_eq!(calm, [200; 4], "every call of the calm principal passes");
    let refused: Vec<&reqwest::Response> = flood.iter().filter(|r| r.status() == 429).collect();
    assert!(
        refused.len() >= 50,
        "{} of 60 flood calls refused",
        refused.len()
    );
    let passed = flood.iter().filter(|r| r.status() == 200).count();
    assert!(passed <= 6, "{passed} flood calls passed a burst of 5");
    for r in &refused {
        let seconds: u64 = r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        // Held about as long as it was told to wait: little or none left.
        assert!(seconds <= 2, "Retry-After {seconds}");
    }
    let body: Value = flood
        .into_iter()
        .find(|r| r.status() == 429)
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert!(body["error"]["details"]["retryAfterMs"].as_i64().unwrap() >= 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_the_limits_is_refused_before_its_body_is_read() {
    let (base, _gateway, _dir) =
        gateway("[limits]\nper_principal_rate = 0.05\nper_principal_burst = 1").await;
    let http = reqwest::Client::new();
    let post = |body: &'static str| {
        http.post(format!("{base}/api/v1/calls"))
            .bearer_auth(FLOOD)
            .header("Content-Type", "application/json")
            .body(body)
            .send()
    };
    let first = post(r#"{"server": "demo", "tool": "greet", "arguments": {"name": "x"}}"#)
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    // Within its limits this body would be a 400; over them it is never read.
    let refused = post("not json").await.unwrap();
    assert_eq!(refused.status(), 429);
    let seconds: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // Told 20 s, held 1 s of it.
    assert!((1..=20).contains(&seconds), "Retry-After {seconds}");
    let other = http
        .post(format!("{base}/api/v1/calls"))
        .bearer_auth(CALM)
        .header("Content-Type", "application/json")
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 400, "another principal's body is read");
}
