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
