//! The container image as a user runs it: `deploy/build-image` packs the
//! binary this test build made (no release build here: CI stays short) with
//! its shared libraries into a `FROM scratch` image, which must run
//! `mcptask demo --once` to the end and `mcptask serve` with its defaults
//! (listening on 0.0.0.0:7777, SQLite in the /data volume, as user 65532):
//! `/healthz` and `/readyz` answer 200 from the host through a published
//! loopback port, the operator token comes from the environment, SIGTERM
//! stops it cleanly, and the database stays in the volume.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mcptask_testkit::{free_port, repo_root};

use crate::podman::{Made, both, podman, podman_or_skip, run, run_flags};
use crate::probe::{get, wait_for};

/// Staging the context and `podman build` (a debug binary is ~100 MB).
const BUILD_LIMIT: Duration = Duration::from_secs(300);
/// `demo --once`: three tasks, the slowest 3 s.
const DEMO_LIMIT: Duration = Duration::from_secs(180);
/// From `podman run -d` to `/healthz` and `/readyz` answering.
const READY_LIMIT: Duration = Duration::from_secs(90);
/// `podman stop` grace: the gateway drains within 20 s (docs/DEPLOY.md).
const STOP_GRACE_SECS: u64 = 30;
/// Other podman commands (inspect, volume create, rm).
const PODMAN_LIMIT: Duration = Duration::from_secs(120);

#[test]
fn the_image_runs_the_demo_and_serves_probes_from_its_volume() {
    let Some(podman_version) = podman_or_skip("deploy image") else {
        return;
    };
    let binary = Path::new(env!("CARGO_BIN_EXE_mcptask"));
    let mut made = Made::new();
    let image = made.image("deploy");

    // Build: the script stages rootfs/ (binary, libraries, CA store, user)
    // and runs `podman build` on deploy/Containerfile.
    let mut build = Command::new(repo_root().join("deploy/build-image"));
    build.args(["--engine", "podman", "--tag", &image, "--binary"]);
    build.arg(binary);
    let started = Instant::now();
    let built = run(build, BUILD_LIMIT);
    assert!(
        built.status.success(),
        "deploy/build-image failed:\n{}",
        both(&built)
    );
    let build_time = started.elapsed();

    let inspect = podman(
        &[
            "image",
            "inspect",
            "--format",
            "{{.Size}}|{{.Config.User}}|{{.Config.WorkingDir}}|{{json .Config.ExposedPorts}}|{{json .Config.Volumes}}",
            &image,
        ],
        PODMAN_LIMIT,
    );
    assert!(inspect.status.success(), "{}", both(&inspect));
    let inspect = String::from_utf8_lossy(&inspect.stdout).trim().to_string();
    let fields: Vec<&str> = inspect.split('|').collect();
    let [size, user, workdir, ports, volumes] = fields[..] else {
        panic!("unexpected podman image inspect output {inspect:?}");
    };
    assert_eq!(user, "65532:65532", "the image runs as a non-root user");
    assert_eq!(workdir, "/data");
    assert!(ports.contains("7777/tcp"), "EXPOSE 7777: {ports}");
    assert!(volumes.contains("/data"), "VOLUME /data: {volumes}");
    let size: u64 = size.parse().expect("image size in bytes");
    let binary_size = std::fs::metadata(binary).expect("the binary").len();
    eprintln!(
        "deploy: image {image} built in {:.1} s with {podman_version}: {:.1} MB \
         (of which the {} binary {:.1} MB)",
        build_time.as_secs_f64(),
        size as f64 / 1e6,
        binary.display(),
        binary_size as f64 / 1e6,
    );

    let flags = run_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();

    // `demo --once`: demo server and gateway in the container, three tasks
    // end to end, on sqlite:mcptask.db in the working directory /data.
    let demo = made.container("demo");
    let started = Instant::now();
    let out = podman(
        &[
            &["run", "--name", &demo],
            &flags[..],
            &[&image, "demo", "--once"],
        ]
        .concat(),
        DEMO_LIMIT,
    );
    let text = both(&out);
    assert!(out.status.success(), "demo --once failed:\n{text}");
    assert!(
        text.contains("All three tasks settled") && text.contains("[3/3] cancelled"),
        "demo --once did not settle its three tasks:\n{text}"
    );
    eprintln!(
        "deploy: demo --once passed in the container in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // `serve` with the image's defaults, the operator token from the
    // environment, the port published on the host's loopback only.
    let token = format!("op-token-{}", made.id);
    let volume = made.volume("data");
    let out = podman(&["volume", "create", &volume], PODMAN_LIMIT);
    assert!(out.status.success(), "{}", both(&out));
    let serve = made.container("serve");
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:7777");
    let mount = format!("{volume}:/data");
    let env = format!("MCPTASK_OPERATOR_TOKEN={token}");
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
    assert!(out.status.success(), "podman run serve:\n{}", both(&out));
    let started = Instant::now();
    wait_for(port, "/healthz", READY_LIMIT);
    wait_for(port, "/readyz", READY_LIMIT);
    eprintln!(
        "deploy: serve answered /healthz and /readyz with 200 on 127.0.0.1:{port} after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(get(port, "/api/v1/tasks", None).map(|(s, _)| s), Ok(401));
    let (status, body) = get(port, "/api/v1/tasks", Some(&token)).expect("GET /api/v1/tasks");
    assert_eq!(
        status, 200,
        "the operator token from the environment: {body}"
    );

    // SIGTERM: a clean exit well within the grace period.
    let started = Instant::now();
    let grace = STOP_GRACE_SECS.to_string();
    let out = podman(
        &["stop", "--time", &grace, &serve],
        Duration::from_secs(STOP_GRACE_SECS + 60),
    );
    assert!(out.status.success(), "podman stop:\n{}", both(&out));
    let stopped = started.elapsed();
    let out = podman(
        &["inspect", "--format", "{{.State.ExitCode}}", &serve],
        PODMAN_LIMIT,
    );
    let code = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(code, "0", "serve's exit code after SIGTERM");
    assert!(
        stopped < Duration::from_secs(STOP_GRACE_SECS),
        "serve took {stopped:?} to stop (killed at the end of the grace period?)"
    );
    eprintln!(
        "deploy: serve stopped on SIGTERM with exit code 0 in {:.1} s",
        stopped.as_secs_f64()
    );

    // The database is /data/mcptask.db in the volume: a later container
    // finds it there with every migration applied.
    let again = made.container("migrate");
    let out = podman(
        &[
            &["run", "--name", &again][..],
            &flags[..],
            &["--volume", &mount, &image, "migrate", "--json"],
        ]
        .concat(),
        PODMAN_LIMIT,
    );
    let text = both(&out);
    assert!(out.status.success(), "migrate in the volume:\n{text}");
    assert!(
        text.contains(r#""applied":0"#),
        "the volume should hold serve's migrated database:\n{text}"
    );
}
