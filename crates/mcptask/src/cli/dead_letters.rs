//! `mcptask dead-letters list|redrive`.

use serde_json::{Value, json};

use super::client::GatewayClient;
use super::exit;
use super::output::outln;

pub async fn list(
    gw: &GatewayClient,
    task: Option<&str>,
    target: Option<&str>,
    limit: u32,
    json_out: bool,
) -> anyhow::Result<i32> {
    let limit = limit.to_string();
    let mut q = vec![("limit", limit.as_str())];
    if let Some(t) = task {
        q.push(("task", t));
    }
    if let Some(t) = target {
        q.push(("target", t));
    }
    let page = gw.get_query("/api/v1/dead-letters", &q).await?;
    if json_out {
        outln!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(exit::OK);
    }
    let letters = page["deadLetters"].as_array().cloned().unwrap_or_default();
    eprintln!("{} dead letter(s) in all", page["count"]);
    if letters.is_empty() {
        return Ok(exit::OK);
    }
    outln!(
        "{:<44}  {:<25}  {:<36}  ERROR",
        "EVENT",
        "DEAD AT",
        "TARGET"
    );
    for d in letters {
        outln!(
            "{:<44}  {:<25}  {:<36}  {}",
            d["idempotencyKey"].as_str().unwrap_or(""),
            d["deadAt"].as_str().unwrap_or(""),
            d["target"].as_str().unwrap_or(""),
            d["error"].as_str().unwrap_or("")
        );
    }
    eprintln!("redrive them with: mcptask dead-letters redrive [--task ID] [--target NAME]");
    Ok(exit::OK)
}

pub async fn redrive(
    gw: &GatewayClient,
    task: Option<&str>,
    target: Option<&str>,
    json_out: bool,
) -> anyhow::Result<i32> {
    let mut body = json!({});
    if let Some(t) = task {
        body["task"] = Value::from(t);
    }
    if let Some(t) = target {
        body["target"] = Value::from(t);
    }
    let out = gw.post("/api/v1/dead-letters/redrive", &body).await?;
    if json_out {
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(exit::OK);
    }
    eprintln!(
        "{} dead letter(s) handed back to delivery; {} left",
        out["redriven"], out["remaining"]
    );
    Ok(exit::OK)
}
