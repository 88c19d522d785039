//! `[servers.oauth]` and `[oauth]` in mcptask.toml: what is accepted, what a
//! server definition gets from it, and errors that name the line and the fix.

use std::collections::HashMap;

use mcptask_client::oauth::{Grant, TokenEndpointAuth, TokenSource};
use mcptask_gateway::config::Config;

const HEAD: &str = r#"
[api]
auth = "none"
"#;

fn with_server(oauth: &str) -> String {
    format!(
        "{HEAD}\n[[servers]]\nname = \"reports\"\nurl = \"https://reports.example.com/mcp\"\n\n[servers.oauth]\n{oauth}"
    )
}

fn load(text: &str, env: &[(&str, &str)], files: &[(&str, &str)]) -> Result<Config, String> {
    load_in(&tempfile::tempdir().unwrap(), text, env, files)
}

/// [`load`] in `dir` (kept by the caller: files there are read later).
fn load_in(
    dir: &tempfile::TempDir,
    text: &str,
    env: &[(&str, &str)],
    files: &[(&str, &str)],
) -> Result<Config, String> {
    for (name, body) in files {
        std::fs::write(dir.path().join(name), body).unwrap();
    }
    let path = dir.path().join("mcptask.toml");
    std::fs::write(&path, text).unwrap();
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::load_with_env(&path, |k| env.get(k).cloned()).map_err(|e| e.0)
}

#[test]
fn client_credentials_with_a_secret_from_the_environment() {
    let config = load(
        &with_server(
            "grant = \"client_credentials\"\nclient_id = \"mcptask\"\nclient_secret_env = \"REPORTS_SECRET\"\nscopes = [\"reports:read\"]\n",
        ),
        &[("REPORTS_SECRET", "s3cret")],
        &[],
    )
    .unwrap();
    assert!(config.uses_oauth());
    let def = &config.server_defs()[0];
    let oauth = def.oauth.as_ref().expect("oauth settings");
    assert_eq!(oauth.grant, Grant::ClientCredentials);
    assert_eq!(oauth.client_id.as_deref(), Some("mcptask"));
    assert_eq!(
        oauth.client_secret.as_ref().map(|s| s.expose()),
        Some("s3cret")
    );
    assert_eq!(oauth.scopes, ["reports:read"]);
    assert!(
        !format!("{def:?}").contains("s3cret"),
        "the secret never shows"
    );
    assert_eq!(
        def.hash(),
        mcptask_client::ServerDef::http("reports", "https://reports.example.com/mcp").hash(),
        "OAuth is not the server's identity"
    );
}

#[test]
fn private_key_jwt_reads_the_key_file_beside_the_configuration() {
    let config = load(
        &with_server(
            "client_id = \"svc\"\ntoken_endpoint_auth = \"private_key_jwt\"\nprivate_key_file = \"client.pem\"\nsigning_algorithm = \"ES256\"\n",
        ),
        &[],
        &[("client.pem", "-----BEGIN PRIVATE KEY-----\n…\n")],
    )
    .unwrap();
    let oauth = config.server_defs()[0].oauth.clone().unwrap();
    assert_eq!(
        oauth.token_endpoint_auth,
        Some(TokenEndpointAuth::PrivateKeyJwt)
    );
    assert!(
        oauth
            .private_key_pem
            .unwrap()
            .expose()
            .starts_with("-----BEGIN PRIVATE KEY")
    );
}

#[test]
fn the_sealing_key_comes_from_the_environment_or_a_file() {
    let text = format!(
        "{}\n[oauth]\nsecret_key_file = \"k.key\"\n",
        with_server("grant = \"authorization_code\"\n")
    );
    let key = mcptask_client::oauth::SecretKey::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = load_in(&dir, &text, &[], &[("k.key", &key.to_base64())]).unwrap();
    assert!(config.secret_key(|_| None).unwrap().is_some());
    let other = mcptask_client::oauth::SecretKey::generate()
        .unwrap()
        .to_base64();
    assert!(
        config
            .secret_key(|k| (k == "MCPTASK_SECRET_KEY").then(|| other.clone()))
            .unwrap()
            .is_some()
    );
    let e = config
        .secret_key(|k| (k == "MCPTASK_SECRET_KEY").then(|| "short".to_string()))
        .unwrap_err()
        .0;
    assert!(
        e.contains("MCPTASK_SECRET_KEY") && e.contains("32 random bytes"),
        "{e}"
    );
    let none = load(&with_server("grant = \"authorization_code\"\n"), &[], &[]).unwrap();
    assert!(none.secret_key(|_| None).unwrap().is_none());
}

/// Each mistake is reported at the `[servers.oauth]` line with a fix.
#[test]
fn mistakes_name_the_line_and_the_fix() {
    let cases: [(&str, &str); 9] = [
        ("grant = \"client_credentials\"\n", "needs client_id"),
        (
            "client_id = \"a\"\nclient_secret = \"x\"\nclient_secret_env = \"Y\"\n",
            "both client_secret and client_secret_env",
        ),
        ("client_id = \"a\"\n", "needs a credential"),
        (
            "client_id = \"a\"\ntoken_endpoint_auth = \"private_key_jwt\"\n",
            "needs private_key_file",
        ),
        (
            "client_id = \"a\"\ntoken_endpoint_auth = \"client_secret_basic\"\n",
            "needs a client secret",
        ),
        (
            "grant = \"authorization_code\"\nclient_secret = \"x\"\n",
            "no client_id",
        ),
        (
            "client_id = \"a\"\nclient_secret = \"x\"\nsigning_algorithm = \"HS256\"\n",
            "not supported",
        ),
        (
            "grant = \"authorization_code\"\nclient_metadata_url = \"http://x/c.json\"\n",
            "not https",
        ),
        (
            "grant = \"authorization_code\"\nauthorization_server = \"auth.example.com\"\n",
            "not an http(s) URL",
        ),
    ];
    let line = with_server("")
        .lines()
        .position(|l| l == "[servers.oauth]")
        .unwrap()
        + 1;
    for (oauth, problem) in cases {
        let e = Config::parse("mcptask.toml", &with_server(oauth))
            .map(|_| ())
            .unwrap_err()
            .0;
        assert!(e.contains(problem), "{oauth:?}: {e}");
        assert!(e.contains("fix:"), "{e}");
        assert!(
            e.starts_with(&format!("mcptask.toml:{line}:")),
            "{oauth:?}: at the [servers.oauth] line {line}: {e}"
        );
    }
    let stdio = format!(
        "{HEAD}\n[[servers]]\nname = \"local\"\ncommand = \"srv\"\n\n[servers.oauth]\ngrant = \"authorization_code\"\n"
    );
    let e = Config::parse("mcptask.toml", &stdio).unwrap_err().0;
    assert!(e.contains("not an HTTP server"), "{e}");
    let both = format!(
        "{HEAD}\n[[servers]]\nname = \"r\"\nurl = \"https://r/mcp\"\nheaders = {{ Authorization = \"Bearer t\" }}\n\n[servers.oauth]\ngrant = \"authorization_code\"\n"
    );
    let e = Config::parse("mcptask.toml", &both).unwrap_err().0;
    assert!(e.contains("both an Authorization header"), "{e}");

    let e = load(
        &with_server("client_id = \"a\"\nclient_secret_env = \"MISSING\"\n"),
        &[],
        &[],
    )
    .unwrap_err();
    assert!(
        e.contains("client_secret_env \"MISSING\" is not set") && e.contains("export MISSING"),
        "{e}"
    );
    let e = load(
        &with_server("client_id = \"a\"\nprivate_key_file = \"nope.pem\"\n"),
        &[],
        &[],
    )
    .unwrap_err();
    assert!(e.contains("cannot read private_key_file"), "{e}");
}

#[test]
fn a_workload_token_file_and_dpop() {
    let dir = tempfile::tempdir().unwrap();
    let config = load_in(
        &dir,
        &with_server(
            "grant = \"jwt_bearer\"\nclient_id = \"workload\"\nassertion_file = \"token.jwt\"\ndpop = true\n",
        ),
        &[],
        &[("token.jwt", "eyJ.workload.jwt\n")],
    )
    .unwrap();
    let oauth = config.server_defs()[0]
        .oauth
        .clone()
        .expect("oauth settings");
    assert_eq!(oauth.grant, Grant::JwtBearer);
    assert!(oauth.dpop);
    let source = oauth.assertion.expect("the workload token");
    assert_eq!(
        source,
        TokenSource::File(dir.path().join("token.jwt")),
        "beside the configuration"
    );
    std::fs::write(dir.path().join("token.jwt"), "eyJ.rotated.jwt").unwrap();
    assert_eq!(
        source.read().unwrap(),
        "eyJ.rotated.jwt",
        "read when a token is bought, not only at load"
    );
}

#[test]
fn an_enterprise_identity_provider() {
    let config = load(
        &with_server(
            "grant = \"enterprise_managed\"\nclient_id = \"mcp-client\"\nclient_secret_env = \"AS_SECRET\"\n\n[servers.oauth.identity_provider]\nissuer = \"https://idp.example.com\"\ntoken_endpoint = \"https://idp.example.com/oauth2/token\"\nclient_id = \"idp-client\"\nclient_secret_env = \"IDP_SECRET\"\nid_token_env = \"ID_TOKEN\"\n",
        ),
        &[
            ("AS_SECRET", "as-s3cret"),
            ("IDP_SECRET", "idp-s3cret"),
            ("ID_TOKEN", "eyJ.id.token"),
        ],
        &[],
    )
    .unwrap();
    let def = &config.server_defs()[0];
    let oauth = def.oauth.as_ref().expect("oauth settings");
    assert_eq!(oauth.grant, Grant::EnterpriseManaged);
    assert!(!oauth.dpop);
    let idp = oauth.identity_provider.as_ref().expect("identity provider");
    assert_eq!(idp.issuer, "https://idp.example.com");
    assert_eq!(idp.token_endpoint, "https://idp.example.com/oauth2/token");
    assert_eq!(idp.client_id, "idp-client");
    assert_eq!(
        idp.client_secret.as_ref().map(|s| s.expose()),
        Some("idp-s3cret")
    );
    assert_eq!(idp.id_token.read().unwrap(), "eyJ.id.token");
    let shown = format!("{def:?}");
    assert!(
        !shown.contains("idp-s3cret") && !shown.contains("eyJ.id.token"),
        "secrets never show: {shown}"
    );
}

/// Each mistake in the DPoP, JWT bearer and identity provider keys is
/// reported at the `[servers.oauth]` line with a fix.
#[test]
fn extension_mistakes_name_the_line_and_the_fix() {
    const IDP: &str = "\n[servers.oauth.identity_provider]\nissuer = \"https://idp.example.com\"\ntoken_endpoint = \"https://idp.example.com/token\"\nclient_id = \"c\"\nid_token_env = \"T\"\n";
    let enterprise = |extra: &str| format!("grant = \"enterprise_managed\"\n{extra}");
    let cases: Vec<(String, &str)> = vec![
        (
            "grant = \"jwt_bearer\"\n".into(),
            "needs the workload's JWT",
        ),
        (
            "grant = \"jwt_bearer\"\nassertion_file = \"a\"\nassertion_env = \"B\"\n".into(),
            "both assertion_file and assertion_env",
        ),
        (
            "client_id = \"a\"\nclient_secret = \"x\"\nassertion_env = \"B\"\n".into(),
            "are for grant = \"jwt_bearer\"",
        ),
        (
            enterprise("client_id = \"a\"\n"),
            "needs an identity provider",
        ),
        (
            format!("client_id = \"a\"\nclient_secret = \"x\"\n{IDP}"),
            "is for grant = \"enterprise_managed\"",
        ),
        (enterprise(IDP), "enterprise_managed grant needs client_id"),
        (
            enterprise(&format!("client_id = \"a\"\ndpop = true\n{IDP}")),
            "bearer tokens only",
        ),
        (
            enterprise(&format!(
                "client_id = \"a\"\n{}",
                IDP.replace("https://idp.example.com/token", "idp/token")
            )),
            "token_endpoint \"idp/token\" is not an http(s) URL",
        ),
        (
            enterprise(&format!(
                "client_id = \"a\"\n{}",
                IDP.replace("id_token_env = \"T\"\n", "")
            )),
            "needs the user's ID token",
        ),
        (
            enterprise(&format!("client_id = \"a\"\n{IDP}id_token_file = \"t\"\n")),
            "both id_token_file and id_token_env",
        ),
    ];
    let line = with_server("")
        .lines()
        .position(|l| l == "[servers.oauth]")
        .unwrap()
        + 1;
    for (oauth, problem) in cases {
        let e = Config::parse("mcptask.toml", &with_server(&oauth))
            .map(|_| ())
            .unwrap_err()
            .0;
        assert!(e.contains(problem), "{oauth:?}: {e}");
        assert!(e.contains("fix:"), "{e}");
        assert!(
            e.starts_with(&format!("mcptask.toml:{line}:")),
            "{oauth:?}: at the [servers.oauth] line {line}: {e}"
        );
    }
    let e = load(
        &with_server("grant = \"jwt_bearer\"\nassertion_env = \"NOT_SET\"\n"),
        &[],
        &[],
    )
    .unwrap_err();
    assert!(
        e.contains("assertion_env \"NOT_SET\" is not set") && e.contains("export NOT_SET"),
        "{e}"
    );
    let e = load(
        &with_server("grant = \"jwt_bearer\"\nassertion_file = \"missing.jwt\"\n"),
        &[],
        &[],
    )
    .unwrap_err();
    assert!(
        e.contains("cannot read the token file") && e.contains("missing.jwt"),
        "{e}"
    );
}
