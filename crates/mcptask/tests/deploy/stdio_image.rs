//! The stdio image (`deploy/build-image --flavor stdio`, deploy/Containerfile.stdio)
//! as a user runs it: built cold on a Debian base this test makes with
//! mmdebstrap, started with a configuration whose only upstream is the npm
//! "everything" server run by `npx` inside the container, and called through
//! `/mcp` from the host: the tool's answer comes back. It prints the build
//! time, the image's size and the time to the first answer (docs/DEPLOY.md).
//!
//! A cold build takes minutes (a Debian base, packages, npm, uv), so the test
//! command (scripts/test) leaves this test out: scripts/test-image-stdio runs it.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::{free_port, in_ci, repo_root};
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

use crate::podman::{Made, both, podman, podman_or_skip, run, run_flags};
use crate::probe::wait_for;

/// mmdebstrap (the base), apt, npm and uv from the network, then the commit.
const BUILD_LIMIT: Duration = Duration::from_secs(900);
/// From `podman run -d` to `/readyz` answering.
const READY_LIMIT: Duration = Duration::from_secs(90);
/// To the everything server's tools listed: npx fetches the server and its
/// dependencies from the registry first (about 45 s here).
const FIRST_CALL_LIMIT: Duration = Duration::from_secs(180);
/// `podman stop` grace: docs/DEPLOY.md gives a stop 45 s.
const STOP_GRACE_SECS: u64 = 45;
/// Other podman commands (inspect, top, rm).
const PODMAN_LIMIT: Duration = Duration::from_secs(120);

/// The everything server's version the interop tests pin
/// (scripts/interop/package.json): the same server, from the registry.
fn everything_version() -> String {
    let path = repo_root().join("scripts/interop/package.json");
    let text = std::fs::read_to_string(&path).expect("scripts/interop/package.json");
    let package: Value = serde_json::from_str(&text).expect("package.json is JSON");
    package["dependencies"]["@modelcontextprotocol/server-everything"]
        .as_str()
        .expect("the everything server is pinned in scripts/interop/package.json")
        .to_string()
}

/// `mmdebstrap` answers, or `false` after a loud SKIPPED line (outside CI).
fn mmdebstrap_or_skip() -> bool {
    match Command::new("mmdebstrap").arg("--version").output() {
        Ok(out) if out.status.success() => true,
        Ok(out) => panic!("mmdebstrap --version failed: {}", both(&out)),
        Err(e) if in_ci() => {
            panic!(
                "the stdio image test is required under CI: mmdebstrap: {e}; apt-get install mmdebstrap"
            )
        }
        Err(e) => {
            eprintln!("SKIPPED (stdio image: no mmdebstrap): {e} — apt-get install mmdebstrap");
            false
        }
    }
}

#[test]
fn the_stdio_image_runs_an_npx_server_behind_the_front() {
    let Some(podman_version) = podman_or_skip("stdio image") else {
        return;
    };
    if !mmdebstrap_or_skip() {
        return;
    }
    let binary = Path::new(env!("CARGO_BIN_EXE_mcptask"));
    let mut made = Made::new();
    // A base of this run's own: the build is cold, and nothing is left behind.
    let base = made.image("base");
    let image = made.image("stdio");

    let mut build = Command::new(repo_root().join("deploy/build-image"));
    build.args([
        "--flavor", "stdio", "--engine", "podman", "--tag", &image, "--base", &base, "--binary",
    ]);
    build.arg(binary);
    let started = Instant::now();
    let built = run(build, BUILD_LIMIT);
    let text = both(&built);
    assert!(built.status.success(), "deploy/build-image failed:\n{text}");
    let build_time = started.elapsed();
    let base_time = text
        .lines()
        .find(|l| l.contains(&format!("{base} made in")))
        .unwrap_or("(base time not printed)")
        .to_string();

    let inspect = podman(
        &[
            "image",
            "inspect",
            "--format",
            "{{.Size}}|{{.Config.User}}|{{.Config.WorkingDir}}|{{json .Config.ExposedPorts}}|{{json .Config.Volumes}}|{{json .Config.Entrypoint}}",
            &image,
        ],
        PODMAN_LIMIT,
    );
    assert!(inspect.status.success(), "{}", both(&inspect));
    let inspect = String::from_utf8_lossy(&inspect.stdout).trim().to_string();
    let fields: Vec<&str> = inspect.split('|').collect();
    let [size, user, workdir, ports, volumes, entrypoint] = fields[..] else {
        panic!("unexpected podman image inspect output {inspect:?}");
    };
    assert_eq!(user, "65532:65532", "the image runs as a non-root user");
    assert_eq!(workdir, "/data");
    assert!(ports.contains("7777/tcp"), "EXPOSE 7777: {ports}");
    assert!(volumes.contains("/data"), "VOLUME /data: {volumes}");
    assert!(
        entrypoint.contains("/usr/local/bin/mcptask"),
        "the entrypoint runs mcptask: {entrypoint}"
    );
    let size: u64 = size.parse().expect("image size in bytes");
    let binary_size = std::fs::metadata(binary).expect("the binary").len();
    eprintln!(
        "deploy: stdio image {image} built cold in {:.1} s with {podman_version} ({base_time}): \
         {:.1} MB (of which the {} binary {:.1} MB)",
        build_time.as_secs_f64(),
        size as f64 / 1e6,
        binary.display(),
        binary_size as f64 / 1e6,
    );

    // A configuration naming one upstream, the everything server over stdio
    // through npx, mounted over the image's default; the front on /mcp.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("mcptask.toml");
    let package = format!(
        "@modelcontextprotocol/server-everything@{}",
        everything_version()
    );
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"sqlite:/data/mcptask.db\"\n\n\
             [api]\nlisten = \"0.0.0.0:7777\"\nauth = \"token\"\n\n\
             [proxy]\nenabled = true\n\n\
             [[servers]]\nname = \"everything\"\ncommand = \"npx\"\n\
             args = [\"-y\", \"{package}\", \"stdio\"]\n\
             # npx fetches the package at the first start\n\
             connect_timeout_ms = 120000\n"
        ),
    )
    .expect("write the configuration");
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("the configuration readable by the image's user");

    let flags = run_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let token = format!("op-token-{}", made.id);
    let serve = made.container("stdio");
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:7777");
    let mount = format!("{}:/etc/mcptask/mcptask.toml:ro", config.display());
    let env = format!("MCPTASK_OPERATOR_TOKEN={token}");
    let started = Instant::now();
    let out = podman(
        &[
            &["run", "--detach", "--name", &serve][..],
            &flags[..],
            &[
                "--publish",
                &publish,
                "--volume",
                &mount,
                "--env",
                &env,
                &image,
            ],
        ]
        .concat(),
        PODMAN_LIMIT,
    );
    assert!(out.status.success(), "podman run:\n{}", both(&out));
    wait_for(port, "/readyz", READY_LIMIT);
    let ready = started.elapsed();

    // The everything server's echo tool through the front, from the host.
    let url = format!("http://127.0.0.1:{port}/mcp");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (first, second) = runtime.block_on(async {
        let client = TestClient::http(&url, Some(&token), Lifecycle::Modern { tasks: false })
            .await
            .expect("connect to /mcp with the operator token");
        // The front lists the server once it answers: after npx has fetched it.
        tokio::time::timeout(FIRST_CALL_LIMIT, listed(&client, "everything__echo"))
            .await
            .expect("the everything server listed within FIRST_CALL_LIMIT");
        let first = echo(&client, "from the image").await;
        let first = (first, started.elapsed());
        let warm = Instant::now();
        let second = tokio::time::timeout(FIRST_CALL_LIMIT, echo(&client, "again"))
            .await
            .expect("the second call answered");
        client.close().await;
        (first, (second, warm.elapsed()))
    });
    assert_eq!(first.0, "Echo: from the image");
    assert_eq!(second.0, "Echo: again");
    eprintln!(
        "deploy: stdio image ready (/readyz 200) {:.1} s after podman run; the everything \
         server's first answer (npx fetching {package}) {:.1} s after podman run; a second \
         call {:.0} ms",
        ready.as_secs_f64(),
        first.1.as_secs_f64(),
        second.1.as_secs_f64() * 1e3,
    );

    // Every process in the container, the stdio server's included, runs as
    // the image's user; tini is PID 1 (it reaps what npx leaves behind).
    let top = podman(&["top", &serve, "user", "pid", "args"], PODMAN_LIMIT);
    let listing = both(&top);
    assert!(top.status.success(), "podman top:\n{listing}");
    let processes: Vec<&str> = listing.lines().skip(1).collect();
    assert!(
        processes
            .iter()
            .any(|l| l.contains("server-everything") || l.contains("mcp-server-everything")),
        "no everything server among the container's processes:\n{listing}"
    );
    for line in &processes {
        let user = line.split_whitespace().next().unwrap_or_default();
        assert!(
            user == "mcptask" || user == "65532",
            "a process not run by the image's user:\n{listing}"
        );
    }
    assert!(
        processes
            .iter()
            .any(|l| l.split_whitespace().nth(1) == Some("1") && l.contains("tini")),
        "tini is not PID 1:\n{listing}"
    );

    // SIGTERM through tini: the gateway and its stdio child stop, exit code 0.
    let stopping = Instant::now();
    let grace = STOP_GRACE_SECS.to_string();
    let out = podman(
        &["stop", "--time", &grace, &serve],
        Duration::from_secs(STOP_GRACE_SECS + 60),
    );
    assert!(out.status.success(), "podman stop:\n{}", both(&out));
    let stopped = stopping.elapsed();
    let out = podman(
        &["inspect", "--format", "{{.State.ExitCode}}", &serve],
        PODMAN_LIMIT,
    );
    let code = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(code, "0", "the exit code after SIGTERM");
    assert!(
        stopped < Duration::from_secs(STOP_GRACE_SECS),
        "took {stopped:?} to stop (killed at the end of the grace period?)"
    );
}

/// Poll `tools/list` until it names `tool`.
async fn listed(client: &TestClient, tool: &str) {
    loop {
        let tools = client.peer().list_all_tools().await.expect("tools/list");
        if tools.iter().any(|t| t.name == tool) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `everything__echo` with `message`, answered synchronously: its text.
async fn echo(client: &TestClient, message: &str) -> String {
    match client
        .call("everything__echo", json!({ "message": message }))
        .await
        .expect("everything__echo through /mcp")
    {
        CallToolResponse::Complete(result) => serde_json::to_value(&result)
            .expect("a result is JSON")["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        other => panic!("expected a synchronous answer, got {other:?}"),
    }
}
