//! Prometheus metrics: the recorder, and gauges refreshed from the store.
//!
//! Counters and histograms are recorded where things happen (claims, remote
//! calls, errors by class, notifications, API requests). Task counts by status
//! and the notification backlog come from the store every few seconds, so a
//! scrape never touches the database.

use std::time::Duration;

use mcptask_client::TaskStatus;
use mcptask_client::Tracker;
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
        .install_recorder()
        .map_err(|e| anyhow::anyhow!("cannot install the metrics recorder: {e}"))
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
        }
        Err(e) => tracing::warn!(error = %e, "cannot read task counts for metrics"),
    }
    match tracker.notification_backlog().await {
        Ok(n) => metrics::gauge!("mcptask_notification_backlog").set(n as f64),
        Err(e) => tracing::warn!(error = %e, "cannot read the notification backlog for metrics"),
    }
}
