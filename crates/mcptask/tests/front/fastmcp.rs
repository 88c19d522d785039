//! Invisible to a client nobody here wrote: FastMCP's default client (PyPI,
//! mode "auto": `server/discover` at 2026-07-28, the legacy handshake for
//! older servers) asks the same of two npm servers (the reference
//! "everything" and "filesystem" servers, 2025-11-25, stdio) directly and
//! through mcptask, at `mcptask proxy --stdio` and at `/mcp` of
//! `mcptask serve`, with `prefix = ""` so that names are the servers' own.
//! Through mcptask it gets the servers' tools, prompts and resources, and
//! the same answers to the same calls, prompts and reads, in 2026-07-28:
//! the front adds the tasks extension and changes nothing else.
//!
//! The peers come from `scripts/install-test-tools`; without them the test
//! skips loudly, except under `CI=true`, where it fails.

use std::path::Path;

use mcptask_testkit::peers::{FastMcp, Filesystem};
use mcptask_testkit::{Everything, GatewayProcess, bin};
use serde_json::{Value, json};

/// What the probe asks of a server: tools to call, prompts to get,
/// resources to read (names as each server has them).
fn asks(everything: bool, file: &Path) -> Value {
    if everything {
        json!({
            "tools": [["echo", {"message": "through"}], ["get-sum", {"a": 2, "b": 40}]],
            "prompts": [["simple-prompt", {}], ["args-prompt", {"city": "Lyon"}]],
            "resources": ["demo://resource/static/document/architecture.md"],
        })
    } else {
        json!({
            "tools": [
                ["read_text_file", {"path": file.display().to_string()}],
                ["list_allowed_directories", {}],
            ],
            "prompts": [],
            "resources": [],
        })
    }
}

/// `asks` with the server to reach.
fn plan(server: Value, asks: &Value) -> Value {
    let mut plan = asks.clone();
    for (key, value) in server.as_object().expect("a server").iter() {
        plan[key] = value.clone();
    }
    plan
}

/// The probe's reports, one per plan, or the test fails with the client's
/// error.
async fn probe(client: &FastMcp, plans: Vec<Value>) -> Vec<Value> {
    let count = plans.len();
    let plans = Value::Array(plans);
    let reports = client
        .probe(&plans)
        .await
        .unwrap_or_else(|e| panic!("{e}\nplans: {plans:#}"));
    assert_eq!(reports.len(), count, "a report per plan");
    reports
}

/// The report's `key` as a list of strings.
fn names(report: &Value, key: &str) -> Vec<String> {
    let list = report[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {report:#}"));
    list.iter()
        .map(|v| v.as_str().expect("a name").to_string())
        .collect()
}

/// Asserts that `through` (a report through mcptask) lists everything
/// `direct` lists and answers each ask as `direct` does.
fn same_answers(server: &str, face: &str, direct: &Value, through: &Value) {
    for key in ["tools", "prompts", "resources"] {
        let listed = names(through, key);
        for name in names(direct, key) {
            assert!(
                listed.contains(&name),
                "{server} at {face}: {key} {name:?} is missing: {listed:?}"
            );
        }
    }
    for key in ["calls", "prompt_results", "reads"] {
        assert_eq!(
            direct[key], through[key],
            "{server} at {face}: the {key} differ"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fastmcps_default_client_gets_the_same_answers_through_the_front() {
    let test = "fastmcps_default_client_gets_the_same_answers_through_the_front";
    let (Some(client), Some(everything), Some(filesystem)) = (
        FastMcp::or_skip(test),
        Everything::or_skip(test),
        Filesystem::or_skip(test),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    // The filesystem server compares what it is asked for with its roots'
    // real paths.
    let root = dir.path().join("shared");
    std::fs::create_dir_all(&root).expect("the served directory");
    let root = root.canonicalize().expect("a canonical path");
    let file = root.join("note.txt");
    std::fs::write(&file, "written before the probe\n").expect("a file to read");

    // Directly: each server on its own, over stdio.
    let q = |s: &Path| s.display().to_string();
    let (fs_program, fs_args) = filesystem.command(&root);
    let ev_server =
        json!({"command": q(&everything.node), "args": [q(&everything.entry), "stdio"]});
    let fs_server = json!({"command": fs_program, "args": fs_args});
    let ev_asks = asks(true, &file);
    let fs_asks = asks(false, &file);
    let direct = probe(
        &client,
        vec![plan(ev_server, &ev_asks), plan(fs_server, &fs_asks)],
    )
    .await;
    let (ev_direct, fs_direct) = (&direct[0], &direct[1]);

    // Through mcptask: both servers behind one front, names kept.
    let toml = format!(
        "[database]\nurl = {db:?}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n\
         [proxy]\nenabled = true\n{ev}{fs}",
        db = format!("sqlite:{}", dir.path().join("front.db").display()),
        ev = everything.server_toml("everything", "prefix = \"\"\nconnect_timeout_ms = 20000\n"),
        fs = filesystem.server_toml(
            "files",
            &root,
            "prefix = \"\"\nconnect_timeout_ms = 20000\n"
        ),
    );
    let config = dir.path().join("mcptask.toml");
    std::fs::write(&config, &toml).expect("the proxy's configuration");
    let stdio = json!({
        "command": bin(),
        "args": ["proxy", "--stdio", "--config", q(&config)],
        "env": {"MCPTASK_LOG": "warn"},
    });
    let gateway = GatewayProcess::start_toml("front before npm servers", &toml, &[]).await;
    let http = json!({"url": format!("{}/mcp", gateway.base)});
    // One probe for the four: each face before each server.
    let faces = [("proxy --stdio", stdio), ("/mcp", http)];
    let servers = [
        ("everything", ev_direct, &ev_asks),
        ("filesystem", fs_direct, &fs_asks),
    ];
    let mut plans = Vec::new();
    for (_, face) in &faces {
        for (_, _, asks) in &servers {
            plans.push(plan(face.clone(), asks));
        }
    }
    let mut reports = probe(&client, plans).await.into_iter();
    for (face, _) in &faces {
        for (name, direct, _) in &servers {
            let through = reports.next().expect("a report");
            assert_eq!(
                through["protocol"], "2026-07-28",
                "{name} at {face}: FastMCP speaks the newest revision to the front: {through:#}"
            );
            same_answers(name, face, direct, &through);
        }
    }
    assert_eq!(
        ev_direct["protocol"], "2025-11-25",
        "the npm servers are of the older era"
    );
}
