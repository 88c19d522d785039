//! Servers that run long work as three plain tools (submit/status/cancel):
//! a real `mcptask serve` with `mcptask fixture-toolset` as a stdio server
//! and a `[[servers.toolsets]]` entry. Work submitted through the API is
//! tracked to its end with the toolset's own tools; what the fixture saw
//! (status polls and their times, cancels) is read from its state file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcptask_testkit::{
    Api, GATEWAY_LISTENING, LoggedChild, TestDatabase, WAIT, bin, serve_command, with_deadline,
};
use serde_json::{Value, json};

/// A gateway in front of the fixture, its config and the fixture's state.
struct Stack {
    gateway: LoggedChild,
    api: Api,
    config: PathBuf,
    state: PathBuf,
    _dir: tempfile::TempDir,
    _db: TestDatabase,
}

impl Stack {
    async fn start(db: TestDatabase) -> Stack {
        let dir = tempfile::tempdir().expect("temp dir");
        let state = dir.path().join("jobs.json");
        let config = dir.path().join("mcptask.toml");
        let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
        let text = format!(
            "[database]\nurl = {db}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n\
             [tracker]\npoll_default_ms = 200\npoll_min_ms = 100\npoll_max_ms = 30000\n\
             idle_tick_ms = 50\nbackoff_base_ms = 100\nbackoff_max_ms = 1000\nlease_ms = 3000\n\
             call_timeout_ms = 2000\n\n\
             [[servers]]\nname = \"jobs\"\ncommand = {bin}\nargs = [\"fixture-toolset\", \"--state\", {state}]\n\n\
             [[servers.toolsets]]\nname = \"jobs\"\nsubmit_tool = \"submit_job\"\n\
             status_tool = \"job_status\"\ncancel_tool = \"cancel_job\"\n",
            db = q(&db.url),
            bin = q(bin()),
            state = q(&state.display().to_string()),
        );
        std::fs::write(&config, text).expect("write mcptask.toml");
        let (gateway, api) = serve(&config).await;
        Stack {
            gateway,
            api,
            config,
            state,
            _dir: dir,
            _db: db,
        }
    }

    /// SIGKILL the gateway (its fixture child goes with its stdin) and start
    /// another on the same config and database.
    async fn restart_hard(&mut self) {
        self.gateway.kill().await;
        let (gateway, api) = serve(&self.config).await;
        self.gateway = gateway;
        self.api = api;
    }

    /// `POST /api/v1/calls` of `submit_job`, expecting a tracked task.
    async fn submit(&self, arguments: Value) -> Value {
        let body = json!({"server": "jobs", "tool": "submit_job", "arguments": arguments});
        let r = self.api.post("/api/v1/calls", &body).await;
        assert_eq!(r.status, 202, "{r:#?}\nlog:\n{}", self.gateway.log());
        assert_eq!(r.json["outcome"], "task", "{r:#?}");
        r.json["task"].clone()
    }

    async fn settled(&self, id: &str) -> Value {
        self.api
            .wait_task(id, "settled", |t| {
                ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or(""))
            })
            .await
    }

    /// The fixture's record of `job`.
    fn job(&self, job: &str) -> Value {
        let state: Value = std::fs::read(&self.state)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null);
        state["jobs"][job].clone()
    }

    fn polls(&self, job: &str) -> Vec<i64> {
        self.job(job)["polls"]
            .as_array()
            .map(|p| p.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default()
    }
}

async fn serve(config: &Path) -> (LoggedChild, Api) {
    let mut command = serve_command(config);
    command.current_dir(config.parent().expect("config dir"));
    let (gateway, url) = LoggedChild::spawn(
        "gateway",
        command,
        GATEWAY_LISTENING,
        Duration::from_secs(60),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    (gateway, Api::new(url.trim_end_matches('/'), None))
}

/// The remote id the operator view shows (`auth = "none"` is an operator).
fn job_of(task: &Value) -> String {
    task["remoteTaskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no remoteTaskId in {task:#}"))
        .to_string()
}

async fn submit_then_complete(stack: &Stack) {
    let task = stack
        .submit(json!({"polls": 2, "result": {"rows": 42}}))
        .await;
    assert_eq!(task["status"], "working", "{task:#}");
    let job = job_of(&task);
    let done = stack.settled(task["id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"rows": 42}),
        "{done:#}"
    );
    assert_eq!(
        stack.polls(&job).len(),
        3,
        "two running answers, then completed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn submitted_work_is_tracked_to_its_result() {
    with_deadline(WAIT, async {
        let stack = Stack::start(TestDatabase::sqlite()).await;
        submit_then_complete(&stack).await;

        // The ordinary tool of the same server is a plain call.
        let r = stack
            .api
            .post(
                "/api/v1/calls",
                &json!({"server": "jobs", "tool": "echo", "arguments": {"text": "hi"}}),
            )
            .await;
        assert_eq!(
            (r.status, r.json["outcome"].as_str()),
            (200, Some("completed")),
            "{r:#?}"
        );
        assert_eq!(r.json["result"]["content"][0]["text"], "hi");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn submitted_work_is_tracked_on_postgres() {
    let Some(db) = TestDatabase::postgres().await else {
        eprintln!("submitted_work_is_tracked_on_postgres: SKIPPED (no PostgreSQL, see above)");
        return;
    };
    with_deadline(WAIT, async {
        let stack = Stack::start(db).await;
        submit_then_complete(&stack).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_servers_poll_hint_spaces_the_status_calls() {
    with_deadline(WAIT, async {
        let stack = Stack::start(TestDatabase::sqlite()).await;
        let task = stack
            .submit(json!({"polls": 3, "poll_after_seconds": 1.5}))
            .await;
        let job = job_of(&task);
        let done = stack.settled(task["id"].as_str().unwrap()).await;
        assert_eq!(done["status"], "completed", "{done:#}");
        let polls = stack.polls(&job);
        assert_eq!(polls.len(), 4, "{polls:?}");
        // 1.5 s less the 10 % jitter; without the hint they would be 200 ms apart.
        for pair in polls.windows(2) {
            assert!(
                pair[1] - pair[0] >= 1_300,
                "status calls too close: {polls:?}"
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_error_is_retried_then_the_work_completes() {
    with_deadline(WAIT, async {
        let stack = Stack::start(TestDatabase::sqlite()).await;
        let task = stack
            .submit(json!({"mode": "error_once", "polls": 1}))
            .await;
        let id = task["id"].as_str().unwrap();
        let done = stack.settled(id).await;
        assert_eq!(done["status"], "completed", "{done:#}");
        // Had the tool error been taken as permanent, the task would have
        // failed at the first status call.
        assert_eq!(
            stack.polls(&job_of(&task)).len(),
            3,
            "error, running, completed"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forgotten_task_fails() {
    with_deadline(WAIT, async {
        let stack = Stack::start(TestDatabase::sqlite()).await;
        let task = stack.submit(json!({"mode": "not_found"})).await;
        let done = stack.settled(task["id"].as_str().unwrap()).await;
        assert_eq!(done["status"], "failed", "{done:#}");
        assert_eq!(done["error"]["data"]["reason"], "not_found", "{done:#}");
        assert!(
            done["error"]["message"]
                .as_str()
                .unwrap()
                .contains("is gone"),
            "{done:#}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_is_shown_and_the_task_can_be_cancelled() {
    with_deadline(WAIT, async {
        let stack = Stack::start(TestDatabase::sqlite()).await;
        let task = stack
            .submit(json!({"mode": "input_required", "question": "Ship to Mars?"}))
            .await;
        let id = task["id"].as_str().unwrap();
        let asking = stack
            .api
            .wait_task(id, "asking", |t| t["statusMessage"].as_str().is_some())
            .await;
        assert_eq!(
            asking["status"], "working",
            "no answer path: it stays working"
        );
        assert_eq!(asking["statusMessage"], "Needs input: Ship to Mars?");
        assert_eq!(asking["inputRequests"], json!({}));

        let r = stack
            .api
            .post(&format!("/api/v1/tasks/{id}/cancel"), &json!({}))
            .await;
        assert_eq!(r.status, 202, "{r:#?}");
        let done = stack.settled(id).await;
        assert_eq!(done["status"], "cancelled", "{done:#}");
        let job = stack.job(&job_of(&task));
        assert_eq!(job["cancel_calls"], 1, "{job:#}");
        assert_eq!(job["status"], "cancelled");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_killed_mid_task_finishes_it_after_restart() {
    with_deadline(WAIT, async {
        let mut stack = Stack::start(TestDatabase::sqlite()).await;
        let task = stack
            .submit(json!({"polls": 4, "poll_after_seconds": 1}))
            .await;
        let id = task["id"].as_str().unwrap().to_string();
        let job = job_of(&task);
        let deadline = tokio::time::Instant::now() + WAIT;
        while stack.polls(&job).is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "never polled");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stack.restart_hard().await;
        let done = stack.settled(&id).await;
        assert_eq!(done["status"], "completed", "{done:#}");
        // Four running answers, then completed (once more if the killed
        // gateway asked but never stored the answer).
        assert!(stack.polls(&job).len() >= 5, "{:?}", stack.polls(&job));
    })
    .await;
}
