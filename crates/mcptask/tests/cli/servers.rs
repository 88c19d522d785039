//! `mcptask servers list|add|remove`, `mcptask virtual-servers
//! list|add|remove` and `mcptask config export` against a running gateway:
//! what the admin API does, from a shell.

use mcptask_testkit::*;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_added_listed_exported_and_removed_from_the_command_line() {
    with_deadline(WAIT, async {
        let db = TestDatabase::sqlite();
        let upstream = SyncUpstream::start().await;
        let spec = GatewaySpec::with_tokens(&db.url, &[("filed", &upstream.url)]);
        let gateway = GatewayProcess::start("servers-cli", &spec).await;
        let run = |args: &'static [&'static str]| run_cli(&gateway.base, OPERATOR, args);

        let url = upstream.url.clone();
        let added = run_cli(
            &gateway.base,
            OPERATOR,
            &["servers", "add", "added", "--url", &url],
        )
        .await;
        assert!(added.status.success(), "{}", text(&added.stderr));
        assert!(
            text(&added.stderr).contains("server \"added\" set"),
            "{}",
            text(&added.stderr)
        );

        let bad = run(&["servers", "add", "bad", "--url", "ftp://example.com/mcp"]).await;
        assert_eq!(bad.status.code(), Some(1), "{}", text(&bad.stderr));
        let said = text(&bad.stderr);
        assert!(said.contains("admin API server \"bad\""), "{said}");
        assert!(said.contains("is not http(s)"), "{said}");

        let principal = run_cli(&gateway.base, ALICE, &["servers", "list"]).await;
        assert_eq!(
            principal.status.code(),
            Some(1),
            "{}",
            text(&principal.stderr)
        );

        let list = run(&["servers", "list"]).await;
        let listed = text(&list.stdout);
        assert!(list.status.success(), "{}", text(&list.stderr));
        let rows: Vec<&str> = listed.lines().collect();
        assert!(
            rows.iter()
                .any(|r| r.starts_with("filed ") && r.contains(" file")),
            "{listed}"
        );
        assert!(
            rows.iter().any(|r| r.starts_with("added ")
                && r.contains(" api ")
                && r.contains("operator token")),
            "{listed}"
        );
        assert!(!listed.contains("bad"), "{listed}");

        // A virtual server: added with repeatable flags, listed, refused
        // with the file's message when it names no configured server.
        let team = run(&[
            "virtual-servers",
            "add",
            "team",
            "--tool",
            "added/*",
            "--tool",
            "filed/echo",
            "--principal",
            "alice",
        ])
        .await;
        assert!(team.status.success(), "{}", text(&team.stderr));
        assert!(
            text(&team.stderr).contains("virtual server \"team\" set"),
            "{}",
            text(&team.stderr)
        );
        let stray = run(&["virtual-servers", "add", "stray", "--tool", "nosuch/*"]).await;
        assert_eq!(stray.status.code(), Some(1), "{}", text(&stray.stderr));
        assert!(
            text(&stray.stderr).contains("admin API virtual server \"stray\""),
            "{}",
            text(&stray.stderr)
        );
        let virtuals = run(&["virtual-servers", "list"]).await;
        let listed = text(&virtuals.stdout);
        assert!(
            listed
                .lines()
                .any(|r| r.starts_with("team ") && r.contains(" api ")),
            "{listed}"
        );
        assert!(!listed.contains("stray"), "{listed}");

        let config = gateway.config_path();
        let config = config.to_str().unwrap();
        let export = run_cli(&gateway.base, OPERATOR, &["config", "export", "-c", config]).await;
        assert!(export.status.success(), "{}", text(&export.stderr));
        let exported = mcptask_gateway::Config::parse("exported.toml", &text(&export.stdout))
            .unwrap_or_else(|e| panic!("{e}\n{}", text(&export.stdout)));
        let names: Vec<&str> = exported.servers.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["filed", "added"]);
        assert_eq!(
            exported.servers[1].url.as_deref(),
            Some(upstream.url.as_str())
        );
        let virtuals: Vec<&str> = exported
            .virtual_servers
            .iter()
            .map(|v| v.name.get_ref().as_str())
            .collect();
        assert_eq!(virtuals, ["team"]);

        // Removed; then the server it selected can go too.
        let gone = run(&["virtual-servers", "remove", "team"]).await;
        assert!(gone.status.success(), "{}", text(&gone.stderr));
        assert!(!text(&run(&["virtual-servers", "list"]).await.stdout).contains("team"));

        // `config check --gateway` with the file unchanged: a reload (which
        // reads the stored servers too) would change nothing.
        let check = run_cli(
            &gateway.base,
            OPERATOR,
            &[
                "config",
                "check",
                "--json",
                "--no-probe",
                "--gateway",
                &gateway.base,
                "-c",
                config,
            ],
        )
        .await;
        let report: serde_json::Value = serde_json::from_slice(&check.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", text(&check.stdout), text(&check.stderr)));
        let removed = &report["reload"]["changes"]["servers_removed"];
        assert!(
            removed.as_array().is_none_or(|r| r.is_empty()),
            "a reload would keep the stored server: {report:#}"
        );

        let removed = run(&["servers", "remove", "added"]).await;
        assert!(removed.status.success(), "{}", text(&removed.stderr));
        let file_one = run(&["servers", "remove", "filed"]).await;
        assert_eq!(file_one.status.code(), Some(1));
        assert!(
            text(&file_one.stderr).contains("defined in the configuration file"),
            "{}",
            text(&file_one.stderr)
        );
        let list = run(&["servers", "list"]).await;
        assert!(
            !text(&list.stdout).contains("added"),
            "{}",
            text(&list.stdout)
        );
    })
    .await;
}
