//! The keys of `[servers.oauth]` for sender-constrained tokens and the
//! grants that need no user secret: `dpop`, the `jwt_bearer` grant's
//! workload token (`assertion_file` / `assertion_env`) and the
//! `enterprise_managed` grant's `[servers.oauth.identity_provider]`: their
//! checks and what is read at load time.

use std::path::Path;

use mcptask_client::oauth::{Grant, IdentityProvider, Secret, TokenSource};
use serde::{Deserialize, Serialize};

use super::OAuthSection;
use super::url::is_http_url;

/// `[servers.oauth.identity_provider]`: where the `enterprise_managed`
/// grant exchanges the user's ID token for an ID-JAG.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct IdentityProviderSection {
    /// Its issuer URL (the ID-JAG's `iss`).
    pub issuer: String,
    /// Its token endpoint.
    pub token_endpoint: String,
    /// This client's id there.
    pub client_id: String,
    /// The environment variable holding this client's secret there
    /// (HTTP Basic); without it, a public client.
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// A file holding the ID token the identity provider issued to this
    /// client for the user (read for every exchange).
    #[serde(default)]
    pub id_token_file: Option<String>,
    /// The environment variable holding it.
    #[serde(default)]
    pub id_token_env: Option<String>,
}

/// A problem and its fix.
pub(super) type Problem = (String, String);

fn problem(problem: String, fix: &str) -> Result<(), Problem> {
    Err((problem, fix.to_string()))
}

/// What these keys get wrong for server `name`, if anything.
pub(super) fn check(name: &str, o: &OAuthSection) -> Result<(), Problem> {
    let assertion = o.assertion_file.is_some() || o.assertion_env.is_some();
    if o.assertion_file.is_some() && o.assertion_env.is_some() {
        return problem(
            format!("server {name:?}: [servers.oauth] sets both assertion_file and assertion_env"),
            "keep one",
        );
    }
    match (o.grant, assertion) {
        (Grant::JwtBearer, false) => {
            return problem(
                format!("server {name:?}: the jwt_bearer grant needs the workload's JWT"),
                "add assertion_file = \"/var/run/secrets/tokens/mcp\" (the file the platform keeps the token in) or assertion_env = \"VAR\"",
            );
        }
        (Grant::JwtBearer, true) | (_, false) => {}
        (_, true) => {
            return problem(
                format!(
                    "server {name:?}: assertion_file and assertion_env are for grant = \"jwt_bearer\""
                ),
                "set grant = \"jwt_bearer\", or remove them",
            );
        }
    }
    match (o.grant, &o.identity_provider) {
        (Grant::EnterpriseManaged, None) => {
            return problem(
                format!("server {name:?}: the enterprise_managed grant needs an identity provider"),
                "add [servers.oauth.identity_provider] with issuer, token_endpoint, client_id and id_token_file (or id_token_env)",
            );
        }
        (Grant::EnterpriseManaged, Some(idp)) => check_identity_provider(name, idp)?,
        (_, Some(_)) => {
            return problem(
                format!(
                    "server {name:?}: [servers.oauth.identity_provider] is for grant = \"enterprise_managed\""
                ),
                "set grant = \"enterprise_managed\", or remove the table",
            );
        }
        (_, None) => {}
    }
    if o.grant == Grant::EnterpriseManaged {
        if o.client_id.is_none() {
            return problem(
                format!("server {name:?}: the enterprise_managed grant needs client_id"),
                "add client_id = \"…\": the client registered at the server's authorization server (the ID-JAG names it)",
            );
        }
        if o.dpop {
            return problem(
                format!(
                    "server {name:?}: enterprise-managed authorization yields bearer tokens only, not DPoP-bound ones"
                ),
                "remove dpop = true",
            );
        }
    }
    Ok(())
}

fn check_identity_provider(name: &str, idp: &IdentityProviderSection) -> Result<(), Problem> {
    for (key, value) in [
        ("issuer", &idp.issuer),
        ("token_endpoint", &idp.token_endpoint),
    ] {
        if !is_http_url(value) {
            return problem(
                format!("server {name:?}: identity_provider {key} {value:?} is not an http(s) URL"),
                "use the identity provider's full URL, e.g. \"https://idp.example.com\"",
            );
        }
    }
    if idp.client_id.trim().is_empty() {
        return problem(
            format!("server {name:?}: identity_provider client_id is empty"),
            "set the client id this gateway has at the identity provider",
        );
    }
    match (&idp.id_token_file, &idp.id_token_env) {
        (Some(_), Some(_)) => problem(
            format!("server {name:?}: identity_provider sets both id_token_file and id_token_env"),
            "keep one",
        ),
        (None, None) => problem(
            format!("server {name:?}: identity_provider needs the user's ID token"),
            "add id_token_file = \"…\" (a file kept current with the ID token) or id_token_env = \"VAR\"",
        ),
        _ => Ok(()),
    }
}

/// What an environment variable named by `key` holds, or the problem.
fn from_env(
    name: &str,
    key: &str,
    var: &str,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Secret, Problem> {
    match get(var) {
        Some(value) if !value.trim().is_empty() => Ok(Secret(value.trim().to_string())),
        _ => Err((
            format!("server {name:?}: {key} {var:?} is not set"),
            format!("export {var}=… before starting mcptask"),
        )),
    }
}

/// A token file, relative to the configuration's folder, that must be
/// readable now (it is read again for every token request).
fn token_file(name: &str, key: &str, file: &str, base: &Path) -> Result<TokenSource, Problem> {
    let full = base.join(file);
    let source = TokenSource::File(full.clone());
    source.read().map_err(|e| {
        (
            format!("server {name:?}: {key}: {e}"),
            format!(
                "point {key} at the file the token is kept in (relative paths start at the configuration's folder): {}",
                full.display()
            ),
        )
    })?;
    Ok(source)
}

/// What these keys point at: the workload's token and the identity
/// provider (with its secret and the user's ID token).
pub(super) fn resolve(
    name: &str,
    o: &OAuthSection,
    base: &Path,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<(Option<TokenSource>, Option<IdentityProvider>), Problem> {
    let assertion = match (&o.assertion_file, &o.assertion_env) {
        (Some(file), _) => Some(token_file(name, "assertion_file", file, base)?),
        (None, Some(var)) => Some(TokenSource::Value(from_env(
            name,
            "assertion_env",
            var,
            get,
        )?)),
        (None, None) => None,
    };
    let Some(idp) = &o.identity_provider else {
        return Ok((assertion, None));
    };
    let id_token = match (&idp.id_token_file, &idp.id_token_env) {
        (Some(file), _) => token_file(name, "id_token_file", file, base)?,
        (None, Some(var)) => TokenSource::Value(from_env(name, "id_token_env", var, get)?),
        (None, None) => return Ok((assertion, None)),
    };
    let client_secret = idp
        .client_secret_env
        .as_ref()
        .map(|var| from_env(name, "identity_provider client_secret_env", var, get))
        .transpose()?;
    let identity_provider = IdentityProvider {
        issuer: idp.issuer.clone(),
        token_endpoint: idp.token_endpoint.clone(),
        client_id: idp.client_id.clone(),
        client_secret,
        id_token,
    };
    Ok((assertion, Some(identity_provider)))
}
