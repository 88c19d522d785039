//! What gets stored when a tool's work ends.
//!
//! Whatever a tool returns, raises or does (panics included) must become a
//! terminal row that fits the store's payload bounds, and only a process that
//! still holds the task may write it. The mapping is decided here over plain
//! JSON so that it is the same for every transport and testable without one;
//! the runtime turns its rmcp values into a [`WorkEnd`] and stores the result.

use serde_json::{Value, json};

use super::Outcome;
use crate::payload::{self, PayloadLimits};

/// Status message of a task whose tool stopped on a `tasks/cancel`.
pub const CANCELLED_BY_CLIENT: &str = "Cancelled at the client's request";

/// How a tool's work ended, as plain data.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkEnd {
    /// The tool returned a `CallToolResult` (serialized), `isError` or not.
    Returned(Value),
    /// The tool raised a JSON-RPC error object (`code`, `message`, `data`).
    Raised(Value),
    /// The tool stopped because cancellation was requested.
    Cancelled,
    /// This process no longer holds the task: another replica took it over,
    /// or it expired. Nothing may be written.
    Lost,
    /// The tool panicked with this text.
    Panicked(String),
}

/// The outcome to store, and whether a result had to be cut to fit.
#[derive(Debug, Clone, PartialEq)]
pub struct Settlement {
    /// What to write with `finish`.
    pub outcome: Outcome,
    /// Size in bytes of a result too large to store whole (stored truncated).
    pub truncated_from_bytes: Option<usize>,
}

impl Settlement {
    fn of(outcome: Outcome) -> Self {
        Settlement {
            outcome,
            truncated_from_bytes: None,
        }
    }
}

/// The settlement of work that ended as `end`, bounded by `limits`; `None`
/// when nothing may be written ([`WorkEnd::Lost`]).
///
/// Results larger than `max_result_bytes` are replaced by a truncated stand-in
/// (the task still completes); error objects are bounded and their message,
/// which becomes the status message, is cut to `max_message_bytes`.
///
/// ```
/// use mcptask_core::payload::PayloadLimits;
/// use mcptask_core::server::outcome::{WorkEnd, settle};
/// use mcptask_core::TaskStatus;
/// let limits = PayloadLimits::default();
/// let done = settle(WorkEnd::Returned(serde_json::json!({"content": []})), &limits).unwrap();
/// assert_eq!(done.outcome.status(), TaskStatus::Completed);
/// let panicked = settle(WorkEnd::Panicked("oops".into()), &limits).unwrap();
/// assert_eq!(panicked.outcome.status(), TaskStatus::Failed);
/// assert!(settle(WorkEnd::Lost, &limits).is_none());
/// ```
pub fn settle(end: WorkEnd, limits: &PayloadLimits) -> Option<Settlement> {
    match end {
        WorkEnd::Returned(result) => {
            let bounded = payload::bound_tool_result(result, limits.max_result_bytes);
            Some(Settlement {
                truncated_from_bytes: bounded.truncated.then_some(bounded.original_bytes),
                outcome: Outcome::Completed {
                    result: bounded.value,
                },
            })
        }
        WorkEnd::Raised(error) => Some(Settlement::of(failed(error, limits))),
        WorkEnd::Cancelled => Some(Settlement::of(Outcome::Cancelled {
            message: Some(CANCELLED_BY_CLIENT.into()),
        })),
        WorkEnd::Lost => None,
        WorkEnd::Panicked(text) => {
            let error = json!({"code": -32603, "message": format!("tool panicked: {text}")});
            Some(Settlement::of(failed(error, limits)))
        }
    }
}

/// A `failed` outcome for a JSON-RPC error object: the error bounded for
/// storage, its message (cut to size) as the status message.
fn failed(error: Value, limits: &PayloadLimits) -> Outcome {
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    let message = payload::truncate_text(message, limits.max_message_bytes);
    Outcome::Failed {
        error: limits.bound_error(error),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskStatus;
    use crate::payload::json_size;
    use proptest::prelude::*;

    fn small_limits() -> PayloadLimits {
        PayloadLimits {
            max_result_bytes: 1_024,
            max_message_bytes: 64,
            ..Default::default()
        }
    }

    #[test]
    fn a_result_within_bounds_is_stored_as_is() {
        let result = json!({"content": [{"type": "text", "text": "ok"}], "isError": true});
        let s = settle(WorkEnd::Returned(result.clone()), &small_limits()).unwrap();
        assert_eq!(s, Settlement::of(Outcome::Completed { result }));
    }

    #[test]
    fn an_oversized_result_completes_truncated() {
        let result = json!({"content": [{"type": "text", "text": "x".repeat(5_000)}]});
        let original = json_size(&result);
        let s = settle(WorkEnd::Returned(result), &small_limits()).unwrap();
        assert_eq!(s.truncated_from_bytes, Some(original));
        let Outcome::Completed { result } = s.outcome else {
            panic!("expected completed")
        };
        assert!(result["_meta"]["io.mcptask/truncated"].is_object());
    }

    #[test]
    fn a_raised_error_fails_with_it_and_its_message() {
        let error = json!({"code": -32000, "message": "disk full", "data": {"dev": "sda"}});
        let s = settle(WorkEnd::Raised(error.clone()), &small_limits()).unwrap();
        assert_eq!(
            s.outcome,
            Outcome::Failed {
                error,
                message: "disk full".into()
            }
        );
    }

    #[test]
    fn a_long_error_message_is_cut_in_the_status_and_the_error_bounded() {
        let error = json!({"code": -32000, "message": "m".repeat(1_000)});
        let s = settle(WorkEnd::Raised(error), &small_limits()).unwrap();
        let Outcome::Failed { error, message } = s.outcome else {
            panic!("expected failed")
        };
        assert!(message.ends_with("…[truncated]"));
        assert_eq!(error["code"], -32000);
        assert_eq!(error["data"]["truncated"], true);
    }

    #[test]
    fn cancellation_and_panics() {
        let limits = small_limits();
        assert_eq!(
            settle(WorkEnd::Cancelled, &limits).unwrap().outcome,
            Outcome::Cancelled {
                message: Some(CANCELLED_BY_CLIENT.into())
            }
        );
        assert_eq!(
            settle(WorkEnd::Panicked("index out of bounds".into()), &limits)
                .unwrap()
                .outcome,
            Outcome::Failed {
                error: json!({"code": -32603, "message": "tool panicked: index out of bounds"}),
                message: "tool panicked: index out of bounds".into()
            }
        );
        assert_eq!(settle(WorkEnd::Lost, &limits), None);
    }

    fn work_end() -> impl Strategy<Value = WorkEnd> {
        prop_oneof![
            // Plain text: a prefix full of escapes may grow when re-quoted.
            ("[a-z ]{0,300}", any::<bool>()).prop_map(|(text, is_error)| WorkEnd::Returned(
                json!({"content": [{"type": "text", "text": text.repeat(8)}], "isError": is_error})
            )),
            (any::<i32>(), ".{0,400}").prop_map(|(code, message)| WorkEnd::Raised(
                json!({"code": code, "message": message, "data": {"echo": message}})
            )),
            Just(WorkEnd::Cancelled),
            Just(WorkEnd::Lost),
            ".{0,400}".prop_map(WorkEnd::Panicked),
        ]
    }

    proptest! {
        #[test]
        fn everything_stored_fits_the_bounds(
            end in work_end(),
            max_result in 300usize..3_000,
            max_message in 8usize..200,
        ) {
            let limits = PayloadLimits {
                max_result_bytes: max_result,
                max_message_bytes: max_message,
                ..Default::default()
            };
            let lost = end == WorkEnd::Lost;
            let Some(s) = settle(end, &limits) else {
                prop_assert!(lost);
                return Ok(());
            };
            prop_assert!(s.outcome.status().is_terminal());
            match &s.outcome {
                Outcome::Completed { result } => {
                    prop_assert!(json_size(result) <= max_result + 400);
                    prop_assert_eq!(s.truncated_from_bytes.is_some(), result.get("_meta").is_some());
                }
                Outcome::Failed { error, message } => {
                    prop_assert!(message.len() <= max_message + "…[truncated]".len());
                    // Kept whole when small, else reduced to code and cut message.
                    let reduced = json!({
                        "code": error["code"], "message": message, "data": {"truncated": true}
                    });
                    let bound = (max_message * 4).max(json_size(&reduced));
                    prop_assert!(json_size(error) <= bound);
                    prop_assert!(error["code"].is_i64());
                }
                Outcome::Cancelled { .. } => prop_assert_eq!(s.outcome.status(), TaskStatus::Cancelled),
            }
        }
    }
}
