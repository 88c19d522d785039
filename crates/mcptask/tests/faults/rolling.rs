//! Stopping a replica under load (docs/RELIABILITY.md, "Rolling updates"):
//! SIGTERM drains a gateway without failing a call in flight
//! (`mcptask_gateway::drain`), and three replicas on one PostgreSQL behind
//! nginx, restarted one by one, fail no call and lose or duplicate no task.
//!
//! Real processes: `mcptask serve` replicas with the front on, Debian's
//! nginx, the testkit's PostgreSQL. The upstream is a [`SyncUpstream`] in
//! the test process, which counts every `echo` per text: each call carries
//! its own text, so the test can say each reached the upstream exactly
//! once. The callers are 2026-07-28 clients without an SDK (stateless
//! `POST /mcp`), as a load balancer sees them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcptask_testkit::nginx::Nginx;
use mcptask_testkit::*;
use serde_json::{Value, json};
use tokio::time::Instant;

/// How long each `echo` runs at the upstream: calls are in flight when a
/// replica is told to stop.
const CALL_MS: u64 = 150;
/// How long each task's `echo` runs.
const TASK_MS: u64 = 400;

/// `mcptask.toml` of a replica on `db` listening on `port`, fronting
/// `upstream` as `up`.
fn replica_toml(db: &str, port: u16, upstream: &SyncUpstream) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
    format!(
        "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:{port}\"\nauth = \"none\"\n\n\
         [proxy]\nenabled = true\n\n\
         [tracker]\npoll_default_ms = 200\npoll_min_ms = 100\npoll_max_ms = 500\n\
         backoff_base_ms = 100\nbackoff_max_ms = 1000\n\n\
         [[servers]]\nname = \"up\"\nurl = {}\nanswer_within_ms = 0\n",
        q(db),
        q(&upstream.url)
    )
}

/// A client of the load or the probes (reqwest wants a TLS provider
/// installed before its first client, even for `http://`).
fn http_client() -> reqwest::Client {
    mcptask_client::tls::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("reqwest client")
}

/// Why a request got no answer.
#[derive(Debug)]
enum NoAnswer {
    /// The connection was refused: nothing was sent.
    Refused,
    /// Anything else: a failed call.
    Failed(String),
}

/// A stateless 2026-07-28 request to `mcp`, from a caller that declares
/// tasks if `tasks`; the JSON-RPC `result`.
async fn post(
    http: &reqwest::Client,
    mcp: &str,
    (method, name, tasks): (&str, &str, bool),
    mut params: Value,
) -> Result<Value, NoAnswer> {
    let capabilities = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "rolling-load", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let sent = http
        .post(mcp)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .header("Mcp-Name", name)
        .json(&body)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(e) if e.is_connect() => return Err(NoAnswer::Refused),
        Err(e) => return Err(NoAnswer::Failed(format!("{method} {name}: {e:?}"))),
    };
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| NoAnswer::Failed(format!("{method} {name}: reading the answer: {e:?}")))?;
    if !status.is_success() {
        return Err(NoAnswer::Failed(format!(
            "{method} {name}: HTTP {status}: {text}"
        )));
    }
    let json = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(&text);
    let answer: Value = serde_json::from_str(json.trim())
        .map_err(|e| NoAnswer::Failed(format!("{method} {name}: {e}: {text}")))?;
    match answer.get("result") {
        Some(result) => Ok(result.clone()),
        None => Err(NoAnswer::Failed(format!("{method} {name}: {answer}"))),
    }
}

fn text_of(result: &Value) -> Option<&str> {
    result["content"][0]["text"].as_str()
}

/// What the load saw.
#[derive(Default)]
struct Seen {
    /// Latency of each answered synchronous call.
    latencies: Vec<Duration>,
    /// When each answered call was sent and answered.
    spans: Vec<(Instant, Instant)>,
    failures: Vec<String>,
    /// Texts of calls refused at connect (nothing sent).
    refused: Vec<String>,
    /// Texts whose call or task completed with that text.
    answered: Vec<String>,
    /// Each created task: id and text.
    tasks: Vec<(String, String)>,
}

/// A load generator: `callers` workers making synchronous calls, and
/// `creators` creating front tasks and following each to its end, until
/// stopped (a refused connection stops a worker when `stop_when_refused`:
/// a lone gateway that closed its port).
struct Load {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(mcp: &str, callers: usize, creators: usize, stop_when_refused: bool) -> Load {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for w in 0..callers + creators {
            let http = http_client();
            let (mcp, seen, stop) = (mcp.to_string(), seen.clone(), stop.clone());
            let task_worker = w >= callers;
            workers.push(tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let go_on = if task_worker {
                        one_task(&http, &mcp, &seen, format!("task-{w}-{n}")).await
                    } else {
                        one_call(&http, &mcp, &seen, format!("call-{w}-{n}")).await
                    };
                    if !go_on && stop_when_refused {
                        return;
                    }
                }
            }));
        }
        Load {
            seen,
            stop,
            workers,
        }
    }

    /// Stop making new calls; wait for those made (and tasks followed) to end.
    async fn finish(self) -> Seen {
        self.stop.store(true, Ordering::SeqCst);
        for worker in self.workers {
            worker.await.expect("a load worker");
        }
        Arc::try_unwrap(self.seen)
            .ok()
            .expect("the workers ended")
            .into_inner()
            .expect("seen lock")
    }

    /// Until `n` more calls or tasks were answered (at most 30 s; the
    /// failures seen so far are the panic's message).
    async fn wait_answered(&self, n: usize) {
        let target = self.seen.lock().expect("seen lock").answered.len() + n;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (answered, failures) = {
                let seen = self.seen.lock().expect("seen lock");
                let failures: Vec<String> = seen.failures.iter().take(5).cloned().collect();
                (seen.answered.len(), failures)
            };
            if answered >= target {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{answered} answered in 30 s, not {target}; failures: {failures:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One synchronous call; false when it was refused.
async fn one_call(http: &reqwest::Client, mcp: &str, seen: &Mutex<Seen>, text: String) -> bool {
    let params = json!({"name": "up__echo", "arguments": {"text": text, "ms": CALL_MS}});
    let sent = Instant::now();
    let outcome = post(http, mcp, ("tools/call", "up__echo", false), params).await;
    let answered = Instant::now();
    let mut seen = seen.lock().expect("seen lock");
    match outcome {
        Ok(result) if text_of(&result) == Some(text.as_str()) && result["isError"] != true => {
            seen.latencies.push(answered - sent);
            seen.spans.push((sent, answered));
            seen.answered.push(text);
        }
        Ok(result) => seen.failures.push(format!("call {text}: {result}")),
        Err(NoAnswer::Refused) => {
            seen.refused.push(text);
            return false;
        }
        Err(NoAnswer::Failed(why)) => seen.failures.push(why),
    }
    true
}

/// One front task, created and followed to its end; false when its
/// creation was refused.
async fn one_task(http: &reqwest::Client, mcp: &str, seen: &Mutex<Seen>, text: String) -> bool {
    let params = json!({"name": "up__echo", "arguments": {"text": text, "ms": TASK_MS}});
    let created = match post(http, mcp, ("tools/call", "up__echo", true), params).await {
        Ok(result) => result,
        Err(NoAnswer::Refused) => {
            seen.lock().expect("seen lock").refused.push(text);
            return false;
        }
        Err(NoAnswer::Failed(why)) => {
            seen.lock().expect("seen lock").failures.push(why);
            return true;
        }
    };
    let Some(id) = created["task"]["taskId"]
        .as_str()
        .or(created["taskId"].as_str())
        .map(str::to_string)
    else {
        let why = format!("task {text}: no task created: {created}");
        seen.lock().expect("seen lock").failures.push(why);
        return true;
    };
    seen.lock()
        .expect("seen lock")
        .tasks
        .push((id.clone(), text.clone()));
    // Followed through whichever replica answers, to its end; a refused
    // poll (a lone gateway gone) is tried again: the task must still end.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let get = post(http, mcp, ("tasks/get", &id, true), json!({"taskId": id})).await;
        match get {
            Ok(task) if tasks::is_terminal(&task) => {
                let mut seen = seen.lock().expect("seen lock");
                if tasks::status(&task) == "completed" && text_of(&task["result"]) == Some(&text) {
                    seen.answered.push(text);
                } else {
                    seen.failures
                        .push(format!("task {id} ({text}) ended: {task}"));
                }
                return true;
            }
            Ok(_) | Err(NoAnswer::Refused) => {}
            Err(NoAnswer::Failed(why)) => {
                seen.lock().expect("seen lock").failures.push(why);
                return true;
            }
        }
        if Instant::now() > deadline {
            let why = format!("task {id} ({text}) did not end within 60 s");
            seen.lock().expect("seen lock").failures.push(why);
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The checks every run makes of what its load saw: no failure; every
/// task created once, ended, with its own result; every answered text
/// heard exactly once by the upstream, every refused one never; nothing
/// heard that no caller sent.
fn check_load(seen: &Seen, upstream: &SyncUpstream) {
    assert!(
        seen.failures.is_empty(),
        "{} failed calls (of {} answered): {:#?}",
        seen.failures.len(),
        seen.answered.len(),
        seen.failures
    );
    let ids: HashSet<&str> = seen.tasks.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids.len(),
        seen.tasks.len(),
        "a task id was handed out twice"
    );
    let answered: HashSet<&str> = seen.answered.iter().map(String::as_str).collect();
    for (id, text) in &seen.tasks {
        assert!(answered.contains(text.as_str()), "task {id} ({text}) lost");
    }
    let echoed: HashMap<String, usize> = upstream.echoed();
    for text in &seen.answered {
        assert_eq!(
            echoed.get(text).copied().unwrap_or(0),
            1,
            "{text}: the upstream heard it this many times"
        );
    }
    for text in &seen.refused {
        assert_eq!(
            echoed.get(text).copied().unwrap_or(0),
            0,
            "{text} was refused, yet the upstream heard it"
        );
    }
    let sent: HashSet<&str> = answered
        .iter()
        .copied()
        .chain(seen.refused.iter().map(String::as_str))
        .collect();
    for text in echoed.keys() {
        assert!(
            sent.contains(text.as_str()),
            "the upstream heard {text}, which no caller saw answered"
        );
    }
}

/// Calls answered, failures and latency percentiles, on one line.
fn summary(seen: &Seen) -> String {
    let mut sorted = seen.latencies.clone();
    sorted.sort();
    format!(
        "{} calls and tasks answered ({} synchronous calls, {} tasks), {} failed, {} refused at connect; call latency p50 {:?}, p99 {:?}, max {:?}",
        seen.answered.len(),
        seen.latencies.len(),
        seen.tasks.len(),
        seen.failures.len(),
        seen.refused.len(),
        mcptask_testkit::bench::percentile(&sorted, 0.50),
        mcptask_testkit::bench::percentile(&sorted, 0.99),
        sorted.last().copied().unwrap_or_default(),
    )
}

/// Requests that nginx's access log ([`Nginx::access_log`]) shows answered
/// 200 by the replica on `port` and in flight there at `at`: begun before
/// it, answered after it.
fn answered_across(access_log: &str, port: u16, at: std::time::SystemTime) -> usize {
    let at = at
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    let replica = format!("127.0.0.1:{port}");
    access_log
        .lines()
        .filter(|line| {
            // `status addr[, addr…] upstream_status[, …] request_time method uri msec`:
            // the fields from the right have no spaces; the last address tried
            // is the last one that names a replica.
            let fields: Vec<&str> = line.split_whitespace().collect();
            let n = fields.len();
            if n < 7 || fields[0] != "200" {
                return false;
            }
            let (Ok(ended), Ok(took)) =
                (fields[n - 1].parse::<f64>(), fields[n - 4].parse::<f64>())
            else {
                return false;
            };
            let last_replica = fields[1..n - 4]
                .iter()
                .rev()
                .find(|f| f.starts_with("127.0.0.1:"))
                .map(|f| f.trim_end_matches(','));
            last_replica == Some(replica.as_str()) && ended - took < at && at < ended
        })
        .count()
}

/// `GET /readyz` on a kept-alive connection every 20 ms until the answers
/// stop (the port closed): every status seen, in order (HTTP status and the
/// error code of a 503).
fn watch_readiness(base: &str) -> tokio::task::JoinHandle<Vec<(u16, String)>> {
    let url = format!("{base}/readyz");
    tokio::spawn(async move {
        let http = http_client();
        let mut seen: Vec<(u16, String)> = Vec::new();
        loop {
            match http.get(&url).send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let body: Value = response.json().await.unwrap_or(Value::Null);
                    let code = body["error"]["code"]
                        .as_str()
                        .or(body["code"].as_str())
                        .unwrap_or_default()
                        .to_string();
                    if seen.last() != Some(&(status, code.clone())) {
                        seen.push((status, code));
                    }
                }
                Err(_) => return seen,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// Until `GET /readyz` at `base` answers 200.
async fn wait_ready(base: &str) {
    let http = http_client();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await
            && r.status().is_success()
        {
            return;
        }
        assert!(Instant::now() < deadline, "{base} not ready within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One gateway under a steady load of synchronous calls is sent SIGTERM:
/// `/readyz` answers 503 `draining` on the connection it was polled on,
/// every call in flight at the signal completes (later ones are refused at
/// connect, before anything is sent), each answered call reached the
/// upstream once, and the process exits 0 within the drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drains_without_failing_a_call() {
    with_deadline(Duration::from_secs(60), async {
        let db = TestDatabase::sqlite();
        let upstream = SyncUpstream::start().await;
        let port = free_port();
        let mut gateway =
            GatewayProcess::start_toml("gateway", &replica_toml(&db.url, port, &upstream), &[])
                .await;
        wait_ready(&gateway.base).await;
        let readiness = watch_readiness(&gateway.base);
        let load = Load::start(&format!("{}/mcp", gateway.base), 6, 0, true);
        load.wait_answered(20).await;

        let signalled = Instant::now();
        gateway.sigterm();
        let status = gateway.exited().await;
        let exit = signalled.elapsed();
        let seen = load.finish().await;
        let readiness = readiness.await.expect("the readiness watcher");

        eprintln!(
            "sigterm: {}; exited {exit:?} after SIGTERM ({status}); /readyz went {readiness:?}",
            summary(&seen)
        );
        check_load(&seen, &upstream);
        assert!(
            status.success(),
            "exit status {status}; log:\n{}",
            gateway.log()
        );
        let across = seen
            .spans
            .iter()
            .filter(|(sent, answered)| *sent < signalled && *answered > signalled)
            .count();
        assert!(across > 0, "no call was in flight at SIGTERM");
        assert_eq!(
            readiness.last(),
            Some(&(503, "draining".to_string())),
            "/readyz must answer 503 draining once the drain began: {readiness:?}"
        );
        assert!(
            exit < Duration::from_secs(10),
            "exited {exit:?} after SIGTERM: the HTTP drain is bounded by 10 s"
        );
    })
    .await;
}

/// Three replicas on one PostgreSQL behind nginx, each SIGTERMed and
/// restarted in turn (the next once the last is ready) while a load
/// generator makes synchronous calls and creates front tasks (following
/// each to its end) through nginx for the whole run: no call fails, every
/// task ends with its own result, none is lost or made twice, and every
/// call reached the upstream exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_behind_nginx_fails_no_call() {
    let test = "rolling_restart_behind_nginx_fails_no_call";
    let Some(db) = TestDatabase::postgres().await else {
        eprintln!("{test}: SKIPPED (no PostgreSQL)");
        return;
    };
    let ports = [free_port(), free_port(), free_port()];
    let Some(nginx) = Nginx::start(test, &ports).await else {
        return;
    };
    with_deadline(Duration::from_secs(120), async {
        let upstream = SyncUpstream::start().await;
        let mut replicas = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let toml = replica_toml(&db.url, *port, &upstream);
            let replica = GatewayProcess::start_toml(&format!("replica {i}"), &toml, &[]).await;
            wait_ready(&replica.base).await;
            replicas.push(replica);
        }
        let load = Load::start(&format!("{}/mcp", nginx.base), 6, 3, false);
        let mut exits = Vec::new();
        let mut restarts = Vec::new();
        let mut signalled_at = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            // Load on every replica before this one stops.
            load.wait_answered(30).await;
            let signalled = Instant::now();
            signalled_at.push(std::time::SystemTime::now());
            replicas[i].sigterm();
            let status = replicas[i].exited().await;
            exits.push(signalled.elapsed());
            assert!(status.success(), "replica {i}: {status}; log:\n{}", replicas[i].log());
            let toml = replica_toml(&db.url, *port, &upstream);
            replicas[i] =
                GatewayProcess::start_toml(&format!("replica {i} (restarted)"), &toml, &[]).await;
            wait_ready(&replicas[i].base).await;
            restarts.push(signalled.elapsed());
        }
        load.wait_answered(30).await;
        let seen = load.finish().await;
        let access_log = nginx.access_log();
        let retried = access_log.lines().filter(|l| l.contains(", ")).count();
        // Each replica had requests in flight when it was told to stop, and
        // answered them: the drain was exercised at every stop.
        let across: Vec<usize> = ports
            .iter()
            .zip(&signalled_at)
            .map(|(port, at)| answered_across(&access_log, *port, *at))
            .collect();
        eprintln!(
            "rolling: {}; replicas exited {exits:?} after SIGTERM, ready again {restarts:?} after it; requests in flight at each SIGTERM, answered by the stopping replica: {across:?}; nginx moved {retried} requests to another replica",
            summary(&seen)
        );
        check_load(&seen, &upstream);
        assert!(seen.refused.is_empty(), "nginx refused {:?}", seen.refused);
        assert!(!seen.tasks.is_empty(), "no task was created");
        for (i, n) in across.iter().enumerate() {
            assert!(
                *n > 0,
                "no request was in flight at replica {i} when it was sent SIGTERM (in flight at each: {across:?}); nginx access log:\n{access_log}"
            );
        }
    })
    .await;
}

/// [`answered_across`] reads nginx's lines as [`Nginx::access_log`] writes
/// them, retried ones included.
#[test]
fn requests_in_flight_at_an_instant_are_read_from_the_access_log() {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(1_800_000_010_000);
    let log = "200 127.0.0.1:7001 200 0.150 POST /mcp 1800000010.050\n\
               200 127.0.0.1:7002 200 0.150 POST /mcp 1800000010.060\n\
               200 127.0.0.1:7001 200 0.150 POST /mcp 1800000009.990\n\
               200 127.0.0.1:7002, 127.0.0.1:7001 502, 200 0.150 POST /mcp 1800000010.100\n\
               200 127.0.0.1:7001, 127.0.0.1:7002 502, 200 0.150 POST /mcp 1800000010.100\n\
               502 127.0.0.1:7001 502 0.150 POST /mcp 1800000010.100\n";
    assert_eq!(answered_across(log, 7001, at), 2);
    assert_eq!(answered_across(log, 7002, at), 2);
    assert_eq!(answered_across(log, 7003, at), 0);
}
