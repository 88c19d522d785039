//! Listing never waits for a mute upstream (issue 42, item 5): the front's
//! `tools/list` answers at once with the servers that are ready, `/readyz`
//! counts the ones that are not (`GET /api/v1/servers` says which), and a
//! session hears `notifications/tools/list_changed` when a mute one starts
//! answering. A server slow to start is still waited for by a call of its
//! tools: only listing stops waiting.

use std::time::{Duration, Instant};

use mcptask_testkit::*;
use serde_json::json;

use super::peers_behaviour::{front_toml, listening_host};

fn names(tools: Vec<rmcp::model::Tool>) -> Vec<String> {
    tools.into_iter().map(|t| t.name.to_string()).collect()
}

/// A server that accepts connections and never answers `initialize` or
/// `tools/list`, beside a working one: the front lists the working one's
/// tools within 1 s of being asked, `/readyz` (still 200) counts the server
/// not ready and `/api/v1/servers` names it, and once the mute server
/// answers, the session hears `tools/list_changed` and lists its tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_answers_at_once_and_a_mute_upstream_is_announced_when_it_answers() {
    with_deadline(Duration::from_secs(120), async {
        let working = SyncUpstream::start().await;
        let behind = SyncUpstream::start().await;
        let mute = FaultFront::start(behind.url.trim_end_matches("/mcp")).await;
        mute.set(Fault::Hang);
        let db = TestDatabase::sqlite();
        let toml = front_toml(
            &db,
            &format!(
                "[[servers]]\nname = \"work\"\nurl = \"{}\"\n\n[[servers]]\nname = \"mute\"\nurl = \"{}\"\n",
                working.url,
                mute.url()
            ),
        );
        let gateway = GatewayProcess::start_toml("front before a mute upstream", &toml, &[]).await;
        let url = format!("{}/mcp", gateway.base);
        let (host, mut heard) = listening_host(&url).await;

        let asked = Instant::now();
        let tools = names(host.peer().list_all_tools().await.expect("tools/list"));
        let took = asked.elapsed();
        println!("tools/list answered in {took:?}: {tools:?}");
        assert!(took < Duration::from_secs(1), "tools/list took {took:?}");
        assert!(tools.iter().any(|n| n == "work__echo"), "{tools:?}");
        assert!(!tools.iter().any(|n| n.starts_with("mute__")), "{tools:?}");

        let api = gateway.client(None);
        let ready = api.get("/readyz").await;
        assert_eq!(ready.status, 200, "a mute upstream never makes the gateway unready: {ready:?}");
        assert!(
            ready.text.contains("not ready (tools not listed yet): 1"),
            "/readyz counts the server not ready: {:?}",
            ready.text
        );
        let servers = api.get("/api/v1/servers").await;
        let ready_of = |name: &str| {
            servers.json["servers"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| s["name"] == name)
                .map(|s| s["ready"].clone())
        };
        assert_eq!(ready_of("mute"), Some(json!(false)), "{:#}", servers.json);
        assert_eq!(ready_of("work"), Some(json!(true)), "{:#}", servers.json);

        mute.set(Fault::Forward);
        let answering = Instant::now();
        // Every list change from now on is heard; the one that matters
        // lists the mute server's tools (an earlier one, for the working
        // server, may still be on its way).
        loop {
            let left = Duration::from_secs(40).saturating_sub(answering.elapsed());
            if tokio::time::timeout(left, heard.recv()).await.is_err() {
                panic!(
                    "no tools/list_changed within 40 s of the mute server answering; /readyz {:?}",
                    api.get("/readyz").await.text
                );
            }
            let tools = names(host.peer().list_all_tools().await.expect("tools/list"));
            if tools.iter().any(|n| n == "mute__echo") {
                break;
            }
        }
        let announced = answering.elapsed();
        println!("the mute server's tools announced {announced:?} after it answered");
        // Its listing attempts are cut at 2 s, then 4 s, then 8 s: one of
        // them is under way when it answers (not one held for its 30 s
        // connect timeout).
        assert!(
            announced < Duration::from_secs(10),
            "announced {announced:?} after the server answered"
        );
        let ready = api.get("/readyz").await;
        assert!(
            ready.status == 200 && !ready.text.contains("not ready"),
            "{:?}",
            ready.text
        );
    })
    .await;
}

/// A stdio server that takes 6 s to start speaking (Node through `npx`
/// takes seconds too), called right after the gateway starts: the call
/// waits for its first listing and is answered, not refused "not ready" —
/// its listing attempt is never cut, since cutting it would kill the child
/// that is starting and begin again from nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_of_a_stdio_server_slow_to_start_waits_for_it() {
    with_deadline(Duration::from_secs(120), async {
        let db = TestDatabase::sqlite();
        let dir = tempfile::tempdir().expect("temp dir");
        let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
        let toml = front_toml(
            &db,
            &format!(
                "[[servers]]\nname = \"slow\"\ncommand = \"sh\"\nargs = [\"-c\", {script}, {bin}, {state}]\n",
                script = q("sleep 6; exec \"$0\" fixture-toolset --state \"$1\""),
                bin = q(bin()),
                state = q(&dir.path().join("jobs.json").display().to_string()),
            ),
        );
        let started = Instant::now();
        let gateway = GatewayProcess::start_toml("front before a slow starter", &toml, &[]).await;
        let client = mcp::TestClient::http(
            &format!("{}/mcp", gateway.base),
            None,
            mcp::Lifecycle::Modern { tasks: false },
        )
        .await
        .expect("a client of /mcp");
        let answer = client
            .call("slow__echo", json!({"text": "late but here"}))
            .await;
        println!("answered {:?} after the start: {answer:?}", started.elapsed());
        let text = format!("{answer:?}");
        assert!(text.contains("late but here"), "{text}");
    })
    .await;
}
