//! What the front offers: its own (tools, tasks, its list of tools changing
//! as upstreams come and go), and what it can only pass on from the servers
//! behind it, offered when one of those met so far offers it
//! (`Upstreams::offering`): logging, resource subscriptions (from a server
//! before 2026-07-28, see `subscriptions`), completions, and word of
//! changed prompt and resource lists.
//!
//! Prompts and resources are always offered: the front answers their lists
//! (empty when no server has any).

use rmcp::model::{JsonObject, ServerCapabilities};

use super::logging::offers_logging;
use super::subscriptions::subscribable;
use crate::upstreams::Upstreams;

fn prompts_change(capabilities: &ServerCapabilities) -> bool {
    capabilities
        .prompts
        .as_ref()
        .and_then(|p| p.list_changed)
        .unwrap_or(false)
}

fn resources_change(capabilities: &ServerCapabilities) -> bool {
    capabilities
        .resources
        .as_ref()
        .and_then(|r| r.list_changed)
        .unwrap_or(false)
}

fn completes(capabilities: &ServerCapabilities) -> bool {
    capabilities.completions.is_some()
}

/// The front's capabilities, given its upstreams as met so far.
pub(super) fn offered(upstreams: &Upstreams) -> ServerCapabilities {
    let any = |offers: fn(&ServerCapabilities) -> bool| !upstreams.offering(offers).is_empty();
    let mut capabilities = ServerCapabilities::builder()
        .enable_tools()
        .enable_tool_list_changed()
        .enable_prompts()
        .enable_resources()
        .enable_tasks()
        .build();
    if let Some(prompts) = capabilities.prompts.as_mut() {
        prompts.list_changed = any(prompts_change).then_some(true);
    }
    if let Some(resources) = capabilities.resources.as_mut() {
        resources.list_changed = any(resources_change).then_some(true);
        resources.subscribe = (!subscribable(upstreams).is_empty()).then_some(true);
    }
    if any(completes) {
        capabilities.completions = Some(JsonObject::new());
    }
    // Logging is deprecated by SEP-2577; sessions before 2026-07-28 use it.
    #[allow(deprecated)]
    if any(offers_logging) {
        capabilities.logging = Some(JsonObject::new());
    }
    capabilities
}
