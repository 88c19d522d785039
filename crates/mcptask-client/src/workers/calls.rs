//! The remote call of each claim phase for one claimed task, turned into an
//! [`Observation`]: poll sends `tasks/get`, cancel `tasks/cancel`, update
//! `tasks/update` with the stored answers. Failures are classified here, the
//! server's health is reported, and a dropped transport leaves the pool.

use std::sync::Arc;
use std::time::Instant;

use mcptask_core::client::{ClaimedTask, Observation, Phase, RemoteTaskRecord};
use rmcp::model::{CancelTaskParams, GetTaskParams, InputResponses, UpdateTaskParams};
use rmcp::service::ServiceError;

use crate::remote::snapshot;
use crate::remote::{Connection, RemoteError, bounded, classify};
use crate::tracker::Inner;

/// How a failed call ended, besides its classification.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// The server answered (an error) or the answer was unusable.
    Answered,
    /// The transport dropped: the pooled connection leaves the pool.
    Disconnected,
    /// No answer within the call timeout.
    TimedOut,
}

/// A failed call: how it is classified, and how it ended.
type Failure = (RemoteError, Cut);

/// Make `phase`'s call for `claimed` and say what was learned.
pub(super) async fn observe(
    inner: &Arc<Inner>,
    phase: Phase,
    claimed: &ClaimedTask,
) -> Observation {
    let r = &claimed.record;
    let conn = match inner
        .servers
        .connect(&r.server, Some(&r.server_hash), inner.timeouts())
        .await
    {
        Ok(c) => c,
        Err(e) => return counted(e).observation(),
    };
    let started = Instant::now();
    let outcome = match phase {
        Phase::Poll => poll(inner, &conn, claimed).await,
        Phase::Cancel => cancel(&conn, claimed).await,
        Phase::Update => update(&conn, claimed).await,
    };
    metrics::histogram!("mcptask_remote_call_seconds", "phase" => phase.as_str())
        .record(started.elapsed().as_secs_f64());
    if !matches!(outcome, Err((_, Cut::TimedOut | Cut::Disconnected))) {
        conn.heard();
    }
    match outcome {
        Ok(o) => {
            inner.servers.report(&r.server, Ok(()));
            o
        }
        Err((e, cut)) => {
            if matches!(e, RemoteError::Transient(_)) {
                inner.servers.report(&r.server, Err(&e.to_string()));
            }
            match cut {
                Cut::Disconnected => conn.discard().await,
                Cut::TimedOut => {
                    if conn.recycle_if_wedged(started).await {
                        metrics::counter!("mcptask_stdio_recycled_total").increment(1);
                        tracing::warn!(server = %r.server, "stdio server answered nothing within the call timeout; child recycled");
                    }
                }
                Cut::Answered => {}
            }
            counted(e).observation()
        }
    }
}

/// One `tasks/cancel` for a task given up locally (see
/// `transition::abandons_remote`), bounded by the connect and call timeouts.
pub(super) async fn cancel_best_effort(
    inner: &Arc<Inner>,
    record: &RemoteTaskRecord,
) -> Result<(), String> {
    let conn = inner
        .servers
        .connect(&record.server, Some(&record.server_hash), inner.timeouts())
        .await
        .map_err(|e| e.to_string())?;
    bounded(
        "tasks/cancel",
        conn.call_timeout,
        conn.peer
            .cancel_task(CancelTaskParams::new(record.remote_task_id.clone())),
    )
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// `tasks/get`, validated and bounded into a snapshot.
async fn poll(
    inner: &Inner,
    conn: &Connection,
    claimed: &ClaimedTask,
) -> Result<Observation, Failure> {
    let remote_id = &claimed.record.remote_task_id;
    let got = bounded(
        "tasks/get",
        conn.call_timeout,
        conn.peer.get_task(GetTaskParams::new(remote_id.clone())),
    )
    .await
    .map_err(|e| failure("tasks/get", &e))?;
    snapshot::from_detailed(remote_id, &got.task, &inner.config.policy.limits)
        .map(Observation::Snapshot)
        .map_err(|e| (e, Cut::Answered))
}

/// `tasks/cancel` for a durable cancel intent.
async fn cancel(conn: &Connection, claimed: &ClaimedTask) -> Result<Observation, Failure> {
    let remote_id = claimed.record.remote_task_id.clone();
    bounded(
        "tasks/cancel",
        conn.call_timeout,
        conn.peer.cancel_task(CancelTaskParams::new(remote_id)),
    )
    .await
    .map(|_| Observation::CancelAcked)
    .map_err(|e| failure("tasks/cancel", &e))
}

/// `tasks/update` carrying every stored answer the server has not acknowledged.
async fn update(conn: &Connection, claimed: &ClaimedTask) -> Result<Observation, Failure> {
    if claimed.answers.is_empty() {
        return Ok(Observation::UpdateAcked { keys: Vec::new() });
    }
    let responses: InputResponses = claimed.answers.iter().cloned().collect();
    let keys: Vec<String> = claimed.answers.iter().map(|(k, _)| k.clone()).collect();
    let remote_id = claimed.record.remote_task_id.clone();
    bounded(
        "tasks/update",
        conn.call_timeout,
        conn.peer
            .update_task(UpdateTaskParams::new(remote_id, responses)),
    )
    .await
    .map(|_| Observation::UpdateAcked { keys: keys.clone() })
    .or_else(|e| match classify::update_refusal(&e) {
        Some(message) => Ok(Observation::UpdateRejected { keys, message }),
        None => Err(failure("tasks/update", &e)),
    })
}

fn failure(operation: &str, e: &ServiceError) -> Failure {
    let cut = if classify::is_disconnect(e) {
        Cut::Disconnected
    } else if matches!(e, ServiceError::Timeout { .. }) {
        Cut::TimedOut
    } else {
        Cut::Answered
    };
    (classify::task_error(operation, e), cut)
}

/// Count a failure by class (`mcptask_remote_errors_total`) and pass it on.
fn counted(e: RemoteError) -> RemoteError {
    metrics::counter!("mcptask_remote_errors_total", "class" => e.class()).increment(1);
    e
}
