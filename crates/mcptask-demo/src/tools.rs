//! Tools of the bundled demo server: the conformance fixtures and two
//! realistic demo tools.

use std::sync::Arc;
use std::time::Duration;

use mcptask_server::input::{accepted, elicit_form};
use mcptask_server::{
    InterruptPolicy, Preflight, TaskExit, TaskSupport, TaskTool, ToolCall, ToolRegistry,
};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, InputRequests, JsonObject, Tool};
use serde_json::{Value, json};

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn text(s: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s.into())])
}

fn arg_str(call: &ToolCall, key: &str, default: &str) -> String {
    call.arguments
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or(default)
        .to_string()
}

fn arg_seconds(call: &ToolCall, key: &str, default: f64) -> Result<f64, TaskExit> {
    let v = call
        .arguments
        .get(key)
        .and_then(Value::as_f64)
        .unwrap_or(default);
    if !(0.0..=86_400.0).contains(&v) {
        return Err(
            ErrorData::invalid_params(format!("{key} must be between 0 and 86400"), None).into(),
        );
    }
    Ok(v)
}

fn form(message: &str, schema: Value) -> Result<rmcp::model::InputRequest, TaskExit> {
    elicit_form(message, schema)
        .map_err(|e| TaskExit::Error(ErrorData::internal_error(e.to_string(), None)))
}

/// Sleep for `seconds`, updating the status message each second; stop early on cancel.
async fn count_down(call: &ToolCall, seconds: f64, label: &str) -> Result<(), TaskExit> {
    let total = Duration::from_secs_f64(seconds);
    let start = tokio::time::Instant::now();
    while start.elapsed() < total {
        let left = total - start.elapsed();
        call.ctx
            .set_status_message(format!("{label}: {:.0}s left", left.as_secs_f64().ceil()))
            .await?;
        tokio::select! {
            _ = call.ctx.cancelled() => return Err(TaskExit::Cancelled),
            _ = tokio::time::sleep(left.min(Duration::from_secs(1))) => {}
        }
    }
    Ok(())
}

/// Every demo tool.
pub fn registry() -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(
        TaskTool::new(
            Tool::new(
                "greet",
                "Say hello (always synchronous).",
                schema(json!({"type": "object", "properties": {"name": {"type": "string"}}})),
            ),
            |call| async move { Ok(text(format!("Hello, {}!", arg_str(&call, "name", "World")))) },
        )
        .support(TaskSupport::Forbidden),
    );
    r.register(
        TaskTool::new(
            Tool::new(
                "slow_compute",
                "Sleep for `seconds`, then report. Runs as a task when the client supports tasks; \
                 settles as cancelled when cancelled. Fails honestly if its server dies.",
                schema(json!({"type": "object", "properties": {
                    "seconds": {"type": "number", "minimum": 0, "maximum": 86400},
                    "label": {"type": "string"}}})),
            ),
            |call| async move {
                let seconds = arg_seconds(&call, "seconds", 1.0)?;
                let label = arg_str(&call, "label", "compute");
                count_down(&call, seconds, &label).await?;
                Ok(text(format!("{label}: computed in {seconds}s")))
            },
        )
        .interrupt(InterruptPolicy::Fail),
    );
    r.register(TaskTool::new(
        Tool::new(
            "whoami",
            "Report the principal this server authenticated the call as (its bearer token's), \
             after `seconds` (default 0). Runs as a task when the client supports tasks.",
            schema(json!({"type": "object", "properties": {
                "seconds": {"type": "number", "minimum": 0, "maximum": 86400}}})),
        ),
        |call| async move {
            let seconds = arg_seconds(&call, "seconds", 0.0)?;
            count_down(&call, seconds, "whoami").await?;
            let principal = call.ctx.principal().unwrap_or("(none)").to_string();
            Ok(text(format!("principal: {principal}")))
        },
    ));
    r.register(
        TaskTool::new(
            Tool::new(
                "failing_job",
                "A task-only job that reports a tool error (isError) after about a second.",
                schema(json!({"type": "object", "properties": {}})),
            ),
            |call| async move {
                tokio::select! {
                    _ = call.ctx.cancelled() => return Err(TaskExit::Cancelled),
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                Ok(CallToolResult::error(vec![ContentBlock::text(
                    "failing_job: the job failed (as designed)",
                )]))
            },
        )
        .support(TaskSupport::Required),
    );
    r.register(TaskTool::new(
        Tool::new(
            "protocol_error_job",
            "A job that ends with a JSON-RPC error, so its task settles as failed.",
            schema(json!({"type": "object", "properties": {}})),
        ),
        |_call| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Err(ErrorData::internal_error(
                "protocol_error_job: internal failure (as designed)",
                None,
            )
            .into())
        },
    ));
    r.register(TaskTool::new(
        Tool::new(
            "confirm_delete",
            "Ask the user to confirm deleting `filename`, then report the decision.",
            schema(json!({"type": "object", "properties": {"filename": {"type": "string"}}})),
        ),
        |call| async move {
            let filename = arg_str(&call, "filename", "file.txt");
            call.ctx.set_status_message(format!("Waiting for confirmation to delete {filename}")).await?;
            let answer = call
                .ctx
                .request_input(
                    "confirm_delete",
                    form(
                        &format!("Delete {filename}?"),
                        json!({"type": "object", "properties": {"confirm": {"type": "boolean", "title": "Delete it?"}}, "required": ["confirm"]}),
                    )?,
                )
                .await?;
            let yes = accepted(&answer).and_then(|c| c.get("confirm")).and_then(Value::as_bool) == Some(true);
            Ok(text(if yes { format!("Deleted {filename}") } else { format!("Kept {filename}") }))
        },
    ));
    r.register(TaskTool::new(
        Tool::new(
            "multi_input",
            "Ask two questions at once (name and confirmation).",
            schema(json!({"type": "object", "properties": {}})),
        ),
        |call| async move {
            let answers = call
                .ctx
                .request_inputs(
                    [
                        (
                            "name".to_string(),
                            form("What is your name?", json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}))?,
                        ),
                        (
                            "confirm".to_string(),
                            form("Proceed?", json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}))?,
                        ),
                    ]
                    .into_iter()
                    .collect(),
                )
                .await?;
            let name = answers.get("name").and_then(accepted).and_then(|c| c.get("name")).and_then(Value::as_str).unwrap_or("stranger").to_string();
            let confirm = answers.get("confirm").and_then(accepted).and_then(|c| c.get("confirm")).and_then(Value::as_bool).unwrap_or(false);
            Ok(text(format!("Hello, {name}! confirmed={confirm}")))
        },
    ));
    r.register(TaskTool::new(
        Tool::new(
            "deliver_report",
            "Ask how to deliver a report (a form with a choice, a bounded number, an email, a flag and a multi-select), then say what would be sent.",
            schema(json!({"type": "object", "properties": {}})),
        ),
        |call| async move {
            let answer = call
                .ctx
                .request_input(
                    "delivery",
                    form(
                        "How should the report be delivered?",
                        json!({"type": "object", "properties": {
                            "format": {"type": "string", "title": "Format", "oneOf": [
                                {"const": "pdf", "title": "PDF"},
                                {"const": "csv", "title": "CSV"},
                                {"const": "html", "title": "Web page"}]},
                            "copies": {"type": "integer", "title": "Copies", "minimum": 1, "maximum": 5, "default": 1},
                            "email": {"type": "string", "title": "Send to", "format": "email"},
                            "urgent": {"type": "boolean", "title": "Urgent?", "default": false},
                            "sections": {"type": "array", "title": "Sections", "items": {"type": "string", "enum": ["summary", "details", "appendix"]}}
                        }, "required": ["format", "copies"]}),
                    )?,
                )
                .await?;
            let Some(c) = accepted(&answer) else {
                return Ok(text("No report delivered"));
            };
            let format = c.get("format").and_then(Value::as_str).unwrap_or("pdf");
            let copies = c.get("copies").and_then(Value::as_i64).unwrap_or(1);
            let to = c.get("email").and_then(Value::as_str).map(|e| format!(" to {e}")).unwrap_or_default();
            let urgent = if c.get("urgent").and_then(Value::as_bool) == Some(true) { " (urgent)" } else { "" };
            let sections = c
                .get("sections")
                .and_then(Value::as_array)
                .map(|s| s.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("+"))
                .filter(|s| !s.is_empty())
                .map(|s| format!(" with {s}"))
                .unwrap_or_default();
            Ok(text(format!("Delivering {copies} {format} report(s){to}{urgent}{sections}")))
        },
    ));
    r.register(
        TaskTool::new(
            Tool::new(
                "test_tool_with_task",
                "Asks for your name first (multi-round-trip input), then runs a task that greets you.",
                schema(json!({"type": "object", "properties": {}})),
            ),
            |call| async move {
                let name = call
                    .ctx
                    .call_inputs()
                    .get("user_name")
                    .and_then(accepted)
                    .and_then(|c| c.values().find_map(Value::as_str).map(str::to_string))
                    .unwrap_or_else(|| "stranger".into());
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(text(format!("Hello, {name}! (gathered before the task started)")))
            },
        )
        .support(TaskSupport::Required)
        .preflight(|_args, responses| {
            if responses.contains_key("user_name") {
                return Preflight::Proceed;
            }
            let mut requests = InputRequests::new();
            if let Ok(req) = elicit_form(
                "What is your name?",
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            ) {
                requests.insert("user_name".into(), req);
            }
            Preflight::NeedInput(requests)
        }),
    );
    r.register(
        TaskTool::new(
            Tool::new(
                "countdown",
                "Count down from `seconds`, asking for a go/no-go at the midpoint. \
                 Survives server restarts: it reruns and never asks an answered question twice.",
                schema(json!({"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 86400}}})),
            ),
            |call| async move {
                let seconds = arg_seconds(&call, "seconds", 10.0)?;
                let attempt = call.ctx.attempt();
                count_down(&call, seconds / 2.0, "T-minus (first half)").await?;
                let answer = call
                    .ctx
                    .request_input(
                        "go_no_go",
                        form(
                            "Halfway there. Go for launch?",
                            json!({"type": "object", "properties": {"go": {"type": "boolean", "title": "Go?"}}, "required": ["go"]}),
                        )?,
                    )
                    .await?;
                let go = accepted(&answer).and_then(|c| c.get("go")).and_then(Value::as_bool) == Some(true);
                if !go {
                    return Ok(text(format!("Launch scrubbed by the user (attempt {attempt})")));
                }
                count_down(&call, seconds / 2.0, "T-minus (second half)").await?;
                Ok(text(format!("Launched after {seconds}s (attempt {attempt})")))
            },
        )
        .interrupt(InterruptPolicy::Rerun),
    );
    r
}
