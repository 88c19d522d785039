//! `[servers.oauth]`: OAuth 2.1 to an HTTP server (see
//! docs/AUTHORIZATION.md): the keys, their checks, and the client settings
//! they make with the secrets read at load time.

use mcptask_client::oauth::{Grant, OAuthSettings, Secret, TokenEndpointAuth};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::url::{is_http_url, is_https_url};
use super::{
    ConfigError, IdentityProviderSection, ServerSecrets, ServerSection, Source, upstream_auth,
};

/// `[servers.oauth]`: OAuth 2.1 to an HTTP server (see docs/AUTHORIZATION.md).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct OAuthSection {
    /// `client_credentials` (default) or `authorization_code`.
    #[serde(default)]
    pub grant: Grant,
    /// The client registered at the authorization server (required for
    /// `client_credentials`; else found or registered, see AUTHORIZATION.md).
    #[serde(default)]
    pub client_id: Option<String>,
    /// The client secret, inline (prefer `client_secret_env`).
    #[serde(default)]
    pub client_secret: Option<String>,
    /// The environment variable holding the client secret.
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// `client_secret_basic`, `client_secret_post`, `private_key_jwt` or `none`.
    #[serde(default)]
    pub token_endpoint_auth: Option<TokenEndpointAuth>,
    /// A PEM private key file (PKCS#8) for `private_key_jwt`.
    #[serde(default)]
    pub private_key_file: Option<String>,
    /// Its algorithm (default ES256).
    #[serde(default)]
    pub signing_algorithm: Option<String>,
    /// Scopes to ask for (default: those the server's challenge or
    /// metadata names).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The authorization server's issuer URL, instead of the one the
    /// server's metadata names.
    #[serde(default)]
    pub authorization_server: Option<String>,
    /// An https URL of this client's metadata document (used as client id
    /// where the authorization server supports it).
    #[serde(default)]
    pub client_metadata_url: Option<String>,
    /// The name to register under (dynamic registration).
    #[serde(default)]
    pub client_name: Option<String>,
    /// Where `mcptask login` receives the authorization (default
    /// http://127.0.0.1:8976/callback).
    #[serde(default)]
    pub redirect_uri: Option<String>,
    /// Bind tokens to a key of this gateway (DPoP, RFC 9449).
    #[serde(default)]
    pub dpop: bool,
    /// `jwt_bearer`: the file the platform keeps the workload's JWT in
    /// (read for every token request), or the variable holding it.
    #[serde(default)]
    pub assertion_file: Option<String>,
    /// … or the environment variable holding it (`jwt_bearer`).
    #[serde(default)]
    pub assertion_env: Option<String>,
    /// `enterprise_managed`: `[servers.oauth.identity_provider]`.
    #[serde(default)]
    pub identity_provider: Option<IdentityProviderSection>,
}

/// The signing algorithms `private_key_jwt` supports.
const SIGNING_ALGORITHMS: [&str; 9] = [
    "ES256", "ES384", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA",
];

impl OAuthSection {
    /// The client's settings, with the secrets read at load time.
    pub fn settings(&self, secrets: Option<&ServerSecrets>) -> OAuthSettings {
        let secrets = secrets.cloned().unwrap_or_default();
        OAuthSettings {
            grant: self.grant,
            client_id: self.client_id.clone(),
            // An inline secret is in the file itself.
            client_secret: secrets
                .client_secret
                .or_else(|| self.client_secret.clone().map(Secret)),
            token_endpoint_auth: self.token_endpoint_auth,
            private_key_pem: secrets.private_key,
            signing_algorithm: self.signing_algorithm.clone(),
            scopes: self.scopes.clone(),
            authorization_server: self.authorization_server.clone(),
            client_metadata_url: self.client_metadata_url.clone(),
            client_name: self.client_name.clone(),
            redirect_uri: self.redirect_uri.clone(),
            dpop: self.dpop,
            assertion: secrets.assertion,
            identity_provider: secrets.identity_provider,
            ..OAuthSettings::default()
        }
    }

    /// What `server`'s `[servers.oauth]` gets wrong, at the table.
    pub(crate) fn check(
        server: &ServerSection,
        oauth: &Spanned<OAuthSection>,
        src: &Source,
    ) -> Result<(), ConfigError> {
        oauth
            .get_ref()
            .problem(server)
            .map_err(|(problem, fix)| src.at(oauth.span(), &problem, &fix))
    }

    /// The first problem of these keys for `server`, and its fix.
    fn problem(&self, server: &ServerSection) -> Result<(), upstream_auth::Problem> {
        let name = server.name();
        let fail = |problem: String, fix: &str| Err((problem, fix.to_string()));
        if server.url.is_none() {
            return fail(
                format!("server {name:?} has [servers.oauth] but is not an HTTP server"),
                "OAuth applies to url (Streamable HTTP) servers only; remove [servers.oauth]",
            );
        }
        if server
            .headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"))
        {
            return fail(
                format!("server {name:?} sets both an Authorization header and [servers.oauth]"),
                "remove the Authorization header: OAuth sends the bearer token",
            );
        }
        if self.client_secret.is_some() && self.client_secret_env.is_some() {
            return fail(
                format!(
                    "server {name:?}: [servers.oauth] sets both client_secret and client_secret_env"
                ),
                "keep one; client_secret_env = \"VAR\" keeps the secret out of the file",
            );
        }
        self.credential_problem(name)?;
        upstream_auth::check(name, self)?;
        if let Some(alg) = &self.signing_algorithm
            && !SIGNING_ALGORITHMS.contains(&alg.as_str())
        {
            return fail(
                format!("server {name:?}: signing_algorithm {alg:?} is not supported"),
                "use ES256 (default), ES384, RS256, RS384, RS512, PS256, PS384, PS512 or EdDSA",
            );
        }
        for (key, value) in [
            ("authorization_server", &self.authorization_server),
            ("redirect_uri", &self.redirect_uri),
        ] {
            if let Some(v) = value
                && !is_http_url(v)
            {
                return fail(
                    format!("server {name:?}: {key} {v:?} is not an http(s) URL"),
                    "use a full URL, e.g. \"https://auth.example.com\"",
                );
            }
        }
        if let Some(v) = &self.client_metadata_url
            && !is_https_url(v)
        {
            return fail(
                format!("server {name:?}: client_metadata_url {v:?} is not https"),
                "a client ID metadata document is an https URL with a path, e.g. \"https://app.example.com/client.json\"",
            );
        }
        Ok(())
    }

    /// The grant and token endpoint authentication have what they need.
    fn credential_problem(&self, name: &str) -> Result<(), upstream_auth::Problem> {
        let fail = |problem: String, fix: &str| Err((problem, fix.to_string()));
        let has_secret = self.client_secret.is_some() || self.client_secret_env.is_some();
        if self.grant == Grant::ClientCredentials && self.client_id.is_none() {
            return fail(
                format!("server {name:?}: the client_credentials grant needs client_id"),
                "add client_id = \"…\" (the client registered at the authorization server), or use grant = \"authorization_code\"",
            );
        }
        if has_secret && self.client_id.is_none() {
            return fail(
                format!("server {name:?}: [servers.oauth] has a client secret but no client_id"),
                "add the client_id the secret belongs to",
            );
        }
        match self.token_endpoint_auth {
            Some(TokenEndpointAuth::PrivateKeyJwt) if self.private_key_file.is_none() => {
                return fail(
                    format!(
                        "server {name:?}: token_endpoint_auth = \"private_key_jwt\" needs private_key_file"
                    ),
                    "add private_key_file = \"client-key.pem\" (a PKCS#8 PEM private key)",
                );
            }
            Some(TokenEndpointAuth::ClientSecretBasic | TokenEndpointAuth::ClientSecretPost)
                if !has_secret =>
            {
                return fail(
                    format!("server {name:?}: this token_endpoint_auth needs a client secret"),
                    "add client_secret_env = \"VAR\" (or client_secret = \"…\")",
                );
            }
            _ => {}
        }
        if self.grant == Grant::ClientCredentials
            && !has_secret
            && self.private_key_file.is_none()
            && self.token_endpoint_auth != Some(TokenEndpointAuth::None)
        {
            return fail(
                format!("server {name:?}: the client_credentials grant needs a credential"),
                "add client_secret_env = \"VAR\" (or client_secret), or private_key_file for private_key_jwt",
            );
        }
        Ok(())
    }
}
