//! `subscriptions/listen` with the tasks filter: SEP-2663 task status
//! notifications on a long-lived stream.
//!
//! The client names the tasks it wants (`notifications.taskIds`); the server
//! acknowledges the ones it will report (those the caller may read), then
//! sends one `notifications/tasks` per status change, each carrying the full
//! `DetailedTask` that `tasks/get` would return at that moment (the terminal
//! one carries the result or the error). Changes reach the stream through the
//! runtime's change feed, from whichever replica made them. A task that is
//! already terminal when the stream opens is reported at once: the client
//! subscribed because it has not seen that yet. The stream ends with the
//! final `SubscriptionsListenResult` once every watched task has ended, or
//! when the client goes away.
//!
//! rmcp 3.11 cannot carry `taskIds` (its `SubscriptionFilter` has no such
//! field and drops it while parsing), so the filter is set aside before rmcp
//! parses the request ([`TaskListenLayer`](super::TaskListenLayer)) and the
//! request reaches the handler as a custom one.

use std::collections::HashMap;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{
    CustomNotification, CustomResult, DetailedTask, ErrorData, GetMeta, ServerNotification,
    SubscriptionsListenResult, TaskPayload, TaskStatus, TaskStatusNotification,
    TaskStatusNotificationParams,
};
use rmcp::service::RequestContext;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::MissedTickBehavior;

use crate::engine::TaskChange;
use crate::{TaskError, TaskRuntime};

/// The method this module serves.
pub const LISTEN_METHOD: &str = "subscriptions/listen";

/// Task ids one subscription watches at most; the acknowledgement lists the
/// ones accepted, so a client asking for more learns which were left out.
pub const MAX_LISTEN_TASKS: usize = 1024;

/// The `notifications` filter of a `subscriptions/listen` request that asked
/// for tasks, set aside from the request before rmcp parsed it (see
/// [`TaskListenLayer`](super::TaskListenLayer)).
#[derive(Debug, Clone, PartialEq)]
pub struct ListenFilter(pub Value);

/// What makes two snapshots "the same status" for the one-notification-per-
/// change rule: the status, and while waiting for input, which requests
/// are outstanding (a new question is a change the client must see).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    status: TaskStatus,
    inputs: Vec<String>,
}

impl Seen {
    fn of(task: &DetailedTask) -> Self {
        let inputs = match &task.payload {
            TaskPayload::InputRequired { input_requests } => {
                let mut keys: Vec<String> = input_requests.keys().cloned().collect();
                keys.sort_unstable();
                keys
            }
            _ => Vec::new(),
        };
        Self {
            status: task.status(),
            inputs,
        }
    }

    fn is_terminal(&self) -> bool {
        matches!(
            self.status,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

/// The filter set aside for this request, if any.
fn filter_of(context: &RequestContext<RoleServer>) -> Option<&Value> {
    if let Some(filter) = context.extensions.get::<ListenFilter>() {
        return Some(&filter.0);
    }
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<ListenFilter>())
        .map(|f| &f.0)
}

/// The requested ids, deduplicated in request order.
fn requested_ids(filter: &Value) -> Result<Vec<String>, ErrorData> {
    let invalid = || {
        ErrorData::invalid_params(
            "subscriptions/listen: notifications.taskIds must be an array of task ids",
            None,
        )
    };
    let list = filter
        .get("taskIds")
        .and_then(Value::as_array)
        .ok_or_else(invalid)?;
    let mut ids: Vec<String> = Vec::with_capacity(list.len());
    for v in list {
        let id = v.as_str().ok_or_else(invalid)?;
        if !ids.iter().any(|seen| seen == id) {
            ids.push(id.to_string());
        }
    }
    Ok(ids)
}

/// One open subscription.
struct Stream<'a> {
    runtime: &'a TaskRuntime,
    principal: Option<String>,
    context: &'a RequestContext<RoleServer>,
    watched: HashMap<String, Seen>,
}

impl Stream<'_> {
    /// Notify `task` on this stream.
    async fn send(&self, task: DetailedTask) -> Result<(), ()> {
        let mut notification = ServerNotification::TaskStatusNotification(
            TaskStatusNotification::new(TaskStatusNotificationParams::new(task)),
        );
        notification
            .get_meta_mut()
            .set_subscription_id(self.context.id.clone());
        self.context
            .peer
            .send_notification(notification)
            .await
            .map_err(|_| ())
    }

    /// Re-read `id` and notify it if its status changed; a task that ended
    /// or is gone is no longer watched. `Err` when the client is gone.
    async fn refresh(&mut self, id: &str) -> Result<(), ()> {
        let Some(before) = self.watched.get(id) else {
            return Ok(());
        };
        match self.runtime.get_task(id, self.principal.as_deref()).await {
            Ok(task) => {
                let now = Seen::of(&task);
                if &now == before {
                    return Ok(());
                }
                if now.is_terminal() {
                    self.watched.remove(id);
                } else {
                    self.watched.insert(id.to_string(), now);
                }
                self.send(task).await
            }
            Err(TaskError::NotFound) => {
                self.watched.remove(id);
                Ok(())
            }
            // The store hiccuped: the next change or resync reads it again,
            // and the client polls meanwhile.
            Err(e) => {
                tracing::debug!(task_id = id, error = %e, "re-reading a watched task failed");
                Ok(())
            }
        }
    }

    async fn refresh_all(&mut self) -> Result<(), ()> {
        let ids: Vec<String> = self.watched.keys().cloned().collect();
        for id in ids {
            self.refresh(&id).await?;
        }
        Ok(())
    }
}

/// Serve one `subscriptions/listen` request that asked for tasks, until every
/// watched task has ended or the client goes away.
pub(super) async fn serve(
    runtime: &TaskRuntime,
    principal: Option<String>,
    context: RequestContext<RoleServer>,
) -> Result<CustomResult, ErrorData> {
    let Some(filter) = filter_of(&context) else {
        return Err(ErrorData::invalid_params(
            "subscriptions/listen: expected {notifications: {taskIds: [...]}} (task notifications are served by servers that set the filter aside with TaskListenLayer)",
            None,
        ));
    };
    if !super::declares_tasks(&context) {
        return Err(TaskError::MissingCapability.into());
    }
    let requested = requested_ids(filter)?;
    // Subscribe before the first read: a change made between the read and
    // the subscription would otherwise be lost.
    let mut feed = runtime.inner.feed.subscribe();
    let mut stream = Stream {
        runtime,
        principal,
        context: &context,
        watched: HashMap::new(),
    };
    let mut accepted = Vec::new();
    let mut ended = Vec::new();
    for id in requested.into_iter().take(MAX_LISTEN_TASKS) {
        if super::validate::task_id(&id).is_err() {
            continue;
        }
        if let Ok(task) = runtime.get_task(&id, stream.principal.as_deref()).await {
            let seen = Seen::of(&task);
            if seen.is_terminal() {
                ended.push(task);
            } else {
                stream.watched.insert(id.clone(), seen);
            }
            accepted.push(id);
        }
    }
    acknowledge(&context, &accepted).await?;
    let gone = || ErrorData::internal_error("the subscriber went away", None);
    for task in ended {
        stream.send(task).await.map_err(|_| gone())?;
    }
    let every = Duration::from_millis(runtime.inner.config.listen_recheck_every_ms.max(10) as u64);
    let mut recheck = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    recheck.set_missed_tick_behavior(MissedTickBehavior::Delay);
    while !stream.watched.is_empty() {
        let change = tokio::select! {
            _ = context.ct.cancelled() => return Err(gone()),
            change = feed.recv() => change,
            // A notice can be lost (a publish that failed after its commit):
            // re-read now and then rather than stay silent until the end.
            _ = recheck.tick() => Ok(TaskChange::Resync),
        };
        let step = match change {
            Ok(TaskChange::Task(id)) => stream.refresh(&id).await,
            Ok(TaskChange::Resync) | Err(RecvError::Lagged(_)) => stream.refresh_all().await,
            Err(RecvError::Closed) => break,
        };
        step.map_err(|_| gone())?;
    }
    let result = SubscriptionsListenResult::complete(context.id.clone());
    Ok(CustomResult(serde_json::to_value(result).map_err(|e| {
        ErrorData::internal_error(format!("cannot encode the listen result: {e}"), None)
    })?))
}

/// `notifications/subscriptions/acknowledged` with the accepted task ids.
/// Sent as a custom notification: rmcp's typed one cannot carry `taskIds`.
async fn acknowledge(
    context: &RequestContext<RoleServer>,
    accepted: &[String],
) -> Result<(), ErrorData> {
    let mut ack = CustomNotification::new(
        "notifications/subscriptions/acknowledged",
        Some(json!({"notifications": {"taskIds": accepted}})),
    );
    ack.get_meta_mut().set_subscription_id(context.id.clone());
    context
        .peer
        .send_notification(ServerNotification::CustomNotification(ack))
        .await
        .map_err(|e| {
            ErrorData::internal_error(format!("failed to acknowledge the subscription: {e}"), None)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requested_ids_keep_order_and_drop_duplicates() {
        let ids = requested_ids(&json!({"taskIds": ["b", "a", "b"]})).unwrap();
        assert_eq!(ids, ["b", "a"]);
    }

    #[test]
    fn requested_ids_must_be_strings() {
        assert!(requested_ids(&json!({"taskIds": [1]})).is_err());
        assert!(requested_ids(&json!({"toolsListChanged": true})).is_err());
    }
}
