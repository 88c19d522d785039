//! `mcptask serve` processes: the command line, their `mcptask.toml`, and a
//! running gateway with its own config directory and API tokens.

use std::time::Duration;

use tokio::process::Command;

use crate::api::Api;
use crate::bin;
use crate::process::LoggedChild;

/// Tokens of the gateways under test (each at least 16 characters, as `config::weak_token` requires).
pub const OPERATOR: &str = "operator-token-0123456789";
pub const ALICE: &str = "alice-token-0123456789";
pub const BOB: &str = "bob-token-0123456789";

/// What `mcptask serve` logs when a reload put the file in force…
pub const RELOADED: &str = "configuration reloaded";
/// … and when it refused it (the configuration in force stays).
pub const RELOAD_REFUSED: &str = "configuration reload refused";

/// The line `mcptask serve` prints once its API listens.
pub const GATEWAY_LISTENING: &str = "mcptask gateway listening on ";

/// Start `mcptask serve --config PATH` (tracker workers of a gateway) and
/// wait until it listens. Killed (SIGKILL) on drop.
pub async fn start_gateway(name: &str, config: &std::path::Path) -> LoggedChild {
    let (gateway, _api) = LoggedChild::spawn(
        name,
        serve_command(config),
        GATEWAY_LISTENING,
        Duration::from_secs(60),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    gateway
}

/// `mcptask serve --config PATH`, isolated from the caller's MCPTASK_* environment.
pub fn serve_command(config: &std::path::Path) -> Command {
    let mut command = Command::new(bin());
    command
        .arg("serve")
        .arg("--config")
        .arg(config)
        .env("MCPTASK_LOG", "info,sqlx=warn,rmcp=warn")
        .env_remove("MCPTASK_CONFIG")
        .env_remove("MCPTASK_DATABASE_URL")
        .env_remove("MCPTASK_LISTEN")
        .env_remove("MCPTASK_AUTH")
        .env_remove("MCPTASK_API_TOKEN")
        .env_remove("MCPTASK_OPERATOR_TOKEN");
    // A developer's collector settings must not turn export on in tests.
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_TRACES_EXPORTER",
        "OTEL_SDK_DISABLED",
        "OTEL_SERVICE_NAME",
    ] {
        command.env_remove(var);
    }
    command
}

/// `mcptask proxy --stdio --config PATH`, in the config's directory, quiet
/// (warnings only) and killed on drop: the child a desktop host spawns.
pub fn proxy_stdio_command(config: &std::path::Path) -> Command {
    let mut command = Command::new(bin());
    command
        .args(["proxy", "--stdio", "--config"])
        .arg(config)
        .current_dir(config.parent().expect("config directory"))
        .env("MCPTASK_LOG", "warn")
        .env_remove("MCPTASK_CONFIG")
        .env_remove("MCPTASK_DATABASE_URL")
        .kill_on_drop(true);
    command
}

/// `mcptask.toml` for a gateway: no API auth, an ephemeral API port, the
/// given servers (name, Streamable HTTP URL), one signed webhook and raw
/// `[tracker]` lines.
pub fn gateway_config(
    database_url: &str,
    servers: &[(&str, &str)],
    webhook_url: &str,
    secret: &str,
    tracker: &str,
) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a TOML basic string");
    let mut text = format!(
        "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n[tracker]\n{}\n",
        q(database_url),
        tracker.trim()
    );
    for (name, url) in servers {
        text.push_str(&format!(
            "\n[[servers]]\nname = {}\nurl = {}\n",
            q(name),
            q(url)
        ));
    }
    text.push_str(&format!(
        "\n[[webhooks]]\nurl = {}\nsecret = {}\ntimeout_ms = 5000\n",
        q(webhook_url),
        q(secret)
    ));
    text
}

// ---------------------------------------------------------------------------
// Configuration

/// What goes into the gateway's `mcptask.toml`.
#[derive(Debug, Clone)]
pub struct GatewaySpec {
    pub database_url: String,
    /// `auth = "none"` instead of tokens.
    pub auth_none: bool,
    /// `(token, principal)`; no principal = operator token.
    pub tokens: Vec<(String, Option<String>)>,
    pub max_body_bytes: Option<usize>,
    /// `(name, Streamable HTTP URL)`.
    pub servers: Vec<(String, String)>,
}

impl GatewaySpec {
    /// Token auth with an operator token and two principal tokens (alice, bob).
    pub fn with_tokens(database_url: &str, servers: &[(&str, &str)]) -> Self {
        GatewaySpec {
            database_url: database_url.to_string(),
            auth_none: false,
            tokens: vec![
                (OPERATOR.into(), None),
                (ALICE.into(), Some("alice".into())),
                (BOB.into(), Some("bob".into())),
            ],
            max_body_bytes: None,
            servers: servers
                .iter()
                .map(|(n, u)| (n.to_string(), u.to_string()))
                .collect(),
        }
    }

    /// `auth = "none"`.
    pub fn open(database_url: &str, servers: &[(&str, &str)]) -> Self {
        GatewaySpec {
            auth_none: true,
            tokens: Vec::new(),
            ..Self::with_tokens(database_url, servers)
        }
    }

    /// The TOML text. The tracker polls briskly (also while input is
    /// required) so that tests see changes within a second or two.
    pub fn toml(&self) -> String {
        let q = |s: &str| serde_json::to_string(s).expect("a TOML basic string");
        let mut t = format!(
            "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = {}\n",
            q(&self.database_url),
            if self.auth_none {
                "\"none\""
            } else {
                "\"token\""
            }
        );
        if let Some(n) = self.max_body_bytes {
            t.push_str(&format!("max_body_bytes = {n}\n"));
        }
        for (token, principal) in &self.tokens {
            t.push_str(&format!("\n[[api.tokens]]\ntoken = {}\n", q(token)));
            if let Some(p) = principal {
                t.push_str(&format!("principal = {}\n", q(p)));
            }
        }
        t.push_str(
            "\n[tracker]\npoll_default_ms = 250\npoll_min_ms = 100\npoll_max_ms = 1000\ninput_required_poll_ms = 250\nbackoff_base_ms = 100\nbackoff_max_ms = 1000\n",
        );
        for (name, url) in &self.servers {
            t.push_str(&format!(
                "\n[[servers]]\nname = {}\nurl = {}\n",
                q(name),
                q(url)
            ));
        }
        t
    }
}

// ---------------------------------------------------------------------------
// The gateway process

/// A running `mcptask serve` process with its own config directory. Killed
/// (SIGKILL) on drop; on a failing test its log is printed.
pub struct GatewayProcess {
    process: LoggedChild,
    /// `http://127.0.0.1:PORT` (no trailing slash)
    pub base: String,
    _dir: tempfile::TempDir,
}

impl GatewayProcess {
    /// A 2026-07-28 client of this gateway's MCP front (`/mcp`) that
    /// declares tasks.
    pub async fn front_client(&self) -> crate::mcp::TestClient {
        crate::mcp::TestClient::http(
            &format!("{}/mcp", self.base),
            None,
            crate::mcp::Lifecycle::Modern { tasks: true },
        )
        .await
        .expect("connect to /mcp")
    }

    /// Write `spec` to `mcptask.toml` in a fresh directory, start `mcptask
    /// serve --config` there and wait until it listens.
    pub async fn start(name: &str, spec: &GatewaySpec) -> GatewayProcess {
        Self::start_with_env(name, spec, &[]).await
    }

    /// [`GatewayProcess::start`] with extra environment variables for `serve`.
    pub async fn start_with_env(
        name: &str,
        spec: &GatewaySpec,
        env: &[(&str, &str)],
    ) -> GatewayProcess {
        Self::start_toml(name, &spec.toml(), env).await
    }

    /// [`GatewayProcess::start_with_env`] with the configuration's whole text
    /// (an empty value in `env` unsets that variable).
    pub async fn start_toml(name: &str, toml: &str, env: &[(&str, &str)]) -> GatewayProcess {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::start_toml_in(name, toml, env, dir).await
    }

    /// [`GatewayProcess::start_toml`] in `dir`, which the test filled first
    /// (e.g. the state files of stdio upstreams named by relative paths):
    /// `mcptask.toml` is written there and `serve` runs there; the
    /// directory lives as long as the process does.
    pub async fn start_toml_in(
        name: &str,
        toml: &str,
        env: &[(&str, &str)],
        dir: tempfile::TempDir,
    ) -> GatewayProcess {
        let config = dir.path().join("mcptask.toml");
        std::fs::write(&config, toml).expect("write mcptask.toml");
        let mut command = serve_command(&config);
        command.current_dir(dir.path());
        for (key, value) in env {
            // An empty value unsets the variable: the binary's default.
            if value.is_empty() {
                command.env_remove(key);
            } else {
                command.env(key, value);
            }
        }
        let (process, url) =
            LoggedChild::spawn(name, command, GATEWAY_LISTENING, Duration::from_secs(60))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        let base = url.trim_end_matches('/').to_string();
        assert!(
            base.starts_with("http://127.0.0.1:"),
            "unexpected listen line: {base:?}"
        );
        GatewayProcess {
            process,
            base,
            _dir: dir,
        }
    }

    /// The process's stderr so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Whether a line containing `needle` reaches its log within `within`
    /// ([`LoggedChild::logged_within`](crate::process::LoggedChild::logged_within)).
    pub async fn logged_within(&self, needle: &str, within: Duration) -> bool {
        self.process.logged_within(needle, within).await
    }

    /// Its process id (its stdio upstreams are its children).
    pub fn pid(&self) -> u32 {
        self.process.pid
    }

    /// Its `mcptask.toml`.
    pub fn config_path(&self) -> std::path::PathBuf {
        self._dir.path().join("mcptask.toml")
    }

    /// Its directory (the working directory of `serve`).
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// Send SIGHUP (reload the configuration) without waiting.
    pub fn sighup(&self) {
        crate::process::sighup(self.process.pid);
    }

    /// Write `toml` as its configuration, send SIGHUP and wait (at most
    /// 60 s) until the gateway logs the outcome: `Ok(line)` when it put the
    /// file in force, `Err(line)` when it refused it.
    pub async fn reload(&self, toml: &str) -> Result<String, String> {
        std::fs::write(self.config_path(), toml).expect("write mcptask.toml");
        let before = self.reload_lines().len();
        self.sighup();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(line) = self.reload_lines().into_iter().nth(before) {
                return if line.contains(RELOADED) {
                    Ok(line)
                } else {
                    Err(line)
                };
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no reload outcome logged within 60 s; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn reload_lines(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains(RELOADED) || l.contains(RELOAD_REFUSED))
            .map(str::to_string)
            .collect()
    }

    /// SIGKILL the gateway (no drain, no claim released) and reap it.
    pub async fn kill(&mut self) {
        self.process.kill().await;
    }

    /// Send SIGTERM (a clean stop: the gateway drains) without waiting.
    pub fn sigterm(&self) {
        self.process.sigterm();
    }

    /// Wait (at most [`crate::WAIT`]) until the process ends on its own (a
    /// crash point), reap it and return how it ended.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(crate::WAIT, self.process.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the gateway still runs; log:\n{}", self.log()))
            .expect("reap the gateway")
    }

    /// A client sending `Authorization: Bearer TOKEN` (or nothing).
    pub fn client(&self, token: Option<&str>) -> Api {
        Api::new(&self.base, token)
    }
}
