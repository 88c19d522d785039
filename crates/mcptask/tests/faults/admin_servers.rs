//! Servers set through the admin API (`/api/v1/admin/servers`) on real
//! gateways: kept in the database, applied by every replica without a
//! restart or a file edit, checked exactly as the file is, kept across a
//! restart, the file winning for a name it defines, operators only, HTTP
//! servers only (nothing that runs a program or reads the host), and
//! each change in the audit trail with who made it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use mcptask_testkit::*;

/// A file with one server of its own (`filed`) and the test tokens.
fn file(db: &TestDatabase, upstream: &SyncUpstream) -> String {
    GatewaySpec::with_tokens(&db.url, &[("filed", &upstream.url)]).toml()
}

async fn echo(api: &Api, server: &str, text: &str) -> Reply {
    api.post(
        "/api/v1/calls",
        &json!({"server": server, "tool": "echo", "arguments": {"text": text}}),
    )
    .await
}

fn echoed(reply: &Reply) -> bool {
    reply.status == 200 && reply.json["outcome"] == "completed"
}

fn listed<'a>(list: &'a Value, name: &str) -> Vec<&'a Value> {
    list["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == name)
        .collect()
}

/// What the file's own check says of `server` defined in the file: the
/// message after its position.
fn file_message(db: &TestDatabase, upstream: &SyncUpstream, server: &str) -> String {
    let text = format!("{}\n[[servers]]\n{server}\n", file(db, upstream));
    let e = mcptask_gateway::Config::parse("mcptask.toml", &text).unwrap_err();
    e.0.split_once(": ").unwrap().1.to_string()
}

on_both_stores! {
    /// One gateway: a server added through the API is callable at once;
    /// a bad change is refused with the file's message and changes
    /// nothing; the file's server cannot be shadowed; a principal token is
    /// refused; a restart keeps the added server; each change is audited
    /// with who made it; a later file edit defining the same name wins and
    /// the listing says so.
    async fn servers_set_through_the_admin_api(db) {
        with_deadline(WAIT, async {
            let upstream = SyncUpstream::start().await;
            let toml = file(&db, &upstream);
            let mut gateway = GatewayProcess::start_toml("admin-gw", &toml, &[]).await;
            let op = gateway.client(Some(OPERATOR));
            let alice = gateway.client(Some(ALICE));

            // Operators only.
            alice
                .send(
                    alice
                        .request(reqwest::Method::PUT, "/api/v1/admin/servers/sneaky")
                        .json(&json!({"url": upstream.url})),
                )
                .await
                .assert_error(403, "forbidden");
            alice.get("/api/v1/admin/servers").await.assert_error(403, "forbidden");

            // Added: callable at once, without a restart or a file edit.
            assert!(!echoed(&echo(&op, "added", "before").await));
            let put = op
                .send(
                    op.request(reqwest::Method::PUT, "/api/v1/admin/servers/added")
                        .json(&json!({"url": upstream.url})),
                )
                .await;
            assert_eq!(put.status, 200, "{put:#?}");
            assert_eq!(put.json["applied"], true, "{put:#?}");
            let called = echo(&op, "added", "hello").await;
            assert!(echoed(&called), "{called:#?}");

            // A bad change: the file's own message; nothing changes.
            let bad = op
                .send(
                    op.request(reqwest::Method::PUT, "/api/v1/admin/servers/added")
                        .json(&json!({"url": "ftp://example.com/mcp"})),
                )
                .await;
            bad.assert_error(400, "invalid_config");
            let message = bad.json["error"]["message"].as_str().unwrap();
            let expected = file_message(&db, &upstream, "name = \"added\"\nurl = \"ftp://example.com/mcp\"");
            assert!(message.starts_with("admin API server \"added\":"), "{message}");
            assert!(message.ends_with(&expected), "{message}\nvs the file's:\n{expected}");
            let typo = op
                .send(
                    op.request(reqwest::Method::PUT, "/api/v1/admin/servers/other")
                        .json(&json!({"url": upstream.url, "timeout": 5})),
                )
                .await;
            typo.assert_error(400, "invalid_config");
            assert!(
                typo.json["error"]["message"].as_str().unwrap().contains("unknown field `timeout`"),
                "{typo:#?}"
            );
            // Nothing that makes the gateway run a program or read its
            // own files or environment.
            for (key, definition) in [
                ("command", json!({"command": "/bin/sh", "args": ["-c", "id"]})),
                ("oauth", json!({"url": upstream.url, "oauth": {"grant": "client_credentials",
                    "client_id": "x", "client_secret_env": "MCPTASK_SECRET_KEY",
                    "authorization_server": "http://127.0.0.1:9"}})),
            ] {
                let refused = op
                    .send(
                        op.request(reqwest::Method::PUT, "/api/v1/admin/servers/host")
                            .json(&definition),
                    )
                    .await;
                refused.assert_error(400, "not_settable");
                let message = refused.json["error"]["message"].as_str().unwrap();
                assert!(message.contains(&format!("\"{key}\"")), "{message}");
            }
            assert!(echoed(&echo(&op, "added", "still").await));
            let list = op.get("/api/v1/admin/servers").await;
            assert_eq!(list.status, 200, "{list:#?}");
            assert!(listed(&list.json, "other").is_empty(), "{list:#?}");
            let added = listed(&list.json, "added");
            assert_eq!(added.len(), 1, "{list:#?}");
            assert_eq!(added[0]["origin"], "api");
            assert_eq!(added[0]["in_force"], true);
            assert_eq!(added[0]["definition"]["url"], upstream.url.as_str());
            let by = added[0]["changed_by"].as_str().unwrap().to_string();
            assert!(by.starts_with("operator token "), "{by}");

            // The file wins: its server can be neither replaced nor deleted.
            let shadow = op
                .send(
                    op.request(reqwest::Method::PUT, "/api/v1/admin/servers/filed")
                        .json(&json!({"url": "http://127.0.0.1:9/mcp"})),
                )
                .await;
            shadow.assert_error(409, "defined_in_file");
            op.send(op.request(reqwest::Method::DELETE, "/api/v1/admin/servers/filed"))
                .await
                .assert_error(409, "defined_in_file");
            assert!(echoed(&echo(&op, "filed", "file").await));

            // Audited, with who made it.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let trail = op.get("/api/v1/audit?server=added").await;
                let events = trail.json["events"].as_array().cloned().unwrap_or_default();
                let made = events.iter().any(|e| {
                    e["tool"] == "admin.put_server" && e["principal"] == by.as_str() && e["outcome"] == "completed"
                });
                let refused = events.iter().any(|e| {
                    e["tool"] == "admin.put_server" && e["outcome"] == "failed"
                });
                if made && refused {
                    break;
                }
                assert!(Instant::now() < deadline, "admin changes not audited: {trail:#?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }

            // A restart keeps it.
            gateway.sigterm();
            assert!(gateway.exited().await.success());
            let gateway = GatewayProcess::start_toml("admin-gw restarted", &toml, &[]).await;
            let op = gateway.client(Some(OPERATOR));
            assert!(echoed(&echo(&op, "added", "after restart").await));

            // A file edit that defines the same name: the file wins, and
            // the listing shows both, the stored one shadowed.
            let edited = format!("{toml}\n[[servers]]\nname = \"added\"\nurl = {:?}\nprefix = \"fromfile\"\n", upstream.url);
            gateway.reload(&edited).await.unwrap();
            let list = op.get("/api/v1/admin/servers").await;
            let both = listed(&list.json, "added");
            assert_eq!(both.len(), 2, "{list:#?}");
            assert!(both.iter().any(|s| s["origin"] == "file"), "{list:#?}");
            assert!(
                both.iter().any(|s| s["origin"] == "api"
                    && s["shadowed_by_file"] == true
                    && s["in_force"] == false),
                "{list:#?}"
            );

            // Deleted through the API: gone (once the file no longer has it).
            gateway.reload(&toml).await.unwrap();
            let deleted = op
                .send(op.request(reqwest::Method::DELETE, "/api/v1/admin/servers/added"))
                .await;
            assert_eq!(deleted.status, 200, "{deleted:#?}");
            assert!(!echoed(&echo(&op, "added", "gone").await));
            op.send(op.request(reqwest::Method::DELETE, "/api/v1/admin/servers/added"))
                .await
                .assert_error(404, "not_found");
        })
        .await;
    }
}

/// Two replicas on one PostgreSQL: a server added through one is callable
/// through the other within a second, and a delete through the other
/// removes it from the first as fast; neither restarts nor reads a new file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_added_on_one_replica_is_callable_on_the_other_within_a_second() {
    let Some(db) = TestDatabase::postgres().await else {
        eprintln!(
            "a_server_added_on_one_replica_is_callable_on_the_other_within_a_second: SKIPPED (no PostgreSQL)"
        );
        return;
    };
    with_deadline(WAIT, async {
        let upstream = SyncUpstream::start().await;
        let toml = file(&db, &upstream);
        let a = GatewayProcess::start_toml("replica a", &toml, &[]).await;
        let b = GatewayProcess::start_toml("replica b", &toml, &[]).await;
        let (op_a, op_b) = (a.client(Some(OPERATOR)), b.client(Some(OPERATOR)));
        assert!(!echoed(&echo(&op_b, "added", "before").await));

        let put = op_a
            .send(
                op_a.request(reqwest::Method::PUT, "/api/v1/admin/servers/added")
                    .json(&json!({"url": upstream.url})),
            )
            .await;
        assert_eq!(put.status, 200, "{put:#?}");
        let stored = Instant::now();
        loop {
            if echoed(&echo(&op_b, "added", "on b").await) {
                break;
            }
            assert!(
                stored.elapsed() < Duration::from_secs(1),
                "replica b does not serve the added server a second after it was stored; log:\n{}",
                b.log()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        eprintln!(
            "replica b served the server {:?} after replica a stored it",
            stored.elapsed()
        );

        let deleted = op_b
            .send(op_b.request(reqwest::Method::DELETE, "/api/v1/admin/servers/added"))
            .await;
        assert_eq!(deleted.status, 200, "{deleted:#?}");
        let removed = Instant::now();
        while echoed(&echo(&op_a, "added", "on a").await) {
            assert!(
                removed.elapsed() < Duration::from_secs(1),
                "replica a still serves the deleted server a second later"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
}

/// A file with the front on (virtual servers are served there).
fn file_with_front(db: &TestDatabase, upstream: &SyncUpstream) -> String {
    format!("{}\n[proxy]\nenabled = true\n", file(db, upstream))
}

/// The tool names alice sees at `/mcp/team` of `gateway`, once it serves
/// that virtual server (`None` while it answers 404).
async fn team_tools(gateway: &GatewayProcess, who: &str) -> Result<Vec<String>, String> {
    use mcptask_testkit::mcp::{Lifecycle, TestClient};
    let client = TestClient::http(
        &format!("{}/mcp/team", gateway.base),
        Some(who),
        Lifecycle::Modern { tasks: true },
    )
    .await?;
    let tools = client
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| e.to_string())?;
    client.close().await;
    Ok(tools.into_iter().map(|t| t.name.to_string()).collect())
}

/// Two replicas on one PostgreSQL: a virtual server added through one
/// restricts a team on the other within a second (exactly its tools, to
/// its principals only); a bad one is refused with the file's message and
/// changes nothing; one the file defines cannot be replaced; a delete
/// through the other removes it from the first; each change is audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_server_added_on_one_replica_restricts_a_team_on_the_other() {
    let Some(db) = TestDatabase::postgres().await else {
        eprintln!(
            "a_virtual_server_added_on_one_replica_restricts_a_team_on_the_other: SKIPPED (no PostgreSQL)"
        );
        return;
    };
    with_deadline(WAIT, async {
        let upstream = SyncUpstream::start().await;
        let toml = format!(
            "{}\n[[virtual_servers]]\nname = \"filed-team\"\ntools = [\"filed/*\"]\n",
            file_with_front(&db, &upstream)
        );
        let a = GatewayProcess::start_toml("replica a", &toml, &[]).await;
        let b = GatewayProcess::start_toml("replica b", &toml, &[]).await;
        let (op_a, op_b) = (a.client(Some(OPERATOR)), b.client(Some(OPERATOR)));
        assert!(team_tools(&b, ALICE).await.is_err(), "no team yet");

        // A bad selection: the file's own message, nothing stored.
        let bad = op_a
            .send(
                op_a.request(reqwest::Method::PUT, "/api/v1/admin/virtual_servers/team")
                    .json(&json!({"tools": ["nosuch/*"]})),
            )
            .await;
        bad.assert_error(400, "invalid_config");
        let message = bad.json["error"]["message"].as_str().unwrap();
        let in_file = format!("{toml}\n[[virtual_servers]]\nname = \"team\"\ntools = [\"nosuch/*\"]\n");
        let expected = mcptask_gateway::Config::parse("mcptask.toml", &in_file).unwrap_err().0;
        let expected = expected.split_once(": ").unwrap().1;
        assert!(
            message.starts_with("admin API virtual server \"team\":"),
            "{message}"
        );
        assert!(message.ends_with(expected), "{message}\nvs the file's:\n{expected}");
        let list = op_a.get("/api/v1/admin/virtual_servers").await;
        assert_eq!(list.status, 200, "{list:#?}");
        let names: Vec<&str> = list.json["virtual_servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["filed-team"], "{list:#?}");

        // The file wins for a name it defines.
        op_a.send(
            op_a.request(reqwest::Method::PUT, "/api/v1/admin/virtual_servers/filed-team")
                .json(&json!({"tools": ["filed/echo"]})),
        )
        .await
        .assert_error(409, "defined_in_file");

        // Added on a: alice's team on b within a second, bob refused.
        let put = op_a
            .send(
                op_a.request(reqwest::Method::PUT, "/api/v1/admin/virtual_servers/team")
                    .json(&json!({"tools": ["filed/echo"], "principals": ["alice"]})),
            )
            .await;
        assert_eq!(put.status, 200, "{put:#?}");
        assert_eq!(put.json["applied"], true, "{put:#?}");
        let stored = Instant::now();
        let tools = loop {
            if let Ok(tools) = team_tools(&b, ALICE).await {
                break tools;
            }
            assert!(
                stored.elapsed() < Duration::from_secs(1),
                "replica b does not serve the virtual server a second after it was stored; log:\n{}",
                b.log()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        eprintln!("replica b served the virtual server {:?} after replica a stored it", stored.elapsed());
        assert_eq!(tools, ["filed__echo"]);
        assert!(team_tools(&b, BOB).await.is_err(), "bob is not in the team");
        let listed = op_b.get("/api/v1/admin/virtual_servers/team").await;
        assert_eq!(listed.status, 200, "{listed:#?}");
        assert_eq!(listed.json["origin"], "api");
        assert_eq!(listed.json["definition"]["tools"], json!(["filed/echo"]));

        // Deleted through b: gone from a as fast.
        let deleted = op_b
            .send(op_b.request(reqwest::Method::DELETE, "/api/v1/admin/virtual_servers/team"))
            .await;
        assert_eq!(deleted.status, 200, "{deleted:#?}");
        let removed = Instant::now();
        while team_tools(&a, ALICE).await.is_ok() {
            assert!(
                removed.elapsed() < Duration::from_secs(1),
                "replica a still serves the deleted virtual server a second later"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }

        // Audited as virtual server changes.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let trail = op_a.get("/api/v1/audit?server=team").await;
            let events = trail.json["events"].as_array().cloned().unwrap_or_default();
            let tools: Vec<&str> = events.iter().filter_map(|e| e["tool"].as_str()).collect();
            if tools.contains(&"admin.put_virtual_server") && tools.contains(&"admin.delete_virtual_server") {
                break;
            }
            assert!(Instant::now() < deadline, "virtual server changes not audited: {trail:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
}
