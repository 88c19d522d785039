//! The front's crash windows, in this process: a gateway runs on a tokio
//! runtime of its own with its call runtime's store interposed
//! (`mcptask_testkit::interposed::Crash`). At the window the writer stops for
//! good and the test shuts that runtime down, dropping everything the
//! gateway spawned at its next await: a process killed at that instant, its
//! store as a SIGKILL leaves it. A second gateway on the same store is the
//! restart. The windows are too narrow to hit with a signal from outside,
//! and the product holds no crash points of its own.

use std::sync::Arc;
use std::time::Duration;

use mcptask_core::call::CallState;
use mcptask_gateway::{Config, Gateway, StoreLayer};
use mcptask_testkit::interposed::{Crash, Interposed, Step};
use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::{Everything, FaultFront, TestDatabase, free_port, result_text, status};
use serde_json::json;

use crate::seam::caller;

const WAIT: Duration = Duration::from_secs(60);

/// A gateway on a runtime of its own, which [`Instance::kill`] ends.
struct Instance {
    runtime: tokio::runtime::Runtime,
    gateway: Gateway,
}

impl Instance {
    /// A gateway of `text` (TOML) with its call tasks seen through `layer`.
    async fn start(text: &str, layer: StoreLayer) -> Instance {
        let config = Config::parse("(crash)", text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the gateway");
        let gateway = runtime
            .spawn(async move {
                let store = mcptask_sql::open(&config.database.url)
                    .await
                    .expect("open the gateway's store");
                Gateway::start_layered(config, store, layer)
                    .await
                    .expect("start the gateway")
            })
            .await
            .expect("the gateway started");
        Instance { runtime, gateway }
    }

    /// A gateway of `text` writing straight to its store.
    async fn restart(text: &str) -> Instance {
        Instance::start(text, Box::new(|tasks| tasks)).await
    }

    /// An anonymous front client declaring tasks, served on the gateway's
    /// runtime (so that a kill ends its session too).
    async fn front(&self) -> TestClient {
        let anonymous = caller(None);
        let front = mcptask_gateway::front::server(
            &self.gateway.calls,
            Arc::new(move |_| anonymous.clone()),
        );
        TestClient::in_process_on(
            self.runtime.handle(),
            front,
            Lifecycle::Modern { tasks: true },
        )
        .await
    }

    /// The kill: every task of the gateway is dropped, no drain, no release.
    fn kill(self) {
        self.runtime.shutdown_background();
        drop(self.gateway);
    }
}

/// A layer that crashes the gateway at the first step `when` picks, and
/// the crash to wait for.
fn crashing(when: impl Fn(Step<'_>) -> bool + Send + Sync + 'static) -> (StoreLayer, Arc<Crash>) {
    let crash = Arc::new(Crash::at(when));
    let hook = crash.clone();
    (
        Box::new(move |tasks| Interposed::shared(tasks, hook)),
        crash,
    )
}

/// The gateway's configuration on `db` before `servers` (whole
/// `[[servers]]` entries): a short owner lease, so that the restarted
/// gateway recovers what the killed one held within the test.
fn gateway_toml(db: &TestDatabase, servers: &str) -> String {
    format!(
        "[database]\nurl = {url:?}\n[api]\nauth = \"none\"\n\
         [proxy]\nenabled = true\nowner_lease_ms = 1500\n\
         [tracker]\npoll_default_ms = 200\npoll_min_ms = 100\npoll_max_ms = 500\n{servers}",
        url = db.url,
    )
}

/// A `[[servers]]` entry for an HTTP upstream.
fn http_server(name: &str, url: &str) -> String {
    format!("\n[[servers]]\nname = {name:?}\nurl = {url:?}\n")
}

/// The demo server (SEP-2663 tasks) on a loopback port of this process, on
/// its own SQLite file: its URL, and its task store to count what it ran.
async fn demo_server(
    dir: &tempfile::TempDir,
) -> (String, Arc<dyn mcptask_core::store::ServerTaskStore>) {
    let url = format!("sqlite:{}", dir.path().join("demo.db").display());
    let options = mcptask_demo::DemoServerOptions::new(url.clone());
    let runtime = mcptask_demo::start_runtime(&options)
        .await
        .expect("the demo runtime");
    let app = mcptask_demo::router(runtime, &options, Default::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let demo_url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let tasks = mcptask_sql::open(&url)
        .await
        .expect("the demo's store")
        .server_tasks();
    (demo_url, tasks)
}

/// The wall clock in ms (what the stores read TTLs and purges against).
fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.expect("a clock after 1970").as_millis() as i64
}

/// Every task of a store, as (id, status).
async fn tasks_of(store: &Arc<dyn mcptask_core::store::ServerTaskStore>) -> Vec<(String, String)> {
    let page = store
        .list_tasks(None, false, None, 100, now_ms())
        .await
        .expect("list the tasks");
    page.tasks
        .iter()
        .map(|t| (t.id.clone(), t.status.as_str().to_string()))
        .collect()
}

/// Whether a create is the front's commit of an upstream task's handle:
/// the call task with its remote row, in one transaction.
fn is_handle_commit(tasks: &[mcptask_core::server::NewServerTask]) -> bool {
    tasks.iter().any(|task| task.call_row.is_some())
}

mcptask_testkit::on_both_backends! {
    /// The gateway dies right after a tracked call's row and its front task
    /// committed (one transaction), before the caller heard of it.
    /// Restarted, it adopts the front task and follows the same upstream
    /// task to its result: nothing is sent upstream twice, the call is one
    /// row and one front task.
    async fn crash_after_the_handle_commit_the_front_task_adopts_the_upstream_task(db: TestDatabase) {
        let dir = tempfile::tempdir().unwrap();
        let (demo, upstream) = demo_server(&dir).await;
        let toml = gateway_toml(&db, &http_server("demo", &demo));
        let (layer, crash) = crashing(|step| matches!(step, Step::AfterCreate(t) if is_handle_commit(t)));
        let gateway = Instance::start(&toml, layer).await;
        let client = gateway.front().await;
        let call = client.call("demo__slow_compute", json!({"seconds": 2, "label": "adopted"}));
        tokio::select! {
            answer = call => panic!("the caller heard of its task before the crash: {answer:?}"),
            () = crash.crashed() => gateway.kill(),
        }
        assert_eq!(tasks_of(&upstream).await.len(), 1, "the upstream created its task");

        let gateway = Instance::restart(&toml).await;
        let front = tasks_of(&db.server_tasks().await).await;
        assert_eq!(front.len(), 1, "one front task survived the crash: {front:?}");
        let client = gateway.front().await;
        let done = mcptask_testkit::wait_terminal(&client, &front[0].0, WAIT).await;
        assert_eq!(result_text(&done), "adopted: computed in 2s", "{done:#}");
        let upstream = tasks_of(&upstream).await;
        assert_eq!(upstream.len(), 1, "created once: {upstream:?}");
        assert_eq!(upstream[0].1, "completed");
        gateway.kill();
    }

    /// The gateway dies after the upstream created its task, before its row
    /// and front task committed. Restarted, it holds neither: no row without
    /// its front task, no front task without its row. (The upstream task is
    /// beyond reach: the caller never got an id and SEP-2663 lists no tasks;
    /// docs/RELIABILITY.md, known limits.)
    async fn crash_before_the_handle_commit_leaves_no_half_state(db: TestDatabase) {
        let dir = tempfile::tempdir().unwrap();
        let (demo, upstream) = demo_server(&dir).await;
        let toml = gateway_toml(&db, &http_server("demo", &demo));
        let (layer, crash) = crashing(|step| matches!(step, Step::BeforeCreate(t) if is_handle_commit(t)));
        let gateway = Instance::start(&toml, layer).await;
        let client = gateway.front().await;
        let call = client.call("demo__slow_compute", json!({"seconds": 1}));
        tokio::select! {
            answer = call => panic!("the caller heard of its task before the crash: {answer:?}"),
            () = crash.crashed() => gateway.kill(),
        }

        let gateway = Instance::restart(&toml).await;
        let (rows, _) = gateway
            .gateway
            .tracker
            .list(&Default::default(), None, 10)
            .await
            .expect("list the calls");
        assert!(rows.is_empty(), "no row: {rows:?}");
        assert!(tasks_of(&db.server_tasks().await).await.is_empty(), "no front task");
        assert_eq!(tasks_of(&upstream).await.len(), 1, "the upstream task was created");
        gateway.kill();
    }
}

mcptask_testkit::on_both_backends! {
    /// The gateway dies right after a 2025-11-25 upstream (the everything
    /// server over HTTP) created a front call's task, before the upstream's
    /// id was saved. Restarted, the gateway fails the front task (its
    /// upstream session is lost) and does not create the upstream task a
    /// second time: one `tools/call` upstream.
    async fn crash_before_a_2025_11_25_task_id_is_saved_the_call_is_not_made_twice(db: TestDatabase) {
        let test = "crash_before_a_2025_11_25_task_id_is_saved_the_call_is_not_made_twice";
        let Some(ev) = Everything::or_skip(test) else {
            return;
        };
        let (_upstream, url) = ev.start_http("everything", free_port()).await;
        let seen = FaultFront::start(url.trim_end_matches("/mcp")).await;
        let toml = gateway_toml(&db, &http_server("ev", &seen.url()));
        let (layer, crash) = crashing(|step| {
            matches!(step, Step::BeforeSaveState(state)
                if matches!(CallState::from_json(state, None), Ok(CallState::Sep1686 { upstream_task: Some(_), .. })))
        });
        let gateway = Instance::start(&toml, layer).await;
        let client = gateway.front().await;
        let id = client.start_task("ev__simulate-research-query", json!({"topic": "rust"})).await;
        crash.crashed().await;
        gateway.kill();
        assert_eq!(seen.count("tools/call"), 1);

        let gateway = Instance::restart(&toml).await;
        let client = gateway.front().await;
        let done = mcptask_testkit::wait_terminal(&client, &id, WAIT).await;
        assert_eq!(status(&done), "failed", "{done:#}");
        assert_eq!(seen.count("tools/call"), 1, "the upstream task was created once");
        gateway.kill();
    }
}
