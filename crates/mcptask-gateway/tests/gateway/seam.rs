//! The gateway in this test process: its calls (`Calls`, with a real
//! tracker and call runtime on a SQLite file in a temporary directory)
//! before a [`SyncUpstream`] on a loopback port, and its MCP front served
//! to rmcp clients over in-memory pipes. No `mcptask serve`, no mocked
//! store: the route, the drivers and the front run as in production, and a
//! test reaches both faces of a call, the Rust/REST one ([`Seam::call`],
//! `Calls::call`) and the MCP one ([`Seam::front`], `FrontServer`).
//!
//! ```ignore
//! let seam = Seam::start("[limits]\nper_principal_in_flight = 1", "call_timeout_ms = 300").await;
//! let alice = seam.front(Some("alice"), Declares::No).await;
//! alice.call("up__echo", json!({"text": "hi"})).await?;
//! seam.call(Some("alice"), "echo", None).await?;
//! assert_eq!(seam.upstream.heard("echo"), 2);
//! ```

use std::sync::Arc;

use mcptask_gateway::auth::Caller;
use mcptask_gateway::calls::{CallError, CallRequest, Started};
use mcptask_gateway::{Calls, Config, Gateway};
use mcptask_testkit::SyncUpstream;
use mcptask_testkit::mcp::{Lifecycle, TestClient};
use serde_json::json;

/// The upstream's name in the configuration: its tools are `up__<tool>`
/// at the front.
pub const SERVER: &str = "up";

/// Whether a front client declares the tasks extension on its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Declares {
    Tasks,
    No,
}

/// A gateway's calls and front in this process, before one upstream.
pub struct Seam {
    /// Assembled as the binary assembles it (`Gateway::start_with_store`:
    /// the tracker with the configured servers, then `Calls::start`).
    pub gateway: Gateway,
    /// The one upstream, `[[servers]] name = "up"`.
    pub upstream: SyncUpstream,
    _dir: tempfile::TempDir,
}

impl Seam {
    /// A gateway before a fresh [`SyncUpstream`], with `sections` (TOML:
    /// `[limits]`, `[[policy]]`, …) added to its configuration and
    /// `server` (TOML keys: `call_timeout_ms`, `background`, …) added to
    /// the upstream's `[[servers]]` entry. The front is enabled; the
    /// upstream's tools are listed (in the background) before this returns.
    pub async fn start(sections: &str, server: &str) -> Seam {
        let upstream = SyncUpstream::start().await;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let text = format!(
            r#"
            [database]
            url = "sqlite:{db}"
            [api]
            auth = "none"
            [tracker]
            poll_default_ms = 50
            poll_min_ms = 20
            [proxy]
            enabled = true
            {sections}
            [[servers]]
            name = "{SERVER}"
            url = "{url}"
            {server}
            "#,
            db = dir.path().join("gateway.db").display(),
            url = upstream.url,
        );
        let config = Config::parse("(seam)", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let store = mcptask_sql::open(&config.database.url)
            .await
            .expect("open the gateway's SQLite store");
        let gateway = Gateway::start_with_store(config, store)
            .await
            .expect("start the gateway");
        // The gateway lists its upstreams in the background; the seam's
        // tests start from a listed catalog.
        let mut changes = gateway.calls.upstreams.catalog_changes();
        let listed = changes.wait_for(|_| gateway.calls.upstreams.has_listing(SERVER));
        if tokio::time::timeout(std::time::Duration::from_secs(10), listed)
            .await
            .is_err()
        {
            let why = gateway.calls.upstreams.refresh_server(SERVER).await.err();
            panic!("the upstream is not listed after 10 s: {why:?}");
        }
        Seam {
            gateway,
            upstream,
            _dir: dir,
        }
    }

    /// The gateway's calls.
    pub fn calls(&self) -> &Calls {
        &self.gateway.calls
    }

    /// An MCP client of the front (2026-07-28, stateless), every request
    /// made as `principal`, as `mcptask proxy --stdio` binds its caller.
    pub async fn front(&self, principal: Option<&str>, declares: Declares) -> TestClient {
        let caller = caller(principal);
        let front = mcptask_gateway::front::server(self.calls(), Arc::new(move |_| caller.clone()));
        let lifecycle = Lifecycle::Modern {
            tasks: declares == Declares::Tasks,
        };
        TestClient::in_process(front, lifecycle).await
    }

    /// A call of the upstream's `tool` at the Rust face (`Calls::call`,
    /// which the REST API and the CLI call too), made as `principal`.
    pub async fn call(
        &self,
        principal: Option<&str>,
        tool: &str,
        background: Option<bool>,
    ) -> Result<Started, CallError> {
        let caller = caller(principal);
        let options = mcptask_client::CallOptions {
            principal: caller.principal.clone(),
            face: Some(mcptask_core::call::Face::Api),
            ..Default::default()
        };
        self.calls()
            .call(CallRequest {
                server: SERVER.into(),
                tool: tool.into(),
                arguments: json!({"text": "hello"}),
                background,
                options,
                caller,
            })
            .await
    }
}

/// A caller with a principal token (or anonymous), never an operator.
pub fn caller(principal: Option<&str>) -> Caller {
    Caller {
        principal: principal.map(str::to_string),
        ..Caller::default()
    }
}
