//! Input a server asks for before it starts a task (multi-round-trip): `call`
//! answers it from `--input KEY=JSON`, or asks at the terminal field by
//! field, then calls again with the answers; without either it prints the
//! questions and the `--input` flags that would answer them.

use std::collections::BTreeMap;

use anyhow::Context;
use serde_json::{Value, json};

use super::inputs::{describe, example, shell_quote};
use super::prompt::{ask, form_of, interactive};

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
    let interactive = interactive();
    let mut answers = BTreeMap::new();
    let mut missing = Vec::new();
    for (key, request) in requests.as_object().into_iter().flatten() {
        if let Some(value) = given.get(key) {
            answers.insert(key.clone(), as_response(request, value));
        } else if interactive && let Some(form) = form_of(request) {
            let content = ask(key, request, &form).await?;
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
