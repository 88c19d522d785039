//! One HTTP exchange, one answer: on a Streamable HTTP upstream, the answer
//! to a POST is the answer to the request that POST carried, and to no
//! other.
//!
//! rmcp routes an answer by its JSON-RPC id alone, whichever HTTP response
//! it came on. An upstream session may carry several principals' requests
//! at once (the tracker's session to a server is shared by every call that
//! creates or follows a task there), so an upstream that swapped the ids of
//! two concurrent answers would hand one principal's result to another.
//! Here, at the transport every POST passes ([`crate::oauth::AuthorizingClient`]),
//! each answer on a POST's response (its JSON body, or a `message` event of
//! its SSE stream) is checked against the id of the request sent on that
//! exchange. An answer with another id is dropped, logged, and replaced by
//! an error for the request that was sent, so that call fails at once with
//! a clear upstream error instead of waiting for an answer that went
//! elsewhere. A POST that carried no request (a notification, an answer to
//! the server) has no answer of its own: any answer on it is dropped.
//!
//! A response stream broken before its answer is resumed with a GET and
//! `Last-Event-ID` (SEP-1699): the event ids seen on each checked stream
//! are remembered ([`Resumes`]) so a resumed stream is checked against the
//! request of the stream it resumes. A GET stream that resumes none (the
//! session's standalone stream) carries no answers at all (the
//! specification sends answers only on a request's own stream), so any
//! answer there is dropped too.
//!
//! Over stdio nothing tells exchanges apart: one pipe carries every message
//! and the id is all there is. mcptask keeps that safe by what it sends on
//! one stdio session: a synchronous call holds its lane alone (one call in
//! flight), and a SEP-1686 task its own lane too; only the tracker's session
//! is shared, and its answers name the task they are about (`tasks/get`,
//! `tasks/cancel` answers carry the `taskId`, checked by `remote::snapshot`),
//! except a create's, whose task id is new. A stdio server is a process the
//! operator configured and started, not a peer on the network; a swapped
//! create answer there would cross, and the docs say so (docs/AUTHORIZATION.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use rmcp::ErrorData;
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// What a caller reads when its request's answer was dropped (another
/// request's id came back on its exchange).
pub const CROSSED_ANSWER: &str = "the upstream answered another request's id on this request's exchange; mcptask dropped that answer";

/// How many resumable stream positions are remembered before the oldest
/// are forgotten (a stream that ended without its answer and was never
/// resumed leaves its last position behind).
const MAX_RESUMES: usize = 4096;

/// The SSE stream of an upstream's answer, as rmcp's HTTP client hands it
/// over.
pub(crate) type SseStream = BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>;

/// The request a resumable stream answers, by the stream's last event id
/// (per session): a resumed stream is checked against it. Shared by the
/// clones of one session's client.
#[derive(Clone, Default)]
pub(crate) struct Resumes(Arc<Mutex<HashMap<StreamKey, RequestId>>>);

/// A response stream's position: its session and an event id on it.
type StreamKey = (Option<Arc<str>>, String);

impl Resumes {
    fn note(&self, key: StreamKey, asked: RequestId) {
        let mut map = self.0.lock().expect("resumes lock");
        if map.len() >= MAX_RESUMES {
            map.clear();
        }
        map.insert(key, asked);
    }

    fn forget(&self, key: &StreamKey) {
        self.0.lock().expect("resumes lock").remove(key);
    }

    /// The request the stream that reached `last_event_id` answers, if it
    /// was a checked one.
    pub(crate) fn resumed(
        &self,
        session: Option<&Arc<str>>,
        last_event_id: Option<&str>,
    ) -> Option<RequestId> {
        let key = (session.cloned(), last_event_id?.to_string());
        self.0.lock().expect("resumes lock").remove(&key)
    }
}

/// One HTTP exchange with `server`: the request it carried, if any.
#[derive(Clone)]
pub(crate) struct Exchange {
    server: Arc<str>,
    asked: Option<RequestId>,
    session: Option<Arc<str>>,
    resumes: Resumes,
}

impl Exchange {
    /// The exchange of a POST of `message` on `session`.
    pub(crate) fn post(
        server: Arc<str>,
        message: &ClientJsonRpcMessage,
        session: Option<Arc<str>>,
        resumes: Resumes,
    ) -> Self {
        let asked = match message {
            JsonRpcMessage::Request(r) => Some(r.id.clone()),
            _ => None,
        };
        Self {
            server,
            asked,
            session,
            resumes,
        }
    }

    /// The exchange of a GET stream on `session` (resuming the stream that
    /// reached `last_event_id`, if any).
    pub(crate) fn get(
        server: Arc<str>,
        session: Option<Arc<str>>,
        last_event_id: Option<&str>,
        resumes: Resumes,
    ) -> Self {
        let asked = resumes.resumed(session.as_ref(), last_event_id);
        Self {
            server,
            asked,
            session,
            resumes,
        }
    }

    /// A JSON answer to this exchange: as is if it answers the request
    /// sent (or is no answer), else the error of a crossed answer.
    pub(crate) fn json(&self, message: ServerJsonRpcMessage) -> ServerJsonRpcMessage {
        let came = match &message {
            JsonRpcMessage::Response(r) => Some(r.id.clone()),
            JsonRpcMessage::Error(e) => e.id.clone(),
            _ => return message,
        };
        match self.verdict(came.as_ref()) {
            Verdict::Keep => message,
            Verdict::Crossed(asked) => crossed(asked),
            // A JSON body holds one message: nothing else to hand over.
            Verdict::Drop => JsonRpcMessage::Notification(dropped_notice()),
        }
    }

    /// The SSE stream answering this exchange, checked event by event; its
    /// event ids are remembered for a resumption.
    pub(crate) fn sse(self, stream: SseStream) -> SseStream {
        let mut last: Option<StreamKey> = None;
        stream
            .filter_map(move |event| {
                let out = match event {
                    Ok(sse) => Some(Ok(self.event(sse, &mut last))).filter(|e| match e {
                        Ok(sse) => sse.data.is_some() || sse.id.is_some() || sse.retry.is_some(),
                        Err(_) => true,
                    }),
                    Err(e) => Some(Err(e)),
                };
                std::future::ready(out)
            })
            .boxed()
    }

    fn event(&self, mut sse: sse_stream::Sse, last: &mut Option<StreamKey>) -> sse_stream::Sse {
        let is_message = matches!(sse.event.as_deref(), None | Some("") | Some("message"));
        let answered = if is_message {
            match sse.data.as_deref().map(answer_id) {
                Some(Some(came)) => match self.verdict(came.as_ref()) {
                    Verdict::Keep => true,
                    Verdict::Crossed(asked) => {
                        sse.data = serde_json::to_string(&crossed(asked)).ok();
                        true
                    }
                    Verdict::Drop => {
                        sse.data = None;
                        false
                    }
                },
                _ => false,
            }
        } else {
            false
        };
        if let Some(asked) = &self.asked
            && let Some(id) = &sse.id
        {
            if let Some(previous) = last.take() {
                self.resumes.forget(&previous);
            }
            let key = (self.session.clone(), id.clone());
            if answered {
                // Answered: nothing left to resume.
                self.resumes.forget(&key);
            } else {
                self.resumes.note(key.clone(), asked.clone());
                *last = Some(key);
            }
        } else if answered && let Some(previous) = last.take() {
            self.resumes.forget(&previous);
        }
        sse
    }

    /// What becomes of an answer with id `came` on this exchange.
    fn verdict(&self, came: Option<&RequestId>) -> Verdict {
        let Some(came) = came else {
            // An error without an id (the server could not read a request):
            // it names no other request, and rmcp routes it nowhere.
            return Verdict::Keep;
        };
        match &self.asked {
            Some(asked) if asked == came => Verdict::Keep,
            Some(asked) => {
                tracing::warn!(
                    server = %self.server,
                    asked = %asked,
                    answered = %came,
                    "the upstream answered another request's id on a request's HTTP exchange; the answer was dropped and the request failed"
                );
                Verdict::Crossed(asked.clone())
            }
            None => {
                tracing::warn!(
                    server = %self.server,
                    answered = %came,
                    "the upstream sent an answer on an HTTP exchange that asked nothing; the answer was dropped"
                );
                Verdict::Drop
            }
        }
    }
}

/// What becomes of an answer on an exchange.
enum Verdict {
    /// It answers the request sent: handed over.
    Keep,
    /// It answers another: the request sent (this id) fails instead.
    Crossed(RequestId),
    /// The exchange asked nothing: dropped.
    Drop,
}

/// The error that answers `asked` in place of a crossed answer.
fn crossed(asked: RequestId) -> ServerJsonRpcMessage {
    ServerJsonRpcMessage::error(
        ErrorData::internal_error(
            CROSSED_ANSWER,
            Some(serde_json::json!({"reason": "crossed_answer"})),
        ),
        Some(asked),
    )
}

/// The id of the answer `data` holds: `Some(id)` for an answer (a message
/// with an id and no method; `Some(None)` for one with a null id), `None`
/// for anything else (a request, a notification, text rmcp will skip).
/// Read without building the message: an answer may be megabytes.
fn answer_id(data: &str) -> Option<Option<RequestId>> {
    #[derive(Deserialize)]
    struct Shape {
        #[serde(default)]
        id: Option<RequestId>,
        #[serde(default)]
        method: Option<IgnoredAny>,
        #[serde(default)]
        result: Option<IgnoredAny>,
        #[serde(default)]
        error: Option<IgnoredAny>,
    }
    let shape: Shape = serde_json::from_str(data).ok()?;
    let answer = shape.method.is_none() && (shape.result.is_some() || shape.error.is_some());
    answer.then_some(shape.id)
}

/// What stands in for a JSON answer dropped whole: a notification nobody
/// listens to (rmcp logs and skips an unknown one).
fn dropped_notice() -> rmcp::model::JsonRpcNotification<rmcp::model::ServerNotification> {
    rmcp::model::JsonRpcNotification {
        jsonrpc: Default::default(),
        notification: rmcp::model::ServerNotification::CustomNotification(
            rmcp::model::CustomNotification::new("notifications/mcptask/dropped_answer", None),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    fn exchange(asked: Option<i64>) -> Exchange {
        Exchange {
            server: "s".into(),
            asked: asked.map(NumberOrString::Number),
            session: None,
            resumes: Resumes::default(),
        }
    }

    fn answer(id: i64, result: serde_json::Value) -> ServerJsonRpcMessage {
        serde_json::from_value(serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .unwrap()
    }

    #[test]
    fn an_answer_to_the_request_sent_passes_another_ids_is_replaced() {
        let ours = answer(7, serde_json::json!({"content": []}));
        let kept = exchange(Some(7)).json(ours.clone());
        assert_eq!(
            serde_json::to_value(&kept).unwrap(),
            serde_json::to_value(&ours).unwrap()
        );
        let crossed = exchange(Some(7)).json(answer(8, serde_json::json!({"secret": "bob"})));
        let wire = serde_json::to_value(&crossed).unwrap();
        assert_eq!(wire["id"], 7, "{wire}");
        assert_eq!(wire["error"]["message"], CROSSED_ANSWER, "{wire}");
        assert!(!wire.to_string().contains("bob"), "{wire}");
    }

    #[test]
    fn an_answer_on_an_exchange_that_asked_nothing_is_dropped() {
        let dropped = exchange(None).json(answer(8, serde_json::json!({})));
        assert!(matches!(dropped, JsonRpcMessage::Notification(_)));
    }

    #[test]
    fn only_answers_are_checked() {
        assert_eq!(
            answer_id(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#),
            Some(Some(NumberOrString::Number(3)))
        );
        assert_eq!(
            answer_id(r#"{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"x"}}"#),
            Some(Some(NumberOrString::String("a".into())))
        );
        assert_eq!(
            answer_id(r#"{"jsonrpc":"2.0","id":3,"method":"elicitation/create"}"#),
            None
        );
        assert_eq!(
            answer_id(r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#),
            None
        );
        assert_eq!(answer_id("not json"), None);
    }

    #[tokio::test]
    async fn a_crossed_sse_answer_is_replaced_and_a_resumed_stream_is_checked_too() {
        let resumes = Resumes::default();
        let session: Option<Arc<str>> = Some("sess".into());
        let post = Exchange {
            server: "s".into(),
            asked: Some(NumberOrString::Number(1)),
            session: session.clone(),
            resumes: resumes.clone(),
        };
        let event = |id: &str, data: &str| {
            Ok(sse_stream::Sse {
                event: Some("message".into()),
                data: Some(data.into()),
                id: Some(id.into()),
                retry: None,
            })
        };
        // A progress event, then the stream breaks before the answer.
        let first: SseStream = futures::stream::iter(vec![event(
            "e1",
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#,
        )])
        .boxed();
        let seen: Vec<_> = post.sse(first).collect().await;
        assert_eq!(seen.len(), 1);
        // The resumption answers with another id: replaced.
        let resumed = Exchange::get("s".into(), session, Some("e1"), resumes);
        assert_eq!(resumed.asked, Some(NumberOrString::Number(1)));
        let second: SseStream =
            futures::stream::iter(vec![event("e2", r#"{"jsonrpc":"2.0","id":2,"result":{}}"#)])
                .boxed();
        let seen: Vec<_> = resumed.sse(second).collect().await;
        let data = seen[0].as_ref().unwrap().data.clone().unwrap();
        let wire: serde_json::Value = serde_json::from_str(&data).unwrap();
        assert_eq!(wire["id"], 1, "{wire}");
        assert_eq!(wire["error"]["message"], CROSSED_ANSWER);
    }
}
