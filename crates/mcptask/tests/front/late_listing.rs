//! Listing never waits for a mute upstream (issue 42, item 5): the front's
//! `tools/list` answers at once with the servers that are ready, `/readyz`
//! names the ones that are not, and a session hears
//! `notifications/tools/list_changed` when a mute one starts answering.

use std::time::{Duration, Instant};

use mcptask_testkit::*;

use super::peers_behaviour::{front_toml, listening_host};

fn names(tools: Vec<rmcp::model::Tool>) -> Vec<String> {
    tools.into_iter().map(|t| t.name.to_string()).collect()
}

/// A server that accepts connections and never answers `initialize` or
/// `tools/list`, beside a working one: the front lists the working one's
/// tools within 1 s of being asked, `/readyz` (still 200) says which server
/// is not ready, and once the mute server answers, the session hears
/// `tools/list_changed` and lists its tools.
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
            ready.text.contains("not ready: mute") && !ready.text.contains("work"),
            "/readyz names the server not ready: {:?}",
            ready.text
        );

        mute.set(Fault::Forward);
        let answering = Instant::now();
        // Every list change from now on is heard; the one that matters
        // lists the mute server's tools (an earlier one, for the working
        // server, may still be on its way).
        loop {
            let left = Duration::from_secs(30).saturating_sub(answering.elapsed());
            if tokio::time::timeout(left, heard.recv()).await.is_err() {
                let seen: Vec<String> = mute
                    .seen()
                    .iter()
                    .map(|s| format!("{:?} {} {}", s.at.checked_duration_since(answering), s.method, s.answered))
                    .collect();
                panic!(
                    "no tools/list_changed within 30 s of the mute server answering; it saw {seen:#?}; /readyz {:?}",
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
        assert!(
            announced < Duration::from_secs(5),
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
