//! `mcptask servers list|add|remove` and `mcptask config export`: the
//! servers set through the gateway's admin API (`/api/v1/admin/servers`,
//! an operator token), and the running configuration written back as TOML.

use std::path::Path;

use anyhow::Context;
use serde_json::{Map, Value, json};

use super::client::GatewayClient;
use super::exit;
use super::output::outln;

/// What `servers add` sends: the `[[servers]]` keys given as flags, over
/// those of `--definition`.
pub struct AddArgs<'a> {
    pub name: &'a str,
    pub url: Option<&'a str>,
    pub prefix: Option<&'a str>,
    pub definition: Option<&'a str>,
}

/// The path of server `name` (escaped: a name is the operator's text).
fn path_of(name: &str) -> String {
    let mut url = reqwest::Url::parse("http://gateway/api/v1/admin/servers").expect("a URL");
    url.path_segments_mut().expect("a base URL").push(name);
    url.path().to_string()
}

pub async fn list(gw: &GatewayClient, json: bool) -> anyhow::Result<i32> {
    let page = gw.get("/api/v1/admin/servers").await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(exit::OK);
    }
    let servers = page["servers"].as_array().cloned().unwrap_or_default();
    if servers.is_empty() {
        eprintln!("no servers are configured");
        return Ok(exit::OK);
    }
    outln!("{:<24} {:<6} {}", "NAME", "ORIGIN", "SET BY");
    for s in servers {
        let mut by = s["changed_by"].as_str().unwrap_or("").to_string();
        if s["shadowed_by_file"] == true {
            by.push_str(" (shadowed: the file defines it and wins)");
        }
        outln!(
            "{:<24} {:<6} {}",
            s["name"].as_str().unwrap_or(""),
            s["origin"].as_str().unwrap_or(""),
            by
        );
    }
    Ok(exit::OK)
}

pub async fn add(gw: &GatewayClient, a: AddArgs<'_>) -> anyhow::Result<i32> {
    let mut keys = match a.definition {
        None => Map::new(),
        Some(text) => match serde_json::from_str(text).context(
            "--definition is not JSON: give the server's [[servers]] keys as a JSON object",
        )? {
            Value::Object(keys) => keys,
            _ => anyhow::bail!(
                "--definition is not a JSON object: give the server's [[servers]] keys, e.g. '{{\"url\": \"http://127.0.0.1:8080/mcp\"}}'"
            ),
        },
    };
    for (key, value) in [("url", a.url), ("prefix", a.prefix)] {
        if let Some(v) = value {
            keys.insert(key.into(), json!(v));
        }
    }
    let answer = gw.put(&path_of(a.name), &Value::Object(keys)).await?;
    report(&answer, "set");
    Ok(exit::OK)
}

pub async fn remove(gw: &GatewayClient, name: &str) -> anyhow::Result<i32> {
    let answer = gw.delete(&path_of(name)).await?;
    report(&answer, "removed");
    Ok(exit::OK)
}

fn report(answer: &Value, what: &str) {
    let name = answer["name"].as_str().unwrap_or("");
    match answer["not_applied"].as_str() {
        None => eprintln!("server {name:?} {what}; every gateway on this database applies it"),
        Some(why) => eprintln!(
            "server {name:?} {what} and stored, but not in force on this gateway yet: {why}"
        ),
    }
    for line in answer["changes"].as_array().into_iter().flatten() {
        eprintln!("  {}", line.as_str().unwrap_or(""));
    }
}

/// `config export`: the file's own text, then each server the admin API
/// set (and the file does not shadow) as the `[[servers]]` table the file
/// would hold.
pub async fn export(
    gw: &GatewayClient,
    config: &Path,
    output: Option<&Path>,
) -> anyhow::Result<i32> {
    let mut text = std::fs::read_to_string(config)
        .with_context(|| format!("cannot read {}", config.display()))?;
    let page = gw.get("/api/v1/admin/servers").await?;
    let added: Vec<&Value> = page["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["origin"] == "api" && s["shadowed_by_file"] != true)
        .collect();
    if !added.is_empty() {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("\n# Servers set through the admin API (mcptask servers add).\n");
    }
    for s in added {
        let name = s["name"].as_str().unwrap_or_default();
        let table = mcptask_gateway::config::admin::server_body(name, &s["definition"])
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        text.push_str(&table);
    }
    match output {
        Some(path) => std::fs::write(path, &text)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => outln!("{}", text.trim_end()),
    }
    Ok(exit::OK)
}
