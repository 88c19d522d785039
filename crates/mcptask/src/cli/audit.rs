//! `mcptask audit`: the gateway's audit trail, newest first, as a table (or
//! its JSON): every call's end and every refusal, with who made it, how it
//! ended and why it failed.

use std::time::{SystemTime, UNIX_EPOCH};

use mcptask_core::time::{parse_rfc3339, to_rfc3339};

use super::client::GatewayClient;
use super::exit;
use super::output::outln;

/// What to list.
pub struct AuditArgs<'a> {
    pub principal: Option<&'a str>,
    pub server: Option<&'a str>,
    pub tool: Option<&'a str>,
    pub outcome: Option<&'a str>,
    pub since: Option<&'a str>,
    pub until: Option<&'a str>,
    pub limit: u32,
    pub cursor: Option<&'a str>,
    pub json: bool,
}

/// A time as `--since`/`--until` take it: RFC 3339, or a while ago
/// (`90s`, `15m`, `2h`, `7d`), as the RFC 3339 time the API takes.
pub fn time_arg(text: &str) -> anyhow::Result<String> {
    if parse_rfc3339(text).is_some() {
        return Ok(text.to_string());
    }
    let unit_ms: i64 = match text.chars().last() {
        Some('s') => 1_000,
        Some('m') => 60_000,
        Some('h') => 3_600_000,
        Some('d') => 86_400_000,
        _ => 0,
    };
    let amount = text[..text.len().saturating_sub(1)].parse::<i64>().ok();
    match amount.filter(|n| *n >= 0 && unit_ms > 0) {
        Some(n) => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            Ok(to_rfc3339(now.saturating_sub(n.saturating_mul(unit_ms))))
        }
        None => anyhow::bail!(
            "{text:?} is not a time: give an RFC 3339 time (2026-01-31T09:00:00Z) or a while ago (90s, 15m, 2h, 7d)"
        ),
    }
}

pub async fn list(gw: &GatewayClient, args: AuditArgs<'_>) -> anyhow::Result<i32> {
    let since = args.since.map(time_arg).transpose()?;
    let until = args.until.map(time_arg).transpose()?;
    let limit = args.limit.to_string();
    let mut q = vec![("limit", limit.as_str())];
    for (name, value) in [
        ("principal", args.principal),
        ("server", args.server),
        ("tool", args.tool),
        ("outcome", args.outcome),
        ("since", since.as_deref()),
        ("until", until.as_deref()),
        ("cursor", args.cursor),
    ] {
        if let Some(v) = value {
            q.push((name, v));
        }
    }
    let page = gw.get_query("/api/v1/audit", &q).await?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(exit::OK);
    }
    let events = page["events"].as_array().cloned().unwrap_or_default();
    if events.is_empty() {
        eprintln!("no audit entries match");
        return Ok(exit::OK);
    }
    outln!(
        "{:<24}  {:<14}  {:<4}  {:<28}  {:<14}  {:<18}  {:>9}  CALL",
        "AT",
        "PRINCIPAL",
        "FACE",
        "SERVER/TOOL",
        "OUTCOME",
        "ERROR",
        "MS"
    );
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("-").to_string();
    for e in &events {
        outln!(
            "{:<24}  {:<14}  {:<4}  {:<28}  {:<14}  {:<18}  {:>9}  {}",
            text(&e["at"]),
            text(&e["principal"]),
            text(&e["face"]),
            format!("{}/{}", text(&e["server"]), text(&e["tool"])),
            text(&e["outcome"]),
            text(&e["errorClass"]),
            e["durationMs"].as_i64().unwrap_or(0),
            text(&e["callId"]),
        );
    }
    if let Some(cursor) = page["nextCursor"].as_str() {
        eprintln!("more: mcptask audit --cursor {cursor} (with the same filters)");
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_time_or_a_while_ago() {
        assert_eq!(
            time_arg("2026-01-31T09:00:00Z").unwrap(),
            "2026-01-31T09:00:00Z"
        );
        let hour_ago = parse_rfc3339(&time_arg("1h").unwrap()).unwrap();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!((now - hour_ago - 3_600_000).abs() < 60_000);
        assert!(time_arg("yesterday").is_err());
        assert!(time_arg("h").is_err());
    }
}
