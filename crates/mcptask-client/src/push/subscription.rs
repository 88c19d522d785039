//! One `subscriptions/listen` stream for a set of tasks, on a session of its
//! own (closing the session is how a stream is given up over Streamable
//! HTTP: it closes the request's event stream).

use rmcp::model::{
    ClientConfig, ClientRequest, CustomNotification, CustomRequest, ServerResult,
    SubscriptionsAcknowledgedNotificationParams, TaskStatusNotificationParams,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService, ServiceError};
use rmcp::{ClientHandler, RoleClient};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::remote::{RemoteError, ServerDef};

/// How long closing a stream's session may take.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// What the stream brought.
#[derive(Debug)]
pub(super) enum Heard {
    /// The server acknowledged the subscription.
    Acknowledged,
    /// A task's status changed (the remote task id).
    Changed(String),
}

/// Relays the subscription's notifications to its listener.
#[derive(Clone)]
struct PushHandler {
    heard: mpsc::UnboundedSender<Heard>,
}

impl ClientHandler for PushHandler {
    async fn on_subscriptions_acknowledged(
        &self,
        _params: SubscriptionsAcknowledgedNotificationParams,
        _context: NotificationContext<RoleClient>,
    ) {
        // rmcp drops the accepted `taskIds` while parsing: every task asked
        // for is treated as watched, and the ones the server left out are
        // still polled on their schedule.
        let _ = self.heard.send(Heard::Acknowledged);
    }

    async fn on_task_status(
        &self,
        params: TaskStatusNotificationParams,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self
            .heard
            .send(Heard::Changed(params.task.task.task_id.clone()));
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
        if notification.method == "notifications/subscriptions/acknowledged" {
            let _ = self.heard.send(Heard::Acknowledged);
        }
    }

    fn get_info(&self) -> ClientConfig {
        crate::remote::client_config()
    }
}

/// How a stream ended.
pub(super) enum End {
    /// The server closed it gracefully (every watched task ended).
    Finished,
    /// The server refused it with a JSON-RPC error: it does not serve task
    /// notifications (or not to us).
    Refused(String),
    /// The connection was lost.
    Lost(String),
}

/// An open stream.
pub(super) struct Subscription {
    session: RunningService<RoleClient, PushHandler>,
    pub(super) heard: mpsc::UnboundedReceiver<Heard>,
    pub(super) response: Response,
}

/// The pending answer to the listen request (it comes when the stream ends).
pub(super) type Response = JoinHandle<Result<ServerResult, ServiceError>>;

impl Subscription {
    /// Open a session to `def` and ask for notifications about `task_ids`
    /// (remote ids). Returns once the request is sent; the acknowledgement
    /// arrives as [`Heard::Acknowledged`].
    pub(super) async fn open(def: &ServerDef, task_ids: Vec<String>) -> Result<Self, RemoteError> {
        let (sender, heard) = mpsc::unbounded_channel();
        let session = crate::remote::open_http_with(def, PushHandler { heard: sender }).await?;
        // The filter goes as raw JSON: rmcp's SubscriptionFilter has no taskIds.
        let request = ClientRequest::CustomRequest(CustomRequest::new(
            "subscriptions/listen",
            Some(json!({"notifications": {"taskIds": task_ids}})),
        ));
        // No timeout: the request lasts as long as the stream.
        let handle = session
            .peer()
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| {
                RemoteError::Transient(format!("cannot send subscriptions/listen: {e}"))
            })?;
        let response = tokio::spawn(handle.await_response());
        Ok(Self {
            session,
            heard,
            response,
        })
    }

    /// Wait for the request to end (`response` of a [`Subscription`]).
    pub(super) async fn ended(response: &mut Response) -> End {
        match response.await {
            Ok(Ok(_)) => End::Finished,
            Ok(Err(ServiceError::McpError(e))) => {
                End::Refused(format!("{} ({})", e.message, e.code.0))
            }
            Ok(Err(e)) => End::Lost(e.to_string()),
            Err(e) => End::Lost(e.to_string()),
        }
    }

    /// Give the stream up and close its session.
    /// Bounded: an unreachable server must not hold up the listener or a
    /// tracker's shutdown (dropping the session closes it all the same).
    pub(super) async fn close(self) {
        self.response.abort();
        let _ = tokio::time::timeout(CLOSE_WAIT, self.session.cancel()).await;
    }
}
