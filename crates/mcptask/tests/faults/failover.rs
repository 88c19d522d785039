//! A PostgreSQL primary switch under load: two `mcptask serve` gateways on
//! a libpq-style host list (`postgres://…@primary,standby/db?target_session_attrs=read-write`)
//! take front task creates from eight callers; the primary of the
//! synchronous pair is SIGKILLed mid-load and the standby promoted at once.
//!
//! What must hold: both gateways carry on on the new primary (creates
//! succeed there), every create a caller got a task id for is on the new
//! primary and completes with its own result, and no call reaches the
//! upstream twice (each create has a text of its own; the upstream counts
//! its `echo` calls per text). Creates that failed while no server took
//! writes were never acknowledged, and the callers made them again under a
//! new text. Prints the promotion time, the first create each gateway
//! acknowledged after the promotion, the longest pause between two
//! acknowledgements around the kill, and when everything had settled.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mcptask_testkit::mcp::TestClient;
use mcptask_testkit::pg::ReplicatedPair;
use mcptask_testkit::*;
use rmcp::model::CallToolResponse;
use serde_json::json;
use tokio::sync::Mutex;

/// Callers per gateway.
const CALLERS: usize = 4;
/// Load before the kill.
const BEFORE_KILL: Duration = Duration::from_millis(1500);
/// Acknowledged creates each gateway must have after the promotion before
/// the load stops.
const AFTER_PROMOTION: usize = 20;

/// A create a caller got a task id for.
#[derive(Debug, Clone)]
struct Acked {
    gateway: usize,
    id: String,
    text: String,
    at: Instant,
}

/// `mcptask.toml` of a proxy on `db` in front of the synchronous upstream.
fn proxy_toml(db: &str, upstream: &SyncUpstream) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
    format!(
        "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n\
         [proxy]\nenabled = true\n\n[[servers]]\nname = \"up\"\nurl = {}\nanswer_within_ms = 0\n",
        q(db),
        q(&upstream.url)
    )
}

/// One caller: create `up__echo` tasks with texts of their own until
/// `stop`, recording each acknowledged one; a failed create is counted and
/// made again (under a new text).
async fn caller(
    gateway: usize,
    worker: usize,
    client: Arc<TestClient>,
    acked: Arc<Mutex<Vec<Acked>>>,
    failed: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) {
    let mut seq = 0;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let text = format!("g{gateway}-w{worker}-{seq}");
        match client.call("up__echo", json!({ "text": text })).await {
            Ok(CallToolResponse::Task(t)) => acked.lock().await.push(Acked {
                gateway,
                id: t.task.task_id,
                text,
                at: Instant::now(),
            }),
            Ok(other) => panic!("expected a task, got {other:?}"),
            Err(_) => {
                failed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_to_the_promoted_standby_loses_and_repeats_nothing() {
    let Some(pair) =
        ReplicatedPair::start("failover_to_the_promoted_standby_loses_and_repeats_nothing").await
    else {
        return;
    };
    with_deadline(Duration::from_secs(120), failover_run(&pair)).await;
}

async fn failover_run(pair: &ReplicatedPair) {
    let db = pair.fresh_database().await;
    let upstream = SyncUpstream::start().await;
    let toml = proxy_toml(&pair.host_list_url(&db), &upstream);
    let (a, b) = tokio::join!(
        GatewayProcess::start_toml("gateway A", &toml, &[]),
        GatewayProcess::start_toml("gateway B", &toml, &[]),
    );
    let gateways = [&a, &b];
    let mut clients = Vec::new();
    for g in gateways {
        let client = g.front_client().await;
        client.tools_once_listed("up__echo").await;
        clients.push(Arc::new(client));
    }

    let acked = Arc::new(Mutex::new(Vec::<Acked>::new()));
    let failed = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for (gateway, client) in clients.iter().enumerate() {
        for worker in 0..CALLERS {
            load.push(tokio::spawn(caller(
                gateway,
                worker,
                client.clone(),
                acked.clone(),
                failed.clone(),
                stop.clone(),
            )));
        }
    }

    tokio::time::sleep(BEFORE_KILL).await;
    let before_kill = acked.lock().await.len();
    assert!(before_kill > 0, "no create succeeded before the kill");
    pair.kill_primary();
    let killed = Instant::now();
    let promotion = pair.promote_standby().await;
    let promoted = Instant::now();

    // Both gateways carry on: each acknowledges creates made after the
    // promotion.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let after: Vec<usize> = (0..2)
            .map(|g| {
                acked
                    .try_lock()
                    .map(|a| {
                        a.iter()
                            .filter(|x| x.gateway == g && x.at > promoted)
                            .count()
                    })
                    .unwrap_or(0)
            })
            .collect();
        if after.iter().all(|&n| n >= AFTER_PROMOTION) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gateways did not carry on on the new primary: {after:?} creates acknowledged after the promotion (of {AFTER_PROMOTION} each); {} failed attempts\n{}\n--- gateway A ---\n{}\n--- gateway B ---\n{}",
            failed.load(Ordering::Relaxed),
            pair.log_tails(20),
            a.log(),
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in load {
        task.await.expect("a caller");
    }
    let acked = acked.lock().await.clone();
    // Creates acknowledged right after the kill may still be the old
    // primary's (its backends end when they notice; their commits reached
    // the standby, or they would not be acknowledged): the callers' outage
    // is the longest pause between two acknowledgements around the kill.
    let first_after_promotion: Vec<Option<u128>> = (0..2)
        .map(|g| {
            acked
                .iter()
                .filter(|x| x.gateway == g && x.at > promoted)
                .map(|x| (x.at - killed).as_millis())
                .min()
        })
        .collect();
    let longest_pause: Vec<u128> = (0..2)
        .map(|g| {
            let mut at: Vec<Instant> = acked
                .iter()
                .filter(|x| x.gateway == g)
                .map(|x| x.at)
                .collect();
            at.sort();
            at.windows(2)
                .filter(|w| w[1] + Duration::from_secs(1) > killed)
                .map(|w| (w[1] - w[0]).as_millis())
                .max()
                .unwrap_or(0)
        })
        .collect();

    // Every acknowledged task is on the new primary…
    let mut on_new_primary =
        <sqlx::PgConnection as sqlx::Connection>::connect(&pair.standby_url(&db))
            .await
            .expect("connect to the promoted standby");
    let ids: Vec<String> = acked.iter().map(|x| x.id.clone()).collect();
    let found: i64 = sqlx::query_scalar("SELECT count(*) FROM server_tasks WHERE id = ANY($1)")
        .bind(&ids)
        .fetch_one(&mut on_new_primary)
        .await
        .expect("read the new primary");
    assert_eq!(
        found as usize,
        ids.len(),
        "acknowledged tasks missing on the new primary"
    );
    // … and completes with its own result, through either gateway.
    for x in &acked {
        let client = &clients[1 - x.gateway];
        let done = wait_terminal(client, &x.id, WAIT).await;
        assert_eq!(status(&done), "completed", "{}: {done:#}", x.text);
        assert_eq!(result_text(&done), x.text, "{done:#}");
    }
    let settled = killed.elapsed();

    // None ran twice: every acknowledged text once; any other text (a
    // create whose answer was lost with the primary) at most once.
    let echoed = upstream.echoed();
    for x in &acked {
        assert_eq!(
            echoed.get(&x.text),
            Some(&1),
            "{} ran {:?} times",
            x.text,
            echoed.get(&x.text)
        );
    }
    let twice: HashMap<_, _> = echoed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "calls made twice: {twice:?}");

    eprintln!(
        "failover: {} creates acknowledged ({before_kill} before the kill), {} failed attempts; promotion {} ms; first create acknowledged after the promotion {:?} ms after the kill (gateways A, B); longest pause between acknowledgements {longest_pause:?} ms; all settled {} ms after the kill",
        acked.len(),
        failed.load(Ordering::Relaxed),
        promotion.as_millis(),
        first_after_promotion,
        settled.as_millis()
    );
}
