//! podman for the image test: commands with a deadline and the run flags this
//! host needs, and a guard that removes every container, volume and image a
//! test made, whether it passes or fails.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use mcptask_testkit::in_ci;

/// `podman --version`, or why podman cannot be used.
pub fn version() -> Result<String, String> {
    let out = Command::new("podman")
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run podman: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "podman --version failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Podman's version, or `None` after a loud SKIPPED line naming `test`
/// (outside CI; under `CI=true` a missing podman fails the test).
pub fn podman_or_skip(test: &str) -> Option<String> {
    match version() {
        Ok(v) => Some(v),
        Err(reason) if in_ci() => panic!(
            "the container image test is required under CI: {reason}; apt-get install podman buildah runc"
        ),
        Err(reason) => {
            eprintln!(
                "SKIPPED ({test}: no podman): {reason} — apt-get install podman buildah runc"
            );
            None
        }
    }
}

/// Flags of `podman run` on this host: runc when installed (the runtime
/// `.ci/run` installs), and open-file and process limits within this
/// process's hard limits (podman's defaults exceed them on small CI hosts,
/// where the container then fails to start).
pub fn run_flags() -> Vec<String> {
    let mut flags = Vec::new();
    if which("runc") {
        flags.extend(["--runtime".to_string(), "runc".to_string()]);
    }
    let (nofile, nproc) = hard_limits();
    let nofile = nofile.min(8192);
    let nproc = nproc.min(4096);
    flags.push(format!("--ulimit=nofile={nofile}:{nofile}"));
    flags.push(format!("--ulimit=nproc={nproc}:{nproc}"));
    flags
}

/// This process's hard limits of open files and processes.
fn hard_limits() -> (u64, u64) {
    let mut nofile = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let mut nproc = nofile;
    // SAFETY: getrlimit(2) writes one rlimit into the struct it is given.
    let rc = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut nofile)
            | libc::getrlimit(libc::RLIMIT_NPROC, &mut nproc)
    };
    assert_eq!(rc, 0, "getrlimit: {}", std::io::Error::last_os_error());
    (nofile.rlim_max, nproc.rlim_max)
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Run `podman ARGS` to its end, or panic after `limit` (the guard then
/// removes whatever it left running).
pub fn podman(args: &[&str], limit: Duration) -> Output {
    let mut command = Command::new("podman");
    command.args(args);
    run(command, limit)
}

/// Run `command` to its end with its output captured, or kill it and panic
/// after `limit`.
pub fn run(mut command: Command, limit: Duration) -> Output {
    let shown = format!("{command:?}");
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(output) => output.unwrap_or_else(|e| panic!("{shown}: {e}")),
        Err(_) => {
            // SAFETY: kill(2) of the child this function started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{shown} did not finish within {limit:?}");
        }
    }
}

/// `output`'s standard output and error, for messages.
pub fn both(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Names unique to one test run, and their removal on drop. A failing test
/// first gets the logs of its containers.
pub struct Made {
    /// Distinguishes this run's names from any other run's on the host.
    pub id: String,
    containers: Vec<String>,
    volumes: Vec<String>,
    images: Vec<String>,
}

impl Made {
    pub fn new() -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        Made {
            id,
            containers: Vec::new(),
            volumes: Vec::new(),
            images: Vec::new(),
        }
    }

    /// A container name this guard removes.
    pub fn container(&mut self, role: &str) -> String {
        let name = format!("mcptask-test-{}-{role}", self.id);
        self.containers.push(name.clone());
        name
    }

    /// A volume name this guard removes.
    pub fn volume(&mut self, role: &str) -> String {
        let name = format!("mcptask-test-{}-{role}", self.id);
        self.volumes.push(name.clone());
        name
    }

    /// An image tag this guard removes.
    pub fn image(&mut self, role: &str) -> String {
        let tag = format!("localhost/mcptask-test-{}:{role}", self.id);
        self.images.push(tag.clone());
        tag
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        let limit = Duration::from_secs(60);
        let quiet = |args: &[&str]| {
            let started = Instant::now();
            let mut command = Command::new("podman");
            command
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // Bounded like everything else: a wedged podman must not hang the run.
            if let Ok(mut child) = command.spawn() {
                while started.elapsed() < limit {
                    if let Ok(Some(_)) = child.try_wait() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        };
        if std::thread::panicking() {
            for name in &self.containers {
                if let Ok(out) = Command::new("podman").args(["logs", name]).output() {
                    eprintln!("----- podman logs {name} -----\n{}-----", both(&out));
                }
            }
        }
        for name in &self.containers {
            // --volumes: the anonymous volume of VOLUME /data too.
            quiet(&["rm", "--force", "--volumes", "--time", "0", name]);
        }
        for name in &self.volumes {
            quiet(&["volume", "rm", "--force", name]);
        }
        // Newest first: an image built on another goes before its base.
        for tag in self.images.iter().rev() {
            quiet(&["rmi", "--force", tag]);
        }
    }
}
