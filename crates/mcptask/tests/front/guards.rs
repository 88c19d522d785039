//! The guards every HTTP request meets before any transport (`guard.rs`,
//! `serve.rs`): a forged `Host` is refused on the fast path exactly as the
//! full way refuses it, with tokens and without; with `auth = "none"` the
//! REST API is guarded the same way; and a client that trickles its request
//! head or body, or idles, loses its connection after the listener's
//! timeouts while the calls of others keep answering.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use mcptask_testkit::*;

const ALICE: &str = "alice-token-0123456789";
/// The host of the tokens gateway's `public_url`: allowed beside loopback.
const PUBLIC_HOST: &str = "mcptask.example.test";

/// A 2026-07-28 stateless `tools/call` of `up__greet` (the fast path: a
/// plain tool of a stateless HTTP upstream), with `host` in `Host`.
async fn fast_call(mcp: &str, host: &str, token: Option<&str>) -> (u16, String) {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
    "params": {"name": "up__greet", "arguments": {"name": "guard"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "guards-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    let mut request = reqwest::Client::new()
        .post(mcp)
        .header("Host", host)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "up__greet")
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let answer = request.send().await.expect("POST /mcp");
    let status = answer.status().as_u16();
    (status, answer.text().await.expect("the answer"))
}

/// A 2026-07-28 `tools/list` (the full way: rmcp's transport), with `host`.
async fn full_way_list(mcp: &str, host: &str, token: Option<&str>) -> (u16, String) {
    let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "guards-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    let mut request = reqwest::Client::new()
        .post(mcp)
        .header("Host", host)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/list")
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let answer = request.send().await.expect("POST /mcp");
    let status = answer.status().as_u16();
    (status, answer.text().await.expect("the answer"))
}

async fn get_with_host(url: &str, host: &str, token: Option<&str>) -> u16 {
    let mut request = reqwest::Client::new().get(url).header("Host", host);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("GET").status().as_u16()
}

/// The text of a JSON-RPC answer, JSON or one SSE event.
fn answer_json(text: &str) -> Value {
    let json = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(text);
    serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn gateway_toml(db: &str, auth: &str, upstream: &str) -> String {
    format!(
        "[database]\nurl = {db:?}\n\n[api]\nlisten = \"127.0.0.1:0\"\n{auth}\n\n[proxy]\nenabled = true\n\n[[servers]]\nname = \"demo\"\nurl = {upstream:?}\nprefix = \"up\"\n"
    )
}

/// With tokens and with `auth = "none"`: a call on the fast path reaches
/// the upstream at a loopback name (and, with tokens, at `public_url`'s
/// host); with `Host: evil.example` it is refused 403 before anything is
/// relayed, as the full way refuses it. Without the guard in front of the
/// byte relay, the forged call was relayed and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_host_is_refused_on_the_fast_path_with_tokens_and_without() {
    with_deadline(Duration::from_secs(180), async {
        let dir = tempfile::tempdir().expect("temp dir");
        let demo_db = format!("sqlite:{}", dir.path().join("server.db").display());
        let _demo = DemoServer::start_named("guards-host-server", &demo_db, &[]).await;
        let upstream = ScriptedServer::start(&_demo.url).await;
        let tokens = format!(
            "public_url = \"http://{PUBLIC_HOST}:8443\"\n\n[[api.tokens]]\ntoken = {ALICE:?}\nprincipal = \"alice\""
        );
        for (name, auth, token) in [
            ("tokens", tokens.as_str(), Some(ALICE)),
            ("open", "auth = \"none\"", None),
        ] {
            let gw_dir = dir.path().join(name);
            std::fs::create_dir_all(&gw_dir).unwrap();
            let db = format!("sqlite:{}", gw_dir.join("gateway.db").display());
            let (_gateway, api) = start_gateway_with(
                &format!("guards-host-{name}"),
                &gw_dir,
                &gateway_toml(&db, auth, &upstream.url()),
            )
            .await;
            let mcp = format!("{}/mcp", api.base);
            let port = api.base.rsplit(':').next().unwrap().to_string();

            // The fast path works at a loopback name: the call is relayed.
            let before = upstream.seen_method("tools/call").len();
            let (status, text) = fast_call(&mcp, &format!("127.0.0.1:{port}"), token).await;
            assert_eq!(status, 200, "{name}: {text}");
            assert_eq!(
                answer_json(&text)["result"]["content"][0]["text"],
                "Hello, guard!",
                "{name}: {text}"
            );
            assert_eq!(upstream.seen_method("tools/call").len(), before + 1);

            // A forged Host: refused, and nothing reaches the upstream.
            let (status, text) = fast_call(&mcp, "evil.example", token).await;
            assert_eq!(status, 403, "{name}: the fast path relayed a forged Host: {text}");
            assert_eq!(text, "Forbidden: Host header is not allowed", "{name}");
            let (status, _) = fast_call(&mcp, &format!("evil.example:{port}"), token).await;
            assert_eq!(status, 403, "{name}: with the port");
            assert_eq!(
                upstream.seen_method("tools/call").len(),
                before + 1,
                "{name}: a forged call reached the upstream"
            );
            // The full way answers the same.
            let (status, text) = full_way_list(&mcp, "evil.example", token).await;
            assert_eq!((status, text.as_str()), (403, "Forbidden: Host header is not allowed"), "{name}");

            if token.is_some() {
                // public_url's host is allowed, on any port.
                let (status, text) = fast_call(&mcp, PUBLIC_HOST, token).await;
                assert_eq!(status, 200, "{name}: public_url's host: {text}");
                // With tokens, the REST API answers at any name (a CLI or a
                // scraper at the replica's own address); the token guards it.
                let tasks = format!("{}/api/v1/tasks", api.base);
                assert_eq!(get_with_host(&tasks, "10.1.2.3:7777", token).await, 200);
                assert_eq!(get_with_host(&tasks, "10.1.2.3:7777", None).await, 401);
            } else {
                // Without tokens, nothing else guards the REST API: a page at
                // another name (DNS rebinding) is refused there too.
                let tasks = format!("{}/api/v1/tasks", api.base);
                assert_eq!(get_with_host(&tasks, "evil.example", None).await, 403);
                assert_eq!(get_with_host(&tasks, "localhost", None).await, 200);
                // Health stays open to probes at any name.
                let health = format!("{}/healthz", api.base);
                assert_eq!(get_with_host(&health, "10.1.2.3:7777", None).await, 200);
            }
        }
    })
    .await;
}

/// What became of one slow connection.
enum Fate {
    /// The server closed it (EOF or reset), after this long.
    Closed(Duration),
    /// Still open when the test stopped waiting.
    Open,
}

/// Open a connection to `addr`, send `start`, then one more byte of a
/// request head every second (it never completes) until the server closes
/// the connection or `limit` passes.
async fn trickle(addr: String, start: &'static [u8], limit: Duration) -> Fate {
    let began = tokio::time::Instant::now();
    let Ok(mut stream) = TcpStream::connect(&addr).await else {
        return Fate::Closed(began.elapsed());
    };
    if stream.write_all(start).await.is_err() {
        return Fate::Closed(began.elapsed());
    }
    let mut buf = [0u8; 1024];
    let deadline = began + limit;
    loop {
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => return Fate::Closed(began.elapsed()),
                // An answer (a 408 or the like) before the close: read on.
                Ok(_) => {}
            },
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                if tokio::time::Instant::now() >= deadline {
                    return Fate::Open;
                }
                if stream.write_all(b"x").await.is_err() {
                    return Fate::Closed(began.elapsed());
                }
            }
        }
    }
}

/// 200 connections trickling their request heads a byte a second, and one
/// idle after an answer, are all closed after the request-head timeout
/// (10 s), and 50 trickling their bodies after the body timeout (30 s),
/// while calls on other connections keep answering; the demo server's
/// listener bounds them the same way. Without a timer given to hyper
/// (axum's own `serve`), they all stayed open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_request_heads_and_idle_connections_are_closed_while_calls_answer() {
    // Far above the 10 s and 30 s timeouts, far below "never".
    const LIMIT: Duration = Duration::from_secs(50);
    with_deadline(Duration::from_secs(180), async {
        let dir = tempfile::tempdir().expect("temp dir");
        let demo_db = format!("sqlite:{}", dir.path().join("server.db").display());
        let demo = DemoServer::start_named("guards-slow-server", &demo_db, &[]).await;
        let db = format!("sqlite:{}", dir.path().join("gateway.db").display());
        let (_gateway, api) = start_gateway_with(
            "guards-slow-gateway",
            dir.path(),
            &gateway_toml(&db, "auth = \"none\"", &demo.url),
        )
        .await;
        let addr = api.base.trim_start_matches("http://").to_string();
        let demo_addr = demo
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_string();

        let mut slow = Vec::new();
        for _ in 0..200 {
            slow.push(tokio::spawn(trickle(
                addr.clone(),
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
                LIMIT,
            )));
        }
        // Heads sent whole, bodies trickled.
        let mut slow_bodies = Vec::new();
        for _ in 0..50 {
            slow_bodies.push(tokio::spawn(trickle(
                addr.clone(),
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{",
                LIMIT,
            )));
        }
        // A kept-alive connection left idle after its answer.
        let idle = tokio::spawn({
            let addr = addr.clone();
            async move {
                let mut stream = TcpStream::connect(&addr).await.expect("connect");
                stream
                    .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    .await
                    .unwrap();
                let began = tokio::time::Instant::now();
                let mut seen = Vec::new();
                let mut buf = [0u8; 1024];
                loop {
                    match tokio::time::timeout_at(began + LIMIT, stream.read(&mut buf)).await {
                        Ok(Ok(0)) | Ok(Err(_)) => return (seen, Fate::Closed(began.elapsed())),
                        Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
                        Err(_) => return (seen, Fate::Open),
                    }
                }
            }
        });
        let on_demo = tokio::spawn(trickle(
            demo_addr,
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
            LIMIT,
        ));

        // Meanwhile, calls answer.
        for i in 0..5 {
            let answer = post_tools_call(
                &format!("{}/mcp", api.base),
                None,
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                "up__greet",
                json!({"name": format!("caller {i}")}),
                json!({
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "guards-test", "version": "0"},
                    "io.modelcontextprotocol/clientCapabilities": {},
                }),
            )
            .await;
            assert_eq!(
                answer["result"]["content"][0]["text"],
                format!("Hello, caller {i}!"),
                "{answer}"
            );
        }

        let mut open = 0;
        let mut slowest = Duration::ZERO;
        for handle in slow {
            match handle.await.unwrap() {
                Fate::Closed(after) => slowest = slowest.max(after),
                Fate::Open => open += 1,
            }
        }
        assert_eq!(open, 0, "slow request heads still open after {LIMIT:?}");
        assert!(
            slowest >= Duration::from_secs(5),
            "closed after {slowest:?}: a slow client gets the timeout, not less"
        );
        for handle in slow_bodies {
            assert!(
                matches!(handle.await.unwrap(), Fate::Closed(_)),
                "a trickled body still held its connection after {LIMIT:?}"
            );
        }
        let (answered, fate) = idle.await.unwrap();
        assert!(
            String::from_utf8_lossy(&answered).starts_with("HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&answered)
        );
        assert!(
            matches!(fate, Fate::Closed(_)),
            "an idle kept-alive connection stayed open"
        );
        assert!(
            matches!(on_demo.await.unwrap(), Fate::Closed(_)),
            "demo-server kept a slow request head open"
        );
    })
    .await;
}

/// Writes `head` and then `body_len` bytes of body on a raw connection, all
/// of it before reading anything (as most clients do), then reads the
/// answer's status line. Returns the status, or the error that stopped it.
async fn write_all_then_read(addr: &str, head: String, body_len: usize) -> Result<String, String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("head: {e}"))?;
    let chunk = vec![b' '; 1 << 20];
    let mut sent = 0;
    while sent < body_len {
        let n = chunk.len().min(body_len - sent);
        stream
            .write_all(&chunk[..n])
            .await
            .map_err(|e| format!("body after {sent} bytes: {e}"))?;
        sent += n;
    }
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("answer: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    Ok(text.lines().next().unwrap_or_default().to_string())
}

/// A request refused before its body is read (declared too large; a
/// forged token) is answered to a client that writes its whole body first:
/// the gateway reads and discards the body before closing (a lingering
/// close). Without it the connection was reset under the client's write
/// ("broken pipe") and the 413 or 401 never read: 20 MiB fit in no socket
/// buffer, so the reset is certain without the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_body_is_read_away_so_its_writer_gets_the_answer() {
    with_deadline(Duration::from_secs(120), async {
        let dir = tempfile::tempdir().expect("temp dir");
        let demo_db = format!("sqlite:{}", dir.path().join("server.db").display());
        let demo = DemoServer::start_named("guards-linger-server", &demo_db, &[]).await;
        let db = format!("sqlite:{}", dir.path().join("gateway.db").display());
        let tokens = format!("[[api.tokens]]\ntoken = {ALICE:?}\nprincipal = \"alice\"");
        let (_gateway, api) = start_gateway_with(
            "guards-linger-gateway",
            dir.path(),
            &gateway_toml(&db, &tokens, &demo.url),
        )
        .await;
        let addr = api.base.trim_start_matches("http://").to_string();
        const BODY: usize = 20 << 20;
        let head = |token: &str| {
            format!(
                "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Method: tools/call\r\nMcp-Name: up__greet\r\nContent-Length: {BODY}\r\n\r\n"
            )
        };
        let too_large = write_all_then_read(&addr, head(ALICE), BODY).await;
        assert!(
            too_large.as_deref().is_ok_and(|s| s.contains(" 413 ")),
            "{too_large:?}"
        );
        let forged = write_all_then_read(&addr, head("forged-token-0123456789"), BODY).await;
        assert!(
            forged.as_deref().is_ok_and(|s| s.contains(" 401 ")),
            "{forged:?}"
        );
    })
    .await;
}
