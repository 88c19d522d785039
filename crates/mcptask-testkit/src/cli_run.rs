//! The CLI as a user's shell runs it against a running gateway, and the
//! smallest stack to run it against.

use std::process::{Command, Output, Stdio};

use crate::{DemoServer, GatewayProcess, GatewaySpec, TestDatabase, bin};

/// `mcptask ARGS…` against `gateway` with `token` as its credential, with
/// what a Rust user's shell commonly exports (`RUST_BACKTRACE=1`) and no
/// terminal on standard input; run off the async runtime.
pub async fn run_cli(gateway: &str, token: &str, args: &[&str]) -> Output {
    let (gateway, token) = (gateway.to_string(), token.to_string());
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(bin())
            .args(&args)
            .env("MCPTASK_GATEWAY", gateway)
            .env("MCPTASK_API_TOKEN", token)
            .env("MCPTASK_LOG", "warn")
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .output()
            .expect("run mcptask")
    })
    .await
    .expect("the mcptask thread")
}

/// A demo server (`demo`) and a gateway with the test tokens in front of it,
/// each on a SQLite file of its own.
pub struct DemoStack {
    pub server: DemoServer,
    pub gateway: GatewayProcess,
    _databases: (TestDatabase, TestDatabase),
}

impl DemoStack {
    pub async fn start() -> DemoStack {
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        let server = DemoServer::start(&server_db.url, &[]).await;
        let gateway = GatewayProcess::start(
            "gateway",
            &GatewaySpec::with_tokens(&gateway_db.url, &[("demo", &server.url)]),
        )
        .await;
        DemoStack {
            server,
            gateway,
            _databases: (server_db, gateway_db),
        }
    }
}

/// `mcptask ARGS…` left running while the test watches what it writes and
/// types what it is asked: either with piped output ([`LiveCli::piped`],
/// as in a script or a CI log) or in a pseudo-terminal
/// ([`LiveCli::in_terminal`], as a person at a terminal runs it). Killed on
/// drop.
pub struct LiveCli {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    /// Standard output so far (in a terminal: everything the terminal showed).
    stdout: std::sync::Arc<std::sync::Mutex<String>>,
    /// Standard error so far (in a terminal: empty, merged into stdout).
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    /// The tasks collecting both; they end when the CLI's output ends.
    readers: Vec<tokio::task::JoinHandle<()>>,
}

/// Where `script` (util-linux) lives: it gives a command a pseudo-terminal.
const SCRIPT: &str = "/usr/bin/script";

impl LiveCli {
    /// Run with standard input, output and error piped (no terminal).
    pub fn piped(gateway: &str, token: &str, args: &[&str]) -> LiveCli {
        let mut command = tokio::process::Command::new(bin());
        command.args(args);
        Self::spawn(command, gateway, token)
    }

    /// Run in a pseudo-terminal: standard input, output and error are a
    /// terminal (through util-linux's `script`), so the CLI behaves as it
    /// does for a person. `None`, with a note, where `script` is missing
    /// (outside CI only: there its absence fails the test).
    pub fn in_terminal(gateway: &str, token: &str, args: &[&str]) -> Option<LiveCli> {
        if !std::path::Path::new(SCRIPT).exists() {
            assert!(
                std::env::var("CI").is_err(),
                "{SCRIPT} (util-linux) is needed for the terminal tests"
            );
            eprintln!("SKIPPED: no {SCRIPT} to give the CLI a terminal");
            return None;
        }
        let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
        let line = std::iter::once(bin())
            .chain(args.iter().copied())
            .map(quote)
            .collect::<Vec<_>>()
            .join(" ");
        let mut command = tokio::process::Command::new(SCRIPT);
        command.args(["-qfec", &line, "/dev/null"]);
        Some(Self::spawn(command, gateway, token))
    }

    fn spawn(mut command: tokio::process::Command, gateway: &str, token: &str) -> LiveCli {
        let mut child = command
            .env("MCPTASK_GATEWAY", gateway)
            .env("MCPTASK_API_TOKEN", token)
            .env("MCPTASK_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("run mcptask");
        let collect = |mut from: Box<dyn tokio::io::AsyncRead + Unpin + Send>| {
            let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
            let into = seen.clone();
            let reader = tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = tokio::io::AsyncReadExt::read(&mut from, &mut buf).await {
                    if n == 0 {
                        break;
                    }
                    into.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
            (seen, reader)
        };
        let (stdout, out_reader) = collect(Box::new(child.stdout.take().expect("piped stdout")));
        let (stderr, err_reader) = collect(Box::new(child.stderr.take().expect("piped stderr")));
        LiveCli {
            stdin: child.stdin.take(),
            child,
            stdout,
            stderr,
            readers: vec![out_reader, err_reader],
        }
    }

    /// Standard output so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Standard error so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Everything written so far (standard output, then standard error).
    pub fn seen(&self) -> String {
        format!("{}{}", self.stdout(), self.stderr())
    }

    /// Wait (at most [`crate::WAIT`]) until `needle` has been written; what
    /// was written after its first occurrence. Fails the test, showing what
    /// was written, if it never comes (at once if the CLI has ended).
    pub async fn wait_for(&mut self, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + crate::WAIT;
        loop {
            let ended = self.child.try_wait().expect("the CLI's status");
            if ended.is_some() {
                self.read_to_end().await;
            }
            let seen = self.seen();
            if let Some(at) = seen.find(needle) {
                return seen[at + needle.len()..].to_string();
            }
            if let Some(status) = ended {
                panic!("{needle:?} was never written: the CLI ended ({status}); it wrote:\n{seen}");
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{needle:?} was never written; the CLI wrote:\n{seen}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Collect what the ended CLI wrote, to the end of its output.
    async fn read_to_end(&mut self) {
        for reader in self.readers.drain(..) {
            let _ = tokio::time::timeout(crate::WAIT, reader).await;
        }
    }

    /// Type `line` and Enter.
    pub async fn type_line(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt;
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("type into the CLI");
        stdin.flush().await.expect("type into the CLI");
    }

    /// Wait (at most [`crate::WAIT`]) until the CLI exits; its exit code.
    pub async fn exit_code(&mut self) -> Option<i32> {
        let status = tokio::time::timeout(crate::WAIT, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the CLI still runs; it wrote:\n{}", self.seen()))
            .expect("reap the CLI");
        self.read_to_end().await;
        status.code()
    }
}
