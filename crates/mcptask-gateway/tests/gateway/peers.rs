//! The front before an upstream that behaves as real servers do (issue
//! 32's acceptance), on the in-process seam: a call that times out leaves
//! the server usable; a server that forgot its session is initialised
//! again; the caller's identity and progress token reach the upstream.

use std::time::{Duration, Instant};

use mcptask_testkit::{Everything, Fault, FaultFront, free_port, with_deadline};
use rmcp::model::{CallToolResponse, CallToolResult};
use rmcp::service::ServiceError;
use serde_json::{Value, json};

use crate::seam::{Declares, Seam, UrlSeam};

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
        for tool in ["up__echo", "up__held", "up__stall", "up__whoami"] {
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

/// An upstream that forgets its sessions (answers `404 Session not found`,
/// as servers do after an idle spell) is initialised again transparently:
/// the call made on a forgotten session succeeds, at both faces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_expired_its_session_is_initialised_again_and_the_call_succeeds() {
    with_deadline(LIMIT, async {
        let seam = Seam::start_legacy("", "").await;
        let alice = seam.front(Some("alice"), Declares::No).await;
        assert_eq!(
            text(alice.call("up__echo", json!({"text": "one"})).await),
            "one"
        );
        let expired = seam.upstream.expire_sessions().await;
        println!("the upstream forgot {expired} sessions");
        assert!(expired > 0, "the gateway held no session to expire");
        let started = Instant::now();
        let answer = alice.call("up__echo", json!({"text": "two"})).await;
        println!(
            "the call on a forgotten session answered in {:?}",
            started.elapsed()
        );
        assert_eq!(text(answer), "two");
        seam.upstream.expire_sessions().await;
        seam.call(Some("alice"), "echo", Some(false))
            .await
            .expect("the Rust face's call on a forgotten session");
        assert_eq!(seam.upstream.heard("echo"), 3);
    })
    .await;
}

/// What the recording upstream's `whoami` saw of its caller.
fn whoami(answer: &str) -> Value {
    serde_json::from_str(answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

/// The caller's `clientInfo` and its `progressToken` reach the upstream
/// (the front's full way, a legacy session-ful caller over the duplex
/// pipe); the upstream's progress comes back to the caller under its own
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_client_info_and_progress_token_reach_the_upstream() {
    with_deadline(LIMIT, async {
        let seam = Seam::start("", "").await;
        let host = crate::seam::RecordingHost::connect(&seam, "recording-host", "7.7.7").await;
        let (answer, progress) = host
            .call_with_progress("up__whoami", "caller-token-1")
            .await;
        let seen = whoami(&answer);
        println!("the upstream saw {seen}; the caller heard progress {progress:?}");
        assert_eq!(seen["progressToken"], crate::seam::HOST_TOKEN, "{seen}");
        assert_eq!(
            seen["clientInfo"],
            json!({"name": "recording-host", "version": "7.7.7"}),
            "{seen}"
        );
        // The upstream reports 1 then 2. The gateway relays them in order
        // and never a value below one it relayed; the recording host, an
        // rmcp client, handles each notification in a task of its own, so
        // it may note them swapped: what it hears is the two values (or,
        // had the gateway received them swapped, 2 alone).
        let mut heard = progress.clone();
        heard.sort_by(f64::total_cmp);
        assert!(
            heard == [1.0, 2.0] || heard == [2.0],
            "progress heard: {progress:?}"
        );
    })
    .await;
}

/// A 2025-11-25 upstream that holds sessions (the npm everything server over
/// HTTP) and expires one (a front answers the next request on it `404
/// Session not found` once, as servers do after an idle spell) is
/// initialised again transparently: the call made on the expired session
/// succeeds, on one new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_11_25_upstream_that_expires_its_session_is_initialised_again() {
    let test = "a_2025_11_25_upstream_that_expires_its_session_is_initialised_again";
    let Some(everything) = Everything::or_skip(test) else {
        return;
    };
    let (_server, url) = everything.start_http("everything", free_port()).await;
    let fault = FaultFront::start(url.trim_end_matches("/mcp")).await;
    with_deadline(Duration::from_secs(60), async {
        let seam = UrlSeam::start(&fault.url(), "").await;
        let alice = seam.front(Some("alice"), Declares::No).await;
        let echo = |m: &str| json!({"message": m});
        assert_eq!(text(alice.call("up__echo", echo("one")).await), "Echo: one");
        let sessions = fault.count("initialize");
        fault.set_for(Fault::SessionExpiredOnce, &["tools/call"]);
        let started = Instant::now();
        let answer = alice.call("up__echo", echo("two")).await;
        println!(
            "the call on the expired session answered in {:?} ({} initialize in all)",
            started.elapsed(),
            fault.count("initialize")
        );
        assert_eq!(text(answer), "Echo: two");
        let expired: Vec<_> = fault
            .seen()
            .into_iter()
            .filter(|s| s.answered == "session expired")
            .collect();
        assert_eq!(expired.len(), 1, "one 404 was answered: {expired:?}");
        assert_eq!(
            fault.count("initialize"),
            sessions + 1,
            "one new session: {:?}",
            fault.seen()
        );
        // And the calls after it go on on the new session.
        assert_eq!(
            text(alice.call("up__echo", echo("three")).await),
            "Echo: three"
        );
        assert_eq!(fault.count("initialize"), sessions + 1);
    })
    .await;
}
