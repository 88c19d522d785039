//! `mcptask fixture-toolset`: a stdio MCP server that runs long work the way
//! servers without SEP-2663 do, as three plain tools (`submit_job`,
//! `job_status`, `cancel_job`), plus one ordinary tool (`echo`). Tests drive
//! the tracker's toolset driver against it.
//!
//! Jobs live in a JSON state file, so a server restarted by a restarted
//! gateway still knows them, and tests read what it saw (status polls and
//! their times, cancels). How a job behaves is chosen per submit with
//! `{"mode": ...}` (else `--mode`):
//!
//! - `complete` (default): `running` for `polls` status calls (default 2),
//!   then `completed` with `result` (default `{"job": id, "done": true}`);
//! - `input_required`: reports `input_required` with `{"message": question}`
//!   until cancelled;
//! - `error_once`: the first status call is a tool error (`isError`), then
//!   as `complete`;
//! - `not_found`: every status call says `error_code: "task_not_found"`;
//! - `fail`: `failed` with `error` after `polls` status calls.
//!
//! `poll_after_seconds` in the submit arguments is echoed in every `running`
//! answer.
//!
//! `add_tool {"name": n}` adds an echo-like tool `n` (kept in the state file,
//! so every process of the fixture lists it) and sends
//! `notifications/tools/list_changed` on the session that asked.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// Serve the fixture on stdin/stdout until the client goes away: jobs are
/// kept in `state` (created if missing) and behave as `mode` says when the
/// submit arguments name none.
pub async fn run(state: PathBuf, mode: String) -> anyhow::Result<()> {
    let server = Fixture {
        state: Arc::new(Mutex::new(state)),
        mode,
    };
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .context("starting the stdio transport")?;
    running.waiting().await.context("stdio session")?;
    Ok(())
}

#[derive(Clone)]
struct Fixture {
    /// The state file; the lock serializes read-modify-write cycles.
    state: Arc<Mutex<PathBuf>>,
    mode: String,
}

fn schema(properties: Value, required: &[&str]) -> Arc<JsonObject> {
    let v = json!({"type": "object", "properties": properties, "required": required});
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

fn tools() -> Vec<Tool> {
    let by_id = || schema(json!({"task_id": {"type": "string"}}), &["task_id"]);
    vec![
        Tool::new(
            "submit_job",
            "Start a job; answers its task_id at once.",
            schema(
                json!({
                    "mode": {"type": "string"},
                    "polls": {"type": "integer"},
                    "poll_after_seconds": {"type": "number"},
                    "result": {},
                    "question": {"type": "string"}
                }),
                &[],
            ),
        ),
        Tool::new("job_status", "Report a job's status.", by_id()),
        Tool::new("cancel_job", "Cancel a job.", by_id()),
        Tool::new(
            "echo",
            "Answer the text given.",
            schema(json!({"text": {"type": "string"}}), &[]),
        ),
        Tool::new(
            "add_tool",
            "Add an echo-like tool of the given name.",
            schema(json!({"name": {"type": "string"}}), &["name"]),
        ),
    ]
}

/// The fixed tools and those `add_tool` added.
fn all_tools(state: &Value) -> Vec<Tool> {
    let mut all = tools();
    for name in state["added"].as_array().into_iter().flatten() {
        if let Some(name) = name.as_str() {
            all.push(Tool::new(
                name.to_string(),
                "Added at run time; answers the text given.",
                schema(json!({"text": {"type": "string"}}), &[]),
            ));
        }
    }
    all
}

fn load(path: &Path) -> Value {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| json!({"next": 1, "jobs": {}, "calls": {}}))
}

/// Write the whole state atomically: a reader never sees half a file.
fn save(path: &Path, state: &Value) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(state)?)?;
    std::fs::rename(tmp, path)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Fixture {
    fn call(&self, state: &mut Value, tool: &str, args: &JsonObject) -> CallToolResult {
        let calls = &mut state["calls"][tool];
        *calls = json!(calls.as_i64().unwrap_or(0) + 1);
        let task_id = args.get("task_id").and_then(Value::as_str).unwrap_or("");
        match tool {
            "submit_job" => self.submit(state, args),
            "job_status" => status(state, task_id),
            "cancel_job" => cancel(state, task_id),
            "add_tool" => {
                let name = args.get("name").and_then(Value::as_str).unwrap_or("");
                let added = state["added"].as_array().cloned().unwrap_or_default();
                if !name.is_empty() && !added.iter().any(|n| n == name) {
                    let mut added = added;
                    added.push(json!(name));
                    state["added"] = Value::Array(added);
                }
                CallToolResult::success(vec![ContentBlock::text(format!("added {name}"))])
            }
            _ => {
                let text = args.get("text").and_then(Value::as_str).unwrap_or("");
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
        }
    }

    fn submit(&self, state: &mut Value, args: &JsonObject) -> CallToolResult {
        let n = state["next"].as_i64().unwrap_or(1);
        state["next"] = json!(n + 1);
        let id = format!("job-{n}");
        let mode = args
            .get("mode")
            .and_then(Value::as_str)
            .unwrap_or(self.mode.as_str());
        let mut job = json!({
            "mode": mode,
            "polls_needed": args.get("polls").and_then(Value::as_i64).unwrap_or(2),
            "polls": [],
            "status": "running",
            "result": args.get("result").cloned().unwrap_or(json!({"job": id, "done": true})),
            "question": args.get("question").and_then(Value::as_str).unwrap_or("Approve the job?"),
        });
        let mut answer = json!({"task_id": id, "status": "running"});
        if let Some(hint) = args.get("poll_after_seconds") {
            job["poll_after_seconds"] = hint.clone();
            answer["poll_after_seconds"] = hint.clone();
        }
        state["jobs"][&id] = job;
        CallToolResult::structured(answer)
    }
}

fn status(state: &mut Value, id: &str) -> CallToolResult {
    let Some(job) = state["jobs"].get_mut(id) else {
        return CallToolResult::structured(json!({
            "task_id": id, "status": "failed", "error_code": "task_not_found",
            "error": format!("no job {id}"),
        }));
    };
    if let Some(polls) = job["polls"].as_array_mut() {
        polls.push(json!(now_ms()));
    }
    let polls = job["polls"].as_array().map_or(0, Vec::len) as i64;
    let mode = job["mode"].as_str().unwrap_or("complete").to_string();
    let settled = job["status"].as_str() != Some("running");
    if !settled {
        match mode.as_str() {
            "not_found" => {
                return CallToolResult::structured(json!({
                    "task_id": id, "status": "failed", "error_code": "task_not_found",
                    "error": format!("job {id} is gone"),
                }));
            }
            "error_once" if polls == 1 => {
                return CallToolResult::error(vec![
                    ContentBlock::text("job store temporarily unavailable"),
                    ContentBlock::text("a second block nobody reads"),
                ]);
            }
            "input_required" => {
                return CallToolResult::structured(json!({
                    "task_id": id, "status": "input_required",
                    "input_required": {"message": job["question"].clone()},
                }));
            }
            _ => {}
        }
        let needed = job["polls_needed"].as_i64().unwrap_or(2) + i64::from(mode == "error_once");
        if polls > needed {
            job["status"] = json!(if mode == "fail" {
                "failed"
            } else {
                "completed"
            });
        }
    }
    let mut answer = json!({"task_id": id, "status": job["status"].clone()});
    match job["status"].as_str() {
        Some("completed") => answer["result"] = job["result"].clone(),
        Some("failed") => answer["error"] = json!(format!("job {id} failed")),
        Some("running") => {
            if let Some(hint) = job.get("poll_after_seconds") {
                answer["poll_after_seconds"] = hint.clone();
            }
        }
        _ => {}
    }
    CallToolResult::structured(answer)
}

fn cancel(state: &mut Value, id: &str) -> CallToolResult {
    let Some(job) = state["jobs"].get_mut(id) else {
        return CallToolResult::structured(json!({
            "task_id": id, "status": "failed", "error_code": "task_not_found",
        }));
    };
    job["cancel_calls"] = json!(job["cancel_calls"].as_i64().unwrap_or(0) + 1);
    if job["status"].as_str() == Some("running") {
        job["status"] = json!("cancelled");
    }
    CallToolResult::structured(json!({"task_id": id, "status": job["status"].clone()}))
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let path = self.state.lock().await;
        Ok(ListToolsResult::with_all_items(all_tools(&load(&path))))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args = request.arguments.unwrap_or_default();
        let path = self.state.lock().await;
        let mut state = load(&path);
        if !all_tools(&state).iter().any(|t| t.name == name) {
            return Err(ErrorData::invalid_params(format!("no tool {name}"), None));
        }
        let result = self.call(&mut state, &name, &args);
        save(&path, &state).map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        drop(path);
        if name == "add_tool" {
            let _ = context.peer.notify_tool_list_changed().await;
        }
        Ok(CallToolResponse::Complete(result))
    }
}
