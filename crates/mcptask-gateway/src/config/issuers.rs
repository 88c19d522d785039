//! `[[api.oauth]]`: authorization servers whose JWT access tokens this
//! gateway accepts, with their checks.

use serde::Deserialize;
use toml::Spanned;

use super::url::is_http_url;
use super::{ConfigError, Source};

/// An authorization server whose JWT access tokens give a principal
/// (MCP authorization: this gateway is an OAuth 2.1 resource server).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerSection {
    /// The issuer (`iss`), e.g. `https://login.example.com/realms/main`;
    /// named in the protected resource metadata.
    pub issuer: Spanned<String>,
    /// The audience a token must carry (`aud`). Default: this resource's
    /// identifier, `public_url` + `/mcp`.
    #[serde(default)]
    pub audience: Option<String>,
    /// Where the issuer's keys are. Default: `jwks_uri` of its metadata
    /// (`/.well-known/oauth-authorization-server`, else OpenID discovery).
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// The claim that names the principal (default `sub`).
    #[serde(default = "default_principal_claim")]
    pub principal_claim: String,
    /// Scopes every token must grant (advertised as `scopes_supported`).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// A scope that makes its token an operator's (sees every principal).
    #[serde(default)]
    pub operator_scope: Option<String>,
    /// A claim value that makes its token an operator's: `{ claim = "roles",
    /// value = "mcptask-admin" }` (an array claim counts if it holds it).
    #[serde(default)]
    pub operator_claim: Option<ClaimMatch>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds (default 60).
    #[serde(default = "default_leeway")]
    pub leeway_s: u64,
}

/// A claim and the value that must be in it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimMatch {
    /// The claim's name (`roles`, `groups`, …).
    pub claim: String,
    /// The value it must hold (an array claim matches if it contains it).
    pub value: String,
}

fn default_principal_claim() -> String {
    "sub".into()
}

fn default_leeway() -> u64 {
    60
}

impl IssuerSection {
    /// The issuer and its key set are http(s) URLs.
    pub(crate) fn check(&self, src: &Source) -> Result<(), ConfigError> {
        let issuer = self.issuer.get_ref();
        if !is_http_url(issuer) {
            return Err(src.at(
                self.issuer.span(),
                &format!("oauth issuer {issuer:?} is not an http(s) URL"),
                "use the authorization server's issuer URL, e.g. issuer = \"https://login.example.com/realms/main\"",
            ));
        }
        if let Some(url) = &self.jwks_url
            && !is_http_url(url)
        {
            return Err(src.at(
                self.issuer.span(),
                &format!("oauth jwks_url {url:?} is not an http(s) URL"),
                "use the URL of the issuer's JSON Web Key Set, or leave jwks_url out to discover it",
            ));
        }
        Ok(())
    }

    /// Everything but the issuer, as a reload compares it.
    pub(crate) fn print(&self) -> serde_json::Value {
        serde_json::json!([
            self.audience,
            self.jwks_url,
            self.principal_claim,
            self.scopes,
            self.operator_scope,
            self.operator_claim.as_ref().map(|c| (&c.claim, &c.value)),
            self.leeway_s
        ])
    }
}
