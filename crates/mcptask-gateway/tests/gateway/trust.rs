//! What no request can forge: the audience tokens are checked against is
//! configuration (never the `Host` or forwarded headers), a session belongs
//! to the caller that opened it, and an issuer that hangs cannot stall the
//! refusals of tokens whose keys are unknown.

use std::time::{Duration, Instant};

use jsonwebtoken::Algorithm;
use serde_json::{Value, json};

use super::issuer::*;

/// A token the same issuer minted for another resource, presented with
/// that resource's name in `Host` (and in the forwarded headers), is
/// refused at every face; the metadata names this gateway whatever the
/// request says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_for_another_resource_is_refused_at_every_face_whatever_the_host() {
    let issuer = Issuer::start().await;
    let rsa = key("a", Algorithm::RS256);
    issuer.publish(&rsa);
    let s = setup(&issuer).await;
    let other = "http://rs-other.example/mcp";
    let foreign = issuer.token(&rsa, other, json!({}));
    let foreign_admin = issuer.token(&rsa, other, json!({"scope": "mcp mcptask:admin"}));
    let forge = |request: reqwest::RequestBuilder| {
        request
            .header("host", "rs-other.example")
            .header("x-forwarded-host", "rs-other.example")
            .header("x-forwarded-proto", "http")
            .header("forwarded", "host=rs-other.example;proto=http")
    };
    let faces = |token: String| {
        let base = s.base.clone();
        let mcp = s.resource.clone();
        vec![
            ("GET /api/v1/tasks", http().get(format!("{base}/api/v1/tasks")).bearer_auth(&token)),
            (
                "POST /api/v1/calls",
                http()
                    .post(format!("{base}/api/v1/calls"))
                    .bearer_auth(&token)
                    .json(&json!({"server": "demo", "tool": "greet", "arguments": {"name": "x"}})),
            ),
            ("GET /metrics", http().get(format!("{base}/metrics")).bearer_auth(&token)),
            ("GET /api/v1/events", http().get(format!("{base}/api/v1/events")).bearer_auth(&token)),
            (
                "GET /api/v1/events?access_token",
                http().get(format!("{base}/api/v1/events?access_token={token}")),
            ),
            (
                "POST /mcp",
                http()
                    .post(mcp)
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-protocol-version", "2026-07-28")
                    .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}).to_string()),
            ),
        ]
    };
    for token in [foreign, foreign_admin] {
        for (face, request) in faces(token) {
            let response = forge(request).send().await.unwrap();
            assert_eq!(response.status(), 401, "{face}");
            let www = challenge(&response);
            // The challenge names this gateway's metadata, not the Host's.
            assert!(
                www.contains(&format!(
                    "{}/.well-known/oauth-protected-resource/mcp",
                    s.base
                )),
                "{face}: {www}"
            );
            assert!(!www.contains("rs-other"), "{face}: {www}");
        }
    }
    // The metadata ignores the Host too.
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let metadata: Value = forge(http().get(format!("{}{path}", s.base)))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(metadata["resource"], s.resource, "{path}");
    }
    // And this resource's own token does not depend on the Host either.
    let own = issuer.token(&rsa, &s.resource, json!({}));
    let response = forge(
        http()
            .get(format!("{}/api/v1/tasks", s.base))
            .bearer_auth(&own),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
}

/// A JSON-RPC answer, sent as JSON or as the data of an SSE event.
fn rpc_body(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| {
        let data = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .find(|d| d.starts_with('{'))
            .unwrap_or_else(|| panic!("no JSON-RPC message in {text:?}"));
        serde_json::from_str(data).unwrap()
    })
}

/// A legacy session at `/mcp`, opened by alice.
struct Session {
    url: String,
    id: String,
}

fn post(url: &str, token: &str, session: Option<&str>, body: Value) -> reqwest::RequestBuilder {
    let mut request = http()
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string());
    if let Some(id) = session {
        request = request.header("mcp-session-id", id);
    }
    request
}

impl Session {
    async fn open(url: &str, token: &str) -> Session {
        let init = post(
            url,
            token,
            None,
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "trust-test", "version": "1"}}}),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(init.status(), 200);
        let id = init
            .headers()
            .get("mcp-session-id")
            .expect("a legacy session")
            .to_str()
            .unwrap()
            .to_string();
        let initialized = post(
            url,
            token,
            Some(&id),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .send()
        .await
        .unwrap();
        assert!(initialized.status().is_success(), "{initialized:?}");
        Session {
            url: url.to_string(),
            id,
        }
    }

    async fn list_tools(&self, token: &str) -> reqwest::Response {
        post(
            &self.url,
            token,
            Some(&self.id),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .send()
        .await
        .unwrap()
    }
}

/// Bob, holding alice's session id, gets what an unknown id gets, for every
/// use of it (a request, its SSE stream, its deletion), and alice's session
/// goes on working; alice's own DELETE ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principal_cannot_use_or_end_a_session() {
    let issuer = Issuer::start().await;
    let s = setup_with(
        &issuer,
        r#"
        [[api.tokens]]
        token = "alice-token-0123456789"
        principal = "alice"
        [[api.tokens]]
        token = "bob-token-0123456789"
        principal = "bob"
        "#,
    )
    .await;
    let (alice, bob) = ("alice-token-0123456789", "bob-token-0123456789");
    let session = Session::open(&s.resource, alice).await;
    let listed = session.list_tools(alice).await;
    assert_eq!(listed.status(), 200);
    let listed = rpc_body(&listed.text().await.unwrap());
    assert!(
        listed["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{listed}"
    );

    let unknown = Session {
        url: s.resource.clone(),
        id: "no-such-session".into(),
    };
    let unknown_answer = unknown.list_tools(bob).await;
    let (unknown_status, unknown_body) = (
        unknown_answer.status(),
        unknown_answer.text().await.unwrap(),
    );
    assert_eq!(unknown_status, 404);

    // Bob's request, stream and delete: the unknown id's answer, word for word.
    let request = session.list_tools(bob).await;
    assert_eq!(request.status(), unknown_status, "bob's request");
    assert_eq!(request.text().await.unwrap(), unknown_body);
    let stream = http()
        .get(&s.resource)
        .bearer_auth(bob)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session.id)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 404, "bob's SSE stream");
    let delete = http()
        .delete(&s.resource)
        .bearer_auth(bob)
        .header("mcp-session-id", &session.id)
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), 404, "bob's DELETE");
    // The operator's token is not alice's either.
    assert_eq!(
        session.list_tools(OPERATOR).await.status(),
        404,
        "the operator"
    );

    // Alice's session lives on.
    assert_eq!(session.list_tools(alice).await.status(), 200, "after bob");
    // Her own DELETE ends it.
    let delete = http()
        .delete(&s.resource)
        .bearer_auth(alice)
        .header("mcp-session-id", &session.id)
        .send()
        .await
        .unwrap();
    // 200, as the SDKs expect of a session ended (rmcp's own answer is 202).
    assert_eq!(delete.status(), 200, "{delete:?}");
    assert_eq!(session.list_tools(alice).await.status(), 404, "ended");
}

/// While the issuer accepts connections and never answers, a token with an
/// unknown key id is refused within the fetch's bound, ten at once sharing
/// one bounded fetch that reaches the issuer, and a token whose key is known
/// is answered while that fetch still hangs (it does not wait on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuer_that_hangs_cannot_stall_refusals() {
    /// The gateway's bound on a whole key fetch (`auth/keys.rs`
    /// `FETCH_DEADLINE`, 4 s; one request to the issuer is cut at 3 s).
    const FETCH_DEADLINE: Duration = Duration::from_secs(4);
    /// What a loaded two-core machine may add to ten requests' own time.
    const SLACK: Duration = Duration::from_secs(4);
    let issuer = Issuer::start().await;
    let rsa = key("a", Algorithm::RS256);
    let unknown = key("b", Algorithm::RS256);
    issuer.publish(&rsa);
    let s = setup(&issuer).await;
    let api = format!("{}/api/v1/tasks", s.base);
    let known = issuer.token(&rsa, &s.resource, json!({}));
    assert_eq!(get(&api, Some(&known)).await.status(), 200);
    let fetched = Instant::now();

    issuer.set_hanging(true);
    // Past the refetch spacing: an unknown key id makes the gateway ask the
    // issuer again, and the issuer hangs.
    tokio::time::sleep(
        Duration::from_secs(10).saturating_sub(fetched.elapsed()) + Duration::from_millis(200),
    )
    .await;
    let asked = || issuer.requests.load(std::sync::atomic::Ordering::SeqCst);
    let before = asked();
    let forged = issuer.token(&unknown, &s.resource, json!({}));
    let started = Instant::now();
    let refusals = tokio::spawn(futures::future::join_all((0..10).map(|_| {
        let (api, forged) = (api.clone(), forged.clone());
        async move {
            let response = get(&api, Some(&forged)).await;
            (response.status(), started.elapsed())
        }
    })));

    // The fetch reaches the hanging issuer (the refusals will wait out a
    // bounded fetch rather than being answered without asking) ...
    while asked() == before {
        assert!(
            started.elapsed() < FETCH_DEADLINE + SLACK,
            "no request reached the issuer"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // ... and while it hangs, a known key is served from the cache (a
    // token not seen before, so that its key is looked up).
    let known_again = issuer.token(&rsa, &s.resource, json!({"jti": "second"}));
    assert_eq!(get(&api, Some(&known_again)).await.status(), 200);
    let known_took = started.elapsed();

    let refusals = refusals.await.expect("the refusals");
    for (status, took) in &refusals {
        assert_eq!(*status, 401);
        assert!(*took < FETCH_DEADLINE + SLACK, "refused after {took:?}");
    }
    // The refusals waited out the hanging request (cut at 3 s); the known
    // key did not wait for it: answered well before the first refusal.
    let first_refusal = refusals.iter().map(|(_, took)| *took).min().unwrap();
    assert!(
        known_took + Duration::from_secs(1) < first_refusal,
        "the known key's request waited for the hanging fetch: answered after {known_took:?}, the first refusal after {first_refusal:?}"
    );
    // One fetch in flight for all ten: the key set is asked once (with the
    // metadata, read before, kept), at most twice were the metadata asked
    // again.
    let asked = asked() - before;
    assert!(
        (1..=2).contains(&asked),
        "{asked} requests to the hanging issuer for one fetch (expected 1 or 2)"
    );
}

/// With static tokens only, a refused token says so (RFC 6750
/// `error="invalid_token"`), so a host tells its user the token is wrong
/// instead of starting an OAuth login; no `resource_metadata` points at
/// metadata that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_static_token_is_told_it_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let config = mcptask_gateway::Config::parse(
        "(test)",
        &format!(
            "[database]\nurl = \"sqlite:{}\"\n[api]\npublic_url = \"https://gw.example.test\"\n[[api.tokens]]\ntoken = \"{OPERATOR}\"\n[proxy]\nenabled = true\n",
            dir.path().join("gw.db").display()
        ),
    )
    .unwrap();
    let gateway = mcptask_gateway::Gateway::start(config).await.unwrap();
    let serving = gateway.clone();
    tokio::spawn(async move { serving.serve(listener, None).await.unwrap() });
    for path in ["/api/v1/tasks", "/mcp"] {
        let url = format!("{base}{path}");
        let wrong = get(&url, Some("not-the-token-0123456789")).await;
        assert_eq!(wrong.status(), 401, "{path}");
        let www = challenge(&wrong);
        assert!(
            www.starts_with("Bearer error=\"invalid_token\""),
            "{path}: {www}"
        );
        assert!(!www.contains("resource_metadata"), "{path}: {www}");
        let missing = get(&url, None).await;
        assert_eq!(missing.status(), 401, "{path}");
        assert_eq!(challenge(&missing), "Bearer", "{path}");
    }
    assert_eq!(
        get(
            &format!("{base}/.well-known/oauth-protected-resource"),
            None
        )
        .await
        .status(),
        404
    );
}
