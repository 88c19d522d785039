//! Checks on the text a client sends in `tasks/*` requests, made before
//! anything reaches the runtime or the store.
//!
//! Task ids are ours (hex) and input keys are the ones a tool asked with, so
//! text with control characters can be neither: it is refused as invalid
//! params. It must not get further: PostgreSQL refuses a NUL byte in text
//! with an error of its own, which would turn a client's mistake into a
//! store failure.

use rmcp::model::InputResponses;

use crate::TaskError;

/// A task id without control characters (else `-32602`).
pub(crate) fn task_id(id: &str) -> Result<(), TaskError> {
    if id.chars().any(char::is_control) {
        return Err(TaskError::InvalidParams(
            "taskId must not contain control characters".into(),
        ));
    }
    Ok(())
}

/// `inputResponses` keys without control characters (else `-32602`).
pub(crate) fn input_keys(responses: &InputResponses) -> Result<(), TaskError> {
    if responses.keys().any(|k| k.chars().any(char::is_control)) {
        return Err(TaskError::InvalidParams(
            "inputResponses keys must not contain control characters".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_refused() {
        assert!(task_id("0123abcd").is_ok());
        for bad in ["a\u{0}b", "\n", "x\u{7f}", "\u{85}y"] {
            assert!(
                matches!(task_id(bad), Err(TaskError::InvalidParams(_))),
                "{bad:?}"
            );
        }
        let mut responses = InputResponses::new();
        responses.insert("confirm".into(), serde_json::json!({}));
        assert!(input_keys(&responses).is_ok());
        responses.insert("con\u{0}firm".into(), serde_json::json!({}));
        assert!(matches!(
            input_keys(&responses),
            Err(TaskError::InvalidParams(_))
        ));
    }
}
