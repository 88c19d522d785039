//! The unattended grants' token requests, as built (no network): what each
//! grant sends, how the client authenticates, and what is refused before
//! anything goes out.

use super::*;
use crate::oauth::{IdentityProvider, Secret, TokenSource};

const RESOURCE: &str = "https://mcp.example.com/mcp";

fn metadata(auth_methods: &[&str]) -> AuthorizationMetadata {
    serde_json::from_value(serde_json::json!({
        "issuer": "https://as.example.com",
        "authorization_endpoint": "https://as.example.com/authorize",
        "token_endpoint": "https://as.example.com/token",
        "token_endpoint_auth_methods_supported": auth_methods,
    }))
    .unwrap()
}

fn form_of(settings: &OAuthSettings, auth_methods: &[&str]) -> Result<TokenForm, String> {
    let metadata = metadata(auth_methods);
    let scopes = ["files:read".to_string()];
    Unattended {
        server: "files",
        settings,
        metadata: &metadata,
        resource: RESOURCE,
        scopes: &scopes,
        now_secs: 1_700_000_000,
    }
    .form()
}

fn field<'a>(form: &'a TokenForm, name: &str) -> Option<&'a str> {
    form.fields
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.as_str())
}

fn workload(source: TokenSource) -> OAuthSettings {
    OAuthSettings {
        grant: Grant::JwtBearer,
        assertion: Some(source),
        ..OAuthSettings::default()
    }
}

#[test]
fn a_workload_jwt_is_the_grant_and_is_read_again_for_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "eyJ.first.jwt\n").unwrap();
    let mut settings = workload(TokenSource::File(file.clone()));
    settings.client_id = Some("workload-1".into());
    let form = form_of(&settings, &["none"]).unwrap();
    assert_eq!(field(&form, "grant_type"), Some(JWT_BEARER));
    assert_eq!(field(&form, "assertion"), Some("eyJ.first.jwt"));
    assert_eq!(field(&form, "resource"), Some(RESOURCE));
    assert_eq!(field(&form, "scope"), Some("files:read"));
    assert_eq!(
        field(&form, "client_id"),
        Some("workload-1"),
        "a public client"
    );
    assert_eq!(form.basic, None);

    std::fs::write(&file, "eyJ.rotated.jwt").unwrap();
    let form = form_of(&settings, &["none"]).unwrap();
    assert_eq!(
        field(&form, "assertion"),
        Some("eyJ.rotated.jwt"),
        "the platform rotated the token: the file is read again"
    );
}

#[test]
fn a_workload_needs_no_client_id_but_may_authenticate() {
    let anonymous = workload(TokenSource::Value(Secret("eyJ.a.b".into())));
    let form = form_of(&anonymous, &[]).unwrap();
    assert_eq!(field(&form, "client_id"), None);
    assert_eq!(field(&form, "assertion"), Some("eyJ.a.b"));

    let mut confidential = anonymous.clone();
    confidential.client_id = Some("svc".into());
    confidential.client_secret = Some(Secret("s3cret".into()));
    let form = form_of(&confidential, &["client_secret_basic"]).unwrap();
    assert_eq!(form.basic.as_deref(), Some("Basic c3ZjOnMzY3JldA=="));
    assert_eq!(field(&form, "client_secret"), None, "never in the form too");

    let form = form_of(&confidential, &["client_secret_post"]).unwrap();
    assert_eq!(form.basic, None);
    assert_eq!(field(&form, "client_secret"), Some("s3cret"));
}

#[test]
fn what_a_grant_lacks_is_said_before_anything_is_sent() {
    let none = OAuthSettings {
        grant: Grant::JwtBearer,
        ..OAuthSettings::default()
    };
    let e = form_of(&none, &[]).unwrap_err();
    assert!(e.contains("jwt_bearer grant needs assertion_file"), "{e}");

    let empty_dir = tempfile::tempdir().unwrap();
    let empty = empty_dir.path().join("token");
    std::fs::write(&empty, "\n").unwrap();
    let e = form_of(&workload(TokenSource::File(empty)), &[]).unwrap_err();
    assert!(e.contains("is empty"), "{e}");

    let e = form_of(
        &OAuthSettings {
            grant: Grant::ClientCredentials,
            ..OAuthSettings::default()
        },
        &[],
    )
    .unwrap_err();
    assert!(
        e.contains("client_credentials grant needs client_id"),
        "{e}"
    );

    let mut basic_without_secret = workload(TokenSource::Value(Secret("eyJ.a.b".into())));
    basic_without_secret.client_id = Some("svc".into());
    basic_without_secret.token_endpoint_auth = Some(TokenEndpointAuth::ClientSecretBasic);
    let e = form_of(&basic_without_secret, &[]).unwrap_err();
    assert!(e.contains("needs client_secret"), "{e}");
}

#[test]
fn client_credentials_authenticate_as_before() {
    let settings = OAuthSettings::client_credentials("svc", "s3cret");
    let form = form_of(&settings, &["client_secret_basic"]).unwrap();
    assert_eq!(field(&form, "grant_type"), Some("client_credentials"));
    assert!(form.basic.is_some());
    assert_eq!(field(&form, "assertion"), None);
}

#[tokio::test]
async fn enterprise_managed_refuses_what_it_cannot_do_before_any_request() {
    let http = OAuthHttp::new(None).unwrap();
    let metadata = metadata(&["client_secret_basic"]);
    let idp = IdentityProvider {
        issuer: "https://idp.example.com".into(),
        token_endpoint: "https://idp.example.com/token".into(),
        client_id: "idp-client".into(),
        client_secret: None,
        id_token: TokenSource::Value(Secret("eyJ.id.token".into())),
    };
    let attempt = |settings: OAuthSettings| {
        let metadata = metadata.clone();
        let http = &http;
        async move {
            Unattended {
                server: "files",
                settings: &settings,
                metadata: &metadata,
                resource: RESOURCE,
                scopes: &[],
                now_secs: 0,
            }
            .obtain(http)
            .await
            .unwrap_err()
        }
    };
    let base = OAuthSettings {
        grant: Grant::EnterpriseManaged,
        client_id: Some("mcp-client".into()),
        client_secret: Some(Secret("s".into())),
        identity_provider: Some(idp),
        ..OAuthSettings::default()
    };
    let e = attempt(OAuthSettings {
        dpop: true,
        ..base.clone()
    })
    .await;
    assert!(e.contains("bearer tokens only"), "{e}");
    let e = attempt(OAuthSettings {
        identity_provider: None,
        ..base.clone()
    })
    .await;
    assert!(e.contains("needs [servers.oauth.identity_provider]"), "{e}");
    let e = attempt(OAuthSettings {
        client_id: None,
        ..base.clone()
    })
    .await;
    assert!(e.contains("needs client_id"), "{e}");
}

#[test]
fn exchange_failures_say_where_and_what_to_do() {
    let e = ema_words(
        "files",
        &EmaError::InvalidGrant(EmaExchangeStage::IdentityProvider),
    );
    assert!(
        e.contains("IdentityProvider") && e.contains("renew the ID token"),
        "{e}"
    );
    let e = ema_words(
        "files",
        &EmaError::InvalidGrant(EmaExchangeStage::ResourceAuthorizationServer),
    );
    assert!(e.contains("trust the identity provider"), "{e}");
}
