//! Input a server asks for before it starts a task (multi-round-trip): `call`
//! answers it from `--input KEY=JSON`, or asks at the terminal field by
//! field, then calls again with the answers; without either it prints the
//! questions and the `--input` flags that would answer them.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, bail};
use mcptask_core::elicit::{Field, FieldKind, Form, check_answer};
use serde_json::{Value, json};

use super::inputs::{describe, example, shell_quote};

/// `--input KEY=JSON` values, parsed and keyed.
pub fn parse_inputs(given: &[String]) -> anyhow::Result<BTreeMap<String, Value>> {
    let mut inputs = BTreeMap::new();
    for pair in given {
        let (key, json) = pair
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .with_context(|| {
                format!(
                    "--input {pair:?}: expected KEY=JSON, e.g. user_name='{{\"name\": \"Ada\"}}'"
                )
            })?;
        let value: Value = serde_json::from_str(json)
            .with_context(|| format!("--input {key}: the answer is not valid JSON: {json}"))?;
        inputs.insert(key.to_string(), value);
    }
    Ok(inputs)
}

/// A bare object answers an elicitation as its accepted content (as `tasks
/// answer` takes it); a full response (with `action`), or the answer to any
/// other kind of request, goes as given.
pub fn as_response(request: &Value, given: &Value) -> Value {
    let elicitation = request["method"]
        .as_str()
        .is_none_or(|m| m == "elicitation/create");
    if elicitation && given.get("action").is_none() {
        json!({"action": "accept", "content": given})
    } else {
        given.clone()
    }
}

/// Answers for this round's `requests` (the 409's `inputRequests`), from
/// `given` or, on a terminal, from the user. `Ok(None)` when some stay
/// unanswered: the questions and how to answer them have been printed.
pub async fn answer_round(
    requests: &Value,
    given: &BTreeMap<String, Value>,
    call_line: &str,
) -> anyhow::Result<Option<BTreeMap<String, Value>>> {
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let mut answers = BTreeMap::new();
    let mut missing = Vec::new();
    for (key, request) in requests.as_object().into_iter().flatten() {
        if let Some(value) = given.get(key) {
            answers.insert(key.clone(), as_response(request, value));
        } else if interactive && let Some(form) = form_of(request) {
            let (asked, request) = (key.clone(), request.clone());
            let content = tokio::task::spawn_blocking(move || ask(&asked, &request, &form))
                .await
                .context("reading the answer")??;
            answers.insert(key.clone(), json!({"action": "accept", "content": content}));
        } else {
            missing.push((key.clone(), request.clone()));
        }
    }
    if missing.is_empty() {
        return Ok(Some(answers));
    }
    eprintln!("the server needs input before it starts the task:");
    for (key, request) in &missing {
        let message = request["params"]["message"]
            .as_str()
            .unwrap_or("input requested");
        eprintln!("  input {key}: {message}");
        let example = match form_of(request) {
            Some(form) => {
                for field in &form.fields {
                    eprintln!("    {}", describe(field));
                }
                example(&form)
            }
            None => "{…}".to_string(),
        };
        eprintln!(
            "  answer with: {call_line} --input {}",
            shell_quote(&format!("{key}={example}"))
        );
    }
    Ok(None)
}

/// The form of a form-mode elicitation.
fn form_of(request: &Value) -> Option<Form> {
    let params = &request["params"];
    if request["method"].as_str() != Some("elicitation/create") || params["mode"] == "url" {
        return None;
    }
    Form::parse(params.get("requestedSchema")?)
}

/// Ask for each field at the terminal until the answer fits the question.
fn ask(key: &str, request: &Value, form: &Form) -> anyhow::Result<Value> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let message = request["params"]["message"]
        .as_str()
        .unwrap_or("input requested");
    eprintln!("input {key}: {message}");
    loop {
        let mut content = serde_json::Map::new();
        for field in &form.fields {
            eprint!("  {} > ", describe(field));
            std::io::stderr().flush().ok();
            let line = match lines.next() {
                Some(line) => line.context("reading the answer")?,
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
    fn inputs_parse_as_key_and_json() {
        let got = parse_inputs(&["user_name={\"name\": \"Ada\"}".into()]).unwrap();
        assert_eq!(got["user_name"], json!({"name": "Ada"}));
        assert!(parse_inputs(&["nokey".into()]).is_err());
        assert!(parse_inputs(&["k={".into()]).is_err());
    }

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
    fn a_bare_object_answers_an_elicitation_as_accepted_content() {
        let elicit = json!({"method": "elicitation/create", "params": {}});
        assert_eq!(
            as_response(&elicit, &json!({"name": "Ada"})),
            json!({"action": "accept", "content": {"name": "Ada"}})
        );
        let decline = json!({"action": "decline"});
        assert_eq!(as_response(&elicit, &decline), decline);
        let sampling = json!({"method": "sampling/createMessage"});
        let result = json!({"role": "assistant"});
        assert_eq!(as_response(&sampling, &result), result);
    }
}
