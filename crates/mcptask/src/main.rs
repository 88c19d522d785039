//! `mcptask`: durable runtime for MCP Tasks (SEP-2663).

mod cli;
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
    /// Start the demo server and the gateway on the embedded SQLite file, run
    /// three tasks end to end, then keep serving the dashboard.
    Demo {
        /// Exit once the three demo tasks have settled.
        #[arg(long)]
        once: bool,
        /// sqlite:PATH or postgres://USER@HOST/DB
        #[arg(long, env = "MCPTASK_DATABASE_URL", default_value = mcptask_sql::DEFAULT_DATABASE_URL)]
        database_url: String,
        /// Address of the dashboard and API (a free port is used if it is busy).
        #[arg(long, default_value = "127.0.0.1:7777")]
        listen: SocketAddr,
    },
    /// Call a tool through the gateway; with --wait, follow the task to the end.
    Call {
        /// Server name from mcptask.toml.
        server: String,
        /// Tool name.
        tool: String,
        /// Arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// Follow the task with a live progress line until it settles.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        gateway: cli::client::GatewayArgs,
    },
    /// Inspect and act on tracked tasks.
    Tasks {
        #[command(subcommand)]
        action: TasksCommand,
        #[command(flatten)]
        gateway: cli::client::GatewayArgs,
    },
    /// Events a webhook gave up on: list them, or redrive them once it is fixed.
    DeadLetters {
        #[command(subcommand)]
        action: DeadLettersCommand,
        #[command(flatten)]
        gateway: cli::client::GatewayArgs,
    },
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

#[derive(Subcommand)]
enum TasksCommand {
    /// List tasks, newest first.
    List {
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        server: Option<String>,
        /// Only working / input_required tasks.
        #[arg(long)]
        active: bool,
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
    /// Show one task: status, questions, timeline, result.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
        /// Follow it with a live progress line until it settles.
        #[arg(long)]
        follow: bool,
    },
    /// Request cancellation.
    Cancel { id: String },
    /// Answer an input request: a JSON object (taken as accepted content) or a
    /// full response such as '{"action": "decline"}'.
    Answer {
        id: String,
        key: String,
        response: String,
    },
}

#[derive(Subcommand)]
enum DeadLettersCommand {
    /// List dead letters, newest first (operator token).
    List {
        /// Only this task's.
        #[arg(long)]
        task: Option<String>,
        /// Only this target's (e.g. "webhook https://hooks.example.com/mcptask").
        #[arg(long)]
        target: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
    /// Deliver dead letters again, with a fresh retry budget (operator token).
    Redrive {
        /// Only this task's.
        #[arg(long)]
        task: Option<String>,
        /// Only this target's.
        #[arg(long)]
        target: Option<String>,
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
        Command::Demo {
            once,
            database_url,
            listen,
        } => {
            demo::walkthrough::run(demo::walkthrough::DemoArgs {
                database_url,
                listen,
                once,
            })
            .await
        }
        Command::Call {
            server,
            tool,
            args,
            wait,
            gateway,
        } => {
            let gw = cli::client::Gateway::new(&gateway)?;
            exit_with(cli::commands::call(&gw, &server, &tool, &args, wait).await?)
        }
        Command::Tasks { action, gateway } => {
            let gw = cli::client::Gateway::new(&gateway)?;
            let code = match action {
                TasksCommand::List {
                    status,
                    server,
                    active,
                    limit,
                    json,
                } => {
                    cli::commands::list(
                        &gw,
                        status.as_deref(),
                        server.as_deref(),
                        active,
                        limit,
                        json,
                    )
                    .await?
                }
                TasksCommand::Show { id, json, follow } => {
                    if follow {
                        cli::commands::follow(&gw, &id).await?
                    } else {
                        cli::commands::show(&gw, &id, json).await?
                    }
                }
                TasksCommand::Cancel { id } => cli::commands::cancel(&gw, &id).await?,
                TasksCommand::Answer { id, key, response } => {
                    cli::commands::answer(&gw, &id, &key, &response).await?
                }
            };
            exit_with(code)
        }
        Command::DeadLetters { action, gateway } => {
            let gw = cli::client::Gateway::new(&gateway)?;
            let code = match action {
                DeadLettersCommand::List {
                    task,
                    target,
                    limit,
                    json,
                } => {
                    cli::dead_letters::list(&gw, task.as_deref(), target.as_deref(), limit, json)
                        .await?
                }
                DeadLettersCommand::Redrive { task, target } => {
                    cli::dead_letters::redrive(&gw, task.as_deref(), target.as_deref()).await?
                }
            };
            exit_with(code)
        }
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

fn exit_with(code: i32) -> anyhow::Result<()> {
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
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
