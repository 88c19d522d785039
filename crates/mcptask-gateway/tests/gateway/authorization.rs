//! The gateway as an OAuth 2.1 resource server (MCP authorization): a local
//! issuer serves its metadata and keys and signs tokens; a gateway in this
//! process, with the demo server behind its front, accepts exactly the
//! tokens it should, at `/mcp` and in the API.

use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcptask_testkit::mcp::{Lifecycle, TestClient};
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

use super::issuer::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_finds_the_metadata_from_a_401_and_calls_with_a_token() {
    let issuer = Issuer::start().await;
    let rsa = key("a", Algorithm::RS256);
    issuer.publish(&rsa);
    let s = setup(&issuer).await;

    // No token: 401 naming where to learn more, and the scope to ask for.
    let refused = http()
        .post(&s.resource)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let www = challenge(&refused);
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", s.base);
    assert!(
        www.contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{www}"
    );
    assert!(www.contains("scope=\"mcp\""), "{www}");

    // The metadata names this resource and the issuer; the issuer's own
    // metadata names its keys.
    let metadata: Value = get(&metadata_url, None).await.json().await.unwrap();
    assert_eq!(metadata["resource"], s.resource);
    assert_eq!(metadata["authorization_servers"], json!([issuer.base]));
    assert_eq!(metadata["scopes_supported"], json!(["mcp"]));
    let server: Value = get(
        &format!(
            "{}/.well-known/oauth-authorization-server",
            metadata["authorization_servers"][0].as_str().unwrap()
        ),
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    assert!(server["jwks_uri"].is_string());

    // With a token for this resource, the front answers.
    let token = issuer.token(&rsa, &s.resource, json!({}));
    let client = TestClient::http(
        &s.resource,
        Some(&token),
        Lifecycle::Modern { tasks: false },
    )
    .await
    .expect("the front accepts the token");
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "demo__greet"), "{tools:?}");
    // And so does the API, as alice.
    let tasks = get(&format!("{}/api/v1/tasks", s.base), Some(&token)).await;
    assert_eq!(tasks.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_that_fail_a_check_are_refused_and_nothing_says_why() {
    let issuer = Issuer::start().await;
    let rsa = key("a", Algorithm::RS256);
    let other = key("b", Algorithm::RS256);
    let ec = key("a", Algorithm::ES256);
    let ed = key("a", Algorithm::EdDSA);
    for k in [&rsa, &ec, &ed] {
        issuer.publish(k);
    }
    let s = setup(&issuer).await;
    let api = format!("{}/api/v1/tasks", s.base);
    let now = jsonwebtoken::get_current_timestamp();

    // Every accepted algorithm family works.
    for k in [&rsa, &ec, &ed] {
        let token = issuer.token(k, &s.resource, json!({}));
        assert_eq!(get(&api, Some(&token)).await.status(), 200, "{:?}", k.alg);
    }

    let tampered = {
        let token = issuer.token(&rsa, &s.resource, json!({}));
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        let claims = json!({"iss": issuer.base, "aud": s.resource, "sub": "mallory",
            "scope": "mcp mcptask:admin", "exp": now + 300});
        parts[1] = base64_url(claims.to_string().as_bytes());
        parts.join(".")
    };
    let unsigned = format!(
        "{}.{}.",
        base64_url(br#"{"alg":"none","typ":"JWT"}"#),
        base64_url(
            json!({"iss": issuer.base, "aud": s.resource, "sub": "mallory", "scope": "mcp", "exp": now + 300})
                .to_string()
                .as_bytes()
        )
    );
    // The RSA public key, as an HMAC secret: the classic confusion.
    let hmac_confused = {
        let public = serde_json::to_vec(&rsa.jwk).unwrap();
        let mut header = Header::new(Algorithm::HS256);
        header.kid = rsa.jwk.common.key_id.clone();
        let claims = json!({"iss": issuer.base, "aud": s.resource, "sub": "mallory", "scope": "mcp", "exp": now + 300});
        jsonwebtoken::encode(
            &header,
            &claims,
            &EncodingKey::from_secret(&public).unwrap(),
        )
        .unwrap()
    };
    let cases = [
        (
            "expired",
            issuer.token(&rsa, &s.resource, json!({"exp": now - 600})),
        ),
        (
            "not yet valid",
            issuer.token(&rsa, &s.resource, json!({"nbf": now + 600})),
        ),
        (
            "wrong audience",
            issuer.token(&rsa, "https://elsewhere.example/mcp", json!({})),
        ),
        (
            "wrong issuer",
            issuer.token(&rsa, &s.resource, json!({"iss": "https://evil.example"})),
        ),
        ("unknown key", issuer.token(&other, &s.resource, json!({}))),
        ("tampered", tampered),
        ("alg none", unsigned),
        ("HMAC with the public key", hmac_confused),
        ("not a JWT", "not-a-token-at-all".to_string()),
    ];
    for (case, token) in cases {
        let response = get(&api, Some(&token)).await;
        assert_eq!(response.status(), 401, "{case}");
        let www = challenge(&response);
        assert!(
            www.starts_with("Bearer error=\"invalid_token\""),
            "{case}: {www}"
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized", "{case}: {body}");
        let text = body.to_string();
        for leak in ["exp", "audience", "issuer", "kid", "signature", "algorithm"] {
            assert!(
                !text.to_lowercase().contains(leak),
                "{case} leaks {leak:?}: {text}"
            );
        }
    }

    // A valid token without the scope: 403 naming it.
    let unscoped = issuer.token(&rsa, &s.resource, json!({"scope": "profile"}));
    let response = get(&api, Some(&unscoped)).await;
    assert_eq!(response.status(), 403);
    let www = challenge(&response);
    assert!(
        www.contains("error=\"insufficient_scope\"") && www.contains("scope=\"mcp\""),
        "{www}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rotation_at_the_issuer_is_followed_without_a_restart() {
    let issuer = Issuer::start().await;
    let old = key("a", Algorithm::RS256);
    let new = key("b", Algorithm::RS256);
    issuer.publish(&old);
    let s = setup(&issuer).await;
    let api = format!("{}/api/v1/tasks", s.base);
    let first = issuer.token(&old, &s.resource, json!({}));
    assert_eq!(get(&api, Some(&first)).await.status(), 200);

    // The issuer rotates: the new key is published, the old one withdrawn.
    issuer.publish(&new);
    issuer.withdraw(&old);
    let rotated = issuer.token(&new, &s.resource, json!({}));
    // Unknown key ids refetch the set at most every 10 s: within a bound,
    // the new key is found.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = get(&api, Some(&rotated)).await.status();
        if status == 200 {
            break;
        }
        assert_eq!(status, 401);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new key was never found"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_principals_stay_apart_at_the_front_and_in_the_api() {
    let issuer = Issuer::start().await;
    let rsa = key("a", Algorithm::RS256);
    issuer.publish(&rsa);
    let s = setup(&issuer).await;
    let alice = issuer.token(&rsa, &s.resource, json!({"sub": "alice"}));
    let bob = issuer.token(&rsa, &s.resource, json!({"sub": "bob"}));
    let admin = issuer.token(
        &rsa,
        &s.resource,
        json!({"sub": "carol", "scope": "mcp mcptask:admin"}),
    );

    // Alice starts a task at the front; bob cannot read it there.
    let alice_mcp = TestClient::http(&s.resource, Some(&alice), Lifecycle::Modern { tasks: true })
        .await
        .unwrap();
    let id = match alice_mcp
        .call("demo__slow_compute", json!({"seconds": 30}))
        .await
        .unwrap()
    {
        CallToolResponse::Task(t) => t.task.task_id,
        other => panic!("expected a task, got {other:?}"),
    };
    let bob_mcp = TestClient::http(&s.resource, Some(&bob), Lifecycle::Modern { tasks: true })
        .await
        .unwrap();
    assert!(bob_mcp.get(&id).await.is_err(), "bob read alice's task");
    assert!(alice_mcp.get(&id).await.is_ok());

    // In the API: one row, alice's; bob sees nothing, the operator all.
    let task = |token: &str| {
        let url = format!("{}/api/v1/tasks/{id}", s.base);
        let token = token.to_string();
        async move { get(&url, Some(&token)).await }
    };
    let mine = task(&alice).await;
    assert_eq!(mine.status(), 200);
    let mine: Value = mine.json().await.unwrap();
    assert_eq!(
        (&mine["principal"], &mine["face"]),
        (&json!("alice"), &json!("mcp"))
    );
    assert_eq!(task(&bob).await.status(), 404);
    let bobs: Value = get(&format!("{}/api/v1/tasks", s.base), Some(&bob))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(bobs["tasks"], json!([]));
    assert_eq!(
        task(&admin).await.status(),
        200,
        "the operator scope sees every task"
    );
    assert_eq!(
        task(OPERATOR).await.status(),
        200,
        "static tokens keep working"
    );
    let cancelled = http()
        .post(format!("{}/api/v1/tasks/{id}/cancel", s.base))
        .bearer_auth(&bob)
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 404, "bob cannot cancel alice's task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_tool_is_neither_listed_nor_callable_at_any_face() {
    let issuer = Issuer::start().await;
    let rsa = key("a", Algorithm::RS256);
    issuer.publish(&rsa);
    let s = setup_with(
        &issuer,
        r#"
        [[policy]]
        principal = "bob"
        deny = ["demo/slow_*"]
        [[policy]]
        scope = "readonly"
        allow = ["demo/greet"]
        "#,
    )
    .await;
    let alice = issuer.token(&rsa, &s.resource, json!({"sub": "alice"}));
    let bob = issuer.token(&rsa, &s.resource, json!({"sub": "bob"}));
    let reader = issuer.token(
        &rsa,
        &s.resource,
        json!({"sub": "rita", "scope": "mcp readonly"}),
    );

    // The front: bob's list lacks the denied tool, and calling it reads
    // exactly as calling a tool that does not exist.
    let names = |token: String| {
        let url = s.resource.clone();
        async move {
            let client = TestClient::http(&url, Some(&token), Lifecycle::Modern { tasks: true })
                .await
                .unwrap();
            let tools = client.peer().list_all_tools().await.unwrap();
            (
                client,
                tools
                    .into_iter()
                    .map(|t| t.name.to_string())
                    .collect::<Vec<_>>(),
            )
        }
    };
    let (_, alices) = names(alice.clone()).await;
    assert!(
        alices.contains(&"demo__slow_compute".to_string()),
        "{alices:?}"
    );
    let (bob_mcp, bobs) = names(bob.clone()).await;
    assert!(
        !bobs.iter().any(|n| n.starts_with("demo__slow_")),
        "{bobs:?}"
    );
    assert!(bobs.contains(&"demo__greet".to_string()), "{bobs:?}");
    let denied = bob_mcp
        .call("demo__slow_compute", json!({"seconds": 1}))
        .await
        .unwrap_err();
    let missing = bob_mcp
        .call("demo__no_such_tool", json!({}))
        .await
        .unwrap_err();
    let shape = |e: &rmcp::service::ServiceError| {
        mcptask_testkit::mcp::error_code(e).map(|c| {
            (
                c,
                e.to_string()
                    .replace("slow_compute", "X")
                    .replace("no_such_tool", "X"),
            )
        })
    };
    assert_eq!(shape(&denied), shape(&missing), "{denied} / {missing}");
    let (_, readers) = names(reader.clone()).await;
    assert_eq!(
        readers
            .iter()
            .filter(|n| n.starts_with("demo__"))
            .collect::<Vec<_>>(),
        ["demo__greet"]
    );

    // The API (and so the CLI): the same tool is unknown to bob, known to alice.
    let call = |token: String, tool: &'static str| {
        let url = format!("{}/api/v1/calls", s.base);
        async move {
            http()
                .post(url)
                .bearer_auth(token)
                .json(&json!({"server": "demo", "tool": tool, "arguments": {"seconds": 0.1}}))
                .send()
                .await
                .unwrap()
        }
    };
    let refused = call(bob.clone(), "slow_compute").await;
    assert_eq!(refused.status(), 404);
    let refused: Value = refused.json().await.unwrap();
    let unknown: Value = call(bob.clone(), "no_such_tool")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(refused["error"]["code"], unknown["error"]["code"]);
    assert_eq!(refused["error"]["code"], "unknown_tool");
    assert_eq!(call(alice.clone(), "slow_compute").await.status(), 202);
    let listed: Value = get(&format!("{}/api/v1/servers/demo/tools", s.base), Some(&bob))
        .await
        .json()
        .await
        .unwrap();
    let listed: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        listed.contains(&"greet") && !listed.contains(&"slow_compute"),
        "{listed:?}"
    );

    // The Rust face, and a policy edit: a call already running keeps
    // running; new calls are refused.
    let alice_mcp = TestClient::http(&s.resource, Some(&alice), Lifecycle::Modern { tasks: true })
        .await
        .unwrap();
    let running = match alice_mcp
        .call("demo__slow_compute", json!({"seconds": 2}))
        .await
        .unwrap()
    {
        CallToolResponse::Task(t) => t.task.task_id,
        other => panic!("expected a task, got {other:?}"),
    };
    s.gateway
        .calls
        .set_policy(mcptask_core::access::Policy::new(vec![
            mcptask_core::access::Rule {
                deny: vec!["demo/slow_*".into()],
                ..Default::default()
            },
        ]));
    let refused = s
        .gateway
        .calls
        .call(mcptask_gateway::calls::CallRequest {
            server: "demo".into(),
            tool: "slow_compute".into(),
            arguments: json!({"seconds": 1}),
            caller: mcptask_gateway::auth::Caller {
                principal: Some("alice".into()),
                ..Default::default()
            },
            ..Default::default()
        })
        .await;
    assert!(
        matches!(
            refused,
            Err(mcptask_gateway::calls::CallError::Refused(
                mcptask_gateway::failure::Failure::UnknownTool { .. }
            ))
        ),
        "{refused:?}"
    );
    assert!(
        alice_mcp
            .call("demo__slow_compute", json!({"seconds": 1}))
            .await
            .is_err()
    );
    let done = alice_mcp
        .wait_terminal(&running, Duration::from_secs(60))
        .await;
    assert_eq!(
        mcptask_testkit::mcp::wire(&done)["status"],
        "completed",
        "the call made before the edit ran to its end"
    );
}

/// A reload changes who is let in, from the next request: an issuer
/// removed (its tokens refused, the metadata gone), a static token added,
/// then the issuer back again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_issuers_and_tokens_accepted() {
    let issuer = Issuer::start().await;
    let rsa = key("a", Algorithm::RS256);
    issuer.publish(&rsa);
    let s = setup(&issuer).await;
    let api = format!("{}/api/v1/tasks", s.base);
    let metadata = format!("{}/.well-known/oauth-protected-resource/mcp", s.base);
    let jwt = issuer.token(&rsa, &s.resource, json!({}));
    assert_eq!(get(&api, Some(&jwt)).await.status(), 200);
    let first = (*s.gateway.live.get()).clone();

    let mut next = first.clone();
    next.api.oauth.clear();
    next.api.tokens.push(mcptask_gateway::config::TokenSection {
        token: toml::Spanned::new(0..0, "dave-token-0123456789".into()),
        principal: Some("dave".into()),
    });
    let changes = s.gateway.reload(next).await.unwrap();
    assert_eq!(changes.issuers_removed, vec![issuer.base.clone()]);
    assert_eq!(changes.tokens_added, ["dave"]);
    assert_eq!(get(&api, Some(&jwt)).await.status(), 401);
    assert_eq!(get(&api, Some("dave-token-0123456789")).await.status(), 200);
    assert_eq!(get(&metadata, None).await.status(), 404);
    assert_eq!(get(&api, Some(OPERATOR)).await.status(), 200);

    let changes = s.gateway.reload(first).await.unwrap();
    assert_eq!(changes.tokens_removed, ["dave"]);
    assert_eq!(get(&api, Some(&jwt)).await.status(), 200);
    assert_eq!(get(&api, Some("dave-token-0123456789")).await.status(), 401);
    assert_eq!(get(&metadata, None).await.status(), 200);
}
