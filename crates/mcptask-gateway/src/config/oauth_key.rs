//! `[oauth]`: the key that seals the OAuth tokens of `[servers.oauth]`
//! servers in the database.

use std::path::Path;

use mcptask_client::oauth::SecretKey;
use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Reload, reload::short_hash};

/// `[oauth]`: the key that seals the OAuth tokens of `[servers.oauth]`
/// servers in the database. `MCPTASK_SECRET_KEY` (32 random bytes, base64)
/// wins over the file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct OAuthGlobalSection {
    /// A file holding the key (base64 or hex), e.g. written by `mcptask config init`.
    #[serde(default)]
    pub secret_key_file: Option<Spanned<String>>,
}

impl OAuthGlobalSection {
    /// The key is read once, at start.
    pub const RELOAD: Reload = Reload::AtStart;

    /// Make `secret_key_file` relative to the configuration's folder.
    pub(crate) fn resolve(&mut self, base: &Path) {
        if let Some(file) = &mut self.secret_key_file {
            let full = base.join(file.get_ref());
            *file.get_mut() = full.display().to_string();
        }
    }

    /// The key sealing stored OAuth tokens: `MCPTASK_SECRET_KEY`, else
    /// `secret_key_file`; `None` when neither is set.
    pub fn secret_key(
        &self,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<SecretKey>, ConfigError> {
        if let Some(text) = get("MCPTASK_SECRET_KEY") {
            return SecretKey::parse(&text)
                .map(Some)
                .map_err(|e| ConfigError(format!("MCPTASK_SECRET_KEY: {e}")));
        }
        let Some(file) = &self.secret_key_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(file.get_ref()).map_err(|e| {
            ConfigError(format!(
                "[oauth] secret_key_file {:?}: cannot read it: {e}\n  fix: point it at the key file (`mcptask config init` writes one) or set MCPTASK_SECRET_KEY",
                file.get_ref()
            ))
        })?;
        SecretKey::parse(&text)
            .map(Some)
            .map_err(|e| ConfigError(format!("[oauth] secret_key_file {:?}: {e}", file.get_ref())))
    }

    /// What a reload compares: the key file's path.
    pub(crate) fn print(&self) -> String {
        short_hash(&self.secret_key_file.as_ref().map(|f| f.get_ref().clone()))
    }
}
