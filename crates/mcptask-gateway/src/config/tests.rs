//! Whole files through [`Config::parse`] and [`Config::load_with_env`]:
//! what reaches the sections, and errors that name the file, the line and
//! the fix.

use std::time::Duration;

use super::*;
const GOOD: &str = r#"
[database]
url = "sqlite:x.db"

[api]
listen = "127.0.0.1:0"
[[api.tokens]]
token = "0123456789abcdef"
principal = "alice"

[tracker]
poll_min_ms = 100
idle_tick_ms = 50

[[servers]]
name = "demo"
url = "http://127.0.0.1:8080/mcp"
headers = { Authorization = "Bearer t" }

[[servers]]
name = "local"
command = "mcptask"
args = ["demo-server", "--stdio"]

[[webhooks]]
url = "http://127.0.0.1:9/hook"
secret = "s3cret"
"#;

#[test]
fn a_full_file_parses() {
    let c = Config::parse("mcptask.toml", GOOD).unwrap();
    assert_eq!(c.database.url, "sqlite:x.db");
    assert_eq!(c.server_defs().len(), 2);
    assert_eq!(c.tracker.policy.poll.min_ms, 100);
    assert_eq!(c.tracker.idle_tick, Duration::from_millis(50));
    assert_eq!(c.api.tokens[0].principal.as_deref(), Some("alice"));
}

/// The audience of OAuth tokens is configuration: an issuer without a
/// `public_url` is refused, at the issuer's line, with the fix; the
/// environment can supply it.
#[test]
fn oauth_needs_a_public_url() {
    let text = "[api]\n[[api.oauth]]\nissuer = \"https://login.example.com\"\n";
    let e = Config::parse("gw.toml", text).unwrap_err().0;
    assert!(e.starts_with("gw.toml:3:"), "{e}");
    assert!(
        e.contains("public_url") && e.contains("never taken from a request") && e.contains("fix:"),
        "{e}"
    );
    let with = text.replace(
        "[api]\n",
        "[api]\npublic_url = \"https://gw.example.com\"\n",
    );
    assert!(Config::parse("gw.toml", &with).is_ok());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.toml");
    std::fs::write(&path, text).unwrap();
    let c = Config::load_with_env(&path, |k| {
        (k == "MCPTASK_PUBLIC_URL").then(|| "https://gw.example.com".to_string())
    })
    .unwrap();
    assert_eq!(
        c.api.public_url.as_ref().map(|u| u.get_ref().as_str()),
        Some("https://gw.example.com")
    );
}

#[test]
fn errors_name_the_file_the_line_and_the_fix() {
    let bad = GOOD.replace("listen =", "liste =");
    let e = Config::parse("mcptask.toml", &bad).unwrap_err().0;
    assert!(e.starts_with("mcptask.toml:6:"), "{e}");
    assert!(e.contains("unknown field") && e.contains("fix:"), "{e}");

    let both = GOOD.replace(
        "command = \"mcptask\"",
        "command = \"mcptask\"\nurl = \"http://x/mcp\"",
    );
    let e = Config::parse("mcptask.toml", &both).unwrap_err().0;
    assert!(e.starts_with("mcptask.toml:21:"), "{e}");
    assert!(e.contains("both url and command"), "{e}");

    let no_token = "[api]\nauth = \"token\"\n";
    let e = Config::parse("gw.toml", no_token).unwrap_err().0;
    assert!(
        e.starts_with("gw.toml:1:") && e.contains("MCPTASK_API_TOKEN"),
        "{e}"
    );

    let twice = GOOD.replace("name = \"local\"", "name = \"demo\"");
    let e = Config::parse("mcptask.toml", &twice).unwrap_err().0;
    assert!(
        e.contains("defined twice") && e.starts_with("mcptask.toml:21:"),
        "{e}"
    );

    let ftp = GOOD.replace("http://127.0.0.1:8080/mcp", "ftp://x/mcp");
    let e = Config::parse("mcptask.toml", &ftp).unwrap_err().0;
    assert!(e.contains("is not http(s)"), "{e}");

    let zero = GOOD.replace("poll_min_ms = 100", "poll_min_ms = 0");
    let e = Config::parse("mcptask.toml", &zero).unwrap_err().0;
    assert!(e.contains("tracker.poll_min_ms must be positive"), "{e}");
}

/// A check's error points at its own key, found by the parser: here
/// `[tracker] lease_ms`, though `[proxy] owner_lease_ms` (which ends in
/// the same text) comes first in the file.
#[test]
fn a_tracker_error_points_at_its_own_key() {
    let text = "[api]\nauth = \"none\"\n\n[proxy]\nowner_lease_ms = 5000\n\n\
                [tracker]\ncall_timeout_ms = 1000\nlease_ms = 1000\n";
    let e = Config::parse("gw.toml", text).unwrap_err().0;
    assert!(
        e.starts_with("gw.toml:9:1: tracker.lease_ms must exceed"),
        "{e}"
    );
}

/// Tables whose types carry no span are located by the parser too: a
/// comment naming the table earlier in the file does not mislead it.
#[test]
fn table_errors_point_at_their_table() {
    let limits = "# [limits] and [api] are below\n[api]\nauth = \"none\"\n\n\
                  [limits]\nper_principal_rate = 0\n";
    let e = Config::parse("gw.toml", limits).unwrap_err().0;
    assert!(e.starts_with("gw.toml:5:1: a limit under [limits]"), "{e}");

    let no_token = "# [api] needs a token\n[database]\nurl = \"sqlite:x.db\"\n[api]\n";
    let e = Config::parse("gw.toml", no_token).unwrap_err().0;
    assert!(
        e.starts_with("gw.toml:4:1: the API requires a token"),
        "{e}"
    );

    let policy = "[api]\nauth = \"none\"\n[[policy]]\nallow = [\"a/*\"]\n\
                  # an empty [[policy]] follows\n[[policy]]\nprincipal = \"bob\"\n";
    let e = Config::parse("gw.toml", policy).unwrap_err().0;
    assert!(e.starts_with("gw.toml:6:1: this [[policy]] rule"), "{e}");

    // A kind that does not exist would deny nothing: refused, with the kinds.
    let typo = "[api]\nauth = \"none\"\n[[policy]]\nallow = [\"a/*\"]\n\
                [[policy]]\nprincipal = \"bob\"\ndeny = [\"prompts:priv/*\"]\n";
    let e = Config::parse("gw.toml", typo).unwrap_err().0;
    assert!(
        e.starts_with("gw.toml:5:1: \"prompts:priv/*\" starts with a kind"),
        "{e}"
    );
    assert!(e.contains("tool:, prompt: or resource:"), "{e}");
    let kinds = format!(
        "{GOOD}\n[[policy]]\n\
         deny = [\"prompt:a/*\", \"resource:a/file:///x/*\", \"tool:a/b\", \"a/file:///y\"]\n"
    );
    Config::parse("gw.toml", &kinds).unwrap();
}

fn with_toolsets(toolsets: &str) -> String {
    GOOD.replace(
        "args = [\"demo-server\", \"--stdio\"]\n",
        &format!("args = [\"demo-server\", \"--stdio\"]\n{toolsets}"),
    )
}

#[test]
fn toolsets_reach_the_server_definition() {
    let text = with_toolsets(
        "[[servers.toolsets]]\nname = \"jobs\"\nsubmit_tool = \"submit_job\"\n\
         status_tool = \"job_status\"\ncancel_tool = \"cancel_job\"\n",
    );
    let c = Config::parse("mcptask.toml", &text).unwrap();
    let defs = c.server_defs();
    let local = defs.iter().find(|d| d.name == "local").unwrap();
    let t = local.toolset_for("submit_job").unwrap();
    assert_eq!(
        (t.status_tool.as_str(), t.cancel_tool.as_str()),
        ("job_status", "cancel_job")
    );
    assert!(
        defs.iter()
            .find(|d| d.name == "demo")
            .unwrap()
            .toolsets
            .is_empty()
    );
}

#[test]
fn bad_toolsets_are_config_errors() {
    let reused = with_toolsets(
        "[[servers.toolsets]]\nname = \"jobs\"\nsubmit_tool = \"submit_job\"\n\
         status_tool = \"submit_job\"\ncancel_tool = \"cancel_job\"\n",
    );
    let e = Config::parse("mcptask.toml", &reused).unwrap_err().0;
    assert!(
        e.starts_with("mcptask.toml:21:") && e.contains("unique") && e.contains("fix:"),
        "{e}"
    );
    let missing = with_toolsets("[[servers.toolsets]]\nname = \"jobs\"\nsubmit_tool = \"s\"\n");
    let e = Config::parse("mcptask.toml", &missing).unwrap_err().0;
    assert!(e.contains("status_tool"), "{e}");
    let unknown = with_toolsets(
        "[[servers.toolsets]]\nname = \"j\"\nsubmit_tool = \"a\"\nstatus_tool = \"b\"\n\
         cancel_tool = \"c\"\nanswer_tool = \"d\"\n",
    );
    let e = Config::parse("mcptask.toml", &unknown).unwrap_err().0;
    assert!(e.contains("answer_tool"), "{e}");
}

#[test]
fn environment_overrides_apply_before_validation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.toml");
    // No token in the file: the operator token from the environment
    // makes it valid (overrides are validated with the file).
    std::fs::write(&path, "[api]\nauth = \"token\"\n").unwrap();
    let c = Config::load_with_env(&path, |k| match k {
        "MCPTASK_DATABASE_URL" => Some("postgres://u@h/db".into()),
        "MCPTASK_LISTEN" => Some("0.0.0.0:9000".into()),
        "MCPTASK_OPERATOR_TOKEN" => Some("abcdefghijklmnop".into()),
        _ => None,
    })
    .unwrap();
    assert_eq!(c.database.url, "postgres://u@h/db");
    assert_eq!(c.api.listen.port(), 9000);
    assert_eq!(c.api.auth, AuthMode::Token);
    assert_eq!(c.api.tokens.len(), 1);
    assert_eq!(c.api.tokens[0].principal, None);
    let e = Config::load_with_env(&path, |k| (k == "MCPTASK_LISTEN").then(|| "nope".into()))
        .unwrap_err()
        .0;
    assert!(e.contains("MCPTASK_LISTEN"), "{e}");
    // MCPTASK_AUTH=none from the environment relaxes a file that asks for tokens.
    Config::load_with_env(&path, |k| (k == "MCPTASK_AUTH").then(|| "none".into())).unwrap();
}

/// The token trap: `serve` started in a shell that exports a
/// principal's CLI credential must not make it an operator token.
#[test]
fn the_cli_credential_never_becomes_an_operator_token() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.toml");
    let alice = "[api]\nauth = \"token\"\n[[api.tokens]]\ntoken = \"alice-token-0123456789\"\nprincipal = \"alice\"\n";
    std::fs::write(&path, alice).unwrap();
    let c = Config::load_with_env(&path, |k| {
        (k == "MCPTASK_API_TOKEN").then(|| "alice-token-0123456789".into())
    })
    .unwrap();
    assert_eq!(
        c.api.tokens.len(),
        1,
        "MCPTASK_API_TOKEN is not read by serve"
    );
    assert_eq!(c.api.tokens[0].principal.as_deref(), Some("alice"));
    // Without any token, the error says which variable serve does read.
    std::fs::write(&path, "[api]\nauth = \"token\"\n").unwrap();
    let e = Config::load_with_env(&path, |k| {
        (k == "MCPTASK_API_TOKEN").then(|| "alice-token-0123456789".into())
    })
    .unwrap_err()
    .0;
    assert!(
        e.contains("MCPTASK_OPERATOR_TOKEN") && e.contains("never reads"),
        "{e}"
    );
    // The operator variable may not reuse a principal's token.
    std::fs::write(&path, alice).unwrap();
    let e = Config::load_with_env(&path, |k| {
        (k == "MCPTASK_OPERATOR_TOKEN").then(|| "alice-token-0123456789".into())
    })
    .unwrap_err()
    .0;
    assert!(e.contains("also a token"), "{e}");
    // Nor may the file list one token twice.
    let twice = format!("{alice}[[api.tokens]]\ntoken = \"alice-token-0123456789\"\n");
    let e = Config::parse("m.toml", &twice).unwrap_err().0;
    assert!(
        e.contains("listed twice") && e.starts_with("m.toml:7:"),
        "{e}"
    );
}

/// A token in the file that is short or a placeholder is refused at its
/// position, with the fix (the same rule as `MCPTASK_OPERATOR_TOKEN`).
#[test]
fn weak_file_tokens_are_refused_where_they_stand() {
    for (token, why) in [
        ("changeme-changeme-1", "placeholder"),
        ("0123abcd", "at least 16"),
        ("aaaaaaaaaaaaaaaaaaaa", "different characters"),
    ] {
        let text = format!("[api]\nauth = \"token\"\n[[api.tokens]]\ntoken = \"{token}\"\n");
        let e = Config::parse("m.toml", &text).unwrap_err().0;
        assert!(e.starts_with("m.toml:4:"), "{e}");
        assert!(
            e.contains(why) && e.contains("fix: use a long random value"),
            "{e}"
        );
    }
}

/// The live-call limits: a server cap of zero (which would refuse every
/// call) and a value that is not a count are refused at their place; the
/// per-principal default is the front's former fixed cap, and `0` lifts it.
#[test]
fn live_call_limits_are_checked_and_default_to_a_thousand() {
    let zero = "[api]\nauth = \"none\"\n\n[limits]\nlive_calls_per_server = 0\n";
    let e = Config::parse("gw.toml", zero).unwrap_err().0;
    assert!(
        e.starts_with("gw.toml:4:1: [limits] live_calls_per_server = 0"),
        "{e}"
    );
    let negative = "[api]\nauth = \"none\"\n\n[limits]\nlive_calls_per_principal = -1\n";
    let e = Config::parse("gw.toml", negative).unwrap_err().0;
    assert!(e.contains("gw.toml:5:"), "{e}");
    let none = Config::parse("gw.toml", "[api]\nauth = \"none\"\n").unwrap();
    assert_eq!(none.limits.limits().live.per_principal, Some(1000));
    let lifted = "[api]\nauth = \"none\"\n\n[limits]\nlive_calls_per_principal = 0\n";
    let lifted = Config::parse("gw.toml", lifted).unwrap();
    assert_eq!(lifted.limits.limits().live.per_principal, None);
}

/// `[[virtual_servers]]`: a good one reaches its definition; a name that
/// cannot be a path segment, a second of one name, a selection of nothing
/// and a glob of no configured server are refused at their line.
#[test]
fn virtual_servers_are_checked_at_their_line() {
    let head =
        "[api]\nauth = \"none\"\n[[servers]]\nname = \"demo\"\nurl = \"http://127.0.0.1:9/mcp\"\n";
    let good = format!(
        "{head}[[virtual_servers]]\nname = \"ops.v1\"\ntools = [\"demo/greet\", \"d*/slow_*\"]\nprincipals = [\"alice\"]\n"
    );
    let c = Config::parse("gw.toml", &good).unwrap();
    let v = c.virtual_server("ops.v1").expect("defined");
    assert_eq!(v.tools, ["demo/greet", "d*/slow_*"]);
    assert_eq!(v.principals, Some(vec!["alice".to_string()]));
    assert!(c.virtual_server("other").is_none());

    let cases = [
        (
            "[[virtual_servers]]\nname = \"a b\"\ntools = [\"demo/*\"]\n",
            "gw.toml:7:8: the virtual server name \"a b\" cannot be a URL path segment",
        ),
        (
            "[[virtual_servers]]\nname = \"v\"\ntools = [\"demo/*\"]\n\
             [[virtual_servers]]\nname = \"v\"\ntools = [\"demo/greet\"]\n",
            "gw.toml:10:8: a second virtual server is named \"v\"",
        ),
        (
            "[[virtual_servers]]\nname = \"v\"\n",
            "gw.toml:7:8: the virtual server \"v\" selects nothing",
        ),
        (
            "[[virtual_servers]]\nname = \"v\"\ntools = [\"demo/greet\", \"nowhere/greet\"]\n",
            "gw.toml:8:24: \"nowhere/greet\" names no configured server (servers: [\"demo\"])",
        ),
        (
            "[[virtual_servers]]\nname = \"v\"\nprompts = [\"greet\"]\n",
            "gw.toml:8:12: \"greet\" names no server",
        ),
    ];
    refused_at_their_line(head, &cases);
}

#[test]
fn answer_within_is_per_server_and_tool_and_bounded() {
    let head =
        "[api]\nauth = \"none\"\n[[servers]]\nname = \"demo\"\nurl = \"http://127.0.0.1:9/mcp\"\n";
    let c = Config::parse(
        "gw.toml",
        &format!("{head}answer_within_ms = 250\n[servers.tool_answer_within_ms]\nexport = 0\n"),
    )
    .unwrap();
    let within = &c.servers[0].upstream().answer_within;
    assert_eq!(within.of("export"), std::time::Duration::ZERO);
    assert_eq!(within.of("greet"), std::time::Duration::from_millis(250));
    let default = Config::parse("gw.toml", head).unwrap();
    assert_eq!(
        default.servers[0].upstream().answer_within.of("greet"),
        std::time::Duration::from_millis(super::DEFAULT_ANSWER_WITHIN_MS)
    );

    let cases = [
        (
            "answer_within_ms = 60001\n",
            "gw.toml:4:8: server \"demo\" sets answer_within_ms = 60001, over 60000 ms",
        ),
        (
            "[servers.tool_answer_within_ms]\nexport = 90000\n",
            "gw.toml:4:8: server \"demo\" sets tool_answer_within_ms.export = 90000",
        ),
    ];
    refused_at_their_line(head, &cases);
}

/// Each `(section, said)`: `head` then `section` is refused with a message
/// that starts with `said` and names its fix.
fn refused_at_their_line(head: &str, cases: &[(&str, &str)]) {
    for (section, said) in cases {
        let e = Config::parse("gw.toml", &format!("{head}{section}"))
            .unwrap_err()
            .0;
        assert!(e.starts_with(said), "{section}: {e}");
        assert!(e.contains("\n  fix: "), "{e}");
    }
}

#[test]
fn identity_is_checked_at_its_table_and_resolved_at_load() {
    let head =
        "[api]\nauth = \"none\"\n[[servers]]\nname = \"demo\"\nurl = \"http://127.0.0.1:9/mcp\"\n";
    let cases = [
        (
            "[servers.identity]\nmode = \"per_principal\"\n",
            "gw.toml:6:1: server \"demo\": mode = \"per_principal\" names no principal's credential",
        ),
        (
            "[servers.identity]\nmode = \"per_principal\"\n[servers.identity.principals.alice]\ntoken_env = \"A\"\ntoken_file = \"a\"\n",
            "gw.toml:6:1: server \"demo\": principal \"alice\" sets both token_env and token_file",
        ),
        (
            "[servers.identity]\n[servers.identity.principals.alice]\ntoken_env = \"A\"\n",
            "gw.toml:6:1: server \"demo\": [servers.identity.principals] is for mode = \"per_principal\"",
        ),
        (
            "[servers.identity]\nmode = \"token_exchange\"\nclient_id = \"gw\"\n",
            "gw.toml:6:1: server \"demo\": mode = \"token_exchange\" needs token_endpoint",
        ),
        (
            "[servers.identity]\nmode = \"token_exchange\"\ntoken_endpoint = \"ftp://idp/token\"\nclient_id = \"gw\"\n",
            "gw.toml:6:1: server \"demo\": token_endpoint \"ftp://idp/token\" is not an http(s) URL",
        ),
        (
            "[servers.identity]\nmode = \"token_exchange\"\ntoken_endpoint = \"https://idp/token\"\n",
            "gw.toml:6:1: server \"demo\": mode = \"token_exchange\" needs client_id",
        ),
        (
            "[servers.identity]\nmode = \"per_principal\"\ntoken_endpoint = \"https://idp/token\"\n",
            "gw.toml:6:1: server \"demo\": token_endpoint, client_id",
        ),
        ("[servers.identity]\nmode = \"caller\"\n", "gw.toml:7:8: "),
    ];
    refused_at_their_line(head, &cases);
    // A stdio server's calls cannot carry anyone's identity.
    let stdio = "[api]\nauth = \"none\"\n[[servers]]\nname = \"local\"\ncommand = \"srv\"\n";
    refused_at_their_line(
        stdio,
        &[(
            "[servers.identity]\nmode = \"token_exchange\"\ntoken_endpoint = \"https://idp/token\"\nclient_id = \"gw\"\n",
            "gw.toml:6:1: server \"local\" is a stdio server: its calls cannot carry the caller's identity",
        )],
    );

    // What the table names is read at load: a missing variable is an error
    // at the table, a present one becomes the principal's token.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.toml");
    std::fs::write(
        &path,
        format!(
            "{head}[servers.identity]\nmode = \"per_principal\"\n[servers.identity.principals.alice]\ntoken_env = \"ALICE_DEMO\"\n"
        ),
    )
    .unwrap();
    let e = Config::load_with_env(&path, |_| None).unwrap_err().0;
    assert!(
        e.contains(
            "gw.toml:6:1: server \"demo\": principal \"alice\" token_env \"ALICE_DEMO\" is not set"
        ),
        "{e}"
    );
    let c =
        Config::load_with_env(&path, |k| (k == "ALICE_DEMO").then(|| "t0k".to_string())).unwrap();
    let def = c.servers[0].def(c.secrets.get("demo"), None);
    match def.identity {
        mcptask_client::identity::Identity::PerPrincipal(tokens) => {
            assert_eq!(tokens["alice"].read().unwrap(), "t0k");
        }
        other => panic!("{other:?}"),
    }
}
