//! Configuration changed while running: the admin API's objects (servers
//! today) kept in the store, merged with the file
//! ([`crate::config::admin`]: the file wins), and put in force by the
//! reload a SIGHUP runs ([`crate::Gateway::reload`]) on every replica.
//!
//! - [`ConfigFile`]: the file and the environment it is read with, so that
//!   a change, a SIGHUP and a start all build the configuration the same way;
//! - [`Admin::sync`] (`apply`): read the stored objects, build and put in
//!   force the configuration they make with the file;
//! - `watch`: every replica syncs when the store says the objects changed
//!   (PostgreSQL `LISTEN/NOTIFY`; in-process on SQLite) and every
//!   [`RE_READ`] as a safety net;
//! - `change`: a change checked as the file is, then stored and applied.

mod apply;
mod change;
pub use change::audit;
mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mcptask_core::admin::{AdminConfigStore, AdminEntry};

pub use change::{ChangeError, Changed};

use crate::config::{Config, ConfigError};

/// How often every replica re-reads the stored objects whatever its
/// channel said (a `NOTIFY` sent while its listener reconnected is lost).
pub const RE_READ: Duration = Duration::from_secs(5);

/// The environment overrides a file is read with (name → value).
type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The configuration file and how it is read: the environment overrides
/// of the process, and whether it serves the front on stdio.
#[derive(Clone)]
pub struct ConfigFile {
    path: PathBuf,
    env: Env,
    stdio: bool,
}

impl ConfigFile {
    /// The file at `path`, read with the overrides `env` gives; `stdio`:
    /// the process serves the front on stdin/stdout whatever the file says.
    pub fn new(
        path: impl Into<PathBuf>,
        env: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
        stdio: bool,
    ) -> Self {
        Self {
            path: path.into(),
            env: Arc::new(env),
            stdio,
        }
    }

    /// The configuration the file makes with the admin API's `entries`.
    pub fn load(&self, entries: &[AdminEntry]) -> Result<Config, ConfigError> {
        let mut config = Config::load_with_admin(&self.path, |k| (self.env)(k), entries)?;
        // `proxy --stdio` serves the front whatever the file says.
        config.proxy.enabled |= self.stdio;
        Ok(config)
    }

    /// The file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

/// The admin side of one gateway: its file, the stored objects, and what
/// of them is in force.
pub struct Admin {
    file: ConfigFile,
    store: Arc<dyn AdminConfigStore>,
    /// The stored objects the configuration in force was built with; held
    /// while a sync or a change runs, so they run one at a time.
    applied: tokio::sync::Mutex<Option<Vec<AdminEntry>>>,
}

impl Admin {
    /// The admin side of a gateway started from `file` on `store`, with
    /// `applied` (the objects its configuration was built with) in force.
    pub fn new(
        file: ConfigFile,
        store: Arc<dyn AdminConfigStore>,
        applied: Option<Vec<AdminEntry>>,
    ) -> Self {
        Self {
            file,
            store,
            applied: tokio::sync::Mutex::new(applied),
        }
    }

    /// The stored objects.
    pub async fn entries(&self) -> Result<Vec<AdminEntry>, mcptask_core::StoreError> {
        self.store.list_admin_entries().await
    }

    /// The configuration file.
    pub fn file(&self) -> &ConfigFile {
        &self.file
    }
}
