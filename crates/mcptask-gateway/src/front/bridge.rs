//! Protocol bridging: what the front relays from an upstream of any
//! revision is put in the current revision's shape before rmcp's server
//! handler answers the caller, which then gives each caller its own era's
//! shape. A result from a 2025-11-25 upstream has no `resultType`, which
//! 2026-07-28 requires; the spec reads an absent one as `"complete"`, so the
//! front says so, and rmcp drops `resultType: "complete"` again for a
//! caller on an older revision. One rule, applied where every relayed
//! result leaves the front (its `ServerHandler` methods) and where a call
//! task's work ends (`crate::drivers::run`), so a kept call's result reads
//! the same.

use rmcp::model::{
    CallToolResponse, CallToolResult, CompleteResult, GetPromptResponse, GetPromptResult,
    ReadResourceResponse, ReadResourceResult, ResultType,
};

/// A relayed answer, made valid for the newest revision.
pub(crate) trait Bridged {
    /// `self`, an absent `resultType` of a complete result made explicit.
    fn bridged(self) -> Self;
}

macro_rules! complete_when_absent {
    ($($result:ty),*) => {$(
        impl Bridged for $result {
            fn bridged(mut self) -> Self {
                self.result_type.get_or_insert(ResultType::COMPLETE);
                self
            }
        }
    )*};
}

complete_when_absent!(
    CallToolResult,
    CompleteResult,
    GetPromptResult,
    ReadResourceResult
);

/// An answer that may be complete (or ask for input, or be a task, which
/// are the current revision's own): its complete result bridged.
macro_rules! bridged_when_complete {
    ($($response:ident),*) => {$(
        impl Bridged for $response {
            fn bridged(self) -> Self {
                match self {
                    $response::Complete(result) => $response::Complete(result.bridged()),
                    other => other,
                }
            }
        }
    )*};
}

bridged_when_complete!(CallToolResponse, GetPromptResponse, ReadResourceResponse);

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2025-11-25 upstream's `tools/call` result, read and bridged, says
    /// `resultType: "complete"`; one that says it already keeps its own.
    #[test]
    fn an_old_result_gets_the_type_the_spec_reads_into_it() {
        let old: CallToolResult = serde_json::from_value(
            serde_json::json!({"content": [{"type": "text", "text": "hi"}]}),
        )
        .unwrap();
        assert_eq!(old.result_type, None);
        let json = serde_json::to_value(old.bridged()).unwrap();
        assert_eq!(json["resultType"], "complete", "{json}");
        let prompt: rmcp::model::GetPromptResult =
            serde_json::from_value(serde_json::json!({"messages": []})).unwrap();
        let GetPromptResponse::Complete(prompt) = GetPromptResponse::Complete(prompt).bridged()
        else {
            panic!("a complete answer stays complete");
        };
        assert_eq!(
            serde_json::to_value(prompt).unwrap()["resultType"],
            "complete"
        );
    }
}
