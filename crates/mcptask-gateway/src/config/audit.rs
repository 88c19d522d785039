//! `[audit]`: the audit trail (every call's end and every refusal, in the
//! store) and how long it is kept.

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Reload, Source, reload::short_hash};

/// How long audit entries are kept when the file does not say.
pub const DEFAULT_AUDIT_RETENTION_DAYS: u32 = 30;

/// `[audit]`: whether calls are recorded in the audit trail, and for how
/// many days.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSection {
    /// Record calls (default true).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Days an entry is kept before the sweep deletes it (default 30).
    #[serde(default = "default_retention")]
    pub retention_days: Spanned<u32>,
}

fn yes() -> bool {
    true
}

fn default_retention() -> Spanned<u32> {
    Spanned::new(0..0, DEFAULT_AUDIT_RETENTION_DAYS)
}

impl Default for AuditSection {
    fn default() -> Self {
        AuditSection {
            enabled: true,
            retention_days: default_retention(),
        }
    }
}

impl AuditSection {
    /// The writer starts with the gateway.
    pub const RELOAD: Reload = Reload::AtStart;

    pub(crate) fn check(&self, src: &Source) -> Result<(), ConfigError> {
        if *self.retention_days.get_ref() == 0 {
            return Err(src.at(
                self.retention_days.span(),
                "[audit] retention_days must be at least 1",
                "keep entries a day or more, e.g. retention_days = 30 (enabled = false records nothing)",
            ));
        }
        Ok(())
    }

    /// How long an entry is kept, in milliseconds.
    pub fn retention_ms(&self) -> i64 {
        i64::from(*self.retention_days.get_ref()) * 86_400_000
    }

    /// What a reload compares.
    pub(crate) fn print(&self) -> String {
        short_hash(&(self.enabled, *self.retention_days.get_ref()))
    }
}
