//! `[proxy]`: mcptask as one MCP server in front of `[[servers]]`, and the
//! call runtime settings it makes.

use std::time::Duration;

use mcptask_server::RuntimeConfig;
use serde::Deserialize;

use super::{Reload, reload::short_hash};

/// `[proxy]`: serve the configured servers' tools as one MCP server (`/mcp`
/// on the API listener, or `mcptask proxy --stdio`).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ProxySection {
    /// Serve MCP at `/mcp` on the API listener (`mcptask proxy --stdio`
    /// serves it whatever this says).
    #[serde(default)]
    pub enabled: bool,
    /// The principal front tasks of `proxy --stdio` are bound to (HTTP
    /// callers get the principal of their API token).
    #[serde(default)]
    pub principal: Option<String>,
    /// How long the proxy's claim on its running front tasks lasts without
    /// a heartbeat (default 30 000): after a crash, another process
    /// recovers them once it lapses. The crashed process restarted on the
    /// same store adopts them at once ([`crate::incarnation`]).
    #[serde(default)]
    pub owner_lease_ms: Option<i64>,
    /// Live call tasks this process runs at once (front tasks, and
    /// 2025-11-25 or synchronous calls from any face; default 10 000): a
    /// call beyond it is refused "server busy", and a task the upstream
    /// already created for it is cancelled there.
    #[serde(default)]
    pub max_live_tasks: Option<usize>,
    /// How long a question an upstream asks through the proxy (an
    /// elicitation, sampling or roots request; a task's `input_required`)
    /// waits for its answer (default [`DEFAULT_QUESTION_TIMEOUT_MS`]): then
    /// the upstream call or task is cancelled and the front task fails
    /// saying so.
    #[serde(default)]
    pub question_timeout_ms: Option<u64>,
}

/// `[proxy] question_timeout_ms` unset: half an hour, for a person to
/// come back to a question, and below the front tasks' default hour of TTL.
pub const DEFAULT_QUESTION_TIMEOUT_MS: u64 = 1_800_000;

/// The shortest claim on front tasks `owner_lease_ms` may ask for.
const MIN_LEASE_MS: i64 = 300;

impl ProxySection {
    /// The front and the call runtime are started once.
    pub const RELOAD: Reload = Reload::AtStart;

    /// How long a relayed question waits for its answer.
    pub fn question_timeout(&self) -> Duration {
        Duration::from_millis(
            self.question_timeout_ms
                .unwrap_or(DEFAULT_QUESTION_TIMEOUT_MS)
                .max(1),
        )
    }

    /// The call runtime's settings: its claim lease (and how often it
    /// looks for lapsed claims: three times a lease) and its cap on live
    /// tasks; the runtime's defaults for the rest. Live calls per principal
    /// are `[limits] live_calls_per_principal`'s, on every face
    /// (`crate::calls::LiveCalls`): the runtime keeps no cap of its own.
    pub fn runtime_config(&self) -> RuntimeConfig {
        let mut config = RuntimeConfig {
            max_live_tasks_per_principal: None,
            ..RuntimeConfig::default()
        };
        if let Some(lease_ms) = self.owner_lease_ms {
            config.lease_ms = lease_ms.max(MIN_LEASE_MS);
            config.recovery_every_ms = (lease_ms / 3).max(100);
        }
        if let Some(max) = self.max_live_tasks {
            config.max_live_tasks = Some(max);
        }
        config
    }

    /// What a reload compares.
    pub(crate) fn print(&self) -> String {
        short_hash(&(
            self.enabled,
            &self.principal,
            self.owner_lease_ms,
            self.max_live_tasks,
            self.question_timeout_ms,
        ))
    }
}
