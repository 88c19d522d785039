//! What a server's `[servers.oauth]` says: the grant, the client's
//! credentials, where handed-over JWTs are read from, DPoP.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::OAuthRuntime;

/// How tokens are obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// Machine to machine: the client's own credentials (secret or signed
    /// assertion) buy the token; no user involved.
    #[default]
    ClientCredentials,
    /// A user approves once (`mcptask login`); the refresh token keeps it going.
    AuthorizationCode,
    /// Workload identity federation: a JWT the platform hands this process
    /// (a Kubernetes service account token, a cloud workload identity) is
    /// the grant (RFC 7523 §2.1); no user, and no client secret needed.
    JwtBearer,
    /// Enterprise-managed authorization (the MCP extension, SEP-990): a
    /// user's ID token from the enterprise identity provider is exchanged
    /// there for an ID-JAG (RFC 8693 token exchange), which buys the token
    /// at the server's authorization server as a JWT bearer grant.
    EnterpriseManaged,
}

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenEndpointAuth {
    /// HTTP Basic with the client id and secret.
    ClientSecretBasic,
    /// The id and secret in the form body.
    ClientSecretPost,
    /// A JWT assertion signed with the client's private key (RFC 7523).
    PrivateKeyJwt,
    /// A public client: the client id only.
    None,
}

/// A secret value: never printed, never serialized.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    /// The secret text.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// A server's OAuth settings (`[servers.oauth]`).
///
/// ```
/// use mcptask_client::oauth::{Grant, OAuthSettings};
/// let s = OAuthSettings::client_credentials("svc", "s3cret");
/// assert_eq!(s.grant, Grant::ClientCredentials);
/// assert!(!format!("{s:?}").contains("s3cret"), "secrets never show");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct OAuthSettings {
    /// How tokens are obtained.
    #[serde(default)]
    pub grant: Grant,
    /// A client id registered with the authorization server beforehand
    /// (without one, authorization-code clients use a client ID metadata
    /// document or dynamic registration).
    #[serde(default)]
    pub client_id: Option<String>,
    /// Its secret.
    #[serde(skip)]
    pub client_secret: Option<Secret>,
    /// How to authenticate at the token endpoint (default: what the
    /// authorization server supports, preferring the secret when there is one).
    #[serde(default)]
    pub token_endpoint_auth: Option<TokenEndpointAuth>,
    /// PEM private key (PKCS#8, EC or RSA) for `private_key_jwt`.
    #[serde(skip)]
    pub private_key_pem: Option<Secret>,
    /// Its JWS algorithm (default ES256).
    #[serde(default)]
    pub signing_algorithm: Option<String>,
    /// Scopes to ask for (default: what the server's challenge or metadata names).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The authorization server to use instead of the one the server's
    /// metadata names (its issuer URL).
    #[serde(default)]
    pub authorization_server: Option<String>,
    /// An https URL of this client's metadata document, used as its client
    /// id where the authorization server supports that.
    #[serde(default)]
    pub client_metadata_url: Option<String>,
    /// The name to register under (dynamic registration).
    #[serde(default)]
    pub client_name: Option<String>,
    /// Where the authorization server sends the user back (`mcptask login`
    /// listens there).
    #[serde(default)]
    pub redirect_uri: Option<String>,
    /// Bind tokens to a key of this client (DPoP, RFC 9449): token requests
    /// and every request to the server carry a proof signed with it, so a
    /// token that leaks is useless without the key.
    #[serde(default)]
    pub dpop: bool,
    /// The workload's JWT, for [`Grant::JwtBearer`].
    #[serde(skip)]
    pub assertion: Option<TokenSource>,
    /// The enterprise identity provider, for [`Grant::EnterpriseManaged`].
    #[serde(skip)]
    pub identity_provider: Option<IdentityProvider>,
    /// The process's token store and key (see [`OAuthRuntime`]); the
    /// in-memory fallback when unset.
    #[serde(skip)]
    pub runtime: RuntimeSlot,
}

/// An optional [`OAuthRuntime`] carried by settings: not configuration, so
/// it never makes two settings differ.
#[derive(Clone, Default)]
pub struct RuntimeSlot(Option<OAuthRuntime>);

impl RuntimeSlot {
    /// A slot holding `runtime`.
    pub fn new(runtime: OAuthRuntime) -> Self {
        Self(Some(runtime))
    }

    /// The runtime, if one was installed.
    pub fn get(&self) -> Option<OAuthRuntime> {
        self.0.clone()
    }
}

impl PartialEq for RuntimeSlot {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for RuntimeSlot {}

impl std::fmt::Debug for RuntimeSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "RuntimeSlot(set)"
        } else {
            "RuntimeSlot(unset)"
        })
    }
}

impl OAuthSettings {
    /// Client credentials with a secret.
    pub fn client_credentials(client_id: impl Into<String>, secret: impl Into<String>) -> Self {
        Self {
            grant: Grant::ClientCredentials,
            client_id: Some(client_id.into()),
            client_secret: Some(Secret(secret.into())),
            ..Self::default()
        }
    }

    /// Authorization code with PKCE, for a client that needs a user.
    pub fn authorization_code() -> Self {
        Self {
            grant: Grant::AuthorizationCode,
            ..Self::default()
        }
    }

    /// These settings, using `runtime`.
    pub fn with_runtime(mut self, runtime: OAuthRuntime) -> Self {
        self.runtime = RuntimeSlot::new(runtime);
        self
    }

    /// The redirect URI, or the default loopback one.
    pub fn redirect_uri(&self) -> String {
        self.redirect_uri
            .clone()
            .unwrap_or_else(|| DEFAULT_REDIRECT_URI.to_string())
    }
}

/// Where a JWT handed to this process is read from.
///
/// Platforms rotate such tokens (a projected service account token lasts an
/// hour), so a file is read again for every token request.
///
/// ```
/// use mcptask_client::oauth::{Secret, TokenSource};
/// let inline = TokenSource::Value(Secret("eyJ…".into()));
/// assert_eq!(inline.read().unwrap(), "eyJ…");
/// let missing = TokenSource::File("/nonexistent/token".into());
/// assert!(missing.read().unwrap_err().contains("/nonexistent/token"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// A file holding the token (surrounding whitespace ignored).
    File(PathBuf),
    /// The token itself (read from the environment at load time).
    Value(Secret),
}

impl TokenSource {
    /// The token, now.
    pub fn read(&self) -> Result<String, String> {
        let text = match self {
            TokenSource::Value(secret) => secret.expose().to_string(),
            TokenSource::File(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?,
        };
        let token = text.trim();
        if token.is_empty() {
            return Err(match self {
                TokenSource::File(path) => format!("the token file {} is empty", path.display()),
                TokenSource::Value(_) => "the token is empty".to_string(),
            });
        }
        Ok(token.to_string())
    }
}

/// The enterprise identity provider of [`Grant::EnterpriseManaged`]: where
/// the user's ID token is exchanged for an ID-JAG, and as which client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityProvider {
    /// Its issuer (the ID-JAG's `iss`).
    pub issuer: String,
    /// Its token endpoint.
    pub token_endpoint: String,
    /// This client's id there.
    pub client_id: String,
    /// Its secret there (HTTP Basic); a public client without one.
    pub client_secret: Option<Secret>,
    /// The ID token the identity provider issued to this client for the user.
    pub id_token: TokenSource,
}

/// Where `mcptask login` listens unless told otherwise.
pub const DEFAULT_REDIRECT_URI: &str = "http://127.0.0.1:8976/callback";
