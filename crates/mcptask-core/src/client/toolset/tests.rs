//! Every rule of the toolset contract, as a table, plus a property: no
//! answer, however malformed, makes the mapping panic or escape its bounds.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn limits() -> PayloadLimits {
    PayloadLimits::default()
}

fn answer(body: Value) -> Value {
    json!({"content": [{"type": "text", "text": "ignored"}], "structuredContent": body})
}

fn tool_error(texts: &[&str]) -> Value {
    let content: Vec<Value> = texts
        .iter()
        .map(|t| json!({"type": "text", "text": t}))
        .collect();
    json!({"content": content, "isError": true})
}

/// What a status answer should become, in short.
#[derive(Debug, PartialEq)]
enum Expect {
    Status(TaskStatus),
    Transient(&'static str),
    Permanent(FailureKind, &'static str),
}

fn short(o: &Observation) -> (Option<TaskStatus>, Option<FailureKind>, String) {
    match o {
        Observation::Snapshot(s) => (s.status, None, String::new()),
        Observation::Transient(m) => (None, None, m.clone()),
        Observation::Permanent { kind, message } => (None, Some(*kind), message.clone()),
        other => panic!("unexpected observation {other:?}"),
    }
}

#[test]
fn status_answers_map_as_the_contract_says() {
    use Expect::*;
    use FailureKind::*;
    let cases: Vec<(&str, Value, Expect)> = vec![
        (
            "running is working",
            answer(json!({"task_id": "t", "status": "running"})),
            Status(TaskStatus::Working),
        ),
        (
            "completed",
            answer(json!({"task_id": "t", "status": "completed", "result": "ok"})),
            Status(TaskStatus::Completed),
        ),
        (
            "failed",
            answer(json!({"task_id": "t", "status": "failed", "error": "boom"})),
            Status(TaskStatus::Failed),
        ),
        (
            "cancelled",
            answer(json!({"task_id": "t", "status": "cancelled"})),
            Status(TaskStatus::Cancelled),
        ),
        (
            "input_required stays working",
            answer(
                json!({"task_id": "t", "status": "input_required", "input_required": {"message": "which?"}}),
            ),
            Status(TaskStatus::Working),
        ),
        (
            "input_required needs its payload",
            answer(json!({"task_id": "t", "status": "input_required"})),
            Permanent(ProtocolViolation, "without an input_required object"),
        ),
        (
            "input_required payload is an object",
            answer(json!({"task_id": "t", "status": "input_required", "input_required": "which?"})),
            Permanent(ProtocolViolation, "must be an object"),
        ),
        (
            "task_not_found fails whatever the status",
            answer(
                json!({"task_id": "t", "status": "running", "error_code": "task_not_found", "error": "gone"}),
            ),
            Permanent(NotFound, "gone"),
        ),
        (
            "task_not_found has a default message",
            answer(json!({"task_id": "t", "status": "failed", "error_code": "task_not_found"})),
            Permanent(NotFound, "not found"),
        ),
        (
            "other error codes are plain failures",
            answer(json!({"task_id": "t", "status": "failed", "error_code": "quota"})),
            Status(TaskStatus::Failed),
        ),
        (
            "unknown status",
            answer(json!({"task_id": "t", "status": "paused"})),
            Permanent(ProtocolViolation, "unknown status"),
        ),
        (
            "missing status",
            answer(json!({"task_id": "t"})),
            Permanent(ProtocolViolation, "unknown status"),
        ),
        (
            "id mismatch",
            answer(json!({"task_id": "other", "status": "running"})),
            Permanent(ProtocolViolation, "task_id does not match"),
        ),
        (
            "empty id",
            answer(json!({"task_id": " ", "status": "running"})),
            Permanent(ProtocolViolation, "task_id must be"),
        ),
        (
            "numeric id",
            answer(json!({"task_id": 7, "status": "running"})),
            Permanent(ProtocolViolation, "task_id must be"),
        ),
        (
            "text only",
            json!({"content": [{"type": "text", "text": "{\"task_id\":\"t\",\"status\":\"running\"}"}]}),
            Permanent(ProtocolViolation, "text content is not parsed"),
        ),
        (
            "structuredContent not an object",
            json!({"content": [], "structuredContent": [1]}),
            Permanent(ProtocolViolation, "without structuredContent"),
        ),
        (
            "zero poll hint",
            answer(json!({"task_id": "t", "status": "running", "poll_after_seconds": 0})),
            Permanent(ProtocolViolation, "poll_after_seconds"),
        ),
        (
            "negative poll hint",
            answer(json!({"task_id": "t", "status": "running", "poll_after_seconds": -1})),
            Permanent(ProtocolViolation, "poll_after_seconds"),
        ),
        (
            "string poll hint",
            answer(json!({"task_id": "t", "status": "running", "poll_after_seconds": "5"})),
            Permanent(ProtocolViolation, "poll_after_seconds"),
        ),
        (
            "artifact without mime type",
            answer(
                json!({"task_id": "t", "status": "completed", "result_artifact": {"uri": "file:///r"}}),
            ),
            Permanent(ProtocolViolation, "uri and a mime_type"),
        ),
        (
            "oversized artifact",
            answer(
                json!({"task_id": "t", "status": "completed", "result_artifact": {"uri": "x".repeat(70_000), "mime_type": "a/b"}}),
            ),
            Permanent(ProtocolViolation, "65536-byte limit"),
        ),
        (
            "oversized question",
            answer(
                json!({"task_id": "t", "status": "input_required", "input_required": {"q": "x".repeat(70_000)}}),
            ),
            Permanent(ProtocolViolation, "65536-byte limit"),
        ),
        (
            "tool error is transient",
            tool_error(&["upstream temporarily unavailable", "second block"]),
            Transient("the status tool returned an error: upstream temporarily unavailable"),
        ),
        (
            "tool error without text",
            json!({"content": [], "isError": true}),
            Transient("the status tool returned an error: "),
        ),
    ];
    for (name, value, expected) in cases {
        let (status, kind, message) = short(&status("t", &value, &limits()));
        match expected {
            Expect::Status(s) => assert_eq!(status, Some(s), "{name}: {message}"),
            Expect::Transient(m) => {
                assert_eq!((status, kind), (None, None), "{name}");
                assert_eq!(message, m, "{name}");
            }
            Expect::Permanent(k, m) => {
                assert_eq!(kind, Some(k), "{name}: {message}");
                assert!(message.contains(m), "{name}: {message:?} lacks {m:?}");
            }
        }
    }
}

#[test]
fn a_tool_error_keeps_only_a_bounded_first_text_block() {
    let long = "e".repeat(2_000);
    let o = status("t", &tool_error(&[&long, "second"]), &limits());
    let Observation::Transient(m) = o else {
        panic!("{o:?}")
    };
    assert!(!m.contains("second"));
    assert_eq!(
        m.matches('e').count() - "the status tool returned an error: ".matches('e').count(),
        MAX_TOOL_ERROR_CHARS
    );
}

#[test]
fn poll_hints_become_intervals_with_a_cap() {
    let snap = |hint: Value| match status(
        "t",
        &answer(json!({"task_id": "t", "status": "running", "poll_after_seconds": hint})),
        &limits(),
    ) {
        Observation::Snapshot(s) => s.poll_interval_ms,
        other => panic!("{other:?}"),
    };
    assert_eq!(snap(json!(7)), Some(7_000));
    assert_eq!(snap(json!(12.5)), Some(12_500));
    assert_eq!(snap(json!(0.0001)), Some(1));
    assert_eq!(snap(json!(1e9)), Some(86_400_000));
    assert_eq!(snap(Value::Null), None);
}

#[test]
fn completed_keeps_the_result_and_artifact_as_a_tool_result() {
    let body = json!({"task_id": "t", "status": "completed", "result": {"rows": 3},
        "result_artifact": {"uri": "file:///out.csv", "mime_type": "text/csv"}});
    let Observation::Snapshot(s) = status("t", &answer(body), &limits()) else {
        panic!()
    };
    let r = s.result.unwrap();
    assert_eq!(r["structuredContent"], json!({"rows": 3}));
    assert_eq!(r["content"][0]["text"], "{\"rows\":3}");
    assert_eq!(r["content"][1]["uri"], "file:///out.csv");
    assert_eq!(r["content"][1]["mimeType"], "text/csv");
    assert_eq!(r["isError"], false);
    assert!(!s.result_truncated);

    let Observation::Snapshot(s) = status(
        "t",
        &answer(json!({"task_id": "t", "status": "completed", "result": "plain"})),
        &limits(),
    ) else {
        panic!()
    };
    let r = s.result.unwrap();
    assert_eq!(r["content"][0]["text"], "plain");
    assert!(r.get("structuredContent").is_none());
}

#[test]
fn a_large_result_is_stored_truncated() {
    let small = PayloadLimits {
        max_result_bytes: 1_024,
        ..limits()
    };
    let body = json!({"task_id": "t", "status": "completed", "result": "r".repeat(10_000)});
    let Observation::Snapshot(s) = status("t", &answer(body), &small) else {
        panic!()
    };
    assert!(s.result_truncated);
}

#[test]
fn failed_keeps_the_remote_error() {
    let body =
        json!({"task_id": "t", "status": "failed", "error": "disk full", "error_code": "io"});
    let Observation::Snapshot(s) = status("t", &answer(body), &limits()) else {
        panic!()
    };
    let e = s.error.unwrap();
    assert_eq!(e["message"], "disk full");
    assert_eq!(e["data"]["error_code"], "io");
}

#[test]
fn input_required_shows_the_question_and_polls_slowly() {
    let body = json!({"task_id": "t", "status": "input_required", "poll_after_seconds": 2,
        "input_required": {"message": "Approve the transfer?", "requestedSchema": {}}});
    let Observation::Snapshot(s) = status("t", &answer(body), &limits()) else {
        panic!()
    };
    assert_eq!(s.status, Some(TaskStatus::Working));
    assert_eq!(
        s.status_message.as_deref(),
        Some("Needs input: Approve the transfer?")
    );
    assert_eq!(s.poll_interval_ms, Some(INPUT_REQUIRED_MIN_POLL_MS));
    assert!(s.input_requests.is_empty());

    let body = json!({"task_id": "t", "status": "input_required", "poll_after_seconds": 600, "input_required": {"q": 1}});
    let Observation::Snapshot(s) = status("t", &answer(body), &limits()) else {
        panic!()
    };
    assert_eq!(s.status_message.as_deref(), Some("Needs input: {\"q\":1}"));
    assert_eq!(s.poll_interval_ms, Some(600_000));

    let tiny = PayloadLimits {
        max_message_bytes: 32,
        ..limits()
    };
    let body = json!({"task_id": "t", "status": "input_required", "input_required": {"message": "x".repeat(500)}});
    let Observation::Snapshot(s) = status("t", &answer(body), &tiny) else {
        panic!()
    };
    assert!(s.status_message.unwrap().len() < 64);
}

#[test]
fn submit_needs_an_id_and_running() {
    let ok = submitted(&answer(json!({"task_id": "job-1", "status": "running"}))).unwrap();
    assert_eq!(
        ok,
        ToolsetHandle {
            task_id: "job-1".into(),
            poll_interval_ms: None
        }
    );
    let bad = [
        answer(json!({"task_id": "job-1", "status": "queued"})),
        answer(json!({"task_id": "job-1"})),
        answer(json!({"status": "running"})),
        answer(json!({"task_id": "", "status": "running"})),
        answer(json!({"task_id": "x".repeat(256), "status": "running"})),
        answer(
            json!({"task_id": "j", "status": "running", "poll_after_seconds": f64::MAX.to_string()}),
        ),
        json!({"content": [{"type": "text", "text": "job-1"}]}),
    ];
    for b in bad {
        assert!(matches!(submitted(&b), Err(Unreadable::Contract(_))), "{b}");
    }
    assert!(
        submitted(&answer(
            json!({"task_id": "x".repeat(255), "status": "running"})
        ))
        .is_ok()
    );
    assert!(matches!(
        submitted(&tool_error(&["no capacity"])),
        Err(Unreadable::ToolError(m)) if m == "the submit tool returned an error: no capacity"
    ));
}

#[test]
fn cancel_keeps_the_actual_terminal_status_and_retries_the_rest() {
    for s in ["cancelled", "completed", "failed"] {
        let o = cancelled(
            "t",
            &answer(json!({"task_id": "t", "status": s})),
            &limits(),
        );
        let Observation::Snapshot(snap) = o else {
            panic!("{s}: {o:?}")
        };
        assert_eq!(snap.status.map(TaskStatus::as_str), Some(s));
    }
    let retried = [
        answer(json!({"task_id": "t", "status": "running"})),
        answer(json!({"task_id": "t", "status": "paused"})),
        answer(json!({"task_id": "u", "status": "cancelled"})),
        tool_error(&["busy"]),
    ];
    for r in retried {
        assert!(
            matches!(cancelled("t", &r, &limits()), Observation::Transient(_)),
            "{r}"
        );
    }
    let gone = answer(json!({"task_id": "t", "status": "failed", "error_code": "task_not_found"}));
    assert!(matches!(
        cancelled("t", &gone, &limits()),
        Observation::Permanent {
            kind: FailureKind::NotFound,
            ..
        }
    ));
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop_oneof![
            Just("t".to_string()),
            Just("running".to_string()),
            Just("completed".to_string()),
            Just("input_required".to_string()),
            Just("task_not_found".to_string()),
            ".{0,20}",
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("task_id".to_string()),
                    Just("status".to_string()),
                    Just("poll_after_seconds".to_string()),
                    Just("result".to_string()),
                    Just("input_required".to_string()),
                    Just("error_code".to_string()),
                    Just("isError".to_string()),
                    Just("structuredContent".to_string()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Whatever a server answers, polling yields an observation whose texts
    /// stay within the message bound and whose interval is positive.
    #[test]
    fn any_answer_maps_within_bounds(body in any_json(), wrapped in any::<bool>()) {
        let value = if wrapped { answer(body) } else { body };
        let l = PayloadLimits { max_message_bytes: 256, ..limits() };
        match status("t", &value, &l) {
            Observation::Snapshot(s) => {
                prop_assert!(s.status.is_some());
                prop_assert!(s.poll_interval_ms.is_none_or(|ms| ms > 0 && ms <= 86_400_000));
                prop_assert!(s.status_message.is_none_or(|m| m.len() <= 256 + "…[truncated]".len()));
            }
            Observation::Transient(m) => prop_assert!(m.chars().count() <= MAX_TOOL_ERROR_CHARS + 64),
            Observation::Permanent { message, .. } => prop_assert!(!message.is_empty()),
            other => prop_assert!(false, "unexpected {:?}", other),
        }
        let _ = cancelled("t", &value, &l);
        let _ = submitted(&value);
    }
}
