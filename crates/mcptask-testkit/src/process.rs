//! Child processes whose stderr is kept (and printed when a test fails),
//! free ports, and signals sent by pid: SIGKILL, SIGTERM, SIGSTOP/SIGCONT.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A child process whose stderr is drained (and kept) for its whole life.
pub struct LoggedChild {
    pub child: Child,
    pub pid: u32,
    pub name: String,
    log: Arc<Mutex<Vec<String>>>,
}

/// Spawn `command` with stderr piped and drained into a shared log, and wait
/// until it prints a line starting with `ready`. Returns the child, its pid,
/// the log and the rest of the ready line, or the log when the process exits
/// (or stays silent) first.
async fn spawn_logged(
    name: &str,
    mut command: Command,
    stdin: Stdio,
    ready: &str,
    within: Duration,
) -> Result<(Child, u32, Arc<Mutex<Vec<String>>>, String), String> {
    command
        .stdin(stdin)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|e| format!("{name}: cannot spawn: {e}"))?;
    let pid = child.id().expect("pid of a fresh child");
    let stderr = child.stderr.take().expect("piped stderr");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (found_tx, found_rx) = tokio::sync::oneshot::channel::<String>();
    let ready = ready.to_string();
    tokio::spawn({
        let log = log.clone();
        async move {
            let mut found = Some(found_tx);
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.strip_prefix(ready.as_str())
                    && let Some(tx) = found.take()
                {
                    let _ = tx.send(rest.trim().to_string());
                }
                log.lock().unwrap().push(line);
            }
        }
    });
    let joined = |log: &Arc<Mutex<Vec<String>>>| log.lock().unwrap().join("\n");
    match tokio::time::timeout(within, found_rx).await {
        Ok(Ok(rest)) => Ok((child, pid, log, rest)),
        Ok(Err(_)) => {
            let status = child.wait().await;
            Err(format!(
                "{name}: exited before it was ready ({status:?}); log:\n{}",
                joined(&log)
            ))
        }
        Err(_) => Err(format!(
            "{name}: not ready within {within:?}; log:\n{}",
            joined(&log)
        )),
    }
}

impl LoggedChild {
    /// Spawn `command` and wait for its `ready` line (see `spawn_logged`);
    /// returns the process and the rest of that line.
    pub async fn spawn(
        name: &str,
        command: Command,
        ready: &str,
        within: Duration,
    ) -> Result<(LoggedChild, String), String> {
        let (child, pid, log, rest) =
            spawn_logged(name, command, Stdio::null(), ready, within).await?;
        Ok((
            LoggedChild {
                child,
                pid,
                name: name.to_string(),
                log,
            },
            rest,
        ))
    }

    /// [`LoggedChild::spawn`] with the child's stdin piped (taken out of
    /// `child`): a process that reads its input, e.g. `proxy --stdio`.
    pub async fn spawn_with_stdin(
        name: &str,
        command: Command,
        ready: &str,
        within: Duration,
    ) -> Result<(LoggedChild, tokio::process::ChildStdin), String> {
        let (mut child, pid, log, _) =
            spawn_logged(name, command, Stdio::piped(), ready, within).await?;
        let stdin = child.stdin.take().expect("piped stdin");
        let child = LoggedChild {
            child,
            pid,
            name: name.to_string(),
            log,
        };
        Ok((child, stdin))
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Whether a line containing `needle` reaches the log within `within`.
    /// The process answers before its stderr is read here, so a line it
    /// wrote while answering may arrive a moment after the answer.
    pub async fn logged_within(&self, needle: &str, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.count_lines(needle) > 0 {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lines of the log containing `needle`.
    pub fn count_lines(&self, needle: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, without waiting: a clean stop (the process drains).
    pub fn sigterm(&self) {
        sigterm(self.pid);
    }

    /// SIGKILL (no shutdown, no claim release) and reap; asserts death by signal 9.
    pub async fn kill(&mut self) {
        self.child.start_kill().expect("send SIGKILL");
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not die after SIGKILL", self.name))
            .expect("wait for the killed process");
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt as _;
            assert_eq!(
                status.signal(),
                Some(9),
                "{}: expected death by SIGKILL, got {status:?}; log:\n{}",
                self.name,
                self.log()
            );
        }
    }
}

impl Drop for LoggedChild {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if std::thread::panicking() {
            let log = self.log();
            // The tail is what matters; a chaos run's full log is long.
            let tail: Vec<&str> = log.lines().rev().take(200).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            eprintln!(
                "----- log of {} (pid {}, last {} lines) -----\n{}\n-----",
                self.name,
                self.pid,
                tail.len(),
                tail.join("\n")
            );
        }
    }
}

/// A port on 127.0.0.1 that was free a moment ago (for servers that must
/// come back on the same address).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// Send `signal` to `pid` (a process this test started, directly or
/// not), asserting it was delivered; `name` is how `kill -NAME` spells it.
fn send(pid: u32, signal: libc::c_int, name: &str) {
    // SAFETY: kill(2) with a pid we own and a valid signal number.
    let rc = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(
        rc,
        0,
        "kill -{name} {pid}: {}",
        std::io::Error::last_os_error()
    );
}

/// SIGKILL a process by pid (one this test started, directly or through a
/// tracker's stdio transport).
pub fn sigkill(pid: u32) {
    send(pid, libc::SIGKILL, "9");
}

/// SIGTERM a process by pid: the stop an orchestrator sends first.
pub fn sigterm(pid: u32) {
    send(pid, libc::SIGTERM, "TERM");
}

/// Pids of live (not zombie) child processes of this test process whose
/// command line contains `marker`.
pub fn children_with(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    live_processes()
        .into_iter()
        .filter(|p| p.ppid == me && p.cmdline.contains(marker))
        .map(|p| p.pid)
        .collect()
}

/// Pids of live (not zombie) descendants of `root` (children, their
/// children, …) whose command line contains `marker`: e.g. the stdio
/// upstream a gateway this test started spawned.
pub fn descendants_with(root: u32, marker: &str) -> Vec<u32> {
    let all = live_processes();
    let mut family = vec![root];
    let mut grew = true;
    while grew {
        grew = false;
        for p in &all {
            if family.contains(&p.ppid) && !family.contains(&p.pid) {
                family.push(p.pid);
                grew = true;
            }
        }
    }
    all.into_iter()
        .filter(|p| p.pid != root && family.contains(&p.pid) && p.cmdline.contains(marker))
        .map(|p| p.pid)
        .collect()
}

/// A live process as `/proc` shows it.
struct ProcEntry {
    pid: u32,
    ppid: u32,
    cmdline: String,
}

/// Every live (not zombie) process in `/proc`.
fn live_processes() -> Vec<ProcEntry> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid …": comm may contain spaces, so split after ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let ppid: u32 = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if state == "Z" {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        found.push(ProcEntry {
            pid,
            ppid,
            cmdline: String::from_utf8_lossy(&cmdline).into_owned(),
        });
    }
    found
}

/// SIGSTOP a process: it holds its claims and connections but does nothing,
/// like a process stalled by the scheduler or a long GC pause.
pub fn freeze(pid: u32) {
    send(pid, libc::SIGSTOP, "STOP");
}

/// SIGCONT a process stopped by [`freeze`].
pub fn thaw(pid: u32) {
    send(pid, libc::SIGCONT, "CONT");
}

/// SIGHUP a process (`mcptask serve` and `proxy --stdio` reload their
/// configuration on it).
pub fn sighup(pid: u32) {
    send(pid, libc::SIGHUP, "HUP");
}
