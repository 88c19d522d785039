//! `[database]`: where the store is.

use serde::Deserialize;

use super::Reload;

/// `[database]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSection {
    /// `sqlite:PATH` (default `sqlite:mcptask.db`) or `postgres://USER@HOST/DB`.
    #[serde(default = "default_database_url")]
    pub url: String,
}

impl DatabaseSection {
    /// The store is opened once, at start.
    pub const RELOAD: Reload = Reload::AtStart;
}

impl Default for DatabaseSection {
    fn default() -> Self {
        Self {
            url: default_database_url(),
        }
    }
}

fn default_database_url() -> String {
    mcptask_sql::DEFAULT_DATABASE_URL.to_string()
}
