//! `mcptask servers list|add|remove`, `mcptask virtual-servers
//! list|add|remove` and `mcptask config export`: the objects set through
//! the gateway's admin API (`/api/v1/admin/servers`,
//! `/api/v1/admin/virtual_servers`, an operator token), and the running
//! configuration written back as TOML.

use std::path::Path;

use anyhow::Context;
use serde_json::{Map, Value, json};

use mcptask_gateway::config::admin::{Kind, body};

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

/// What `virtual-servers add` sends: the `[[virtual_servers]]` keys given
/// as flags (each list replaces the one of `--definition`).
pub struct AddVirtualArgs<'a> {
    pub name: &'a str,
    pub tools: Vec<String>,
    pub prompts: Vec<String>,
    pub resources: Vec<String>,
    pub principals: Vec<String>,
    pub definition: Option<&'a str>,
}

/// The path of the `kind` object `name` (escaped: a name is the
/// operator's text).
fn path_of(kind: Kind, name: &str) -> String {
    let mut url = reqwest::Url::parse(&format!("http://gateway/api/v1/admin/{}", kind.table()))
        .expect("a URL");
    url.path_segments_mut().expect("a base URL").push(name);
    url.path().to_string()
}

pub async fn list(gw: &GatewayClient, kind: Kind, json: bool) -> anyhow::Result<i32> {
    let page = gw.get(&format!("/api/v1/admin/{}", kind.table())).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(exit::OK);
    }
    let objects = page[kind.table()].as_array().cloned().unwrap_or_default();
    if objects.is_empty() {
        eprintln!("no {}s are configured", kind.noun());
        return Ok(exit::OK);
    }
    outln!("{:<24} {:<6} {}", "NAME", "ORIGIN", "SET BY");
    for s in objects {
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

/// The keys of `--definition` (a JSON object of the kind's table keys).
fn definition_keys(kind: Kind, text: Option<&str>) -> anyhow::Result<Map<String, Value>> {
    let table = kind.table();
    let Some(text) = text else {
        return Ok(Map::new());
    };
    match serde_json::from_str(text).with_context(|| {
        format!(
            "--definition is not JSON: give the {}'s [[{table}]] keys as a JSON object",
            kind.noun()
        )
    })? {
        Value::Object(keys) => Ok(keys),
        _ => anyhow::bail!(
            "--definition is not a JSON object: give the {}'s [[{table}]] keys, e.g. '{{\"name\": …}}' without the name",
            kind.noun()
        ),
    }
}

pub async fn add(gw: &GatewayClient, a: AddArgs<'_>) -> anyhow::Result<i32> {
    let mut keys = definition_keys(Kind::Server, a.definition)?;
    for (key, value) in [("url", a.url), ("prefix", a.prefix)] {
        if let Some(v) = value {
            keys.insert(key.into(), json!(v));
        }
    }
    put(gw, Kind::Server, a.name, keys).await
}

pub async fn add_virtual(gw: &GatewayClient, a: AddVirtualArgs<'_>) -> anyhow::Result<i32> {
    let mut keys = definition_keys(Kind::VirtualServer, a.definition)?;
    for (key, values) in [
        ("tools", a.tools),
        ("prompts", a.prompts),
        ("resources", a.resources),
        ("principals", a.principals),
    ] {
        if !values.is_empty() {
            keys.insert(key.into(), json!(values));
        }
    }
    put(gw, Kind::VirtualServer, a.name, keys).await
}

async fn put(
    gw: &GatewayClient,
    kind: Kind,
    name: &str,
    keys: Map<String, Value>,
) -> anyhow::Result<i32> {
    let answer = gw.put(&path_of(kind, name), &Value::Object(keys)).await?;
    report(kind, &answer, "set");
    Ok(exit::OK)
}

pub async fn remove(gw: &GatewayClient, kind: Kind, name: &str) -> anyhow::Result<i32> {
    let answer = gw.delete(&path_of(kind, name)).await?;
    report(kind, &answer, "removed");
    Ok(exit::OK)
}

fn report(kind: Kind, answer: &Value, what: &str) {
    let name = answer["name"].as_str().unwrap_or("");
    let noun = kind.noun();
    match answer["not_applied"].as_str() {
        None => eprintln!("{noun} {name:?} {what}; every gateway on this database applies it"),
        Some(why) => eprintln!(
            "{noun} {name:?} {what} and stored, but not in force on this gateway yet: {why}"
        ),
    }
    for line in answer["changes"].as_array().into_iter().flatten() {
        eprintln!("  {}", line.as_str().unwrap_or(""));
    }
}

/// `config export`: the file's own text, then each object the admin API
/// set (and the file does not shadow), servers first, as the table the
/// file would hold.
pub async fn export(
    gw: &GatewayClient,
    config: &Path,
    output: Option<&Path>,
) -> anyhow::Result<i32> {
    let mut text = std::fs::read_to_string(config)
        .with_context(|| format!("cannot read {}", config.display()))?;
    for kind in Kind::ALL {
        let page = gw.get(&format!("/api/v1/admin/{}", kind.table())).await?;
        let added: Vec<&Value> = page[kind.table()]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["origin"] == "api" && s["shadowed_by_file"] != true)
            .collect();
        if !added.is_empty() {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "\n# {}s set through the admin API.\n",
                capitalised(kind.noun())
            ));
        }
        for s in added {
            let name = s["name"].as_str().unwrap_or_default();
            let table = body(kind, name, &s["definition"]).map_err(|e| anyhow::anyhow!("{e}"))?;
            text.push_str(&table);
        }
    }
    match output {
        Some(path) => std::fs::write(path, &text)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => outln!("{}", text.trim_end()),
    }
    Ok(exit::OK)
}

fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}
