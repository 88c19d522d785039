//! nginx (Debian's binary, a real process) as the load balancer before the
//! replicas under test, configured as docs/DEPLOY.md ("Rolling updates")
//! tells a team to: kept-alive upstream connections that nginx closes
//! before a draining replica would, and `proxy_next_upstream error
//! timeout`, which moves a request to the next replica only when none of
//! it reached the first (a refused connection), so a POST is never sent
//! twice.
//!
//! Everything nginx writes (configuration, pid, logs, temporary files)
//! stays in its own temporary directory; it listens on an ephemeral
//! loopback port. A machine without nginx skips the test loudly; under
//! `CI=true` that fails it (`.ci/run` installs Debian's `nginx`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::process::free_port;

/// How long nginx keeps an idle upstream connection: shorter than a
/// draining replica's wait for its clients to close theirs (5 s), so
/// nginx, not the replica, closes it and no request races the close.
pub const UPSTREAM_KEEPALIVE_TIMEOUT: &str = "2s";

/// A running nginx; stopped (SIGKILL: one process, `master_process off`)
/// on drop.
pub struct Nginx {
    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub base: String,
    child: Child,
    dir: tempfile::TempDir,
}

/// The nginx binary: on `PATH`, or Debian's `/usr/sbin/nginx` (not on a
/// non-root `PATH`).
pub fn find() -> Result<PathBuf, String> {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join("nginx"))
        .chain([PathBuf::from("/usr/sbin/nginx")]);
    for candidate in on_path {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err("no nginx binary on PATH or at /usr/sbin/nginx".into())
}

impl Nginx {
    /// nginx balancing (round-robin) over `127.0.0.1:PORT` for each of
    /// `ports`, or `None` after a loud SKIPPED line naming `test` when
    /// nginx is not installed (under `CI=true`: a failure instead).
    pub async fn start(test: &str, ports: &[u16]) -> Option<Nginx> {
        let binary = crate::peers::or_skip_with("nginx", test, "apt-get install nginx", find())?;
        // The port was free a moment ago; another process may take it
        // first, so a failed bind is tried again on another.
        let mut last = String::new();
        for _ in 0..5 {
            match Self::start_on(&binary, free_port(), ports).await {
                Ok(nginx) => return Some(nginx),
                Err(why) => last = why,
            }
        }
        panic!("nginx did not start: {last}");
    }

    async fn start_on(binary: &Path, port: u16, upstreams: &[u16]) -> Result<Nginx, String> {
        let dir = tempfile::tempdir().expect("nginx's directory");
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config(dir.path(), port, upstreams)).expect("write nginx.conf");
        let mut child = Command::new(binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            // Before the configuration is read, nginx opens the compiled-in
            // error log; `-e` keeps that in the directory too.
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "nginx exited ({status}); error.log:\n{}",
                    read(&dir.path().join("error.log"))
                ));
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(Nginx {
                    base: format!("http://127.0.0.1:{port}"),
                    child,
                    dir,
                });
            }
            if tokio::time::Instant::now() > deadline {
                return Err("nginx did not listen within 10 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// nginx's error log: connections refused by a replica, retries on the
    /// next one.
    pub fn error_log(&self) -> String {
        read(&self.dir.path().join("error.log"))
    }

    /// One line per request: `status upstream_addr upstream_status
    /// request_time method uri msec`; `upstream_addr` lists every replica
    /// tried (`a, b` when the first refused), `upstream_status` each one's
    /// status, and `msec` is when the answer was sent (Unix seconds with
    /// milliseconds; the request began `request_time` seconds before).
    pub fn access_log(&self) -> String {
        read(&self.dir.path().join("access.log"))
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if std::thread::panicking() {
            eprintln!("----- nginx error.log -----\n{}\n-----", self.error_log());
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The configuration: one process in the foreground, everything under
/// `dir`, listening on `port`, balancing over `upstreams`.
fn config(dir: &Path, port: u16, upstreams: &[u16]) -> String {
    let d = dir.display();
    let servers: String = upstreams
        .iter()
        // A refused replica is left out for a second, not nginx's default
        // ten: a restarted one is back in the rotation soon after it is
        // ready.
        .map(|p| format!("    server 127.0.0.1:{p} max_fails=1 fail_timeout=1s;\n"))
        .collect();
    format!(
        r#"daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  log_format replicas '$status $upstream_addr $upstream_status $request_time $request_method $uri $msec';
  access_log {d}/access.log replicas;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  upstream replicas {{
{servers}    keepalive 32;
    keepalive_timeout {UPSTREAM_KEEPALIVE_TIMEOUT};
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://replicas;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_buffering off;
      proxy_next_upstream error timeout;
      proxy_connect_timeout 2s;
      proxy_read_timeout 60s;
    }}
  }}
}}
"#
    )
}
