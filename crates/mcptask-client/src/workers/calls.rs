//! The remote call of each claim phase for one claimed task, turned into an
//! [`Observation`]: poll sends `tasks/get`, cancel `tasks/cancel`, update
//! `tasks/update` with the stored answers — or, for a task started through a
//! toolset, its status and cancel tools. Failures are classified here, the
//! server's health is reported, and a dropped transport leaves the pool.

use std::sync::Arc;
use std::time::Instant;

use mcptask_core::client::toolset;
use mcptask_core::client::{ClaimedTask, Observation, Phase, RemoteDriver, RemoteTaskRecord};
use rmcp::model::{
    CallToolRequestParams, CancelTaskParams, GetTaskParams, InputResponses, UpdateTaskParams,
};
use rmcp::service::ServiceError;
use tracing::Instrument;

use crate::remote::snapshot;
use crate::remote::{Connection, RemoteError, Seen, bounded, cancel_remote, classify};
use crate::shared::Inner;

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
    if r.driver.is_local() {
        return local(inner, phase, claimed).await;
    }
    let conn = match inner.connect_for(r).await {
        Ok(c) => c,
        Err(e) => return counted(e).observation(),
    };
    let started = Instant::now();
    let outcome = match (&r.driver, phase) {
        (RemoteDriver::Sep2663, Phase::Poll) => poll(inner, &conn, claimed).await,
        (RemoteDriver::Sep2663, Phase::Cancel) => cancel(&conn, claimed).await,
        (RemoteDriver::Sep2663, Phase::Update) => update(&conn, claimed).await,
        (RemoteDriver::Toolset { status_tool, .. }, Phase::Poll) => {
            let limits = &inner.config.policy.limits;
            toolset_call(&conn, status_tool, &r.remote_task_id)
                .await
                .map(|answer| toolset::status(&r.remote_task_id, &answer, limits))
        }
        (RemoteDriver::Toolset { cancel_tool, .. }, Phase::Cancel) => {
            let limits = &inner.config.policy.limits;
            toolset_call(&conn, cancel_tool, &r.remote_task_id)
                .await
                .map(|answer| toolset::cancelled(&r.remote_task_id, &answer, limits))
        }
        (RemoteDriver::Toolset { .. }, Phase::Update) => Ok(no_answer_path(claimed)),
        (RemoteDriver::Sep1686 | RemoteDriver::Sync, _) => {
            unreachable!("local calls are observed in-process")
        }
    };
    metrics::histogram!("mcptask_remote_call_seconds", "phase" => phase.as_str())
        .record(started.elapsed().as_secs_f64());
    if !matches!(outcome, Err((_, Cut::TimedOut | Cut::Disconnected))) {
        conn.heard();
    }
    match outcome {
        Ok(o) => {
            inner.servers.observe(&r.server, Seen::Answered);
            o
        }
        Err((e, cut)) => {
            inner.servers.observe(&r.server, Seen::of_remote(&e));
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

/// `phase`'s call for a call whose work runs in this process's call
/// runtime (see [`crate::LocalWork`]).
async fn local(inner: &Arc<Inner>, phase: Phase, claimed: &ClaimedTask) -> Observation {
    let r = &claimed.record;
    let Some(work) = inner.local.get() else {
        // A process that shares the store but runs no call runtime: the
        // call's own gateway polls it; here it backs off.
        return Observation::Transient("this process runs no call runtime".into());
    };
    let principal = r.principal.as_deref();
    let id = &r.remote_task_id;
    let outcome = match phase {
        Phase::Poll => work.get(id, principal).await.and_then(|local| {
            snapshot::from_detailed(id, &local.task, &inner.config.policy.limits).map(
                |mut snapshot| {
                    snapshot.attempt = Some(local.attempt);
                    snapshot.attempt_by = local.by;
                    Observation::Snapshot(snapshot)
                },
            )
        }),
        Phase::Cancel => work
            .cancel(id, principal)
            .await
            .map(|()| Observation::CancelAcked),
        Phase::Update if claimed.answers.is_empty() => {
            Ok(Observation::UpdateAcked { keys: Vec::new() })
        }
        Phase::Update => {
            let keys: Vec<String> = claimed.answers.iter().map(|(k, _)| k.clone()).collect();
            let answers: InputResponses = claimed.answers.iter().cloned().collect();
            match work.update(id, principal, answers).await {
                Ok(()) => Ok(Observation::UpdateAcked { keys }),
                Err(RemoteError::Rpc(e)) if e.code == rmcp::model::ErrorCode::INVALID_PARAMS => {
                    Ok(Observation::UpdateRejected {
                        keys,
                        message: e.message.to_string(),
                    })
                }
                Err(e) => Err(e),
            }
        }
    };
    outcome.unwrap_or_else(|e| counted(e).observation())
}

/// One `tasks/cancel` for a task given up locally (see
/// `transition::abandons_remote`), bounded by the connect and call timeouts.
pub(super) async fn cancel_best_effort(
    inner: &Arc<Inner>,
    record: &RemoteTaskRecord,
) -> Result<(), String> {
    if record.driver.is_local() {
        let work = inner
            .local
            .get()
            .ok_or("this process runs no call runtime")?;
        return work
            .cancel(&record.remote_task_id, record.principal.as_deref())
            .await
            .map_err(|e| e.to_string());
    }
    let conn = inner.connect_for(record).await.map_err(|e| e.to_string())?;
    cancel_remote(
        &conn,
        &record.driver,
        &record.remote_task_id,
        conn.call_timeout,
    )
    .await
    .map_err(|e| e.to_string())
}

/// One plain `tools/call` of a toolset's status or cancel tool with
/// `{task_id}`; the answer, as JSON, is the contract's to read.
async fn toolset_call(
    conn: &Connection,
    tool: &str,
    remote_id: &str,
) -> Result<serde_json::Value, Failure> {
    let mut args = rmcp::model::JsonObject::new();
    args.insert("task_id".into(), remote_id.into());
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
    let result = bounded("tools/call", conn.call_timeout, conn.call_tool(params))
        .await
        .map_err(|e| (classify::call_error(&e), cut_of(&e)))?;
    Ok(serde_json::to_value(&result).unwrap_or_default())
}

/// A toolset cannot carry answers (its contract has none): any stored
/// answers are refused, so they are not kept as if delivered. Such a task
/// never lists input keys, so this is a guard, not a path.
fn no_answer_path(claimed: &ClaimedTask) -> Observation {
    Observation::UpdateRejected {
        keys: claimed.answers.iter().map(|(k, _)| k.clone()).collect(),
        message: "a submit/status/cancel toolset has no way to answer input".into(),
    }
}

/// `tasks/get`, validated and bounded into a snapshot.
async fn poll(
    inner: &Inner,
    conn: &Connection,
    claimed: &ClaimedTask,
) -> Result<Observation, Failure> {
    let remote_id = &claimed.record.remote_task_id;
    let record = &claimed.record;
    let span = crate::trace::task_request_span(
        "tasks/get",
        Some(&record.server),
        remote_id,
        record.trace.as_ref(),
    );
    let mut params = GetTaskParams::new(remote_id.clone());
    crate::trace::stamp(&mut params.meta, &span);
    let got = bounded("tasks/get", conn.call_timeout, conn.get_task(params))
        .instrument(span)
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
        conn.cancel_task(CancelTaskParams::new(remote_id)),
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
        conn.update_task(UpdateTaskParams::new(remote_id, responses)),
    )
    .await
    .map(|_| Observation::UpdateAcked { keys: keys.clone() })
    .or_else(|e| match classify::update_refusal(&e) {
        Some(message) => Ok(Observation::UpdateRejected { keys, message }),
        None => Err(failure("tasks/update", &e)),
    })
}

fn failure(operation: &str, e: &ServiceError) -> Failure {
    (classify::task_error(operation, e), cut_of(e))
}

fn cut_of(e: &ServiceError) -> Cut {
    if classify::is_disconnect(e) {
        Cut::Disconnected
    } else if matches!(e, ServiceError::Timeout { .. }) {
        Cut::TimedOut
    } else {
        Cut::Answered
    }
}

/// Count a failure by class (`mcptask_remote_errors_total`) and pass it on.
fn counted(e: RemoteError) -> RemoteError {
    metrics::counter!("mcptask_remote_errors_total", "class" => e.class()).increment(1);
    e
}
