//! How `tasks show` presents a task's input requests: for an open question,
//! its fields (type, required, choices, bounds, default) and a command line
//! that answers it; for an answered one, the answer.

use mcptask_core::elicit::{Field, FieldKind, Form};
use serde_json::{Value, json};

use super::output::outln;

/// Print every input of a task detail (`GET /api/v1/tasks/{id}`).
pub fn print(task: &Value) {
    let id = task["id"].as_str().unwrap_or("ID");
    for input in task["inputs"].as_array().into_iter().flatten() {
        let key = input["key"].as_str().unwrap_or("");
        let open = task["inputRequests"].get(key).is_some();
        let state = match (input["answered"] == true, open) {
            (true, _) => "answered",
            (false, true) => "waiting for an answer",
            (false, false) => "no longer asked",
        };
        let request = &input["request"];
        if !input["answered"].as_bool().unwrap_or(false) && open {
            for line in open_question(id, key, request) {
                outln!("{line}");
            }
            continue;
        }
        let message = request["params"]["message"].as_str().unwrap_or("");
        outln!("input {key} ({state}): {message}");
        if input["answered"] == true {
            let sent = if input["sentAt"].is_null() {
                "not sent yet"
            } else {
                "sent to the server"
            };
            outln!("  answer ({sent}): {}", input["response"]);
        }
    }
}

/// An open question of call `id` as `tasks show` and a follower not on a
/// terminal print it: its message, its fields and the command lines that
/// answer it.
pub(super) fn open_question(id: &str, key: &str, request: &Value) -> Vec<String> {
    let message = request["params"]["message"].as_str().unwrap_or("");
    let mut lines = vec![format!("input {key} (waiting for an answer): {message}")];
    lines.extend(
        question(id, key, request)
            .into_iter()
            .map(|l| format!("  {l}")),
    );
    lines
}

/// The lines that describe an open request and how to answer it.
fn question(id: &str, key: &str, request: &Value) -> Vec<String> {
    let command = |json: &str| format!("mcptask tasks answer {id} {key} {}", shell_quote(json));
    let params = &request["params"];
    let mut lines = Vec::new();
    match request["method"].as_str() {
        Some("elicitation/create") if params["mode"] == "url" => {
            lines.push(format!(
                "open {} then confirm:",
                params["url"].as_str().unwrap_or("the URL")
            ));
            lines.push(format!("  {}", command(r#"{"action": "accept"}"#)));
        }
        Some("elicitation/create") => {
            let form = params.get("requestedSchema").and_then(Form::parse);
            let example = match &form {
                Some(form) => {
                    lines.push("fields:".into());
                    lines.extend(form.fields.iter().map(|f| format!("  {}", describe(f))));
                    if form.fields.is_empty() {
                        lines.push("  (none: an empty answer accepts)".into());
                    }
                    example(form)
                }
                None => "{}".to_string(),
            };
            lines.push(format!("answer:  {}", command(&example)));
            lines.push(format!("decline: {}", command(r#"{"action": "decline"}"#)));
        }
        Some(method) => {
            lines.push(format!(
                "a {method} request: answer with the full result object, e.g."
            ));
            let result = match method {
                "sampling/createMessage" => {
                    r#"{"role": "assistant", "content": {"type": "text", "text": "…"}, "model": "…"}"#
                }
                "roots/list" => r#"{"roots": [{"uri": "file:///path"}]}"#,
                _ => "{…}",
            };
            lines.push(format!("  {}", command(result)));
        }
        None => {}
    }
    lines
}

/// `name (type, required): title — description; choices; bounds; default`.
pub(super) fn describe(f: &Field) -> String {
    let mut details: Vec<String> = Vec::new();
    for text in [&f.title, &f.description].into_iter().flatten() {
        details.push(text.clone());
    }
    let labelled = |choices: &[mcptask_core::elicit::Choice]| {
        choices
            .iter()
            .map(|c| match &c.title {
                Some(t) if *t != c.value => format!("{:?} ({t})", c.value),
                _ => format!("{:?}", c.value),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match &f.kind {
        FieldKind::Choice(choices) => details.push(format!("one of {}", labelled(choices))),
        FieldKind::MultiChoice {
            choices,
            min_items,
            max_items,
        } => {
            details.push(format!("any of {}", labelled(choices)));
            details.extend(bounds("items", *min_items, *max_items));
        }
        FieldKind::String {
            min_length,
            max_length,
            format,
        } => {
            if let Some(format) = format {
                details.push(format!("format {format}"));
            }
            details.extend(bounds("characters", *min_length, *max_length));
        }
        FieldKind::Number {
            minimum, maximum, ..
        } => match (minimum, maximum) {
            (Some(lo), Some(hi)) => details.push(format!("from {lo} to {hi}")),
            (Some(lo), None) => details.push(format!("at least {lo}")),
            (None, Some(hi)) => details.push(format!("at most {hi}")),
            (None, None) => {}
        },
        FieldKind::Boolean => details.push("true or false".into()),
        FieldKind::Unchecked => {}
    }
    if let Some(default) = &f.default {
        details.push(format!("default {default}"));
    }
    let required = if f.required { "required" } else { "optional" };
    format!(
        "{} ({}, {required}){}",
        f.name,
        f.kind.type_name(),
        if details.is_empty() {
            String::new()
        } else {
            format!(": {}", details.join("; "))
        }
    )
}

fn bounds(what: &str, min: Option<u64>, max: Option<u64>) -> Option<String> {
    match (min, max) {
        (Some(lo), Some(hi)) => Some(format!("{lo} to {hi} {what}")),
        (Some(lo), None) => Some(format!("at least {lo} {what}")),
        (None, Some(hi)) => Some(format!("at most {hi} {what}")),
        (None, None) => None,
    }
}

/// An answer that fills the form: the defaults where given, otherwise a
/// value of the right type within the bounds. Fields the form does not
/// describe well enough to fill are left out.
pub(super) fn example(form: &Form) -> String {
    let parts: Vec<String> = form
        .fields
        .iter()
        .filter_map(|f| Some(format!("{}: {}", json!(f.name), example_value(f)?)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

fn example_value(f: &Field) -> Option<Value> {
    let fallback = match &f.kind {
        FieldKind::Boolean => json!(true),
        FieldKind::Choice(choices) => json!(choices.first()?.value),
        FieldKind::MultiChoice {
            choices, min_items, ..
        } => {
            let n = min_items.unwrap_or(1).max(1) as usize;
            json!(
                choices
                    .iter()
                    .take(n)
                    .map(|c| c.value.clone())
                    .collect::<Vec<_>>()
            )
        }
        FieldKind::Number {
            integer,
            minimum,
            maximum,
        } => {
            let n = minimum.unwrap_or(0.0_f64.min(maximum.unwrap_or(0.0)));
            let n = match (integer, minimum) {
                (true, Some(_)) => n.ceil(),
                (true, None) => n.floor(),
                (false, _) => n,
            };
            if *integer && n.abs() < 9e15 {
                json!(n as i64)
            } else {
                json!(n)
            }
        }
        FieldKind::String {
            min_length,
            max_length,
            format,
        } => {
            let text = match format.as_deref() {
                Some("email") => "user@example.com".to_string(),
                Some("uri") => "https://example.com".to_string(),
                Some("date") => "2025-01-31".to_string(),
                Some("date-time") => "2025-01-31T12:00:00Z".to_string(),
                _ => {
                    let min = min_length.unwrap_or(0) as usize;
                    let max = max_length.map_or(usize::MAX, |m| m as usize);
                    "text"
                        .chars()
                        .cycle()
                        .take(4.clamp(min, max.max(min)))
                        .collect()
                }
            };
            json!(text)
        }
        FieldKind::Unchecked => return f.default.clone(),
    };
    // A default that fits is what the user most likely means.
    let fits = |v: &Value| {
        let mut content = serde_json::Map::new();
        content.insert(f.name.clone(), v.clone());
        Form {
            fields: vec![f.clone()],
            extra_allowed: false,
        }
        .check(&content)
        .is_ok()
    };
    Some(f.default.clone().filter(fits).unwrap_or(fallback))
}

/// Single quotes for a POSIX shell (`'` itself as `'\''`).
pub(super) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcptask_core::elicit::check_answer;

    fn request(schema: Value) -> Value {
        json!({"method": "elicitation/create", "params": {"mode": "form", "message": "Q?", "requestedSchema": schema}})
    }

    #[test]
    fn fields_show_type_required_choices_bounds_and_default_and_the_example_fits() {
        let schema = json!({"type": "object", "properties": {
            "confirm": {"type": "boolean", "title": "Delete it?"},
            "mode": {"type": "string", "oneOf": [{"const": "trash", "title": "Trash"}, {"const": "shred", "title": "Shred"}], "default": "shred"},
            "copies": {"type": "integer", "minimum": 2, "maximum": 5},
            "ratio": {"type": "number", "maximum": -1.5},
            "name": {"type": "string", "minLength": 6, "maxLength": 9},
            "mail": {"type": "string", "format": "email"},
            "day": {"type": "string", "format": "date"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 2},
            "free": {"type": ["string", "null"]},
        }, "required": ["confirm", "copies", "tags"]});
        let lines = question("rt_1", "k", &request(schema.clone()));
        let text = lines.join("\n");
        for expected in [
            "  confirm (boolean, required): Delete it?; true or false",
            "  mode (enum, optional): one of \"trash\" (Trash), \"shred\" (Shred); default \"shred\"",
            "  copies (integer, required): from 2 to 5",
            "  ratio (number, optional): at most -1.5",
            "  name (string, optional): 6 to 9 characters",
            "  mail (string, optional): format email",
            "  tags (enum list, required): any of \"a\", \"b\", \"c\"; at least 2 items",
            "  free (any, optional)",
            "decline: mcptask tasks answer rt_1 k '{\"action\": \"decline\"}'",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        let answer_line = lines.iter().find(|l| l.starts_with("answer:")).unwrap();
        let quoted = answer_line
            .split_once(" k '")
            .unwrap()
            .1
            .trim_end_matches('\'');
        let content: Value = serde_json::from_str(quoted).unwrap();
        assert_eq!(content["mode"], "shred", "the default is used: {content}");
        assert_eq!(content["copies"], 2);
        assert!(content.get("free").is_none());
        let answer = json!({"action": "accept", "content": content});
        assert_eq!(check_answer(&request(schema), &answer), Ok(()), "{answer}");
    }

    #[test]
    fn other_requests_show_the_result_to_give_and_quotes_survive_the_shell() {
        let text = question(
            "rt_1",
            "s",
            &json!({"method": "sampling/createMessage", "params": {}}),
        )
        .join("\n");
        assert!(text.contains("\"model\""), "{text}");
        let url = question(
            "rt_1",
            "u",
            &json!({"method": "elicitation/create", "params": {"mode": "url", "url": "https://x/y"}}),
        );
        assert!(url[0].contains("https://x/y"), "{url:?}");
        assert_eq!(shell_quote(r#"{"a": "it's"}"#), r#"'{"a": "it'\''s"}'"#);
    }
}
