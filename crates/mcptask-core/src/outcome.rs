//! How a call ended, as lists, filters and metrics name it. The wire keeps
//! the spec's status (a result whose `isError` is true is a `completed`
//! task: the tool ran and said it failed); an operator asking "which calls
//! failed?" wants those apart, so every view names the ending with
//! [`Outcome`], decided here once.

use serde_json::Value;

use crate::TaskStatus;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The tool answered with its result.
    Completed,
    /// The tool answered, saying it failed (`isError: true`); the task's
    /// status is `completed`.
    ToolError,
    /// The call failed: the upstream's error, unreachable, timed out,
    /// interrupted.
    Failed,
    /// The call was cancelled.
    Cancelled,
    /// The caller's policy does not let it call the tool: nothing was sent.
    RefusedPolicy,
    /// The caller was over its limits: nothing was sent.
    RefusedLimit,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Outcome; 6] = [
        Outcome::Completed,
        Outcome::ToolError,
        Outcome::Failed,
        Outcome::Cancelled,
        Outcome::RefusedPolicy,
        Outcome::RefusedLimit,
    ];

    /// The outcome's name in lists, filters and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::ToolError => "tool_error",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::RefusedPolicy => "refused_policy",
            Outcome::RefusedLimit => "refused_limit",
        }
    }

    /// The outcome named `name`.
    pub fn parse(name: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == name)
    }

    /// The outcome of a tool's result (as JSON): a tool error if it says so.
    pub fn of_result(result: &Value) -> Outcome {
        Outcome::answered(is_tool_error(result))
    }

    /// The outcome of a tool's answer whose `isError` is `tool_error`.
    pub fn answered(tool_error: bool) -> Outcome {
        if tool_error {
            Outcome::ToolError
        } else {
            Outcome::Completed
        }
    }

    /// How a kept call with `status` and `result` ended (`None`: it has not).
    pub fn of_call(status: TaskStatus, result: Option<&Value>) -> Option<Outcome> {
        match status {
            TaskStatus::Completed => Some(result.map_or(Outcome::Completed, Outcome::of_result)),
            TaskStatus::Failed => Some(Outcome::Failed),
            TaskStatus::Cancelled => Some(Outcome::Cancelled),
            _ => None,
        }
    }
}

/// Whether a `CallToolResult` (as JSON) is the tool saying it failed.
pub fn is_tool_error(result: &Value) -> bool {
    result.get("isError") == Some(&Value::Bool(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_result_with_is_error_is_a_tool_error_of_a_completed_call() {
        let failed = json!({"content": [], "isError": true});
        let fine = json!({"content": [], "isError": false});
        assert_eq!(
            Outcome::of_call(TaskStatus::Completed, Some(&failed)),
            Some(Outcome::ToolError)
        );
        assert_eq!(
            Outcome::of_call(TaskStatus::Completed, Some(&fine)),
            Some(Outcome::Completed)
        );
        assert_eq!(
            Outcome::of_call(TaskStatus::Completed, None),
            Some(Outcome::Completed)
        );
        assert_eq!(Outcome::of_call(TaskStatus::Working, None), None);
        assert_eq!(
            Outcome::of_call(TaskStatus::Failed, None),
            Some(Outcome::Failed)
        );
        for o in Outcome::ALL {
            assert_eq!(Outcome::parse(o.as_str()), Some(o));
        }
    }
}
