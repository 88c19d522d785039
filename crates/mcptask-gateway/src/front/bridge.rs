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

impl Bridged for CallToolResponse {
    fn bridged(self) -> Self {
        match self {
            CallToolResponse::Complete(result) => CallToolResponse::Complete(result.bridged()),
            other => other,
        }
    }
}

impl Bridged for GetPromptResponse {
    fn bridged(self) -> Self {
        match self {
            GetPromptResponse::Complete(result) => GetPromptResponse::Complete(result.bridged()),
            other => other,
        }
    }
}

impl Bridged for ReadResourceResponse {
    fn bridged(self) -> Self {
        match self {
            ReadResourceResponse::Complete(result) => {
                ReadResourceResponse::Complete(result.bridged())
            }
            other => other,
        }
    }
}

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
