//! Traces across the hop: a caller's `traceparent` (in `_meta`, SEP-414)
//! reaches the upstream, and the spans `mcptask serve` exports over OTLP —
//! the front's `tools/call`, the driver's, the upstream request's and every
//! poll of the upstream task — form that one trace. The REST face does the
//! same with the `traceparent` HTTP header.

use std::time::Duration;

use mcptask_testkit::{
    DemoServer, GatewayProcess, GatewaySpec, OtlpReceiver, ReceivedSpan, TestDatabase, status,
    wait_terminal, with_deadline,
};
use rmcp::model::{CallToolRequestParams, CallToolResponse, RequestMetaObject};
use serde_json::json;

/// The caller's trace and span (what an agent host would send).
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
/// The trace of the REST call.
const REST_TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";

/// OTLP span kinds.
const SERVER: i32 = 2;
const CLIENT: i32 = 3;

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_is_one_trace_from_the_host_to_the_upstream() {
    with_deadline(Duration::from_secs(180), async {
        let collector = OtlpReceiver::start().await;
        let upstream_db = TestDatabase::sqlite();
        let demo = DemoServer::start(&upstream_db.url, &[]).await;
        let front_db = TestDatabase::sqlite();
        let toml = format!(
            "{}\n[proxy]\nenabled = true\n\n[telemetry]\nenabled = true\nendpoint = {:?}\nservice_name = \"mcptask-under-test\"\n",
            GatewaySpec::open(&front_db.url, &[("demo", &demo.url)]).toml(),
            collector.endpoint,
        );
        // Batches leave every 200 ms rather than every 5 s.
        let gateway =
            GatewayProcess::start_toml("gateway", &toml, &[("OTEL_BSP_SCHEDULE_DELAY", "200")])
                .await;
        let client = gateway.front_client().await;

        let mut params = CallToolRequestParams::new("demo__slow_compute")
            .with_arguments(json!({"seconds": 2}).as_object().unwrap().clone());
        let mut meta = RequestMetaObject::default();
        meta.set_traceparent(format!("00-{TRACE_ID}-{CALLER_SPAN}-01"));
        params.meta = Some(meta);
        let id = match client.peer().call_tool_once(params).await.expect("tools/call") {
            CallToolResponse::Task(t) => t.task.task_id,
            other => panic!("expected a task, got {other:?}"),
        };
        let done = wait_terminal(&client, &id, Duration::from_secs(60)).await;
        assert_eq!(status(&done), "completed", "{done:#}");

        let spans = collector
            .wait_trace(TRACE_ID, Duration::from_secs(60), |spans| {
                let has = |name: &str| spans.iter().any(|s| s.name == name);
                has("tools/call demo__slow_compute")
                    && has("tools/call slow_compute")
                    && has("driver sep2663 slow_compute")
                    && has("tasks/get")
            })
            .await;
        let all = || format!("{:#?}", collector.spans());

        // The front's span continues the caller's.
        let front = named(&spans, "tools/call demo__slow_compute");
        assert_eq!(front.len(), 1, "one front span: {}", all());
        let front = front[0];
        assert_eq!(front.parent, CALLER_SPAN, "{front:#?}");
        assert_eq!(front.kind, SERVER);
        assert_eq!(front.service, "mcptask-under-test");
        assert_eq!(front.attr("mcp.method.name"), Some("tools/call"));
        assert_eq!(front.attr("gen_ai.tool.name"), Some("demo__slow_compute"));
        assert_eq!(front.attr("mcp.protocol.version"), Some("2026-07-28"));
        assert!(front.attr("jsonrpc.request.id").is_some(), "{front:#?}");
        assert_eq!(front.attr("network.transport"), Some("tcp"));

        // The upstream request, under it.
        let upstream = named(&spans, "tools/call slow_compute");
        assert_eq!(upstream.len(), 1, "one upstream call: {}", all());
        assert_eq!(upstream[0].parent, front.span_id);
        assert_eq!(upstream[0].kind, CLIENT);
        assert_eq!(upstream[0].attr("gen_ai.tool.name"), Some("slow_compute"));
        assert_eq!(upstream[0].attr("mcptask.server"), Some("demo"));

        // The driver and every poll, run later from the kept row, join it.
        let driver = named(&spans, "driver sep2663 slow_compute");
        assert_eq!(driver.len(), 1, "one driver run: {}", all());
        assert_eq!(driver[0].parent, front.span_id);
        let polls = named(&spans, "tasks/get");
        assert!(!polls.is_empty(), "the polls: {}", all());
        for poll in &polls {
            assert_eq!(poll.parent, front.span_id, "{poll:#?}");
            assert_eq!(poll.kind, CLIENT);
            assert_eq!(poll.attr("mcp.method.name"), Some("tasks/get"));
        }

        // The upstream was called, and polled, in the same trace.
        let log = demo.log();
        let traced = |method: &str| {
            log.lines()
                .any(|l| l.contains("request in a trace") && l.contains(method) && l.contains(TRACE_ID))
        };
        assert!(traced("tools/call"), "the upstream's tools/call carried the trace:\n{log}");
        assert!(traced("tasks/get"), "the upstream's tasks/get carried the trace:\n{log}");

        // The REST face reads the trace from the HTTP headers.
        let api = gateway.client(None);
        let reply = api
            .send(
                api.request(reqwest::Method::POST, "/api/v1/calls")
                    .header("traceparent", format!("00-{REST_TRACE_ID}-{CALLER_SPAN}-01"))
                    .json(&json!({"server": "demo", "tool": "slow_compute", "arguments": {"seconds": 1}})),
            )
            .await;
        assert_eq!(reply.status, 202, "{reply:#?}");
        let id = reply.json["task"]["id"].as_str().expect("a call id").to_string();
        api.wait_status(&id, "completed").await;
        let rest = "POST /api/v1/calls demo/slow_compute";
        let spans = collector
            .wait_trace(REST_TRACE_ID, Duration::from_secs(60), |spans| {
                let has = |name: &str| spans.iter().any(|s| s.name == name);
                has(rest) && has("tools/call slow_compute") && has("tasks/get")
            })
            .await;
        let call = named(&spans, rest);
        assert_eq!(call.len(), 1, "one REST span: {}", all());
        assert_eq!(call[0].parent, CALLER_SPAN);
        assert_eq!(call[0].kind, SERVER);
        let upstream = named(&spans, "tools/call slow_compute");
        assert_eq!(upstream.len(), 1, "{}", all());
        assert_eq!(upstream[0].parent, call[0].span_id);
        for poll in named(&spans, "tasks/get") {
            assert_eq!(poll.parent, call[0].span_id, "{poll:#?}");
        }
    })
    .await;
}

/// The trace of the fast-path call and of the declaring call below.
const FAST_TRACE_ID: &str = "5c1e0b7a9d3f4e2a8b6c4d2e0f1a3b5c";
const TASKS_TRACE_ID: &str = "6d2f1c8b0e4a5f3b9c7d5e3f1a2b4c6d";

/// A 2026-07-28 `tools/call` of `tool` posted raw, as a stateless client
/// does, with the caller's trace in the `traceparent` HTTP header only.
async fn post_call(
    mcp: &str,
    tool: &str,
    trace_id: &str,
    capabilities: serde_json::Value,
) -> serde_json::Value {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "trace-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let traceparent = format!("00-{trace_id}-{CALLER_SPAN}-01");
    mcptask_testkit::post_tools_call(
        mcp,
        None,
        &traceparent,
        tool,
        json!({"name": "trace"}),
        meta,
    )
    .await
}

/// Every path through the front continues the caller's trace: the fast
/// path's byte relay exports the same server span as the full way and a
/// client span, and the upstream's parent is the front's span (not the
/// caller's); a declaring caller whose trace is only in the HTTP header
/// is continued too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_continues_the_callers_trace_and_the_upstream_sees_the_fronts_span() {
    with_deadline(Duration::from_secs(180), async {
        let collector = OtlpReceiver::start().await;
        let upstream_db = TestDatabase::sqlite();
        let demo = DemoServer::start(&upstream_db.url, &[]).await;
        let recorder = mcptask_testkit::ScriptedServer::start(&demo.url).await;
        let front_db = TestDatabase::sqlite();
        let toml = format!(
            "{}\n[proxy]\nenabled = true\n\n[telemetry]\nenabled = true\nendpoint = {:?}\nservice_name = \"mcptask-under-test\"\n",
            GatewaySpec::open(&front_db.url, &[("demo", &recorder.url())]).toml(),
            collector.endpoint,
        );
        let gateway =
            GatewayProcess::start_toml("gateway", &toml, &[("OTEL_BSP_SCHEDULE_DELAY", "200")])
                .await;
        let mcp = format!("{}/mcp", gateway.base);
        let all = || format!("{:#?}", collector.spans());

        // The fast path: a synchronous tool, tasks not declared.
        let answer = post_call(&mcp, "demo__greet", FAST_TRACE_ID, json!({})).await;
        assert_eq!(answer["result"]["content"][0]["text"], "Hello, trace!", "{answer}");
        let seen = recorder.seen_method("tools/call");
        let call = seen.last().expect("the call reached the upstream");
        assert_eq!(
            call.params["_meta"]["io.modelcontextprotocol/clientInfo"]["name"], "trace-test",
            "relayed as bytes (the fast path): {}",
            call.params
        );
        let spans = collector
            .wait_trace(FAST_TRACE_ID, Duration::from_secs(60), |spans| {
                let has = |name: &str| spans.iter().any(|s| s.name == name);
                has("tools/call demo__greet") && has("tools/call greet")
            })
            .await;
        let front = named(&spans, "tools/call demo__greet");
        assert_eq!(front.len(), 1, "one front span: {}", all());
        let front = front[0];
        assert_eq!(front.parent, CALLER_SPAN, "{front:#?}");
        assert_eq!(front.kind, SERVER);
        assert_eq!(front.attr("mcp.protocol.version"), Some("2026-07-28"));
        let client = named(&spans, "tools/call greet");
        assert_eq!(client.len(), 1, "one upstream call: {}", all());
        let client = client[0];
        assert_eq!(client.parent, front.span_id);
        assert_eq!(client.kind, CLIENT);
        assert_eq!(client.attr("mcptask.server"), Some("demo"));
        // The upstream's parent is the front's client span, in the header
        // and in the request's `_meta` alike.
        let expected = format!("00-{FAST_TRACE_ID}-{}-01", client.span_id);
        let header = call.headers.get("traceparent").and_then(|v| v.to_str().ok());
        assert_eq!(header, Some(expected.as_str()), "{:?}", call.headers);
        assert_eq!(call.params["_meta"]["traceparent"], expected.as_str(), "{}", call.params);

        // A declaring caller, its trace in the HTTP header only.
        let tasks = serde_json::to_value(
            rmcp::model::ClientCapabilities::builder().enable_tasks().build(),
        )
        .unwrap();
        let answer = post_call(&mcp, "demo__greet", TASKS_TRACE_ID, tasks).await;
        // The full way (a tracked call; greet answers at once).
        assert_eq!(answer["result"]["content"][0]["text"], "Hello, trace!", "{answer}");
        let spans = collector
            .wait_trace(TASKS_TRACE_ID, Duration::from_secs(60), |spans| {
                spans.iter().any(|s| s.name == "tools/call demo__greet")
            })
            .await;
        let front = named(&spans, "tools/call demo__greet");
        assert_eq!(front.len(), 1, "one front span: {}", all());
        assert_eq!(front[0].parent, CALLER_SPAN, "{:#?}", front[0]);
    })
    .await;
}
