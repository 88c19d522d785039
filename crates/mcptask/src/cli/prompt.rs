//! Asking a question at the terminal, field by field, until the answer fits
//! it: the one way the CLI asks, whether the server asks before its task
//! starts (`call`, pre-task input) or while it runs (`call --wait`,
//! `tasks show --follow`). The fit is decided by the same check the gateway
//! applies to answers (`mcptask_core::elicit::check_answer`).

use std::io::{BufRead, IsTerminal, Write};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::bail;
use mcptask_core::elicit::{Field, FieldKind, Form, check_answer};
use serde_json::{Value, json};
use tokio::sync::{Mutex, mpsc};

use super::inputs::describe;

/// Whether a person can be asked: standard input and standard error (where
/// questions are written) are both a terminal.
pub fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// The form of a form-mode elicitation: what can be asked field by field.
/// Anything else (a URL to open, a sampling or roots request) is answered
/// with `mcptask tasks answer`.
pub fn form_of(request: &Value) -> Option<Form> {
    let params = &request["params"];
    if request["method"].as_str() != Some("elicitation/create") || params["mode"] == "url" {
        return None;
    }
    Form::parse(params.get("requestedSchema")?)
}

/// Standard input's lines, read by one thread for the whole process. A
/// question given up half-way (answered elsewhere meanwhile) leaves no
/// reader behind that would swallow the next answer typed.
fn lines() -> &'static Mutex<mpsc::UnboundedReceiver<std::io::Result<String>>> {
    static LINES: OnceLock<Mutex<mpsc::UnboundedReceiver<std::io::Result<String>>>> =
        OnceLock::new();
    LINES.get_or_init(|| {
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Mutex::new(rx)
    })
}

/// Whether a field's prompt is on the screen, its line not ended yet (what
/// is printed next, e.g. on Ctrl-C, starts a line of its own).
static ASKING: AtomicBool = AtomicBool::new(false);

/// End the line of a prompt left waiting, if one is.
pub fn end_prompt_line() {
    if ASKING.swap(false, Ordering::Relaxed) {
        eprintln!();
    }
}

/// Ask for each field of `form` (the question `key`, `request`) until the
/// answer fits; the accepted content.
pub async fn ask(key: &str, request: &Value, form: &Form) -> anyhow::Result<Value> {
    let mut lines = lines().lock().await;
    let message = request["params"]["message"]
        .as_str()
        .unwrap_or("input requested");
    eprintln!("input {key}: {message}");
    loop {
        let mut content = serde_json::Map::new();
        for field in &form.fields {
            eprint!("  {} > ", describe(field));
            std::io::stderr().flush().ok();
            ASKING.store(true, Ordering::Relaxed);
            let line = lines.recv().await;
            ASKING.store(false, Ordering::Relaxed);
            let line = match line {
                Some(line) => line?,
                None => bail!("standard input ended before input {key} was answered"),
            };
            if let Some(value) = read_value(field, line.trim()) {
                content.insert(field.name.clone(), value);
            }
        }
        let content = Value::Object(content);
        let response = json!({"action": "accept", "content": content});
        match check_answer(request, &response) {
            Ok(()) => return Ok(content),
            Err(e) => eprintln!("  that does not fit: {e}; once more (empty keeps the default)"),
        }
    }
}

/// A typed value from what was typed: empty is the default (or nothing);
/// what does not parse as the field's type is kept as text, so the check
/// that follows names the field and what it expects.
fn read_value(field: &Field, typed: &str) -> Option<Value> {
    if typed.is_empty() {
        return field.default.clone();
    }
    Some(match &field.kind {
        FieldKind::Boolean => match typed.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => json!(true),
            "n" | "no" | "false" => json!(false),
            _ => json!(typed),
        },
        FieldKind::Number { .. } => typed
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| typed.parse::<f64>().map(Value::from))
            .unwrap_or_else(|_| json!(typed)),
        FieldKind::Choice(choices) => json!(choice(choices, typed)),
        FieldKind::MultiChoice { choices, .. } => json!(
            typed
                .split(',')
                .map(|t| choice(choices, t.trim()))
                .collect::<Vec<_>>()
        ),
        FieldKind::String { .. } | FieldKind::Unchecked => json!(typed),
    })
}

/// A choice by its value or its title (case-insensitive).
fn choice(choices: &[mcptask_core::elicit::Choice], typed: &str) -> String {
    choices
        .iter()
        .find(|c| {
            c.value == typed
                || c.title
                    .as_deref()
                    .is_some_and(|t| t.eq_ignore_ascii_case(typed))
        })
        .map_or_else(|| typed.to_string(), |c| c.value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_text_becomes_the_fields_type() {
        let form = Form::parse(&json!({"type": "object", "properties": {
            "ok": {"type": "boolean"},
            "n": {"type": "integer", "default": 3},
            "fmt": {"type": "string", "oneOf": [{"const": "pdf", "title": "PDF"}]},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}
        }}))
        .unwrap();
        let field = |name: &str| form.fields.iter().find(|f| f.name == name).unwrap();
        assert_eq!(read_value(field("ok"), "yes"), Some(json!(true)));
        assert_eq!(read_value(field("n"), ""), Some(json!(3)));
        assert_eq!(read_value(field("n"), "7"), Some(json!(7)));
        assert_eq!(read_value(field("fmt"), "pdf"), Some(json!("pdf")));
        assert_eq!(read_value(field("fmt"), "PDF"), Some(json!("pdf")));
        assert_eq!(read_value(field("tags"), "a, b"), Some(json!(["a", "b"])));
    }

    #[test]
    fn only_form_questions_are_asked_field_by_field() {
        let schema = json!({"type": "object", "properties": {"go": {"type": "boolean"}}});
        let form = json!({"method": "elicitation/create", "params": {"requestedSchema": schema}});
        assert!(form_of(&form).is_some());
        let url =
            json!({"method": "elicitation/create", "params": {"mode": "url", "url": "https://x"}});
        assert!(form_of(&url).is_none());
        assert!(form_of(&json!({"method": "sampling/createMessage", "params": {}})).is_none());
    }
}
