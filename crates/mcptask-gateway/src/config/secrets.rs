//! What `[servers.oauth]` names outside the file, read once when the
//! configuration is loaded: client secrets from the environment, private
//! keys and workload tokens from files (relative to the configuration's
//! folder). A value that cannot be read is an error at the server's table.

use std::collections::BTreeMap;
use std::path::Path;

use mcptask_client::identity::Identity;
use mcptask_client::oauth::{IdentityProvider, Secret, TokenSource};

use super::reload::short_hash;
use super::{Config, ConfigError, OAuthSection, Source, upstream_auth};

/// The secrets of one server's `[servers.oauth]`, as read at load time.
#[derive(Debug, Clone, Default)]
pub struct ServerSecrets {
    /// `client_secret_env`'s value.
    pub client_secret: Option<Secret>,
    /// `private_key_file`'s PEM.
    pub private_key: Option<Secret>,
    /// `assertion_file` (kept as a file, read per request) or `assertion_env`.
    pub assertion: Option<TokenSource>,
    /// `[servers.oauth.identity_provider]` with its secret and ID token.
    pub identity_provider: Option<IdentityProvider>,
    /// `[servers.identity]` with what it names read.
    pub identity: Identity,
}

/// Every server's secrets, by server name.
pub type Secrets = BTreeMap<String, ServerSecrets>;

impl ServerSecrets {
    /// Read what `o` (server `name`'s `[servers.oauth]`) points at.
    fn read(
        name: &str,
        o: &OAuthSection,
        base: &Path,
        get: &impl Fn(&str) -> Option<String>,
    ) -> Result<ServerSecrets, upstream_auth::Problem> {
        let (assertion, identity_provider) = upstream_auth::resolve(name, o, base, get)?;
        let client_secret = match &o.client_secret_env {
            None => None,
            Some(var) => match get(var) {
                Some(secret) if !secret.is_empty() => Some(Secret(secret)),
                _ => {
                    return Err((
                        format!("server {name:?}: client_secret_env {var:?} is not set"),
                        format!("export {var}=… before starting mcptask"),
                    ));
                }
            },
        };
        let private_key = match &o.private_key_file {
            None => None,
            Some(file) => {
                let full = base.join(file);
                let pem = std::fs::read_to_string(&full).map_err(|e| {
                    (
                        format!(
                            "server {name:?}: cannot read private_key_file {}: {e}",
                            full.display()
                        ),
                        "point private_key_file at a PEM private key (relative paths start at the configuration's folder)".to_string(),
                    )
                })?;
                Some(Secret(pem))
            }
        };
        Ok(ServerSecrets {
            client_secret,
            private_key,
            assertion,
            identity_provider,
            identity: Identity::Gateway,
        })
    }

    /// A short hash of the values: a rotated secret is a changed server.
    pub(crate) fn print(&self) -> String {
        let source = |s: &TokenSource| match s {
            TokenSource::File(path) => format!("file {}", path.display()),
            TokenSource::Value(v) => format!("value {}", v.expose()),
        };
        short_hash(&(
            self.client_secret.as_ref().map(Secret::expose),
            self.private_key.as_ref().map(Secret::expose),
            self.assertion.as_ref().map(source),
            self.identity_provider.as_ref().map(|idp| {
                (
                    &idp.issuer,
                    &idp.token_endpoint,
                    &idp.client_id,
                    idp.client_secret.as_ref().map(Secret::expose),
                    source(&idp.id_token),
                )
            }),
            identity_print(&self.identity, &source),
        ))
    }
}

impl Config {
    /// Read every secret the file names (`base`: the configuration's
    /// folder; `get`: the environment), once.
    pub(crate) fn resolve_secrets(
        &mut self,
        src: &Source,
        base: &Path,
        get: &impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        self.oauth.resolve(base);
        for s in &self.servers {
            let mut secrets = match &s.oauth {
                Some(oauth) => ServerSecrets::read(s.name(), oauth.get_ref(), base, get)
                    .map_err(|(problem, fix)| src.at(oauth.span(), &problem, &fix))?,
                None => ServerSecrets::default(),
            };
            if let Some(identity) = &s.identity {
                secrets.identity = identity
                    .get_ref()
                    .resolve(s.name(), s.url.as_deref(), base, get)
                    .map_err(|(problem, fix)| src.at(identity.span(), &problem, &fix))?;
            }
            if s.oauth.is_some() || s.identity.is_some() {
                self.secrets.insert(s.name().to_string(), secrets);
            }
        }
        Ok(())
    }
}

/// What a reload compares of an identity: its settings and secrets, hashed
/// with the rest (a rotated principal token is a changed server).
fn identity_print(identity: &Identity, source: &impl Fn(&TokenSource) -> String) -> String {
    match identity {
        Identity::Gateway => "gateway".into(),
        Identity::PerPrincipal(tokens) => tokens
            .iter()
            .map(|(p, t)| format!("{p}={}", source(t)))
            .collect::<Vec<_>>()
            .join(","),
        Identity::TokenExchange(x) => format!(
            "{} {} {:?} {:?} {:?} {:?}",
            x.token_endpoint,
            x.client_id,
            x.client_secret.as_ref().map(Secret::expose),
            x.audience,
            x.resource,
            x.scopes
        ),
    }
}
