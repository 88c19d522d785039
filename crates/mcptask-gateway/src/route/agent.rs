//! The front's own tools for callers that do not declare the tasks
//! extension: the one list of their names.

/// One of the agent tools (`crate::front::agent_tools` serves them).
///
/// ```
/// use mcptask_gateway::route::AgentTool;
/// for t in AgentTool::ALL {
///     assert_eq!(AgentTool::parse(t.name()), Some(t));
/// }
/// assert_eq!(AgentTool::parse("demo__greet"), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentTool {
    /// `mcptask_list_tasks`: the caller's background tasks.
    List,
    /// `mcptask_get_task`: one task, its questions and result.
    Get,
    /// `mcptask_answer_task`: answer a task's questions.
    Answer,
    /// `mcptask_cancel_task`: ask a task to stop.
    Cancel,
}

impl AgentTool {
    /// Every agent tool, in the order they are listed.
    pub const ALL: [AgentTool; 4] = [
        AgentTool::List,
        AgentTool::Get,
        AgentTool::Answer,
        AgentTool::Cancel,
    ];

    /// Its name, as callers call it.
    pub const fn name(self) -> &'static str {
        match self {
            AgentTool::List => "mcptask_list_tasks",
            AgentTool::Get => "mcptask_get_task",
            AgentTool::Answer => "mcptask_answer_task",
            AgentTool::Cancel => "mcptask_cancel_task",
        }
    }

    /// The agent tool named `name`, if it is one.
    pub fn parse(name: &str) -> Option<AgentTool> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}
