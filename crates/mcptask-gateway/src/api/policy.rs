//! `GET /api/v1/policy`: which caller may call which tool, as the policy in
//! force decides it (`[[policy]]`, asked through `route::access::allows`,
//! where every face asks it), over the tools the catalog lists now.
//!
//! An operator sees every principal of a static token (`[[api.tokens]]`)
//! and the operator tokens, with the rules; a principal sees only itself,
//! judged with its own token's scopes and claims: the tools it may call,
//! and no rules (they name other principals). Callers of OAuth issuers are not known in advance:
//! rules that select by scope or claim are listed for operators, and apply
//! to such callers when they come.

use std::collections::BTreeSet;

use axum::Extension;
use axum::Json;
use axum::extract::State;
use mcptask_core::access::{Caller as Selector, Item};
use serde_json::{Value, json};

use super::{AppState, Caller};
use crate::route::allows;

/// The tools each caller may call.
pub async fn in_force(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Json<Value> {
    let policy = state.calls.policy();
    let catalog = state.calls.upstreams.catalog();
    // A tool a principal may not call reads as one that does not exist:
    // it is not named to them (the listings' own rule, `route::visible`).
    let tools: Vec<(String, String)> = catalog
        .routes()
        .filter(|r| {
            caller.operator || crate::route::visible(&state.calls, &caller, &r.server, &r.tool)
        })
        .map(|r| (r.server.clone(), r.tool.clone()))
        .collect();
    let judge = |who: Selector<'_>| -> Value {
        let allowed: Vec<bool> = tools
            .iter()
            .map(|(server, tool)| allows(&policy, &who, Item::tool(server, tool)))
            .collect();
        json!(allowed)
    };
    let mut callers = Vec::new();
    let mut rules = Value::Null;
    if caller.operator {
        let config = state.config.as_ref().map(|live| live.get());
        let principals: BTreeSet<String> = config
            .iter()
            .flat_map(|c| c.api.tokens.iter().filter_map(|t| t.principal.clone()))
            .collect();
        callers.push(json!({
            "principal": null,
            "label": "operator tokens",
            "allowed": judge(Selector::default()),
        }));
        for p in &principals {
            callers.push(json!({
                "principal": p,
                "label": p,
                "allowed": judge(Selector {
                    principal: Some(p),
                    ..Default::default()
                }),
            }));
        }
        if let Some(config) = &config {
            rules = json!(config.policy.iter().map(|p| p.print()).collect::<Vec<_>>());
        }
    } else {
        callers.push(json!({
            "principal": caller.principal,
            "label": caller.principal.as_deref().unwrap_or("you"),
            "allowed": judge(caller.access()),
        }));
    }
    Json(json!({
        "tools": tools
            .iter()
            .map(|(server, tool)| json!({"server": server, "tool": tool}))
            .collect::<Vec<_>>(),
        "callers": callers,
        "rules": rules,
        "unrestricted": policy.is_empty(),
    }))
}
