//! `GET /api/v1/servers/stats`: each configured server's condition (ok,
//! degraded, down) and its recent numbers (calls/s, p50/p99 latency, error
//! rate, a per-minute series, per tool) for the dashboard's servers page.
//!
//! The numbers come from the audit trail, which every replica on the store
//! writes: one indexed walk of its newest entries, at most [`SAMPLE`] of
//! them, whatever the number of calls stored. When the window holds more,
//! the numbers cover the newest [`SAMPLE`] entries and the answer says so
//! (`sampled`, `coveredSeconds`). An operator sees every caller's calls; a
//! principal its own (the rule of the task list, [`Caller::acting_for`]).

use std::collections::BTreeMap;

use axum::Extension;
use axum::Json;
use axum::extract::{Query, State};
use mcptask_client::Health;
use mcptask_core::Clock;
use mcptask_core::audit::{AuditEvent, AuditFilter};
use mcptask_core::outcome::Outcome;
use mcptask_core::time::to_rfc3339;
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::ApiError;
use super::{AppState, Caller};

/// Audit entries read per request, at most.
pub const SAMPLE: i64 = 5_000;

/// The width of one point of a series.
const BUCKET_MS: i64 = 60_000;

/// The window when the query names none, and the widest allowed (minutes).
const DEFAULT_MINUTES: i64 = 15;
const MAX_MINUTES: i64 = 60;

/// A server whose ended calls in the window failed (or returned a tool
/// error) at least this often is degraded.
pub const DEGRADED_ERROR_RATE: f64 = 0.1;

/// The query of `GET /api/v1/servers/stats`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsQuery {
    /// The window, in minutes (1 to 60; default 15).
    minutes: Option<i64>,
}

/// The numbers of one server, or one tool, over the window.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Numbers {
    /// Entries: calls that ended and refusals.
    pub calls: u64,
    /// Of which ended by failing or with a tool error.
    pub errors: u64,
    /// Of which refused (policy or limits): nothing reached the server.
    pub refused: u64,
    /// Counts by outcome.
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Durations of the calls that reached the server (ms).
    durations: Vec<i64>,
    /// Entries per bucket, oldest first.
    pub series: Vec<u64>,
    /// Errors per bucket, oldest first.
    pub error_series: Vec<u64>,
}

impl Numbers {
    fn new(buckets: usize) -> Self {
        Numbers {
            series: vec![0; buckets],
            error_series: vec![0; buckets],
            ..Default::default()
        }
    }

    fn add(&mut self, e: &AuditEvent, bucket: Option<usize>) {
        self.calls += 1;
        *self.outcomes.entry(e.outcome.as_str()).or_default() += 1;
        let error = matches!(e.outcome, Outcome::Failed | Outcome::ToolError);
        let refused = matches!(e.outcome, Outcome::RefusedPolicy | Outcome::RefusedLimit);
        self.errors += u64::from(error);
        self.refused += u64::from(refused);
        if !refused {
            self.durations.push(e.duration_ms);
        }
        if let Some(b) = bucket {
            self.series[b] += 1;
            self.error_series[b] += u64::from(error);
        }
    }

    /// Calls that reached the server and ended.
    pub fn reached(&self) -> u64 {
        self.calls - self.refused
    }

    /// The share of the calls that reached the server that failed or
    /// returned a tool error (`None`: none reached it).
    pub fn error_rate(&self) -> Option<f64> {
        let reached = self.reached();
        (reached > 0).then(|| self.errors as f64 / reached as f64)
    }

    /// The `q` quantile (0–1) of the durations, nearest rank.
    pub fn quantile_ms(&mut self, q: f64) -> Option<i64> {
        if self.durations.is_empty() {
            return None;
        }
        self.durations.sort_unstable();
        let rank = (q * self.durations.len() as f64).ceil() as usize;
        Some(self.durations[rank.clamp(1, self.durations.len()) - 1])
    }

    fn view(&mut self, covered_s: f64) -> Value {
        json!({
            "calls": self.calls,
            "callsPerSecond": if covered_s > 0.0 { self.calls as f64 / covered_s } else { 0.0 },
            "errors": self.errors,
            "refused": self.refused,
            "errorRate": self.error_rate(),
            "p50Ms": self.quantile_ms(0.5),
            "p99Ms": self.quantile_ms(0.99),
            "outcomes": self.outcomes,
            "series": {"calls": self.series, "errors": self.error_series},
        })
    }
}

/// How a server stands, for the console: decided here once from its
/// health (what its last exchange said) and its recent numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// `ok`, `degraded`, `down` or `unknown` (not contacted yet).
    pub state: &'static str,
    /// Why, in words (`None` when ok).
    pub reason: Option<String>,
}

/// The condition of a server whose last exchange left `health` and whose
/// calls in the window are `numbers`. `show_error` tells whether the
/// upstream's own error text may be shown (operators only).
pub fn condition(health: Option<&Health>, numbers: &Numbers, show_error: bool) -> Condition {
    let failing = health.is_some_and(|h| h.state == "error");
    if failing {
        let why = health
            .and_then(|h| h.last_error.clone())
            .filter(|_| show_error)
            .unwrap_or_else(|| "its last exchange failed".into());
        return Condition {
            state: "down",
            reason: Some(why),
        };
    }
    if let Some(rate) = numbers.error_rate()
        && rate >= DEGRADED_ERROR_RATE
    {
        return Condition {
            state: "degraded",
            reason: Some(format!(
                "{} of its last {} calls failed or returned a tool error",
                numbers.errors,
                numbers.reached()
            )),
        };
    }
    match health {
        Some(h) if h.state == "ok" => Condition {
            state: "ok",
            reason: None,
        },
        _ if numbers.reached() > 0 => Condition {
            state: "ok",
            reason: None,
        },
        _ => Condition {
            state: "unknown",
            reason: Some("not contacted yet".into()),
        },
    }
}

/// Each configured server's condition and numbers.
pub async fn servers(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<StatsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let minutes = q.minutes.unwrap_or(DEFAULT_MINUTES);
    if !(1..=MAX_MINUTES).contains(&minutes) {
        return Err(ApiError::bad_request(format!(
            "minutes must be between 1 and {MAX_MINUTES}"
        )));
    }
    let now = mcptask_core::SystemClock.now_ms();
    let window = minutes * 60_000;
    let since = now - window;
    let filter = AuditFilter {
        principal: caller.acting_for(None)?,
        since_ms: Some(since),
        ..Default::default()
    };
    let sample = state
        .calls
        .store()
        .audit()
        .list_audit(&filter, None, SAMPLE)
        .await
        .map_err(|e| crate::failure::Failure::store(&e))?;
    let sampled = sample.len() as i64 == SAMPLE;
    // A full sample covers from its oldest entry on, not the whole window.
    let start = match sample.last() {
        Some(oldest) if sampled => oldest.event.at_ms,
        _ => since,
    };
    let covered_s = ((now - start).max(1)) as f64 / 1000.0;
    let buckets = minutes as usize;
    let bucket_of = |at: i64| {
        let b = (at - since) / BUCKET_MS;
        usize::try_from(b).ok().filter(|b| *b < buckets)
    };

    let registry = state.tracker.servers();
    let catalog = state.calls.upstreams.catalog();
    let mut per_server: BTreeMap<String, (Numbers, BTreeMap<String, Numbers>)> = registry
        .names()
        .into_iter()
        .map(|n| (n, (Numbers::new(buckets), BTreeMap::new())))
        .collect();
    for record in &sample {
        let e = &record.event;
        let Some((numbers, tools)) = per_server.get_mut(&e.server) else {
            continue;
        };
        let bucket = bucket_of(e.at_ms);
        numbers.add(e, bucket);
        tools
            .entry(e.tool.clone())
            .or_insert_with(|| Numbers::new(buckets))
            .add(e, bucket);
    }
    let mut servers = Vec::new();
    for (name, (mut numbers, mut tools)) in per_server {
        // Every tool its listing offers this caller, called or not.
        for route in catalog.routes().filter(|r| r.server == name) {
            if crate::route::visible(&state.calls, &caller, &name, &route.tool) {
                tools
                    .entry(route.tool.clone())
                    .or_insert_with(|| Numbers::new(buckets));
            }
        }
        let health = registry.health(&name);
        let Condition {
            state: cond,
            reason,
        } = condition(health.as_ref(), &numbers, caller.operator);
        let tools: Vec<Value> = tools
            .iter_mut()
            .filter(|(tool, _)| tool.as_str() != crate::metrics::OTHER)
            .map(|(tool, n)| {
                let mut v = n.view(covered_s);
                v["name"] = json!(tool);
                v
            })
            .collect();
        let mut entry = numbers.view(covered_s);
        let obj = entry.as_object_mut().expect("an object");
        obj.insert("name".into(), json!(name));
        obj.insert("state".into(), json!(cond));
        obj.insert("reason".into(), json!(reason));
        obj.insert(
            "lastOkAt".into(),
            json!(health.as_ref().and_then(|h| h.last_ok_at.clone())),
        );
        obj.insert(
            "lastErrorAt".into(),
            json!(health.as_ref().and_then(|h| h.last_error_at.clone())),
        );
        obj.insert("tools".into(), json!(tools));
        servers.push(entry);
    }
    Ok(Json(json!({
        "since": to_rfc3339(since),
        "windowSeconds": window / 1000,
        "bucketSeconds": BUCKET_MS / 1000,
        "coveredSeconds": covered_s,
        "sampled": sampled,
        "sampleLimit": SAMPLE,
        "servers": servers,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcptask_core::call::Face;

    fn ended(outcome: Outcome, ms: i64) -> AuditEvent {
        AuditEvent {
            at_ms: 0,
            call_id: None,
            principal: None,
            face: Face::Api,
            server: "s".into(),
            tool: "t".into(),
            driver: "sync".into(),
            outcome,
            error_class: None,
            duration_ms: ms,
            via: None,
        }
    }

    fn numbers(events: &[AuditEvent]) -> Numbers {
        let mut n = Numbers::new(2);
        for e in events {
            n.add(e, Some(1));
        }
        n
    }

    fn health(state: &'static str, error: Option<&str>) -> Health {
        Health {
            state,
            last_error: error.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn quantiles_are_nearest_rank_over_calls_that_reached_the_server() {
        let mut events: Vec<AuditEvent> =
            (1..=100).map(|ms| ended(Outcome::Completed, ms)).collect();
        events.push(ended(Outcome::RefusedLimit, 0));
        let mut n = numbers(&events);
        assert_eq!(
            (n.quantile_ms(0.5), n.quantile_ms(0.99)),
            (Some(50), Some(99))
        );
        assert_eq!((n.calls, n.refused, n.reached()), (101, 1, 100));
        assert_eq!(n.series, [0, 101]);
        assert_eq!(Numbers::new(1).quantile_ms(0.5), None);
    }

    #[test]
    fn a_failing_server_is_down_with_its_reason_for_operators_only() {
        let n = numbers(&[ended(Outcome::Completed, 5)]);
        let h = health("error", Some("connection refused"));
        let op = condition(Some(&h), &n, true);
        assert_eq!(op.state, "down");
        assert_eq!(op.reason.as_deref(), Some("connection refused"));
        let other = condition(Some(&h), &n, false);
        assert_eq!(other.reason.as_deref(), Some("its last exchange failed"));
    }

    #[test]
    fn errors_over_the_threshold_degrade_an_answering_server() {
        let mut events = vec![ended(Outcome::Completed, 5); 8];
        events.push(ended(Outcome::Failed, 5));
        events.push(ended(Outcome::ToolError, 5));
        // Refusals say nothing about the server.
        events.extend(vec![ended(Outcome::RefusedPolicy, 0); 50]);
        let c = condition(Some(&health("ok", None)), &numbers(&events), true);
        assert_eq!(c.state, "degraded");
        assert_eq!(
            c.reason.as_deref(),
            Some("2 of its last 10 calls failed or returned a tool error")
        );
        events.extend(vec![ended(Outcome::Completed, 5); 20]);
        let c = condition(Some(&health("ok", None)), &numbers(&events), true);
        assert_eq!((c.state, c.reason), ("ok", None));
        let quiet = condition(None, &Numbers::new(1), true);
        assert_eq!(quiet.state, "unknown");
    }
}
