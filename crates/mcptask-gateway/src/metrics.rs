//! Prometheus metrics: the recorder, and gauges refreshed from the store.
//!
//! Counters and histograms are recorded where things happen (claims, remote
//! calls, errors by class, notifications, API requests). Task counts by status
//! and the notification backlog come from the store every few seconds, so a
//! scrape never touches the database.

use std::time::Duration;

use mcptask_client::TaskStatus;
use mcptask_client::Tracker;
use mcptask_core::Clock;
use mcptask_core::audit::AuditEvent;
use mcptask_core::call::Face;
use mcptask_core::outcome::Outcome;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;

/// Install the process-wide recorder (once per process).
pub fn install() -> anyhow::Result<PrometheusHandle> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full("mcptask_remote_call_seconds".into()),
            &[
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ],
        )?
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full("mcptask_call_seconds".into()),
            &CALL_BUCKETS,
        )?
        .install_recorder()
        .inspect(|_| describe())
        .map_err(|e| anyhow::anyhow!("cannot install the metrics recorder: {e}"))
}

/// Every series with `# HELP` text, and the ones with a known label set
/// registered at zero: a dashboard or alert (`rate(...)`, `absent(...)`)
/// should see a series from the first scrape, not after its first event.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(
        "mcptask_tasks",
        "Tracked remote tasks by status (refreshed from the store every few seconds)."
    );
    describe_gauge!(
        "mcptask_notification_backlog",
        "Task events not yet delivered to every notification target."
    );
    describe_counter!(
        "mcptask_claims_total",
        "Tasks claimed by this gateway's workers, by phase."
    );
    describe_histogram!(
        "mcptask_remote_call_seconds",
        metrics::Unit::Seconds,
        "Duration of remote MCP calls, by phase."
    );
    describe_counter!(
        "mcptask_remote_errors_total",
        "Failed remote MCP calls, by class."
    );
    describe_counter!(
        "mcptask_stale_claims_total",
        "Results dropped because their claim was lost (fenced out)."
    );
    describe_counter!(
        "mcptask_abandon_cancels_total",
        "Best-effort tasks/cancel sent for tasks given up locally, by outcome."
    );
    describe_counter!(
        "mcptask_stdio_recycled_total",
        "Wedged stdio server processes killed and respawned."
    );
    describe_counter!(
        "mcptask_notifications_total",
        "Notification deliveries, by outcome."
    );
    describe_counter!(
        "mcptask_remote_purged_total",
        "Settled tasks purged after the retention period."
    );
    describe_counter!(
        "mcptask_api_requests_total",
        "HTTP API requests, by route, method and status."
    );
    for phase in ["poll", "cancel", "update"] {
        metrics::counter!("mcptask_claims_total", "phase" => phase).absolute(0);
    }
    for class in [
        "transient",
        "not_found",
        "protocol",
        "connection_unavailable",
    ] {
        metrics::counter!("mcptask_remote_errors_total", "class" => class).absolute(0);
    }
    for outcome in ["delivered", "retry", "dead_letter"] {
        metrics::counter!("mcptask_notifications_total", "outcome" => outcome).absolute(0);
    }
    for outcome in ["sent", "failed"] {
        metrics::counter!("mcptask_abandon_cancels_total", "outcome" => outcome).absolute(0);
    }
    metrics::counter!("mcptask_stale_claims_total").absolute(0);
    metrics::counter!("mcptask_stdio_recycled_total").absolute(0);
    metrics::counter!("mcptask_remote_purged_total").absolute(0);
    metrics::gauge!("mcptask_notification_backlog").set(0.0);
    describe_upstreams();
    describe_calls();
    crate::audit::describe();
}

/// Refresh the store-derived gauges until `stop`.
pub fn spawn_gauges(tracker: Tracker, every: Duration, stop: CancellationToken) {
    tokio::spawn(async move {
        loop {
            refresh(&tracker).await;
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
        }
    });
}

/// Read counts from the store into gauges.
pub async fn refresh(tracker: &Tracker) {
    match tracker.counts().await {
        Ok(counts) => {
            for status in TaskStatus::ALL {
                let n = counts
                    .iter()
                    .find(|(s, _)| *s == status)
                    .map_or(0, |(_, n)| *n);
                metrics::gauge!("mcptask_tasks", "status" => status.as_str()).set(n as f64);
            }
            set_live_calls(&counts);
        }
        Err(e) => tracing::warn!(error = %e, "cannot read task counts for metrics"),
    }
    match tracker.notification_backlog().await {
        Ok(n) => metrics::gauge!("mcptask_notification_backlog").set(n as f64),
        Err(e) => tracing::warn!(error = %e, "cannot read the notification backlog for metrics"),
    }
}

/// The limits of `[limits]` in `/metrics`: each configured value, and the
/// refusals by the limit that refused them (labels: the limit's key, a
/// closed set; never a principal, which would make the series unbounded).
pub mod limits {
    use crate::calls::{Limit, Limits};

    const REFUSALS: &str = "mcptask_limit_refusals_total";
    const CONFIGURED: &str = "mcptask_limit";

    /// One refusal by `limit`.
    pub fn refused(limit: Limit) {
        metrics::counter!(REFUSALS, "limit" => limit.key()).increment(1);
    }

    /// The limits now in force (at start and after each reload; `+Inf`: no
    /// cap). The refusal counters are registered at
    /// zero here, so they exist from the first scrape.
    pub fn configured(limits: &Limits) {
        metrics::describe_counter!(
            REFUSALS,
            "Calls refused by a limit of [limits], by the limit's key"
        );
        metrics::describe_gauge!(
            CONFIGURED,
            "The value of each limit of [limits] in force (+Inf: no cap)"
        );
        for limit in Limit::ALL {
            metrics::counter!(REFUSALS, "limit" => limit.key()).increment(0);
            let value = match limit {
                Limit::PerPrincipalRate => limits.rate.map(|r| r.per_second),
                Limit::PerPrincipalInFlight => limits.in_flight.map(|n| n as f64),
                Limit::LiveCallsPerPrincipal => limits.live.per_principal.map(|n| n as f64),
                Limit::LiveCallsPerServer => limits.live.per_server.map(|n| n as f64),
            };
            let gauge = metrics::gauge!(CONFIGURED, "limit" => limit.key());
            match value {
                Some(v) => gauge.set(v),
                None => gauge.set(f64::INFINITY),
            }
        }
    }
}

// --- upstream health -------------------------------------------------------

/// Set `mcptask_upstream_up{server}` from each configured server's health
/// (1: its last call or listing was answered; 0: it failed, or the server
/// was not contacted yet). Read at each scrape from memory: the gauge is
/// never staler than the health `GET /api/v1/servers` shows.
pub fn upstream_up(upstreams: &crate::upstreams::Upstreams) {
    for (server, up) in upstreams.up() {
        metrics::gauge!("mcptask_upstream_up", "server" => server).set(if up { 1.0 } else { 0.0 });
    }
}

/// The `# HELP` of the upstream health gauge.
fn describe_upstreams() {
    metrics::describe_gauge!(
        "mcptask_upstream_up",
        "Whether each configured upstream server answers: 1 when its last call or listing was answered, 0 when it failed or the server was not contacted yet."
    );
}

// --- calls -----------------------------------------------------------------

/// The label a server or tool name takes when it is not one the gateway
/// knows: a caller's made-up name never becomes a series of its own.
pub const OTHER: &str = "(other)";

/// The labels of one call in `mcptask_calls_total` and
/// `mcptask_call_seconds`: bounded by the configuration (a server that is
/// not configured, or a tool its last listing does not have, is
/// [`OTHER`]), never a caller's text.
///
/// They carry what the audit trail records of the call beside them (who
/// called, the kept call's id, why it failed): never metric labels, which
/// stay bounded.
#[derive(Debug, Clone)]
pub struct CallLabels {
    server: String,
    tool: String,
    face: Face,
    driver: &'static str,
    principal: Option<String>,
    call_id: Option<String>,
    error_class: Option<&'static str>,
    via: Option<String>,
}

impl CallLabels {
    /// The labels of a call of `tool` on `server` through `face`, run by
    /// `driver` (`pass_through` for an answer relayed synchronously).
    pub fn new(
        upstreams: &crate::upstreams::Upstreams,
        server: &str,
        tool: &str,
        face: Face,
        driver: &'static str,
    ) -> Self {
        let configured = upstreams.is_configured(server);
        let listed = configured && upstreams.catalog().of_upstream(server, tool).is_some();
        CallLabels {
            server: if configured { server } else { OTHER }.to_string(),
            tool: if listed { tool } else { OTHER }.to_string(),
            face,
            driver,
            principal: None,
            call_id: None,
            error_class: None,
            via: None,
        }
    }

    /// Made by `principal` (`None`: anonymous), for the audit trail.
    pub fn by(mut self, principal: Option<&str>) -> Self {
        self.principal = principal.map(str::to_string);
        self
    }

    /// Made through the virtual server `name` (`/mcp/<name>`), for the
    /// audit trail and `mcptask_virtual_server_calls_total`.
    pub fn via(mut self, name: Option<&str>) -> Self {
        self.via = name.map(str::to_string);
        self
    }

    /// The kept call `id`, for the audit trail.
    pub fn call(mut self, id: &str) -> Self {
        self.call_id = (!id.is_empty()).then(|| id.to_string());
        self
    }

    /// It failed or was refused for `class` (a [`Failure::code`]-style
    /// word, [`crate::failure::class_of`]), for the audit trail.
    ///
    /// [`Failure::code`]: crate::failure::Failure::code
    pub fn failed_with(mut self, class: &'static str) -> Self {
        self.error_class = Some(class);
        self
    }
}

impl CallLabels {
    /// The labels of a call refused from its headers, before its body
    /// named a server or tool.
    pub fn unnamed(face: Face) -> Self {
        CallLabels {
            server: OTHER.to_string(),
            tool: OTHER.to_string(),
            face,
            driver: NO_DRIVER,
            principal: None,
            call_id: None,
            error_class: None,
            via: None,
        }
    }
}

#[cfg(test)]
impl CallLabels {
    /// Labels of a call of `s/t` through the MCP front, for unit tests.
    pub(crate) fn for_tests() -> Self {
        CallLabels {
            server: "s".into(),
            tool: "t".into(),
            face: Face::Mcp,
            driver: PASS_THROUGH,
            principal: None,
            call_id: None,
            error_class: None,
            via: None,
        }
    }
}

/// The driver label of an answer relayed synchronously (nothing kept).
pub const PASS_THROUGH: &str = "pass_through";

/// The driver label of a call refused before it was made.
pub const NO_DRIVER: &str = "none";

/// A call ended with `outcome` after `took`: counted, and recorded in the
/// audit trail (the one observer of a call's end or refusal, on every
/// face).
pub fn call_ended(labels: &CallLabels, outcome: Outcome, took: Duration) {
    let CallLabels {
        server,
        tool,
        face,
        driver,
        principal,
        call_id,
        error_class,
        via,
    } = labels.clone();
    if let Some(name) = &via {
        metrics::counter!("mcptask_virtual_server_calls_total",
            "virtual_server" => name.clone(), "outcome" => outcome.as_str())
        .increment(1);
    }
    metrics::counter!("mcptask_calls_total",
        "server" => server.clone(), "tool" => tool.clone(), "face" => face.as_str(),
        "outcome" => outcome.as_str(), "driver" => driver)
    .increment(1);
    metrics::histogram!("mcptask_call_seconds", "server" => server.clone(), "tool" => tool.clone())
        .record(took.as_secs_f64());
    crate::audit::record(AuditEvent {
        at_ms: mcptask_core::SystemClock.now_ms(),
        call_id,
        principal,
        face,
        server,
        tool,
        driver: driver.to_string(),
        outcome,
        error_class: error_class
            .or_else(|| crate::failure::class_of_outcome(outcome))
            .map(str::to_string),
        duration_ms: i64::try_from(took.as_millis()).unwrap_or(i64::MAX),
        via,
    });
}

/// The buckets of `mcptask_call_seconds`: from a fast relay to a long task.
const CALL_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// The `# HELP` of the call metrics.
fn describe_calls() {
    metrics::describe_counter!(
        "mcptask_calls_total",
        "Tool calls ended, by server, tool, face, outcome (completed, tool_error, failed, cancelled, refused_policy, refused_limit) and driver. Unknown servers and tools are counted as \"(other)\"."
    );
    metrics::describe_counter!(
        "mcptask_virtual_server_calls_total",
        "Tool calls ended that came through a virtual server (/mcp/<name>), by virtual server and outcome (also counted in mcptask_calls_total)."
    );
    metrics::describe_histogram!(
        "mcptask_call_seconds",
        metrics::Unit::Seconds,
        "Duration of tool calls from the request to their end (a kept call: to its result), by server and tool."
    );
    metrics::describe_gauge!(
        "mcptask_calls_live",
        "Kept calls not ended yet (working or waiting for an answer; refreshed from the store every few seconds)."
    );
    metrics::describe_gauge!(
        "mcptask_questions_waiting",
        "Kept calls waiting for an answer to a question (input_required; refreshed from the store every few seconds)."
    );
}

/// `mcptask_calls_live` and `mcptask_questions_waiting` from the store's
/// counts by status.
fn set_live_calls(counts: &[(TaskStatus, i64)]) {
    let count = |status| {
        counts
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n)
    };
    let waiting = count(TaskStatus::InputRequired);
    let live = count(TaskStatus::Working) + waiting;
    metrics::gauge!("mcptask_calls_live").set(live as f64);
    metrics::gauge!("mcptask_questions_waiting").set(waiting as f64);
}
