//! A kept call's outcome as the CLI shows it: its status as a person reads
//! it, its result on standard output, and the exit code it maps to (see
//! docs/CLI.md, exit codes).

use serde_json::Value;

use super::exit;
use super::output::outln;

/// Whether a call's status is final.
pub fn terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// Whether a completed call's tool reported an error (`isError` in its
/// result; `toolError` in a list's rows, which carry no result): it
/// completed, but not well, and exits as failed.
pub fn tool_error(task: &Value) -> bool {
    task["status"] == "completed"
        && (task["result"]["isError"] == true || task["toolError"] == true)
}

/// A task's status as a person reads it.
pub fn shown_status(task: &Value) -> &str {
    match task["status"].as_str() {
        _ if tool_error(task) => "completed with a tool error",
        Some(status) => status,
        None => "?",
    }
}

/// Print a settled task's outcome; returns the process exit code.
pub fn print_outcome(task: &Value) -> i32 {
    match task["status"].as_str().unwrap_or("?") {
        "completed" => print_result(&task["result"]),
        "failed" => eprintln!(
            "failed: {}",
            task["error"]["message"].as_str().unwrap_or("(no message)")
        ),
        other => eprintln!(
            "{other}{}",
            task["statusMessage"]
                .as_str()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
    }
    outcome_code(task)
}

/// A tool result that reports an error (`isError`) is a failed call.
pub fn result_code(result: &Value) -> i32 {
    if result["isError"] == true {
        exit::TASK_FAILED
    } else {
        exit::OK
    }
}

/// A tool result's content: text blocks as text, others as JSON, then the
/// structured content.
pub fn print_result(result: &Value) {
    let mut printed = false;
    for block in result["content"].as_array().into_iter().flatten() {
        if let Some(text) = block["text"].as_str() {
            outln!("{text}");
        } else {
            outln!("{block}");
        }
        printed = true;
    }
    if let Some(s) = result.get("structuredContent").filter(|s| !s.is_null()) {
        outln!("{}", serde_json::to_string_pretty(s).unwrap_or_default());
        printed = true;
    }
    if !printed {
        outln!("{result}");
    }
}

/// The exit code a settled task maps to (see docs/CLI.md, exit codes).
pub fn outcome_code(task: &Value) -> i32 {
    match task["status"].as_str() {
        Some("completed") => result_code(&task["result"]),
        Some("failed") => exit::TASK_FAILED,
        Some("cancelled") => exit::TASK_CANCELLED,
        _ => exit::OK,
    }
}
