//! What the dashboard's console reads, on a real gateway and demo servers,
//! on SQLite and on PostgreSQL: the call list filtered by tool and by time
//! (`GET /api/v1/tasks?tool=&since=&until=`), each server's condition and
//! numbers (`GET /api/v1/servers/stats`: a killed server is down with the
//! reason, the operator's numbers count every call, a principal's only its
//! own), and the policy in force per principal (`GET /api/v1/policy`: the
//! operator sees every token's principal, a principal only itself and only
//! the tools it may call).

use std::time::Duration;

use serde_json::{Value, json};

use mcptask_testkit::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_filters_calls_and_shows_servers_and_policy_sqlite() {
    console(TestDatabase::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_filters_calls_and_shows_servers_and_policy_postgres() {
    let Some(db) = TestDatabase::postgres().await else {
        eprintln!("console postgres: SKIPPED (no PostgreSQL)");
        return;
    };
    console(db).await;
}

/// The ids of every call `api` lists with `query`.
async fn listed(api: &Api, query: &str) -> Vec<String> {
    ids(&api.list_all(query).await)
}

/// The stats entry of `server`.
fn server<'a>(stats: &'a Value, name: &str) -> &'a Value {
    stats["servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no server {name} in {stats:#}"))
}

/// `GET /api/v1/servers/stats` of `api` until `done` holds.
async fn stats_until(api: &Api, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let stats = api
            .get("/api/v1/servers/stats")
            .await
            .assert_status(200)
            .clone();
        if done(&stats) {
            return stats;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {stats:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn console(db: TestDatabase) {
    with_deadline(WAIT * 3, async {
        let demo_db = TestDatabase::sqlite();
        let flaky_db = TestDatabase::sqlite();
        let demo = DemoServer::start(&demo_db.url, &[]).await;
        let mut flaky = DemoServer::start(&flaky_db.url, &[]).await;
        let spec = GatewaySpec::with_tokens(&db.url, &[("demo", &demo.url), ("flaky", &flaky.url)]);
        let toml =
            spec.toml() + "\n[[policy]]\nprincipal = \"bob\"\ndeny = [\"demo/confirm_delete\"]\n";
        let gateway = GatewayProcess::start_toml("console-gateway", &toml, &[]).await;
        let op = gateway.client(Some(OPERATOR));
        let alice = gateway.client(Some(ALICE));

        // Calls: alice's first, then (a clock tick later) the operator's.
        let first = alice
            .start_task_with(json!({"server": "demo", "tool": "slow_compute",
                "arguments": {"seconds": 1, "label": "first"}, "waitMs": 60_000}))
            .await;
        let first_id = first["id"].as_str().expect("id").to_string();
        alice.wait_status(&first_id, "completed").await;
        let broken = op.start_task("protocol_error_job", json!({})).await;
        let broken_id = broken["id"].as_str().expect("id").to_string();
        op.wait_status(&broken_id, "failed").await;
        let split = broken["createdAt"].as_str().expect("createdAt").to_string();
        assert!(
            first["createdAt"].as_str() < Some(split.as_str()),
            "made a second apart: {first:#} {broken:#}"
        );

        // By tool, alone and with a server; by time, on either side of the
        // second call's creation.
        assert_eq!(
            listed(&op, "tool=protocol_error_job").await,
            [broken_id.as_str()]
        );
        assert_eq!(
            listed(&op, "tool=slow_compute&server=demo").await,
            [first_id.as_str()]
        );
        assert!(
            listed(&op, "tool=slow_compute&server=flaky")
                .await
                .is_empty()
        );
        assert_eq!(
            listed(&op, &format!("since={}", encode(&split))).await,
            [broken_id.as_str()]
        );
        assert_eq!(
            listed(&op, &format!("until={}", encode(&split))).await,
            [first_id.as_str()]
        );
        assert_eq!(
            listed(
                &op,
                &format!(
                    "since=2020-01-01T00:00:00Z&until={}&outcome=completed",
                    encode(&split)
                )
            )
            .await,
            [first_id.as_str()]
        );
        // A principal's filters never reach past its own calls.
        assert!(listed(&alice, "tool=protocol_error_job").await.is_empty());
        op.get("/api/v1/tasks?since=yesterday")
            .await
            .assert_error(400, "bad_request");

        // The flaky server answers once, then dies; the next call to it
        // fails and its health turns down.
        let ok = op
            .post(
                "/api/v1/calls",
                &json!({"server": "flaky", "tool": "slow_compute",
                "arguments": {"seconds": 0}, "waitMs": 60_000}),
            )
            .await;
        assert!(ok.status < 300, "{ok:#?}");
        flaky.kill().await;
        let failed = op
            .post(
                "/api/v1/calls",
                &json!({"server": "flaky", "tool": "slow_compute",
                "arguments": {"seconds": 0}}),
            )
            .await;
        eprintln!("a call to the killed server: {failed:#?}");

        // Answered at once (the audit trail records their ends): alice's
        // completes, the operator's is the tool's own error.
        let greeted = alice
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": "greet", "background": false}),
            )
            .await;
        assert_eq!(greeted.status, 200, "{greeted:#?}");
        let failing = op
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": "test_error_handling", "background": false}),
            )
            .await;
        assert_eq!(failing.status, 200, "{failing:#?}");

        let stats = stats_until(&op, "flaky down, the answered calls counted", |s| {
            let outcomes = &server(s, "demo")["outcomes"];
            server(s, "flaky")["state"] == "down"
                && outcomes["completed"].as_i64() >= Some(1)
                && outcomes["tool_error"].as_i64() >= Some(1)
        })
        .await;
        let down = server(&stats, "flaky");
        let reason = down["reason"].as_str().expect("a reason");
        assert!(
            reason.contains("connection refused"),
            "the operator sees the cause: {down:#}"
        );
        assert!(down["lastErrorAt"].is_string(), "{down:#}");
        let numbers = server(&stats, "demo");
        assert_eq!(
            numbers["state"], "degraded",
            "half its calls failed: {numbers:#}"
        );
        assert_eq!(numbers["errorRate"], json!(0.5), "{numbers:#}");
        assert!(
            numbers["p50Ms"].as_i64().is_some_and(|ms| ms >= 0),
            "{numbers:#}"
        );
        assert!(
            numbers["callsPerSecond"].as_f64().is_some_and(|r| r > 0.0),
            "{numbers:#}"
        );
        let series: i64 = numbers["series"]["calls"]
            .as_array()
            .expect("a series")
            .iter()
            .map(|n| n.as_i64().unwrap_or(0))
            .sum();
        assert_eq!(
            Some(series),
            numbers["calls"].as_i64(),
            "the series holds every call: {numbers:#}"
        );
        let tools = numbers["tools"].as_array().expect("tools");
        let tool = |name: &str| tools.iter().find(|t| t["name"] == name).cloned();
        assert_eq!(
            tool("greet").map(|t| t["outcomes"]["completed"].clone()),
            Some(json!(1)),
            "{tools:#?}"
        );
        assert!(
            tool("test_error_handling").is_some_and(|t| t["errors"].as_i64() >= Some(1)),
            "{tools:#?}"
        );
        assert_eq!(
            tool("confirm_delete").map(|t| t["calls"].clone()),
            Some(json!(0)),
            "a listed tool not called yet is shown: {tools:#?}"
        );
        assert_eq!(stats["sampled"], false, "{stats:#}");

        // Alice: her own numbers, and no upstream error text.
        let hers = alice
            .get("/api/v1/servers/stats")
            .await
            .assert_status(200)
            .clone();
        assert!(
            server(&hers, "demo")["calls"].as_i64() >= Some(1),
            "{hers:#}"
        );
        assert_eq!(server(&hers, "demo")["errors"], 0, "{hers:#}");
        assert_eq!(server(&hers, "flaky")["calls"], 0, "{hers:#}");
        assert_eq!(
            server(&hers, "flaky")["reason"],
            "its last exchange failed",
            "{hers:#}"
        );
        op.get("/api/v1/servers/stats?minutes=0")
            .await
            .assert_error(400, "bad_request");

        // The policy: bob may not call demo/confirm_delete; alice may.
        let policy = op.get("/api/v1/policy").await.assert_status(200).clone();
        let tools = policy["tools"].as_array().expect("tools");
        let at = tools
            .iter()
            .position(|t| t == &json!({"server": "demo", "tool": "confirm_delete"}))
            .unwrap_or_else(|| panic!("{policy:#}"));
        let allowed = |who: Value| {
            policy["callers"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["principal"] == who))
                .map(|c| c["allowed"][at].clone())
        };
        assert_eq!(allowed(json!("bob")), Some(json!(false)), "{policy:#}");
        assert_eq!(allowed(json!("alice")), Some(json!(true)), "{policy:#}");
        assert_eq!(
            allowed(Value::Null),
            Some(json!(true)),
            "operator tokens: {policy:#}"
        );
        assert_eq!(policy["rules"][0]["principal"], "bob", "{policy:#}");
        let bobs = gateway
            .client(Some(BOB))
            .get("/api/v1/policy")
            .await
            .assert_status(200)
            .clone();
        assert_eq!(
            bobs["callers"].as_array().map(Vec::len),
            Some(1),
            "{bobs:#}"
        );
        assert_eq!(bobs["callers"][0]["principal"], "bob", "{bobs:#}");
        assert_eq!(bobs["rules"], Value::Null, "{bobs:#}");
        assert!(
            !bobs["tools"]
                .as_array()
                .is_some_and(|t| t.contains(&json!({"server": "demo", "tool": "confirm_delete"}))),
            "a tool bob may not call is not named to him: {bobs:#}"
        );
        assert_eq!(
            bobs["tools"].as_array().map(Vec::len),
            Some(tools.len() - 1),
            "every other tool is his: {bobs:#}"
        );
        assert!(
            bobs["callers"][0]["allowed"]
                .as_array()
                .is_some_and(|a| a.iter().all(|x| x == true)),
            "{bobs:#}"
        );
        drop(demo);
    })
    .await;
}
