//! The caller's identity at the upstream (`[servers.identity]`,
//! docs/AUTHORIZATION.md): an upstream that authenticates each request's
//! bearer token (the demo server with `--auth-token`, whose `whoami` tool
//! says whom a call was authenticated as) sees each principal's own token
//! (`per_principal`) or the caller's token exchanged at a token endpoint
//! (`token_exchange`, the testkit's [`TokenIssuer`]) on every exchange of
//! the call — the create, the tracker's polls of a task — through the REST
//! face and the MCP front, for a synchronous call and a task; never the
//! gateway's own credential, and never another principal's.

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient, wire};
use mcptask_testkit::{
    ALICE, BOB, DemoServer, EXCHANGE_CLIENT_ID, EXCHANGE_CLIENT_SECRET, GatewayProcess,
    TestDatabase, TokenIssuer, with_deadline,
};
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

/// A principal the gateway knows but no upstream credential is configured
/// for.
const CAROL: &str = "carol-token-0123456789";
/// The gateway's own credential at the upstream: never a call's.
const GATEWAY_OWN: &str = "gateway-own-upstream-token";

/// The upstream: the demo server accepting the gateway's own token, each
/// principal's own token, and the tokens the issuer hands out.
async fn upstream(db: &TestDatabase) -> DemoServer {
    let own = format!("{GATEWAY_OWN}=the-gateway");
    DemoServer::start(
        &db.url,
        &[
            "--auth-token",
            &own,
            "--auth-token",
            "alice-upstream-token=alice-own",
            "--auth-token",
            "bob-upstream-token=bob-own",
            "--auth-token",
            "xa-1=alice-exchanged",
            "--auth-token",
            "xa-2=alice-exchanged",
            "--auth-token",
            "xb-1=bob-exchanged",
            "--auth-token",
            "xb-2=bob-exchanged",
        ],
    )
    .await
}

/// A gateway (REST and `/mcp`) with alice, bob and carol, before the demo
/// server at `url` with `identity` (the `[servers.identity]` table), and
/// its database.
async fn gateway(
    url: &str,
    identity: &str,
    env: &[(&str, &str)],
) -> (GatewayProcess, TestDatabase) {
    let db = TestDatabase::sqlite();
    let toml = gateway_toml(&db, url, identity);
    (GatewayProcess::start_toml("gateway", &toml, env).await, db)
}

/// The configuration of [`gateway`], on `db`.
fn gateway_toml(db: &TestDatabase, url: &str, identity: &str) -> String {
    format!(
        "[database]\nurl = {:?}\n\n[api]\nlisten = \"127.0.0.1:0\"\n\n\
         [[api.tokens]]\ntoken = {ALICE:?}\nprincipal = \"alice\"\n\n\
         [[api.tokens]]\ntoken = {BOB:?}\nprincipal = \"bob\"\n\n\
         [[api.tokens]]\ntoken = {CAROL:?}\nprincipal = \"carol\"\n\n\
         [proxy]\nenabled = true\n\n\
         [tracker]\npoll_default_ms = 200\npoll_min_ms = 100\npoll_max_ms = 500\n\n\
         [[servers]]\nname = \"demo\"\nurl = {url:?}\n\
         headers = {{ Authorization = \"Bearer {GATEWAY_OWN}\" }}\n\n{identity}",
        db.url
    )
}

/// A client of the front as `token`, declaring tasks or not.
async fn front(gateway: &GatewayProcess, token: &str, tasks: bool) -> TestClient {
    TestClient::http(
        &format!("{}/mcp", gateway.base),
        Some(token),
        Lifecycle::Modern { tasks },
    )
    .await
    .expect("connect to /mcp")
}

/// What `whoami` answered in a task: its result's text.
async fn task_whoami(client: &TestClient) -> String {
    let id = client
        .start_task("demo__whoami", json!({"seconds": 1.5}))
        .await;
    let done = client.wait_terminal(&id, Duration::from_secs(60)).await;
    wire(&done).to_string()
}

/// What `whoami` answered a synchronous call (a caller that declares no
/// tasks: the front passes the call through).
async fn sync_whoami(client: &TestClient) -> String {
    match client.call("demo__whoami", json!({})).await {
        Ok(CallToolResponse::Complete(result)) => serde_json::to_string(&result).unwrap(),
        other => format!("{other:?}"),
    }
}

/// What `whoami` answered a task made through `POST /api/v1/calls`.
async fn rest_whoami(gateway: &GatewayProcess, token: &str) -> Value {
    let api = gateway.client(Some(token));
    let r = api
        .post(
            "/api/v1/calls",
            &json!({"server": "demo", "tool": "whoami", "arguments": {"seconds": 1.5}}),
        )
        .await;
    if r.status != 202 {
        return r.json;
    }
    let id = r.json["task"]["id"].as_str().unwrap().to_string();
    api.wait_task(&id, "settled", |t| {
        matches!(
            t["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        )
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_principal_calls_carry_each_principals_own_token_and_no_other() {
    let db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(240), async {
        let demo = upstream(&db).await;
        let identity = "[servers.identity]\nmode = \"per_principal\"\n\
             [servers.identity.principals.alice]\ntoken_env = \"ALICE_DEMO_TOKEN\"\n\
             [servers.identity.principals.bob]\ntoken_env = \"BOB_DEMO_TOKEN\"\n";
        let (gateway, _store) = gateway(
            &demo.url,
            identity,
            &[
                ("ALICE_DEMO_TOKEN", "alice-upstream-token"),
                ("BOB_DEMO_TOKEN", "bob-upstream-token"),
            ],
        )
        .await;

        // A task through the front (its create and the tracker's polls),
        // and a synchronous call passed through.
        let alice_tasks = front(&gateway, ALICE, true).await;
        let bob_sync = front(&gateway, BOB, false).await;
        let seen = task_whoami(&alice_tasks).await;
        assert!(seen.contains("principal: alice-own"), "{seen}");
        let seen = sync_whoami(&bob_sync).await;
        assert!(seen.contains("principal: bob-own"), "{seen}");
        let bob_tasks = front(&gateway, BOB, true).await;
        let seen = task_whoami(&bob_tasks).await;
        assert!(seen.contains("principal: bob-own"), "{seen}");
        let alice_sync = front(&gateway, ALICE, false).await;
        let seen = sync_whoami(&alice_sync).await;
        assert!(seen.contains("principal: alice-own"), "{seen}");

        // And through REST.
        let done = rest_whoami(&gateway, ALICE).await;
        assert_eq!(done["status"], "completed", "{done:#}");
        assert!(
            done.to_string().contains("principal: alice-own"),
            "{done:#}"
        );

        // Carol has no credential of her own there: refused, naming the
        // server and the principal, and never sent with the gateway's.
        let refused = rest_whoami(&gateway, CAROL).await;
        let said = refused.to_string();
        assert!(
            said.contains("server \\\"demo\\\" has no credential for principal \\\"carol\\\""),
            "{refused:#}"
        );
        let carol = front(&gateway, CAROL, false).await;
        let said = sync_whoami(&carol).await;
        assert!(
            said.contains("has no credential for principal") && !said.contains("the-gateway"),
            "{said}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_exchange_calls_carry_the_callers_exchanged_token_for_their_whole_life() {
    let db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(240), async {
        let demo = upstream(&db).await;
        // Each caller token is exchanged once per call; the issuer refuses
        // a second exchange of a token it already exchanged for that
        // entry, so a task's polls can only succeed with the token its
        // create got.
        let issuer = TokenIssuer::start(&[
            (ALICE, "xa-1"),
            (BOB, "xb-1"),
            (ALICE, "xa-2"),
            (BOB, "xb-2"),
        ])
        .await;
        let identity = format!(
            "[servers.identity]\nmode = \"token_exchange\"\ntoken_endpoint = {:?}\n\
             client_id = {EXCHANGE_CLIENT_ID:?}\nclient_secret_env = \"EXCHANGE_SECRET\"\n\
             audience = \"demo-upstream\"\n",
            issuer.token_endpoint
        );
        let (gateway, _store) = gateway(
            &demo.url,
            &identity,
            &[("EXCHANGE_SECRET", EXCHANGE_CLIENT_SECRET)],
        )
        .await;

        let alice_tasks = front(&gateway, ALICE, true).await;
        let seen = task_whoami(&alice_tasks).await;
        assert!(seen.contains("principal: alice-exchanged"), "{seen}");
        let bob_sync = front(&gateway, BOB, false).await;
        let seen = sync_whoami(&bob_sync).await;
        assert!(seen.contains("principal: bob-exchanged"), "{seen}");
        let done = rest_whoami(&gateway, BOB).await;
        assert_eq!(done["status"], "completed", "{done:#}");
        assert!(
            done.to_string().contains("principal: bob-exchanged"),
            "{done:#}"
        );
        let alice_sync = front(&gateway, ALICE, false).await;
        let seen = sync_whoami(&alice_sync).await;
        assert!(seen.contains("principal: alice-exchanged"), "{seen}");

        // One exchange per call, none per poll, each as RFC 8693 says,
        // with the gateway authenticated as its client.
        let exchanges = issuer.seen();
        let subjects: Vec<&str> = exchanges
            .iter()
            .map(|x| x.form["subject_token"].as_str())
            .collect();
        assert_eq!(subjects, [ALICE, BOB, BOB, ALICE], "{exchanges:#?}");
        for x in &exchanges {
            assert!(x.client_ok, "{x:?}");
            assert_eq!(
                x.form["grant_type"],
                "urn:ietf:params:oauth:grant-type:token-exchange"
            );
            assert_eq!(
                x.form["subject_token_type"],
                "urn:ietf:params:oauth:token-type:access_token"
            );
            assert_eq!(x.form["audience"], "demo-upstream");
            assert_eq!(x.form["resource"], demo.url);
        }

        // Every exchange of the four is spent: the issuer refuses the next,
        // and the call fails saying so, the gateway's own credential never
        // sent in its place.
        let refused = rest_whoami(&gateway, ALICE).await;
        assert!(
            refused
                .to_string()
                .contains("the token exchange for server \\\"demo\\\" was refused: invalid_grant"),
            "{refused:#}"
        );
        let said = task_or_error(&front(&gateway, BOB, true).await).await;
        assert!(
            said.contains("the token exchange for server \\\"demo\\\" was refused: invalid_grant"),
            "{said}"
        );
    })
    .await;
}

/// A task call's error, or its result when it made one.
async fn task_or_error(client: &TestClient) -> String {
    match client.call("demo__whoami", json!({"seconds": 1})).await {
        Err(e) => format!("{e:?}"),
        Ok(CallToolResponse::Task(t)) => {
            let done = client
                .wait_terminal(&t.task.task_id, Duration::from_secs(60))
                .await;
            wire(&done).to_string()
        }
        Ok(other) => format!("{other:?}"),
    }
}

/// An exchanged token is kept sealed in the database where the gateway has
/// a secret key: a task the gateway adopts after a restart is polled with
/// it and completes, with no second exchange. Without a key it is held by
/// the process that made the exchange (docs/AUTHORIZATION.md): the adopted
/// task cannot be authorized any more, and ends `failed` saying so, its
/// polls never sent with the gateway's own credential (the upstream would
/// answer them: they would find alice's task foreign and the call would
/// fail with another reason).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_outlives_its_gateway_with_a_key_and_fails_saying_so_without() {
    let db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(300), async {
        let demo = upstream(&db).await;
        for keyed in [true, false] {
            let issuer = TokenIssuer::start(&[(ALICE, "xa-1")]).await;
            let identity = format!(
                "[servers.identity]\nmode = \"token_exchange\"\ntoken_endpoint = {:?}\n\
                 client_id = {EXCHANGE_CLIENT_ID:?}\nclient_secret_env = \"EXCHANGE_SECRET\"\n",
                issuer.token_endpoint
            );
            let store = TestDatabase::sqlite();
            let toml = gateway_toml(&store, &demo.url, &identity);
            let key = mcptask_client::oauth::SecretKey::generate()
                .unwrap()
                .to_base64();
            let env = [
                ("EXCHANGE_SECRET", EXCHANGE_CLIENT_SECRET),
                ("MCPTASK_SECRET_KEY", if keyed { key.as_str() } else { "" }),
            ];
            let mut first = GatewayProcess::start_toml("gateway", &toml, &env).await;
            let api = first.client(Some(ALICE));
            let r = api
                .post(
                    "/api/v1/calls",
                    &json!({"server": "demo", "tool": "whoami", "arguments": {"seconds": 4}}),
                )
                .await;
            assert_eq!(r.status, 202, "{r:#?}");
            let id = r.json["task"]["id"].as_str().unwrap().to_string();
            // Polled with the exchanged token while its gateway lives.
            api.wait_task(&id, "polled", |t| {
                t["statusMessage"]
                    .as_str()
                    .is_some_and(|m| m.contains("whoami"))
            })
            .await;
            first.kill().await;

            let second = GatewayProcess::start_toml("gateway-again", &toml, &env).await;
            let api = second.client(Some(ALICE));
            let settled = api
                .wait_task(&id, "settled", |t| {
                    matches!(t["status"].as_str(), Some("completed" | "failed"))
                })
                .await;
            if keyed {
                assert_eq!(settled["status"], "completed", "{settled:#}");
                assert!(
                    settled.to_string().contains("principal: alice-exchanged"),
                    "{settled:#}"
                );
            } else {
                assert_eq!(settled["status"], "failed", "{settled:#}");
                assert!(
                    settled.to_string().contains("can no longer be authorized"),
                    "{settled:#}"
                );
            }
            assert_eq!(
                issuer.seen().len(),
                1,
                "one exchange, none after the restart"
            );
        }
    })
    .await;
}
