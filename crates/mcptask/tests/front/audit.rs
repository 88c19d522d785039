//! The audit trail on a real gateway, on SQLite and on PostgreSQL: a policy
//! refusal, a synchronous failure and a tool error each appear in
//! `GET /api/v1/audit` (and in `mcptask_calls_total`) with their outcome;
//! a principal's query shows only its own calls while the operator sees
//! every one; pages walk the trail; entries past `[audit] retention_days`
//! are deleted by the sweep; `mcptask audit` prints the table.

use std::time::Duration;

use mcptask_core::audit::AuditEvent;
use mcptask_core::call::Face;
use mcptask_core::outcome::Outcome;
use serde_json::{Value, json};

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const DAY_MS: i64 = 86_400_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_failures_and_tool_errors_are_audited_per_principal_sqlite() {
    audited(TestDatabase::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_failures_and_tool_errors_are_audited_per_principal_postgres() {
    let Some(db) = TestDatabase::postgres().await else {
        eprintln!("audit postgres: SKIPPED (no PostgreSQL)");
        return;
    };
    audited(db).await;
}

/// An entry `days` old, of a principal no call here makes.
fn back_dated(days: i64, tool: &str) -> AuditEvent {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as i64;
    AuditEvent {
        at_ms: now - days * DAY_MS,
        call_id: None,
        principal: Some("carol".into()),
        face: Face::Api,
        server: "demo".into(),
        tool: tool.into(),
        driver: "pass_through".into(),
        outcome: Outcome::Completed,
        error_class: None,
        duration_ms: 5,
        via: None,
    }
}

/// Every entry `api` may read with `query`, walking pages of `page`.
async fn trail(api: &Api, query: &str, page: usize) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/v1/audit?limit={page}{query}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let reply = api.get(&path).await;
        let body = reply.assert_status(200);
        all.extend(body["events"].as_array().expect("events").iter().cloned());
        match body["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return all,
        }
    }
}

/// The entry of `tool` that ended with `outcome`, waited for (the writer
/// appends shortly after the call's end).
async fn entry(api: &Api, tool: &str, outcome: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let found = trail(api, &format!("&tool={tool}&outcome={outcome}"), 50).await;
        if let Some(e) = found.into_iter().next() {
            return e;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {outcome} entry of {tool} in the audit trail"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The count of `mcptask_calls_total` series lines with all of `labels`.
fn counted(scrape: &str, labels: &[&str]) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with("mcptask_calls_total{") && labels.iter().all(|w| l.contains(w)))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, n)| n.parse::<f64>().ok()))
        .sum()
}

async fn audited(db: TestDatabase) {
    with_deadline(WAIT * 3, async {
        // Before the gateway starts: entries 31 days and 1 day old.
        let store = db.open().await;
        store
            .audit()
            .append_audit(&[back_dated(31, "expired"), back_dated(1, "recent")])
            .await
            .expect("back-dated entries");
        store.close().await;

        let dir = tempfile::tempdir().expect("temp dir");
        let demo_db = format!("sqlite:{}", dir.path().join("server.db").display());
        let demo = DemoServer::start_named("audit-demo", &demo_db, &[]).await;
        let upstream = ScriptedServer::start(&demo.url).await;
        let spec = GatewaySpec::with_tokens(&db.url, &[("demo", &upstream.url())]);
        let toml = format!(
            "{}\n[proxy]\nenabled = true\n\n[audit]\nretention_days = 30\n\n[[policy]]\nprincipal = \"alice\"\ndeny = [\"demo/failing_job\"]\n",
            spec.toml()
        );
        let gateway = GatewayProcess::start_toml("audit-gateway", &toml, &[]).await;
        let operator = gateway.client(Some(OPERATOR));
        let alice = gateway.client(Some(ALICE));
        let mcp = format!("{}/mcp", gateway.base);

        // A synchronous failure: the upstream answers the call with its
        // JSON-RPC error.
        upstream.script(
            Rule::new("tools/call", 1, Scripted::Error(-32603, "Access denied".into()))
                .when("/name", json!("greet")),
        );
        let failed = operator
            .post("/api/v1/calls", &json!({"server": "demo", "tool": "greet", "background": false}))
            .await;
        assert!(failed.status >= 400, "{failed:#?}");

        // Alice: a call that completes, and one the policy refuses.
        let greeted = alice
            .post("/api/v1/calls", &json!({"server": "demo", "tool": "greet", "background": false}))
            .await;
        assert_eq!(greeted.status, 200, "{greeted:#?}");
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "audit-test", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let refused =
            post_tools_call(&mcp, Some(ALICE), TRACEPARENT, "demo__failing_job", json!({}), meta)
                .await;
        assert!(refused["error"].is_object(), "{refused}");

        // A tool error: a kept call that completes with `isError`.
        let client = TestClient::http(&mcp, Some(OPERATOR), Lifecycle::Modern { tasks: true })
            .await
            .expect("a client of the front");
        let task = client.start_task("demo__failing_job", json!({})).await;
        let done = client.wait_terminal(&task, Duration::from_secs(60)).await;
        assert_eq!(done.task.status(), rmcp::model::TaskStatus::Completed, "{done:?}");
        client.close().await;

        // Each appears with its outcome, who made it and why it failed.
        let e = entry(&operator, "greet", "failed").await;
        assert_eq!(
            (&e["face"], &e["driver"], &e["errorClass"], &e["principal"]),
            (&json!("api"), &json!("pass_through"), &json!("remote_error"), &Value::Null),
            "{e:#}"
        );
        let e = entry(&operator, "failing_job", "refused_policy").await;
        assert_eq!(
            (&e["face"], &e["driver"], &e["errorClass"], &e["principal"]),
            (&json!("mcp"), &json!("none"), &json!("unknown_tool"), &json!("alice")),
            "{e:#}"
        );
        let e = entry(&operator, "failing_job", "tool_error").await;
        assert_eq!((&e["face"], &e["driver"]), (&json!("mcp"), &json!("sep2663")), "{e:#}");
        assert_eq!(e["callId"], json!(task), "{e:#}");
        assert_eq!(e["errorClass"], "tool_error", "{e:#}");

        // The same call kept for REST: the tracker's workers carry it to its
        // end with no call task of the gateway's, and its end is in the
        // trail too (it was not: only a front task's end was recorded).
        let kept = operator
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": "failing_job", "background": true}),
            )
            .await;
        let kept_id = kept.assert_status(202)["task"]["id"]
            .as_str()
            .expect("the kept call's id")
            .to_string();
        let deadline = tokio::time::Instant::now() + WAIT;
        let e = loop {
            let found = trail(&operator, "&tool=failing_job&outcome=tool_error", 50).await;
            if let Some(e) = found.into_iter().find(|e| e["callId"] == json!(kept_id)) {
                break e;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the REST call's end is not in the audit trail\n{}",
                gateway.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(
            (&e["face"], &e["driver"], &e["errorClass"]),
            (&json!("api"), &json!("sep2663"), &json!("tool_error")),
            "{e:#}"
        );
        let e = entry(&operator, "greet", "completed").await;
        assert_eq!((&e["principal"], &e["errorClass"]), (&json!("alice"), &Value::Null), "{e:#}");
        assert!(!e.to_string().contains("Hello"), "no result in the trail: {e:#}");

        // The metrics count the same ends.
        let scrape = operator.get("/metrics").await.text;
        for (tool, outcome) in [
            ("greet", "failed"),
            ("failing_job", "refused_policy"),
        ] {
            let labels = [&format!("tool=\"{tool}\"")[..], &format!("outcome=\"{outcome}\"")[..]];
            assert_eq!(counted(&scrape, &labels), 1.0, "{tool} {outcome}:\n{scrape}");
        }
        // The front's and REST's.
        let labels = ["tool=\"failing_job\"", "outcome=\"tool_error\""];
        assert_eq!(counted(&scrape, &labels), 2.0, "{scrape}");

        // The sweep at start deleted the 31-day-old entry, not the 1-day-old one.
        let deadline = tokio::time::Instant::now() + WAIT;
        while !trail(&operator, "&tool=expired", 50).await.is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "never purged\n{}", gateway.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(trail(&operator, "&tool=recent", 50).await.len(), 1, "a recent entry is kept");

        // The operator sees every entry, page by page as at once; alice
        // only her own, and may not ask for another's.
        let all = trail(&operator, "", 500).await;
        assert_eq!(all.len(), 6, "{all:#?}");
        assert_eq!(trail(&operator, "", 2).await, all, "pages of 2 walk the same entries");
        let times: Vec<&str> = all.iter().map(|e| e["at"].as_str().unwrap_or("")).collect();
        assert!(times.windows(2).all(|w| w[0] >= w[1]), "newest first: {times:?}");
        let hers = trail(&alice, "", 1).await;
        assert_eq!(hers.len(), 2, "{hers:#?}");
        assert!(hers.iter().all(|e| e["principal"] == "alice"), "{hers:#?}");
        assert_eq!(
            trail(&operator, "&principal=alice", 50).await,
            hers,
            "the operator filters by principal"
        );
        let other = alice.get("/api/v1/audit?principal=carol").await;
        assert_eq!(other.status, 403, "{other:#?}");
        let bad = operator.get("/api/v1/audit?since=yesterday").await;
        assert_eq!(bad.status, 400, "{bad:#?}");

        // The CLI prints the same trail as a table.
        let out = tokio::process::Command::new(bin())
            .args(["audit", "--outcome", "refused_policy", "--since", "1h", "--gateway"])
            .arg(&gateway.base)
            .args(["--token", ALICE])
            .output()
            .await
            .expect("run mcptask audit");
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{table}\n{}", String::from_utf8_lossy(&out.stderr));
        let rows: Vec<&str> = table.lines().skip(1).collect();
        assert_eq!(rows.len(), 1, "{table}");
        assert!(
            rows[0].contains("alice") && rows[0].contains("demo/failing_job") && rows[0].contains("unknown_tool"),
            "{table}"
        );
        drop((demo, upstream));
    })
    .await;
}
