//! `mcptask tools [SERVER]`: what the configured servers offer, so that a
//! user learns a tool's name and arguments without speaking raw MCP.

use serde_json::{Value, json};

use super::client::GatewayClient;
use super::exit;
use super::output::outln;

/// Longest description shown in the table (the JSON has it whole).
const DESCRIPTION_CHARS: usize = 80;

/// List the tools of `server`, or of every configured server.
pub async fn list(gw: &GatewayClient, server: Option<&str>, json_out: bool) -> anyhow::Result<i32> {
    let names = match server {
        Some(name) => vec![name.to_string()],
        None => {
            let servers = gw.get("/api/v1/servers").await?;
            servers["servers"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s["name"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        }
    };
    if let Some(name) = server {
        // One server: its failure is the command's (an unknown name, a server down).
        let answer = gw.get(&tools_path(name)).await?;
        if json_out {
            outln!("{}", serde_json::to_string_pretty(&answer)?);
        } else {
            table(&[answer]);
        }
        return Ok(exit::OK);
    }
    if names.is_empty() {
        eprintln!("no servers are configured: add [[servers]] to mcptask.toml");
        if json_out {
            outln!("{}", serde_json::to_string_pretty(&json!({"servers": []}))?);
        }
        return Ok(exit::OK);
    }
    // Every server: one that is down must not hide the others' tools.
    let mut answers = Vec::new();
    let mut failed = 0;
    for name in &names {
        match gw.get(&tools_path(name)).await {
            Ok(answer) => answers.push(answer),
            Err(e) => {
                failed += 1;
                eprintln!("error: {e:#}");
                answers.push(json!({"server": name, "error": format!("{e:#}")}));
            }
        }
    }
    if json_out {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"servers": answers}))?
        );
    } else {
        table(&answers);
    }
    Ok(if failed > 0 { exit::ERROR } else { exit::OK })
}

fn tools_path(server: &str) -> String {
    format!("/api/v1/servers/{}/tools", encode_segment(server))
}

/// Percent-encode a path segment (a server name may hold `/`, `?` or spaces).
fn encode_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn table(answers: &[Value]) {
    let mut rows = Vec::new();
    for answer in answers {
        let server = answer["server"].as_str().unwrap_or("");
        for tool in answer["tools"].as_array().into_iter().flatten() {
            rows.push([
                server.to_string(),
                tool["name"].as_str().unwrap_or("").to_string(),
                arguments(&tool["inputSchema"]),
                one_line(tool["description"].as_str().unwrap_or("")),
            ]);
        }
    }
    if rows.is_empty() {
        eprintln!("no tools");
        return;
    }
    let width = |i: usize| {
        rows.iter()
            .map(|r: &[String; 4]| r[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let (w0, w1, w2) = (width(0).max(6), width(1).max(4), width(2).max(9));
    outln!(
        "{:<w0$}  {:<w1$}  {:<w2$}  DESCRIPTION",
        "SERVER",
        "TOOL",
        "ARGUMENTS"
    );
    for [server, tool, args, description] in rows {
        let line = format!("{server:<w0$}  {tool:<w1$}  {args:<w2$}  {description}");
        outln!("{}", line.trim_end());
    }
    eprintln!(
        "`*` marks a required argument; `mcptask tools SERVER --json` shows the full schemas"
    );
}

/// `a:number* b:string mode:fast|slow`: each argument with its type, `*`
/// when required; `-` for none.
pub fn arguments(schema: &Value) -> String {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema["properties"].as_object() else {
        return "-".into();
    };
    if properties.is_empty() {
        return "-".into();
    }
    properties
        .iter()
        .map(|(name, prop)| {
            let star = if required.contains(&name.as_str()) {
                "*"
            } else {
                ""
            };
            format!("{name}:{}{star}", type_of(prop))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn type_of(prop: &Value) -> String {
    if let Some(choices) = prop["enum"].as_array() {
        return choices
            .iter()
            .map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join("|");
    }
    match &prop["type"] {
        Value::String(t) => t.clone(),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("|"),
        _ => "any".into(),
    }
}

fn one_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    if line.chars().count() > DESCRIPTION_CHARS {
        let cut: String = line.chars().take(DESCRIPTION_CHARS - 1).collect();
        format!("{cut}…")
    } else {
        line.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_summarised_with_types_and_required_marks() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "number"}, "b": {"type": "number"},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "note": {"type": ["string", "null"]}, "x": {}},
            "required": ["a"]});
        assert_eq!(
            arguments(&schema),
            "a:number* b:number mode:fast|slow note:string|null x:any"
        );
        assert_eq!(arguments(&json!({"type": "object", "properties": {}})), "-");
        assert_eq!(arguments(&json!({"type": "object"})), "-");
    }

    #[test]
    fn descriptions_keep_one_bounded_line_and_names_are_encoded() {
        assert_eq!(one_line("first line\nsecond"), "first line");
        let long = "x".repeat(200);
        assert_eq!(one_line(&long).chars().count(), DESCRIPTION_CHARS);
        assert_eq!(encode_segment("a b/c?d"), "a%20b%2Fc%3Fd");
    }
}
