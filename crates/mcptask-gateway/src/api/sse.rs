//! `GET /api/v1/events`: a Server-Sent Events stream of task changes.
//!
//! Two kinds of messages: `task` (the task's summary whenever this gateway
//! sees it change: polls applied, answers, cancels) and `event` (timeline
//! entries as they are delivered). Hints, not a log: after a reconnect the
//! dashboard re-lists, and the durable timeline lives in the store.

use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use tokio::sync::broadcast::error::RecvError;

use super::{AppState, Caller, views};

pub async fn events(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut changes = state.tracker.changes();
    let mut delivered = state.tracker.subscribe();
    let stream = async_stream(move |tx| async move {
        let _ = tx.send(Event::default().event("hello").data("{}")).await;
        loop {
            tokio::select! {
                changed = changes.recv() => match changed {
                    Ok(id) => {
                        if let Ok(r) = state.tracker.get(&id).await
                            && caller.may_see(r.principal.as_deref())
                        {
                            let data = views::summary(&r, caller.operator).to_string();
                            if tx.send(Event::default().event("task").id(format!("{}:{}", r.id, r.event_version)).data(data)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        if tx.send(Event::default().event("resync").data("{}")).await.is_err() {
                            return;
                        }
                    }
                    Err(RecvError::Closed) => return,
                },
                event = delivered.recv() => match event {
                    Ok(e) => {
                        let principal = e.data.get("principal").and_then(|p| p.as_str());
                        if caller.may_see(principal) {
                            let data = views::event(&e).to_string();
                            if tx.send(Event::default().event("event").id(e.idempotency_key()).data(data)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                },
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// A stream fed by a producer task through a bounded channel (ends when the
/// client goes away and the producer's send fails).
fn async_stream<F, Fut>(producer: F) -> impl Stream<Item = Result<Event, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Event>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tokio::spawn(producer(tx));
    futures::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|e| (Ok(e), rx)) },
    )
}
