//! `tools/call` with the tasks extension declared: an immediate result, a
//! task handle (recorded before the caller sees it), or input asked for
//! before the task starts (answered by the resolver, multi-round-trip).

use mcptask_core::elicit::check_answer;
use mcptask_core::payload;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, InputResponses, JsonObject,
};
use rmcp::service::ServiceError;
use serde_json::Value;
use tracing::Instrument;

use super::{Tracker, TrackerError};
use crate::remote::{Connection, Seen, ServerRegistry, bounded, classify};
use crate::resolver::InputContext;

use mcptask_core::protocol::MAX_INPUT_ROUNDS as MAX_MRTR_ROUNDS;

/// Application context recorded with a task and echoed in its events.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// The authenticated subject the task belongs to (listing filters on it).
    pub principal: Option<String>,
    /// The conversation the call was made in.
    pub conversation: Option<String>,
    /// The application's id for this call (e.g. a model's tool-call id).
    pub call_id: Option<String>,
    /// Free-form data echoed in every event (bounded).
    pub correlation: Option<Value>,
    /// Answers to input the server asks for before a task exists
    /// (multi-round-trip), by input key, as a caller learned the questions
    /// from an earlier [`TrackerError::InputNeeded`]. Each is checked against
    /// its question when the server asks it; keys it does not ask are
    /// ignored. They take precedence over the resolver.
    pub input_responses: std::collections::BTreeMap<String, Value>,
    /// The server's `requestState` from the round these answers reply to
    /// (as a caller got it in [`TrackerError::InputNeeded`]). With it, the
    /// first request already carries the answers and the state, as a
    /// multi-round-trip retry does; without it the answers are given when the
    /// server asks.
    pub request_state: Option<String>,
    /// Relay `input_responses` as given, unchecked: the caller is a proxy
    /// and the server, not mcptask, judges its client's answers.
    pub relay_answers: bool,
    /// The call's id; `None` mints one. A gateway gives the id its call
    /// runtime's task of the same call has (one id per call).
    pub id: Option<String>,
    /// The face the call was made through, recorded with it.
    pub face: Option<mcptask_core::call::Face>,
    /// Commit a new handle's row through this (with whatever must commit
    /// with it) instead of on its own.
    pub commit: Option<super::CommitWith>,
    /// The trace the call belongs to, kept with its row; `None`: the
    /// current span's (nothing with telemetry off).
    pub trace: Option<mcptask_core::trace::TraceContext>,
    /// The bound on each exchange of this call with its upstream, as a
    /// gateway's route decided it; `None`: the server's own
    /// (`call_timeout`, else the tracker's).
    pub timeout: Option<std::time::Duration>,
    /// The token the caller authenticated with, for a server that takes the
    /// caller's identity by token exchange (`crate::identity`); never sent
    /// upstream itself.
    pub subject_token: Option<crate::oauth::Secret>,
}

/// What `call_tool` produced.
#[derive(Debug, Clone)]
pub enum CallOutcome {
    /// The server answered synchronously.
    Completed(CallToolResult),
    /// The server created a task; it is durably tracked.
    Task(Box<mcptask_core::client::RemoteTaskRecord>),
}

/// A failed `tools/call` as the caller's error; a broken session is dropped
/// from the pool (in the background) so the next call opens a fresh one.
/// A `tools/call` on `server`'s pooled connection that failed with `e`:
/// what its caller is told, and what it says of the server's health.
pub(super) fn call_failure(
    servers: &ServerRegistry,
    server: &str,
    conn: &Connection,
    e: &ServiceError,
) -> TrackerError {
    if classify::is_disconnect(e) {
        let conn = conn.clone();
        tokio::spawn(async move { conn.discard().await });
    }
    // Silence is the caller's to know as such (not "could not be reached").
    if let ServiceError::Timeout { timeout } = e {
        servers.observe(
            server,
            Seen::Failed(format!("tools/call: no answer within {timeout:?}")),
        );
        return TrackerError::NoAnswer {
            operation: "tools/call".into(),
            after: *timeout,
        };
    }
    let e = classify::call_error(e);
    servers.observe(server, Seen::of_remote(&e));
    e.into()
}

impl Tracker {
    /// The checks every new call passes before anything is sent: the tracker
    /// is running, and the arguments are an object (or nothing) within the
    /// size limit.
    pub(super) fn call_arguments(&self, arguments: Value) -> Result<JsonObject, TrackerError> {
        let inner = &self.inner;
        if inner.shutdown.is_cancelled() {
            return Err(TrackerError::ShuttingDown);
        }
        let arguments = match arguments {
            Value::Object(map) => map,
            Value::Null => Default::default(),
            _ => {
                return Err(TrackerError::InvalidInput(
                    "arguments must be a JSON object".into(),
                ));
            }
        };
        let size = payload::json_size(&Value::Object(arguments.clone()));
        if size > inner.config.policy.limits.max_arguments_bytes {
            return Err(TrackerError::InvalidInput(format!(
                "arguments are {size} bytes; the limit is {}",
                inner.config.policy.limits.max_arguments_bytes
            )));
        }
        Ok(arguments)
    }

    /// Call `tool` on `server`, declaring the tasks extension. Returns the
    /// result, or, once the task handle is durably recorded, the tracked task.
    /// Multi-round-trip input requested before a task exists is answered by the
    /// resolver (or the call fails with [`TrackerError::InputNeeded`]).
    pub async fn call_tool(
        &self,
        server: &str,
        tool: &str,
        arguments: Value,
        options: CallOptions,
    ) -> Result<CallOutcome, TrackerError> {
        let inner = &self.inner;
        let arguments = self.call_arguments(arguments)?;
        for (key, response) in &options.input_responses {
            inner
                .config
                .policy
                .limits
                .check_input_response(response)
                .map_err(|e| TrackerError::InvalidInput(format!("input response {key:?} {e}")))?;
        }
        // Before the call: refused after the server created the task, it would
        // leave that task running on the server untracked.
        super::record::bound_correlation(options.correlation.clone(), &inner.config.policy.limits)?;
        let mut options = options;
        let (conn, hash) = self.connect_to_make(server, &mut options).await?;
        let outcome = self
            .make_call(server, &hash, tool, &arguments, &options, &conn)
            .await;
        // A call that is not kept holds nothing for later exchanges.
        if !matches!(outcome, Ok(CallOutcome::Task(_)))
            && let Some(id) = &options.id
        {
            inner.identities.forget(id);
        }
        outcome
    }

    /// The connection a new call is made on: the server's pooled session,
    /// acting with the call's own credential where the server takes the
    /// caller's identity (an exchanging server's exchange is made here, and
    /// its token held under the call's id, which is minted now if the
    /// caller gave none). Returns it with the server's endpoint hash.
    pub(super) async fn connect_to_make(
        &self,
        server: &str,
        options: &mut CallOptions,
    ) -> Result<(Connection, String), TrackerError> {
        let inner = &self.inner;
        let credential = self.new_call_credential(server, options).await?;
        let (_, hash) = inner
            .servers
            .get(server)
            .ok_or_else(|| TrackerError::UnknownServer(server.into()))?;
        let conn = inner
            .servers
            .connect(server, Some(&hash), inner.timeouts())
            .await?
            .bounded_by(options.timeout)
            .acting_as(credential);
        Ok((conn, hash))
    }

    /// The rounds of `tools/call` on `conn` until a result, a task, or a
    /// question for the caller.
    async fn make_call(
        &self,
        server: &str,
        hash: &str,
        tool: &str,
        arguments: &JsonObject,
        options: &CallOptions,
        conn: &Connection,
    ) -> Result<CallOutcome, TrackerError> {
        let inner = &self.inner;
        // The server's opaque state of the round in progress: echoed back
        // unchanged with the answers, as MRTR requires (a server that keeps
        // its progress there would otherwise start over every round).
        let mut request_state: Option<String> = options.request_state.clone();
        // A caller continuing a round it was shown answers it at once.
        let mut responses: InputResponses = if request_state.is_some() {
            options.input_responses.clone()
        } else {
            InputResponses::new()
        };
        for _round in 0..MAX_MRTR_ROUNDS {
            let mut params =
                CallToolRequestParams::new(tool.to_string()).with_arguments(arguments.clone());
            if !responses.is_empty() {
                params = params.with_input_responses(responses.clone());
            }
            if let Some(state) = request_state.take() {
                params = params.with_request_state(state);
            }
            let span = crate::trace::tool_call_span(Some(server), tool);
            crate::trace::stamp(&mut params.meta, &span);
            let response = bounded("tools/call", conn.call_timeout, conn.call_tool_once(params))
                .instrument(span)
                .await
                .map_err(|e| call_failure(&inner.servers, server, conn, &e))?;
            inner.servers.observe(server, Seen::Answered);
            match response {
                CallToolResponse::Complete(result) => return Ok(CallOutcome::Completed(result)),
                CallToolResponse::Task(created) => {
                    return self
                        .record_created(server, hash, tool, arguments, &created.task, options, conn)
                        .await;
                }
                CallToolResponse::InputRequired(required) => {
                    request_state = required.request_state;
                    let requests = required.input_requests.unwrap_or_default();
                    let mut unanswered = Vec::new();
                    for (key, request) in &requests {
                        let request = serde_json::to_value(request).unwrap_or(Value::Null);
                        if let Some(given) = options.input_responses.get(key) {
                            if !options.relay_answers {
                                check_answer(&request, given)
                                    .map_err(|e| TrackerError::rejected(key, e))?;
                            }
                            responses.insert(key.clone(), given.clone());
                            continue;
                        }
                        let answer = match &inner.resolver {
                            Some(r) => {
                                r.resolve(InputContext {
                                    task_id: None,
                                    server,
                                    tool,
                                    principal: options.principal.as_deref(),
                                    key,
                                    request: &request,
                                })
                                .await
                            }
                            None => None,
                        };
                        // An answer that does not fit is no answer: the
                        // call reports the input as needed.
                        let answer = answer.filter(|a| match check_answer(&request, a) {
                            Ok(()) => true,
                            Err(e) => {
                                tracing::warn!(server, tool, key = %key, error = %e,
                                    "the input resolver's answer does not fit the question");
                                false
                            }
                        });
                        match answer {
                            Some(a) => {
                                responses.insert(key.clone(), a);
                            }
                            None => unanswered.push(key.clone()),
                        }
                    }
                    // State alone (no questions) is a continuation: ask again.
                    if requests.is_empty() && request_state.is_some() {
                        continue;
                    }
                    if !unanswered.is_empty() || requests.is_empty() {
                        return Err(TrackerError::InputNeeded {
                            keys: unanswered,
                            requests,
                            request_state,
                        });
                    }
                }
                #[allow(unreachable_patterns)]
                _ => return Err(TrackerError::Protocol("unknown tools/call response".into())),
            }
        }
        Err(TrackerError::Protocol(format!(
            "no result after {MAX_MRTR_ROUNDS} input rounds"
        )))
    }
}
