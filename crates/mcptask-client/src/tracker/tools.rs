//! What a server offers: its tools, listed on demand (nothing is cached
//! here; rmcp honours the server's own cache hints).

use rmcp::model::Tool;

use super::{Tracker, TrackerError};

impl Tracker {
    /// Every tool `server` offers, listed over its pooled connection within
    /// this tracker's connect and call timeouts (see
    /// [`ServerRegistry::list_tools`](crate::ServerRegistry::list_tools)).
    ///
    /// ```no_run
    /// # async fn demo(tracker: mcptask_client::Tracker) -> Result<(), mcptask_client::TrackerError> {
    /// for tool in tracker.list_tools("reports").await? {
    ///     println!("{}", tool.name);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_tools(&self, server: &str) -> Result<Vec<Tool>, TrackerError> {
        let servers = &self.inner.servers;
        if servers.get(server).is_none() {
            return Err(TrackerError::UnknownServer(server.into()));
        }
        Ok(servers.list_tools(server, self.inner.timeouts()).await?)
    }

    /// Contact every configured server once, in the background, so that
    /// their health is known before the first call (`ok`, or `error` with
    /// the cause, logged as degraded). Returns at once; each attempt is
    /// bounded by its connect timeout.
    pub fn probe_servers(&self) {
        for name in self.inner.servers.names() {
            let servers = self.inner.servers.clone();
            let timeouts = self.inner.timeouts();
            tokio::spawn(async move {
                // The outcome is recorded as the server's health by connect itself.
                let _ = servers.connect(&name, None, timeouts).await;
            });
        }
    }
}
