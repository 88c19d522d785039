//! Tools for callers that do not declare the tasks extension (a model
//! behind an ordinary MCP client): follow, answer and cancel the front
//! tasks started for them in the background. Every call is scoped to the
//! caller's principal by the front runtime; a task of someone else reads
//! like an unknown one.

use std::sync::Arc;

use mcptask_core::server::TaskCursor;
use mcptask_server::{TaskError, TaskRuntime};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResult, ContentBlock, InputResponses, JsonObject, TaskPayload, TaskStatus, Tool,
};
use serde_json::{Value, json};

use crate::route::AgentTool;

const LIST: &str = AgentTool::List.name();
const GET: &str = AgentTool::Get.name();
const ANSWER: &str = AgentTool::Answer.name();
const CANCEL: &str = AgentTool::Cancel.name();

/// The most tasks one `mcptask_list_tasks` call returns.
const MAX_LIMIT: i64 = 50;

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("tool schemas are objects"),
    }
}

/// The agent tools' definitions.
pub fn definitions() -> Vec<Tool> {
    let task_id =
        json!({"type": "string", "description": "The task id given when the task started."});
    vec![
        Tool::new(
            LIST,
            "List your background tasks (newest first): id, tool, status, pending questions.",
            schema(json!({"type": "object", "properties": {
                "status": {"type": "string", "enum": ["live", "all"],
                    "description": "live (default): tasks still running or waiting for an answer; all: finished ones too."},
                "cursor": {"type": "string", "description": "nextCursor of the previous page."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}
            }})),
        ),
        Tool::new(
            GET,
            "Show a background task: its status, its pending questions, and its result once done.",
            schema(
                json!({"type": "object", "properties": {"taskId": task_id}, "required": ["taskId"]}),
            ),
        ),
        Tool::new(
            ANSWER,
            "Answer a background task's pending questions: answers maps each question key to its answer \
             (for a form: {\"action\": \"accept\", \"content\": {...}}).",
            schema(json!({"type": "object", "properties": {
                "taskId": task_id,
                "answers": {"type": "object", "description": "question key -> answer",
                    "additionalProperties": true}
            }, "required": ["taskId", "answers"]})),
        ),
        Tool::new(
            CANCEL,
            "Ask a background task to stop.",
            schema(
                json!({"type": "object", "properties": {"taskId": task_id}, "required": ["taskId"]}),
            ),
        ),
    ]
}

/// The answer to a non-declaring caller whose call became task `id`.
pub fn started(id: &str, front_tool: &str) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(format!(
        "Started background task {id} ({front_tool}). Follow it with {GET} {{\"taskId\":\"{id}\"}}; \
         answer its questions with {ANSWER}; stop it with {CANCEL}."
    ))]);
    result.structured_content = Some(json!({"taskId": id, "status": "working"}));
    result
}

fn ok(text: String, structured: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

fn refuse(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn status_name(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Working => "working",
        TaskStatus::InputRequired => "input_required",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Cancelled => "cancelled",
        _ => "unknown",
    }
}

fn unknown(id: &str) -> CallToolResult {
    refuse(format!(
        "Unknown task {id}: no task of yours has this id (it may have expired). \
         {LIST} shows your tasks."
    ))
}

/// An engine error as the agent sees it: a task that cannot be seen or a
/// bad argument is a tool error; a store failure is a JSON-RPC error.
fn failed(id: &str, e: TaskError) -> Result<CallToolResult, ErrorData> {
    match e {
        TaskError::NotFound => Ok(unknown(id)),
        TaskError::InvalidParams(why) => Ok(refuse(why)),
        other => Err(other.into()),
    }
}

fn task_id(arguments: &JsonObject) -> Result<String, CallToolResult> {
    match arguments.get("taskId").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => Ok(id.to_string()),
        _ => Err(refuse(
            "taskId is required: the id given when the task started".into(),
        )),
    }
}

/// Run agent tool `tool` for `principal`.
pub async fn call(
    runtime: &TaskRuntime,
    tool: AgentTool,
    arguments: JsonObject,
    principal: Option<&str>,
) -> Result<CallToolResult, ErrorData> {
    match tool {
        AgentTool::List => list(runtime, &arguments, principal).await,
        AgentTool::Get => {
            let id = match task_id(&arguments) {
                Ok(id) => id,
                Err(refusal) => return Ok(refusal),
            };
            get(runtime, &id, principal).await
        }
        AgentTool::Answer => {
            let id = match task_id(&arguments) {
                Ok(id) => id,
                Err(refusal) => return Ok(refusal),
            };
            let Some(Value::Object(answers)) = arguments.get("answers") else {
                return Ok(refuse(
                    "answers is required: an object mapping each question key to its answer".into(),
                ));
            };
            if answers.is_empty() {
                return Ok(refuse(
                    "answers is empty: give at least one question key".into(),
                ));
            }
            let responses: InputResponses = answers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let keys: Vec<String> = responses.keys().cloned().collect();
            match runtime.update_task(&id, principal, responses).await {
                Ok(()) => Ok(ok(
                    format!(
                        "Sent answers for {} to task {id}. Check it with {GET}.",
                        keys.join(", ")
                    ),
                    json!({"taskId": id, "sent": keys}),
                )),
                Err(e) => failed(&id, e),
            }
        }
        AgentTool::Cancel => {
            let id = match task_id(&arguments) {
                Ok(id) => id,
                Err(refusal) => return Ok(refusal),
            };
            match runtime.cancel_task(&id, principal).await {
                Ok(()) => Ok(ok(
                    format!(
                        "Cancellation requested; the task settles with what the upstream reports. Check task {id} with {GET}."
                    ),
                    json!({"taskId": id, "cancelRequested": true}),
                )),
                Err(e) => failed(&id, e),
            }
        }
    }
}

async fn list(
    runtime: &TaskRuntime,
    arguments: &JsonObject,
    principal: Option<&str>,
) -> Result<CallToolResult, ErrorData> {
    let live_only = match arguments.get("status").and_then(Value::as_str) {
        None | Some("live") => true,
        Some("all") => false,
        Some(other) => {
            return Ok(refuse(format!(
                "status {other:?} is not one of \"live\", \"all\""
            )));
        }
    };
    let limit = match arguments.get("limit") {
        None => 20,
        Some(v) => match v.as_i64() {
            Some(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => return Ok(refuse(format!("limit must be 1 to {MAX_LIMIT}"))),
        },
    };
    let cursor = match arguments.get("cursor").and_then(Value::as_str) {
        None => None,
        Some(text) => match TaskCursor::decode(text) {
            Some(c) => Some(c),
            None => return Ok(refuse("cursor is not one this tool gave".into())),
        },
    };
    let (tasks, next) = runtime
        .list_task_overviews(principal, live_only, cursor.as_ref(), limit)
        .await
        .map_err(ErrorData::from)?;
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    for (task, overview) in tasks {
        let tool = overview.tool;
        let mut questions = Vec::new();
        if task.status == TaskStatus::InputRequired
            && let Ok(detailed) = runtime.get_task(&task.task_id, principal).await
            && let TaskPayload::InputRequired { input_requests } = &detailed.payload
        {
            questions = input_requests.keys().cloned().collect();
        }
        let status = status_name(task.status);
        let mut line = format!("- {} {tool}: {status}", task.task_id);
        if let Some(message) = &task.status_message {
            line.push_str(&format!(" ({message})"));
        }
        if !questions.is_empty() {
            line.push_str(&format!("; questions: {}", questions.join(", ")));
        }
        lines.push(line);
        rows.push(json!({
            "taskId": task.task_id,
            "tool": tool,
            "status": status,
            "statusMessage": task.status_message,
            "createdAt": task.created_at,
            "questions": questions,
        }));
    }
    let next = next.as_ref().map(TaskCursor::encode);
    let mut text = if lines.is_empty() {
        format!("No {}tasks.", if live_only { "live " } else { "" })
    } else {
        lines.join("\n")
    };
    if let Some(c) = &next {
        text.push_str(&format!("\nMore: call {LIST} with cursor {c:?}."));
    }
    Ok(ok(text, json!({"tasks": rows, "nextCursor": next})))
}

async fn get(
    runtime: &TaskRuntime,
    id: &str,
    principal: Option<&str>,
) -> Result<CallToolResult, ErrorData> {
    let detailed = match runtime.get_task(id, principal).await {
        Ok(d) => d,
        Err(e) => return failed(id, e),
    };
    let task = &detailed.task;
    let status = status_name(detailed.status());
    let mut text = format!("Task {id}: {status}");
    if let Some(message) = &task.status_message {
        text.push_str(&format!(" ({message})"));
    }
    text.push('.');
    let mut structured = json!({
        "taskId": id,
        "status": status,
        "statusMessage": task.status_message,
    });
    match &detailed.payload {
        TaskPayload::InputRequired { input_requests } => {
            let mut questions = serde_json::Map::new();
            text.push_str(&format!(
                "\nQuestions (answer with {ANSWER}, answers keyed by question):"
            ));
            for (key, request) in input_requests {
                let request = serde_json::to_value(request).unwrap_or(Value::Null);
                text.push_str(&format!("\n- {key}: {request}"));
                questions.insert(key.clone(), request);
            }
            structured["questions"] = Value::Object(questions);
        }
        TaskPayload::Completed { result } => {
            let result = Value::Object(result.clone());
            let parsed: Option<CallToolResult> = serde_json::from_value(result.clone()).ok();
            let is_error = parsed.as_ref().and_then(|r| r.is_error).unwrap_or(false);
            if is_error {
                text.push_str("\nThe tool reported an error:");
            } else {
                text.push_str("\nResult:");
            }
            match &parsed {
                Some(r) if !r.content.is_empty() => {
                    for block in &r.content {
                        match block.as_text() {
                            Some(t) => text.push_str(&format!("\n{}", t.text)),
                            None => text.push_str(&format!(
                                "\n{}",
                                serde_json::to_string(block).unwrap_or_default()
                            )),
                        }
                    }
                }
                _ => text.push_str(&format!("\n{result}")),
            }
            structured["result"] = result;
        }
        TaskPayload::Failed { error } => {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| Value::Object(error.clone()).to_string());
            text.push_str(&format!("\nError: {message}"));
            structured["error"] = Value::Object(error.clone());
        }
        _ => {
            if !detailed.status().is_terminal() {
                text.push_str(&format!("\nStill running: check again later with {GET}."));
            }
        }
    }
    Ok(ok(text, structured))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_names_are_reserved() {
        let c = TaskCursor {
            created_at: 42,
            id: "a:b".into(),
        };
        assert_eq!(TaskCursor::decode(&c.encode()), Some(c));
        assert!(TaskCursor::decode("nope").is_none());
        for tool in definitions() {
            assert!(AgentTool::parse(&tool.name).is_some());
            assert!(tool.name.starts_with("mcptask_"));
        }
    }

    #[test]
    fn the_started_answer_names_the_task_and_the_tools() {
        let r = started("t1", "demo__slow_compute");
        let text = r.content[0].as_text().unwrap().text.clone();
        assert!(text.starts_with("Started background task t1 (demo__slow_compute)."));
        assert!(text.contains("mcptask_get_task {\"taskId\":\"t1\"}"));
        assert_eq!(
            r.structured_content,
            Some(json!({"taskId": "t1", "status": "working"}))
        );
    }
}
