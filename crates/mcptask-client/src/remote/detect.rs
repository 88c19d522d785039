//! Which tasks protocol an upstream speaks, read from the raw `initialize`
//! and `tools/list` answers (rmcp drops the SEP-1686 fields on decode).

pub use mcptask_core::call::{Protocol, TaskSupport};
use mcptask_core::protocol::Era;
use rmcp::model::{ProtocolVersion, ServerCapabilities, TASKS_EXTENSION_ID};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What an upstream server is, as far as relaying calls to it goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamInfo {
    /// The tasks protocol it speaks.
    pub protocol: Protocol,
    /// The protocol version agreed with it, e.g. `2025-11-25`: the one it
    /// named when it was met (see [`UpstreamInfo::era`]).
    pub protocol_version: String,
    /// Its tool definitions as sent, `execution` and `annotations` included
    /// (empty when only rmcp's decoded view was available: HTTP).
    pub tools: Vec<Value>,
    /// The capabilities it declared when it was met (what the front offers
    /// on its behalf: logging, resource subscriptions).
    #[serde(default)]
    pub capabilities: ServerCapabilities,
}

impl UpstreamInfo {
    /// How the server is spoken to: [`Era::of`] the version it agreed to
    /// when it was met. A stateless server (2026-07-28) is eligible for the
    /// front's fast path.
    ///
    /// ```
    /// use mcptask_client::upstream::{Protocol, UpstreamInfo};
    /// use mcptask_core::protocol::Era;
    /// let info = UpstreamInfo {
    ///     protocol: Protocol::Sync,
    ///     protocol_version: "2026-07-28".into(),
    ///     tools: vec![],
    ///     capabilities: Default::default(),
    /// };
    /// assert_eq!(info.era(), Era::Stateless);
    /// ```
    pub fn era(&self) -> Era {
        Era::of(&self.protocol_version)
    }

    /// How `tool` may be called on a SEP-1686 server (`Forbidden` for an
    /// unknown tool, a tool that says nothing, or another protocol).
    ///
    /// ```
    /// use mcptask_client::upstream::{Protocol, TaskSupport, UpstreamInfo};
    /// let info = UpstreamInfo {
    ///     protocol: Protocol::Sep1686,
    ///     protocol_version: "2025-11-25".into(),
    ///     tools: vec![serde_json::json!({"name": "research", "execution": {"taskSupport": "required"}})],
    ///     capabilities: Default::default(),
    /// };
    /// assert_eq!(info.task_support("research"), TaskSupport::Required);
    /// assert_eq!(info.task_support("echo"), TaskSupport::Forbidden);
    /// ```
    pub fn task_support(&self, tool: &str) -> TaskSupport {
        if self.protocol != Protocol::Sep1686 {
            return TaskSupport::Forbidden;
        }
        self.tools
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(tool))
            .and_then(|t| t.pointer("/execution/taskSupport"))
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or(TaskSupport::Forbidden)
    }
}

/// Decide from the raw `initialize` result (stdio tap, or the raw probe of
/// a session-era HTTP server), else from rmcp's decoded view (the
/// `negotiated` version and the `declared` capabilities, from the server's
/// `server/discover` or `initialize` answer). SEP-2663 needs the stateless era and the extension;
/// SEP-1686 lives on `initialize` sessions only.
pub(crate) fn classify(
    raw_initialize: Option<&Value>,
    negotiated: Option<&ProtocolVersion>,
    declared: Option<&ServerCapabilities>,
    tools: Vec<Value>,
) -> UpstreamInfo {
    let capabilities = declared
        .cloned()
        .or_else(|| {
            raw_initialize
                .and_then(|r| r.get("capabilities"))
                .and_then(|c| serde_json::from_value(c.clone()).ok())
        })
        .unwrap_or_default();
    let version = raw_initialize
        .and_then(|r| r.get("protocolVersion"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| negotiated.map(|v| v.to_string()))
        .unwrap_or_default();
    let era = Era::of(&version);
    let extension = capabilities.supports_tasks()
        || raw_initialize
            .and_then(|r| r.pointer("/capabilities/extensions"))
            .and_then(Value::as_object)
            .is_some_and(|e| e.contains_key(TASKS_EXTENSION_ID));
    let legacy_tasks = raw_initialize
        .and_then(|r| r.pointer("/capabilities/tasks/requests/tools/call"))
        .is_some();
    let protocol = if era == Era::Stateless && extension {
        Protocol::Sep2663
    } else if era == Era::Session && legacy_tasks {
        Protocol::Sep1686
    } else {
        Protocol::Sync
    };
    UpstreamInfo {
        protocol,
        protocol_version: version,
        tools,
        capabilities,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn everything_server_is_sep1686() {
        // docs/interop/everything-server.md, `initialize`.
        let init = json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},
            "logging":{},"resources":{"subscribe":true,"listChanged":true},
            "tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}}});
        let tools = vec![
            json!({"name":"echo","execution":{"taskSupport":"forbidden"}}),
            json!({"name":"simulate-research-query","execution":{"taskSupport":"required"}}),
            json!({"name":"maybe","execution":{"taskSupport":"optional"}}),
            json!({"name":"bare"}),
        ];
        let info = classify(
            Some(&init),
            Some(&ProtocolVersion::V_2025_11_25),
            None,
            tools,
        );
        assert_eq!(info.protocol, Protocol::Sep1686);
        assert_eq!(info.protocol_version, "2025-11-25");
        // What the front offers on its behalf, read from the raw answer.
        assert!(info.capabilities.logging.is_some());
        assert_eq!(
            info.capabilities
                .resources
                .as_ref()
                .and_then(|r| r.subscribe),
            Some(true)
        );
        assert_eq!(
            info.task_support("simulate-research-query"),
            TaskSupport::Required
        );
        assert_eq!(info.task_support("maybe"), TaskSupport::Optional);
        assert_eq!(info.task_support("echo"), TaskSupport::Forbidden);
        assert_eq!(info.task_support("bare"), TaskSupport::Forbidden);
    }

    #[test]
    fn modern_with_extension_is_sep2663_and_without_is_plain() {
        let v = ProtocolVersion::V_2026_07_28;
        let tasks: ServerCapabilities =
            serde_json::from_value(json!({"extensions": {TASKS_EXTENSION_ID: {}}}))
                .expect("capabilities");
        let tasks = Some(&tasks);
        assert_eq!(
            classify(None, Some(&v), tasks, vec![]).protocol,
            Protocol::Sep2663
        );
        assert_eq!(
            classify(None, Some(&v), None, vec![]).protocol,
            Protocol::Sync
        );
        // An `initialize` session (before 2026-07-28) that declares the extension is not SEP-2663.
        let old = ProtocolVersion::V_2025_11_25;
        assert_eq!(
            classify(None, Some(&old), tasks, vec![]).protocol,
            Protocol::Sync
        );
    }
}
