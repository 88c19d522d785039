//! `mcptask`: durable runtime for MCP Tasks (SEP-2663).

mod demo;
mod gateway;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "mcptask",
    version,
    about = "Durable runtime for MCP Tasks (SEP-2663)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the bundled demo MCP server (conformance fixtures + demo tools).
    DemoServer(DemoServerArgs),
    /// Run the gateway: tracker workers, HTTP API, dashboard and metrics.
    Serve {
        /// Configuration file (see README, Configuration).
        #[arg(long, short, env = "MCPTASK_CONFIG", default_value = "mcptask.toml")]
        config: std::path::PathBuf,
    },
    /// Apply pending database migrations and exit.
    Migrate {
        /// sqlite:PATH or postgres://USER@HOST/DB
        #[arg(long, env = "MCPTASK_DATABASE_URL", default_value = mcptask_sql::DEFAULT_DATABASE_URL)]
        database_url: String,
    },
}

#[derive(clap::Args)]
struct DemoServerArgs {
    /// Serve Streamable HTTP at http://ADDR/mcp (e.g. 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR", conflicts_with = "stdio")]
    http: Option<SocketAddr>,
    /// Serve over stdin/stdout.
    #[arg(long)]
    stdio: bool,
    /// sqlite:PATH or postgres://USER@HOST/DB
    #[arg(long, env = "MCPTASK_DATABASE_URL", default_value = mcptask_sql::DEFAULT_DATABASE_URL)]
    database_url: String,
    /// Owner lease: how long before another replica recovers this process's tasks.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    lease_ms: i64,
    /// How often to look for tasks of dead replicas.
    #[arg(long, default_value_t = 5_000, value_name = "MS")]
    recovery_every_ms: i64,
    /// Default task TTL; 0 means unlimited.
    #[arg(long, default_value_t = 3_600_000, value_name = "MS")]
    ttl_ms: i64,
    /// How long settled or expired tasks stay readable after their TTL.
    #[arg(long, default_value_t = 3_600_000, value_name = "MS")]
    retention_ms: i64,
    /// Largest accepted tool arguments, in bytes.
    #[arg(long, default_value_t = 1024 * 1024)]
    max_arguments_bytes: usize,
    /// Largest accepted HTTP request body, in bytes.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    max_body_bytes: usize,
    /// TOKEN=SUBJECT: require `Authorization: Bearer TOKEN` and bind tasks to SUBJECT (repeatable).
    #[arg(long = "auth-token", value_name = "TOKEN=SUBJECT")]
    auth_tokens: Vec<String>,
    /// Extra allowed Host header values (default: loopback only).
    #[arg(long = "allowed-host")]
    allowed_hosts: Vec<String>,
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MCPTASK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn,rmcp=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logging();
    let cli = Cli::parse();
    match cli.command {
        Command::DemoServer(args) => demo_server(args).await,
        Command::Serve { config } => gateway::run(&config).await,
        Command::Migrate { database_url } => {
            let store = mcptask_sql::open_without_migrating(&database_url).await?;
            let applied = mcptask_sql::migrate(&store, &database_url).await?;
            println!(
                "{}: {applied} migration(s) applied; schema is up to date",
                mcptask_sql::redact(&database_url)
            );
            Ok(())
        }
    }
}

async fn demo_server(args: DemoServerArgs) -> anyhow::Result<()> {
    if args.http.is_none() && !args.stdio {
        bail!("choose a transport: --http 127.0.0.1:PORT or --stdio");
    }
    let mut tokens = HashMap::new();
    for pair in &args.auth_tokens {
        let (token, subject) = pair
            .split_once('=')
            .filter(|(t, s)| !t.is_empty() && !s.is_empty())
            .with_context(|| format!("--auth-token {pair:?}: expected TOKEN=SUBJECT"))?;
        tokens.insert(token.to_string(), subject.to_string());
    }
    let config = mcptask_server::RuntimeConfig {
        lease_ms: args.lease_ms,
        recovery_every_ms: args.recovery_every_ms,
        default_ttl_ms: (args.ttl_ms > 0).then_some(args.ttl_ms),
        retention_ms: args.retention_ms,
        limits: mcptask_core::payload::PayloadLimits {
            max_arguments_bytes: args.max_arguments_bytes,
            ..Default::default()
        },
        ..Default::default()
    };
    demo::server::run(demo::server::DemoServerOptions {
        database_url: args.database_url,
        http: args.http,
        config,
        tokens,
        allowed_hosts: args.allowed_hosts,
        max_body_bytes: args.max_body_bytes,
        shutdown_grace: Duration::from_secs(10),
    })
    .await
}
