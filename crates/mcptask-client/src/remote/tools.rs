//! Tool discovery: `tools/list` over a server's pooled connection, every
//! page of it, bounded in time and size like any other remote call.

use std::time::Instant;

use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::service::{Peer, RoleClient, ServiceError};

use super::classify::{self, RemoteError};
use super::connection::{Connection, Timeouts};
use super::registry::ServerRegistry;

/// Most pages followed: a server that hands out cursors forever is broken,
/// and the listing must end.
const MAX_PAGES: usize = 100;
/// Most tools kept from one server (what a person or a form can use anyway).
const MAX_TOOLS: usize = 10_000;

impl ServerRegistry {
    /// Every tool `name` offers, in the server's order: `tools/list` on the
    /// pooled connection (connecting first if needed, within the connect
    /// timeout), following `nextCursor` until the last page. The whole
    /// listing is bounded by the server's call timeout (or `defaults.call`).
    /// The outcome counts for the server's [`Health`](super::Health) like a
    /// call's: a server that cannot be reached turns `error`, one that answers
    /// turns `ok`.
    ///
    /// ```no_run
    /// use mcptask_client::remote::Timeouts;
    /// use mcptask_client::{ServerDef, ServerRegistry};
    /// use std::time::Duration;
    ///
    /// # async fn demo() -> Result<(), mcptask_client::remote::RemoteError> {
    /// let servers = ServerRegistry::new();
    /// servers.upsert(ServerDef::http("reports", "http://127.0.0.1:8080/mcp"));
    /// let bounds = Timeouts { connect: Duration::from_secs(5), call: Duration::from_secs(10) };
    /// for tool in servers.list_tools("reports", bounds).await? {
    ///     println!("{}: {}", tool.name, tool.description.as_deref().unwrap_or(""));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_tools(
        &self,
        name: &str,
        defaults: Timeouts,
    ) -> Result<Vec<Tool>, RemoteError> {
        if self.get(name).is_none() {
            return Err(RemoteError::ConnectionUnavailable(format!(
                "server {name:?} is not configured"
            )));
        }
        // No pinned hash: discovery is not bound to any task's endpoint.
        let conn = self.connect(name, None, defaults).await?;
        let started = Instant::now();
        let listed = tokio::time::timeout(conn.call_timeout, all_pages(&conn)).await;
        let outcome = match listed {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                conn.recycle_if_wedged(started).await;
                Err(RemoteError::Transient(format!(
                    "tools/list: no answer within {:?} (the server's call timeout)",
                    conn.call_timeout
                )))
            }
        };
        self.observe(
            name,
            match &outcome {
                Ok(_) => super::Seen::Answered,
                Err(e) => super::Seen::of_remote(e),
            },
        );
        outcome
    }
}

async fn all_pages(conn: &Connection) -> Result<Vec<Tool>, RemoteError> {
    tool_pages(
        &conn.peer,
        || conn.heard(),
        || {
            let conn = conn.clone();
            tokio::spawn(async move { conn.discard().await });
        },
    )
    .await
}

/// Every page of `peer`'s `tools/list`, following `nextCursor` to the last
/// page, at most [`MAX_PAGES`] pages and [`MAX_TOOLS`] tools (a server that
/// hands out cursors or tools forever gets a protocol error, not the
/// gateway's memory). `answered` is told of each page answered,
/// `disconnected` of a session lost on the way. Unbounded in time: bound it
/// with the server's call timeout. The one listing of the pooled connection
/// and of a lane (the gateway's listing of an HTTP server).
pub async fn tool_pages(
    peer: &Peer<RoleClient>,
    mut answered: impl FnMut(),
    mut disconnected: impl FnMut(),
) -> Result<Vec<Tool>, RemoteError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor
            .take()
            .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let page = peer.list_tools(params).await.map_err(|e| {
            if classify::is_disconnect(&e) {
                disconnected();
            }
            list_error(&e)
        })?;
        answered();
        tools.extend(page.tools);
        if tools.len() > MAX_TOOLS {
            return Err(RemoteError::Protocol(format!(
                "tools/list: the server lists more than {MAX_TOOLS} tools"
            )));
        }
        match page.next_cursor {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => return Ok(tools),
        }
    }
    Err(RemoteError::Protocol(format!(
        "tools/list: still more pages after {MAX_PAGES}; the server's cursors never end"
    )))
}

fn list_error(e: &ServiceError) -> RemoteError {
    match e {
        ServiceError::McpError(data) if data.code.0 == -32601 => RemoteError::Protocol(format!(
            "tools/list: the server offers no tools (it does not implement tools/list: {})",
            data.message
        )),
        ServiceError::McpError(data) => RemoteError::Rpc(data.clone()),
        other => classify::task_error("tools/list", other),
    }
}
