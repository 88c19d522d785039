//! The upstream layer against a SEP-2663 server (mcptask-server over
//! Streamable HTTP): detection says `Sep2663`, and a synchronous call that
//! does not declare the tasks extension is answered synchronously even for
//! a task-capable tool, while one that declares it gets a task (which a
//! synchronous call cannot read as a tool result).

use std::time::Duration;

use mcptask_client::remote::Timeouts;
use mcptask_client::upstream::{
    self, LaneOptions, Protocol, SyncEvent, SyncOptions, UpstreamError,
};
use mcptask_client::{ServerDef, ServerRegistry};
use mcptask_testkit::fixtures::client::RemoteServer;
use serde_json::json;

const TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(10),
    call: Duration::from_secs(10),
};

async fn done(
    mut call: upstream::SyncCall,
) -> Result<rmcp::model::CallToolResponse, UpstreamError> {
    match tokio::time::timeout(Duration::from_secs(10), call.next())
        .await
        .expect("an event within 10 s")
    {
        Some(SyncEvent::Done(r)) => r,
        Some(other) => panic!("unexpected {other:?}"),
        None => panic!("no Done"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep2663_server_detected_and_called_synchronously() {
    let server = RemoteServer::start(None).await;
    let registry = ServerRegistry::new();
    registry.upsert(ServerDef::http("durable", server.url()));
    let info = registry.protocol("durable", TIMEOUTS).await.unwrap();
    assert_eq!(info.protocol, Protocol::Sep2663);
    assert_eq!(info.protocol_version, "2026-07-28");

    let pool = registry.lanes("durable", LaneOptions::default()).unwrap();
    let call = upstream::sync_call(
        pool.acquire().await.unwrap(),
        "quick",
        json!({"n": 1}),
        SyncOptions::default(),
    )
    .await
    .unwrap();
    let rmcp::model::CallToolResponse::Complete(result) =
        done(call).await.expect("a synchronous result")
    else {
        panic!("a synchronous call answers a result");
    };
    let text = serde_json::to_value(&result).unwrap()["content"][0]["text"].clone();
    assert_eq!(text, json!("quick {\"n\":1}"));

    // Declaring the extension lets the server answer with a task instead,
    // which the call hands back as such.
    let call = upstream::sync_call(
        pool.acquire().await.unwrap(),
        "quick",
        json!({"n": 2}),
        SyncOptions {
            declare_tasks: true,
            ..SyncOptions::default()
        },
    )
    .await
    .unwrap();
    let answer = done(call).await.expect("an answer");
    assert!(
        matches!(answer, rmcp::model::CallToolResponse::Task(_)),
        "{answer:?}"
    );
}
