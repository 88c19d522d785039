//! Fair limits: one principal's flood is refused at once with
//! `Retry-After`, and every call of another principal goes through.

use std::time::Duration;

use mcptask_gateway::{Config, Gateway};
use serde_json::{Value, json};

const FLOOD: &str = "flood-token-0123456789";
const CALM: &str = "calm-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_is_refused_with_retry_after_and_the_other_principals_calls_all_pass() {
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
            [limits]
            per_principal_rate = 5
            per_principal_burst = 5
            per_principal_in_flight = 4
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
        assert!((1..=2).contains(&seconds), "Retry-After {seconds}");
    }
    let body: Value = flood
        .into_iter()
        .find(|r| r.status() == 429)
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert!(body["error"]["details"]["retryAfterMs"].as_i64().unwrap() > 0);
}
