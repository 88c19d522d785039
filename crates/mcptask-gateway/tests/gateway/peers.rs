//! The front before an upstream that behaves as real servers do (issue
//! 32's acceptance), on the in-process seam: a call that times out leaves
//! the server usable.

use std::time::{Duration, Instant};

use mcptask_testkit::with_deadline;
use rmcp::model::{CallToolResponse, CallToolResult};
use rmcp::service::ServiceError;
use serde_json::json;

use crate::seam::{Declares, Seam};

/// The bound on each test: a hang fails here, not in the harness.
const LIMIT: Duration = Duration::from_secs(30);

fn text(answer: Result<CallToolResponse, ServiceError>) -> String {
    match answer {
        Ok(CallToolResponse::Complete(CallToolResult { content, .. })) => content[0]
            .as_text()
            .map(|t| t.text.clone())
            .unwrap_or_default(),
        other => panic!("expected a synchronous answer, got {other:?}"),
    }
}

/// After one call of a server times out (`call_timeout_ms`), that server's
/// other tools stay listed and its next call answers, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_call_times_out_the_servers_tools_stay_listed_and_its_next_call_works() {
    with_deadline(LIMIT, async {
        let seam = Seam::start("", "call_timeout_ms = 300").await;
        let alice = seam.front(Some("alice"), Declares::No).await;
        let timed_out = alice.call("up__stall", json!({})).await;
        assert!(
            format!("{timed_out:?}").contains("did not answer within 300ms"),
            "{timed_out:?}"
        );
        let listed = alice.peer().list_tools(None).await.expect("tools/list");
        let names: Vec<&str> = listed.tools.iter().map(|t| t.name.as_ref()).collect();
        for tool in ["up__echo", "up__held", "up__stall"] {
            assert!(names.contains(&tool), "{tool} is still listed: {names:?}");
        }
        let started = Instant::now();
        let answer = text(alice.call("up__echo", json!({"text": "still here"})).await);
        let took = started.elapsed();
        println!("the call after a timeout answered in {took:?}");
        assert_eq!(answer, "still here");
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
        // The REST face too.
        seam.call(Some("alice"), "echo", Some(false))
            .await
            .expect("the next call at the Rust face");
        assert_eq!(seam.upstream.heard("echo"), 2);
    })
    .await;
}
