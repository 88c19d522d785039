//! Environment and command-line overrides of the file: they are applied
//! before the checks, so an override can supply what the file leaves out
//! and is checked like the file is.

use toml::Spanned;

use super::{AuthMode, Config, ConfigError, TokenSection};

/// Command-line overrides of `serve`: they win over the environment, which
/// wins over the file, and are validated with the rest.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<String>,
    /// `--database-url`.
    pub database_url: Option<String>,
}

impl Overrides {
    /// The environment as `serve` sees it: a flag given on the command line
    /// stands in for its environment variable.
    pub fn lookup(&self, key: &str) -> Option<String> {
        let flag = match key {
            "MCPTASK_LISTEN" => self.listen.clone(),
            "MCPTASK_DATABASE_URL" => self.database_url.clone(),
            _ => None,
        };
        flag.or_else(|| std::env::var(key).ok())
    }
}

/// Where a value from the environment is "in the file": nowhere.
const FROM_ENV: std::ops::Range<usize> = 0..0;

impl Config {
    /// Environment overrides: `MCPTASK_DATABASE_URL`, `MCPTASK_LISTEN`,
    /// `MCPTASK_PUBLIC_URL`, `MCPTASK_AUTH` (`token`|`none`), `MCPTASK_OPERATOR_TOKEN` (an operator
    /// token). `MCPTASK_API_TOKEN` is deliberately not read: it is the CLI's
    /// credential, often a principal's token, and a `serve` started in a
    /// shell that exports it must not turn that token into an operator's.
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(url) = get("MCPTASK_DATABASE_URL") {
            self.database.url = url;
        }
        if let Some(listen) = get("MCPTASK_LISTEN") {
            self.api.listen = listen.parse().map_err(|_| {
                ConfigError(format!("MCPTASK_LISTEN={listen:?} is not an address\n  fix: use HOST:PORT, e.g. 127.0.0.1:7777"))
            })?;
        }
        if let Some(url) = get("MCPTASK_PUBLIC_URL") {
            self.api.public_url = Some(Spanned::new(FROM_ENV, url));
        }
        if let Some(auth) = get("MCPTASK_AUTH") {
            self.api.auth = match auth.as_str() {
                "token" => AuthMode::Token,
                "none" => AuthMode::None,
                other => {
                    return Err(ConfigError(format!(
                        "MCPTASK_AUTH={other:?} is not a mode\n  fix: use token or none"
                    )));
                }
            };
        }
        if let Some(token) = get("MCPTASK_OPERATOR_TOKEN") {
            if let Some(why) = super::weak_token(&token) {
                return Err(ConfigError(format!(
                    "MCPTASK_OPERATOR_TOKEN: {why}\n  fix: {}",
                    super::STRONG_TOKEN_FIX
                )));
            }
            if self.api.tokens.iter().any(|t| t.token.get_ref() == &token) {
                return Err(ConfigError("MCPTASK_OPERATOR_TOKEN is also a token in [[api.tokens]]\n  fix: give the operator a token of its own".into()));
            }
            self.api.tokens.push(TokenSection {
                token: Spanned::new(FROM_ENV, token),
                principal: None,
            });
        }
        Ok(())
    }
}
