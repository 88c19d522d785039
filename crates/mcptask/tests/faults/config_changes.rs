//! Config changes across a restart: `mcptask serve` started again with an
//! edited `mcptask.toml` (a reload by SIGHUP, without a restart:
//! [`super::live_config`]). Only the
//! endpoint identity (the URL of an HTTP server; command, args and cwd of a
//! stdio one) decides whether a live task is still on "the same server".

use serde_json::{Value, json};

use mcptask_testkit::*;

struct Rig {
    _demo: DemoServer,
    proxy: ScriptedServer,
    dir: tempfile::TempDir,
    db: String,
}

async fn rig(name: &str) -> Rig {
    let dir = tempfile::tempdir().expect("temp dir");
    let demo_db = format!("sqlite:{}", dir.path().join("server.db").display());
    let demo = DemoServer::start_named(&format!("{name}-server"), &demo_db, &[]).await;
    let proxy = ScriptedServer::start(&demo.url).await;
    let db = format!("sqlite:{}", dir.path().join("gateway.db").display());
    Rig {
        _demo: demo,
        proxy,
        dir,
        db,
    }
}

impl Rig {
    async fn gateway(&self, name: &str, servers: &str) -> (LoggedChild, Api) {
        start_gateway_with(
            name,
            self.dir.path(),
            &fault_gateway_toml(&self.db, servers),
        )
        .await
    }
}

fn server(url: &str, token: &str, extra: &str) -> String {
    format!(
        "[[servers]]\nname = \"demo\"\nurl = {url:?}\n{extra}headers = {{ Authorization = \"Bearer {token}\" }}\n"
    )
}

async fn slow(api: &Api, seconds: u64) -> String {
    let t = api
        .start_task("slow_compute", json!({"seconds": seconds}))
        .await;
    t["id"].as_str().unwrap().to_string()
}

fn reason(t: &Value) -> &str {
    t["error"]["data"]["reason"].as_str().unwrap_or_default()
}

/// Rotating the token, editing headers and timeouts (then restarting the
/// gateway) keeps the server's live tasks tracked: they complete with the
/// server's result, and the new credentials are the ones used.
#[tokio::test]
async fn token_header_and_timeout_edits_keep_live_tasks_tracked() {
    with_deadline(WAIT, async {
        let rig = rig("rotate").await;
        let url = rig.proxy.url();
        let (mut gateway, api) = rig
            .gateway("rotate-gw1", &server(&url, "old-token", ""))
            .await;
        let id = slow(&api, 4).await;
        api.wait_task(&id, "polled", |t| t["pollCount"].as_i64() > Some(0))
            .await;
        gateway.kill().await;
        let edited = server(
            &url,
            "new-token",
            "call_timeout_ms = 7000\nconnect_timeout_ms = 3000\n",
        )
        .replace("headers = { ", "headers = { X-Team = \"blue\", ");
        let (_gateway, api) = rig.gateway("rotate-gw2", &edited).await;
        let done = api
            .wait_task(&id, "terminal", |t| t["completedAt"].is_string())
            .await;
        assert_eq!(done["status"], "completed", "{done:#}");
        let seen = rig.proxy.seen_method("tasks/get");
        let last = seen.last().expect("polled");
        assert_eq!(last.authorization.as_deref(), Some("Bearer new-token"));
        assert_eq!(
            last.headers.get("x-team").and_then(|v| v.to_str().ok()),
            Some("blue")
        );
        assert!(
            seen.iter()
                .any(|s| s.authorization.as_deref() == Some("Bearer old-token")),
            "the first gateway used the old token"
        );
    })
    .await;
}

/// Pointing the server name at another endpoint fails its live tasks (the
/// new endpoint never heard of them), and so does removing the server; both
/// with `connection_unavailable` and a reason that says what happened.
#[tokio::test]
async fn changed_endpoint_or_removed_server_fails_live_tasks_with_a_clear_reason() {
    with_deadline(WAIT, async {
        let rig = rig("moved").await;
        let url = rig.proxy.url();
        let (mut gateway, api) = rig.gateway("moved-gw1", &server(&url, "t", "")).await;
        let moved = slow(&api, 60).await;
        gateway.kill().await;
        // The same machine behind another URL is another endpoint.
        let other = url.replace("/mcp", "/mcp/");
        let (mut gateway, api) = rig.gateway("moved-gw2", &server(&other, "t", "")).await;
        let t = api
            .wait_task(&moved, "failed", |t| t["completedAt"].is_string())
            .await;
        assert_eq!(
            (t["status"].as_str(), reason(&t)),
            (Some("failed"), "connection_unavailable"),
            "{t:#}"
        );
        let message = t["statusMessage"].as_str().unwrap();
        assert!(message.contains("another endpoint"), "{message}");
        let removed = slow(&api, 60).await;
        gateway.kill().await;
        let (_gateway, api) = rig
            .gateway(
                "moved-gw3",
                &server(&url, "t", "").replace("name = \"demo\"", "name = \"other\""),
            )
            .await;
        let t = api
            .wait_task(&removed, "failed", |t| t["completedAt"].is_string())
            .await;
        assert_eq!(reason(&t), "connection_unavailable", "{t:#}");
        let message = t["statusMessage"].as_str().unwrap();
        assert!(message.contains("no longer configured"), "{message}");
    })
    .await;
}
