//! `mcptask`: durable runtime for MCP Tasks (SEP-2663).

// The doc comments of this binary are clap's help text, which names TOML
// tables (`[database]`) and URLs as a terminal shows them, not rustdoc links.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::bare_urls)]

mod cli;
mod demo;
mod telemetry;
mod wiring;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use cli::output::outln;

#[derive(Parser)]
#[command(
    name = "mcptask",
    version,
    about = "Durable runtime for MCP Tasks (SEP-2663)",
    after_help = "Logs go to standard error; MCPTASK_LOG sets the filter (tracing EnvFilter syntax, default \"info,sqlx=warn,rmcp=warn,rmcp::service=error,rmcp::transport::worker=off\"; e.g. MCPTASK_LOG=debug)."
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
        /// KEY=JSON: an answer to input the server asks before it starts the
        /// task (repeatable; a bare object is an accepted form). Without it, a
        /// terminal is asked field by field.
        #[arg(long = "input", value_name = "KEY=JSON")]
        inputs: Vec<String>,
        /// Keep the call (unless --sync) and follow it until it settles: its
        /// id first, then its progress; its questions are asked on a
        /// terminal (otherwise printed with the command that answers them);
        /// a gateway restart is waited out and the same call followed again.
        #[arg(long, visible_alias = "follow")]
        wait: bool,
        /// With --wait: stop waiting after this many seconds (the task goes on; exit code 5).
        #[arg(long, value_name = "SECS", requires = "wait")]
        timeout: Option<u64>,
        /// Print the gateway's JSON (with --wait: the settled task's detail) instead of text.
        #[arg(long)]
        json: bool,
        /// Keep the call as a task whatever the tool: a plain tool runs as
        /// durable work, its progress the task's status (default: the
        /// server's `background` list).
        #[arg(long, conflicts_with = "sync")]
        background: bool,
        /// The synchronous answer where the tool has one, even if the
        /// server lists the tool in `background` (with --wait: its elapsed
        /// time shows while it runs).
        #[arg(long)]
        sync: bool,
        #[command(flatten)]
        gateway: cli::client::GatewayArgs,
    },
    /// List the tools of the configured servers: names, arguments (`*` =
    /// required) and descriptions.
    Tools {
        /// Only this server's tools (its name in mcptask.toml).
        server: Option<String>,
        /// Print the gateway's JSON (with each tool's full input schema).
        #[arg(long)]
        json: bool,
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
    /// The audit trail, newest first: every call's end and every refusal,
    /// with who called, the face, how it ended, why it failed and how long
    /// it took (a principal token sees only its own calls).
    Audit {
        /// Only this principal's calls (an operator token may name any).
        #[arg(long)]
        principal: Option<String>,
        /// Only calls of this server (its name in mcptask.toml).
        #[arg(long)]
        server: Option<String>,
        /// Only calls of this tool.
        #[arg(long)]
        tool: Option<String>,
        /// Only calls that ended this way.
        #[arg(long, value_parser = ["completed", "tool_error", "failed", "cancelled", "refused_policy", "refused_limit"])]
        outcome: Option<String>,
        /// Only entries since this time: RFC 3339, or a while ago (90s, 15m, 2h, 7d).
        #[arg(long)]
        since: Option<String>,
        /// Only entries before this time (as --since).
        #[arg(long)]
        until: Option<String>,
        /// Entries per page (the gateway allows 1-500).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
        limit: u32,
        /// Continue after the page that printed this cursor.
        #[arg(long)]
        cursor: Option<String>,
        /// Print the gateway's JSON page instead of a table.
        #[arg(long)]
        json: bool,
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
    /// Test fixture: a stdio server with a submit/status/cancel toolset.
    #[command(hide = true)]
    FixtureToolset {
        /// The JSON file holding the jobs (created if missing).
        #[arg(long)]
        state: std::path::PathBuf,
        /// How jobs behave when the submit arguments name no mode.
        #[arg(long, default_value = "complete")]
        mode: String,
    },
    /// Authorize mcptask with an upstream server that needs a user
    /// (`[servers.oauth] grant = "authorization_code"`): prints the
    /// authorization URL, takes the redirect on a loopback callback, and
    /// keeps the tokens (sealed) in the database `serve` uses.
    Login {
        /// Server name from mcptask.toml.
        server: String,
        /// Configuration file (the same one `serve` uses).
        #[arg(long, short, env = "MCPTASK_CONFIG", default_value = "mcptask.toml")]
        config: std::path::PathBuf,
        /// Port of the loopback callback (default: the port of the
        /// server's redirect_uri, 8976 unless configured).
        #[arg(long, value_name = "PORT")]
        callback_port: Option<u16>,
        /// Also open the URL in the default browser.
        #[arg(long)]
        open: bool,
        /// sqlite:PATH or postgres://USER@HOST/DB; overrides MCPTASK_DATABASE_URL and [database] url.
        #[arg(long, value_name = "URL")]
        database_url: Option<String>,
    },
    /// Test fixture: the client side of the official MCP conformance suite
    /// (`conformance client --command "mcptask conformance-client"`).
    #[command(hide = true)]
    ConformanceClient {
        /// The server URL the suite passes.
        url: String,
    },
    /// Run the gateway: tracker workers, HTTP API, dashboard and metrics.
    Serve {
        /// Configuration file (see README, Configuration).
        #[arg(long, short, env = "MCPTASK_CONFIG", default_value = "mcptask.toml")]
        config: std::path::PathBuf,
        /// Address of the API, dashboard and metrics; overrides MCPTASK_LISTEN and [api] listen.
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// sqlite:PATH or postgres://USER@HOST/DB; overrides MCPTASK_DATABASE_URL and [database] url.
        #[arg(long, value_name = "URL")]
        database_url: Option<String>,
    },
    /// Serve the configured servers' tools as one MCP server over stdio (for
    /// desktop hosts); every call of a client that declares tasks is durable.
    Proxy {
        /// Serve over stdin/stdout (the only transport here; HTTP is `/mcp`
        /// of `serve` with [proxy] enabled = true).
        #[arg(long)]
        stdio: bool,
        /// Serve this `[[virtual_servers]]` entry only (its selection, to
        /// `[proxy] principal`, which it must admit): `/mcp/<name>` over stdio.
        #[arg(long, value_name = "NAME")]
        server: Option<String>,
        /// Configuration file (see README, Configuration).
        #[arg(long, short, env = "MCPTASK_CONFIG", default_value = "mcptask.toml")]
        config: std::path::PathBuf,
        /// sqlite:PATH or postgres://USER@HOST/DB; overrides MCPTASK_DATABASE_URL and [database] url.
        #[arg(long, value_name = "URL")]
        database_url: Option<String>,
    },
    /// Servers added, replaced and removed while the gateway runs (the
    /// admin API: an operator token). They are kept in the database, every
    /// gateway on it applies them, and the file wins for a name it defines.
    Servers {
        #[command(subcommand)]
        action: ServersCommand,
        #[command(flatten)]
        gateway: cli::client::GatewayArgs,
    },
    /// Virtual servers added, replaced and removed while the gateway runs
    /// (the admin API: an operator token): a named selection of tools,
    /// prompts and resources served at `/mcp/<name>`. Kept in the database
    /// like `servers`; the file wins for a name it defines.
    VirtualServers {
        #[command(subcommand)]
        action: VirtualServersCommand,
        #[command(flatten)]
        gateway: cli::client::GatewayArgs,
    },
    /// Write a starter mcptask.toml, or check one before `serve` runs it.
    Config {
        #[command(subcommand)]
        action: ConfigCommand,
    },
    /// Print a shell completion script: `mcptask completions bash > /etc/bash_completion.d/mcptask`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Apply pending database migrations and exit.
    Migrate {
        /// sqlite:PATH or postgres://USER@HOST/DB
        #[arg(long, env = "MCPTASK_DATABASE_URL", default_value = mcptask_sql::DEFAULT_DATABASE_URL)]
        database_url: String,
        /// Print {"database": URL (password hidden), "applied": N} instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ServersCommand {
    /// Every server in force, with its origin (`file` or `api`) and who set it.
    List {
        /// Print the gateway's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a server, or replace one set through the admin API; it is
    /// checked as the file's [[servers]] entries are, with the same messages.
    Add {
        /// Its name (a name the file defines is refused: the file wins).
        name: String,
        /// Its Streamable HTTP endpoint (stdio servers and [servers.oauth]
        /// read the gateway's host: they are defined in the file).
        #[arg(long)]
        url: Option<String>,
        /// Front tool names are `<prefix>__<tool>` (default: the name).
        #[arg(long)]
        prefix: Option<String>,
        /// Any other [[servers]] keys as a JSON object, e.g. '{"call_timeout_ms": 5000}'.
        #[arg(long, value_name = "JSON")]
        definition: Option<String>,
    },
    /// Remove a server set through the admin API.
    Remove {
        /// Its name.
        name: String,
    },
}

#[derive(Subcommand)]
enum VirtualServersCommand {
    /// Every virtual server in force, with its origin (`file` or `api`) and who set it.
    List {
        /// Print the gateway's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a virtual server, or replace one set through the admin API; it
    /// is checked as the file's [[virtual_servers]] entries are, with the
    /// same messages.
    Add {
        /// Its name: served at /mcp/<name> (a name the file defines is refused: the file wins).
        name: String,
        /// A "server/tool" glob of the tools it offers (repeat for more).
        #[arg(long = "tool", value_name = "GLOB")]
        tools: Vec<String>,
        /// A "server/prompt" glob of the prompts it offers (repeat for more).
        #[arg(long = "prompt", value_name = "GLOB")]
        prompts: Vec<String>,
        /// A "server/uri" glob of the resources it offers (repeat for more).
        #[arg(long = "resource", value_name = "GLOB")]
        resources: Vec<String>,
        /// A principal glob of who may use it (repeat for more; none: anyone the gateway admits).
        #[arg(long = "principal", value_name = "GLOB")]
        principals: Vec<String>,
        /// Its [[virtual_servers]] keys as a JSON object (the flags above replace its lists).
        #[arg(long, value_name = "JSON")]
        definition: Option<String>,
    },
    /// Remove a virtual server set through the admin API.
    Remove {
        /// Its name.
        name: String,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Write a commented configuration with a fresh operator token.
    Init {
        /// Write here instead of printing (never over an existing file without --force).
        #[arg(long, short)]
        output: Option<std::path::PathBuf>,
        /// Replace an existing --output file.
        #[arg(long)]
        force: bool,
    },
    /// Validate a configuration (with the environment overrides `serve`
    /// applies), summarise what `serve` would run, probe each server and
    /// list the live tasks the configuration would fail. Exit code 1 if a
    /// server cannot be reached or a live task would fail.
    Check {
        /// Configuration file.
        #[arg(long, short, env = "MCPTASK_CONFIG", default_value = "mcptask.toml")]
        config: std::path::PathBuf,
        /// Do not contact the servers (validate and read the database only).
        #[arg(long)]
        no_probe: bool,
        /// Print the findings as one JSON object (servers, probes, live tasks that would fail, problems).
        #[arg(long)]
        json: bool,
        /// Compare the file with the configuration in force at this running
        /// gateway (e.g. http://127.0.0.1:7777): what a reload (SIGHUP) would
        /// change, and which live tasks the edit touches. Needs an operator
        /// token: MCPTASK_API_TOKEN, else the file's operator tokens.
        #[arg(long, value_name = "URL")]
        gateway: Option<String>,
    },
    /// Write the running configuration as TOML: the file, then the servers
    /// set through the admin API (those the file does not shadow).
    Export {
        /// Configuration file the gateway runs.
        #[arg(long, short, env = "MCPTASK_CONFIG", default_value = "mcptask.toml")]
        config: std::path::PathBuf,
        /// Write here instead of printing.
        #[arg(long, short)]
        output: Option<std::path::PathBuf>,
        #[command(flatten)]
        gateway: cli::client::GatewayArgs,
    },
}

#[derive(Subcommand)]
enum TasksCommand {
    /// List tasks, newest first.
    List {
        /// Only tasks in this status (the wire status: `completed` includes
        /// tool errors).
        #[arg(long, value_parser = ["working", "input_required", "completed", "failed", "cancelled"])]
        status: Option<String>,
        /// Only calls that ended this way: `tool_error` is a completed call
        /// whose tool said it failed (`isError`), `completed` one that did
        /// not.
        #[arg(long, value_parser = ["completed", "tool_error", "failed", "cancelled"])]
        outcome: Option<String>,
        /// Only tasks of this server (its name in mcptask.toml).
        #[arg(long)]
        server: Option<String>,
        /// Only tasks bound to this principal (an operator token may name any).
        #[arg(long)]
        principal: Option<String>,
        /// Only working / input_required tasks.
        #[arg(long)]
        active: bool,
        /// Tasks per page (newest first; the gateway allows 1-500).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
        limit: u32,
        /// Continue after the page that printed this cursor.
        #[arg(long, conflicts_with = "all")]
        cursor: Option<String>,
        /// Every page, not only the first.
        #[arg(long)]
        all: bool,
        /// Print the gateway's JSON page instead of a table (with --all: every task in one list).
        #[arg(long)]
        json: bool,
    },
    /// Show one task: status, questions, timeline, result.
    Show {
        /// Task id (rt_…), as `tasks list` and `call` print it.
        id: String,
        /// Print the gateway's JSON detail instead of text.
        #[arg(long)]
        json: bool,
        /// Follow it until it settles, as `call --wait` does: progress, its
        /// questions asked on a terminal, a gateway restart waited out.
        #[arg(long, visible_alias = "wait")]
        follow: bool,
        /// With --follow: stop waiting after this many seconds (the task goes on; exit code 5).
        #[arg(long, value_name = "SECS", requires = "follow")]
        timeout: Option<u64>,
    },
    /// Request cancellation.
    Cancel {
        /// Task id (rt_…).
        id: String,
        /// Print the task's JSON as the gateway returns it after the request.
        #[arg(long)]
        json: bool,
    },
    /// Answer an input request: a JSON object (taken as accepted content) or a
    /// full response such as '{"action": "decline"}'.
    Answer {
        /// Task id (rt_…).
        id: String,
        /// The input request's key, as `tasks show` lists it.
        key: String,
        /// A JSON object (the accepted content) or a full response with "action".
        response: String,
        /// Print the gateway's JSON answer (keys stored and ignored).
        #[arg(long)]
        json: bool,
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
        /// At most this many dead letters.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Print the gateway's JSON answer instead of a table.
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
        /// Print the gateway's JSON answer (counts redriven and remaining).
        #[arg(long)]
        json: bool,
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
    /// Owner lease: how long a silent process keeps its tasks before another
    /// replica recovers them (not the gateway's [tracker] lease_ms, which
    /// bounds one worker's claim on one task).
    #[arg(long, default_value_t = 30_000, value_name = "MS", alias = "lease-ms")]
    owner_lease_ms: i64,
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
    #[arg(long, default_value_t = 1024 * 1024, value_name = "BYTES")]
    max_arguments_bytes: usize,
    /// Live tasks this process runs at once; beyond it creates are refused
    /// with -32000 "server busy". 0 means no cap.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    max_live_tasks: usize,
    /// Live tasks of one authenticated principal at once. 0 means no cap.
    #[arg(long, default_value_t = 1_000, value_name = "N")]
    max_live_tasks_per_principal: usize,
    /// Largest accepted HTTP request body, in bytes (the gateway's [api] max_body_bytes default too).
    #[arg(long, default_value_t = mcptask_core::payload::DEFAULT_MAX_BODY_BYTES, value_name = "BYTES")]
    max_body_bytes: usize,
    /// TOKEN=PRINCIPAL: require `Authorization: Bearer TOKEN` and bind its tasks to PRINCIPAL (repeatable).
    #[arg(long = "auth-token", value_name = "TOKEN=PRINCIPAL")]
    auth_tokens: Vec<String>,
    /// Extra allowed Host header values (default: loopback only).
    #[arg(long = "allowed-host")]
    allowed_hosts: Vec<String>,
}

fn main() -> std::process::ExitCode {
    // One TLS provider (ring) for every https:// client and PostgreSQL TLS.
    mcptask_client::tls::install_crypto_provider();
    let cli = Cli::parse();
    // `serve` and `proxy` install theirs once their configuration says
    // whether traces are exported.
    if !matches!(cli.command, Command::Serve { .. } | Command::Proxy { .. })
        && let Err(e) = telemetry::init(None)
    {
        return report(e);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return report(anyhow::Error::new(e).context("cannot start the async runtime")),
    };
    let outcome = runtime.block_on(run(cli));
    // A read of stdin (`proxy --stdio`, stopped by a signal while its host
    // still holds the pipe open) runs on a blocking thread that returns
    // only when a byte or the end comes: dropping the runtime would wait
    // for it for ever. What the command had to finish, it finished in `run`.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    telemetry::shutdown();
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => report(e),
    }
}

/// Print an error the way a user reads it: the message, then each cause on
/// its own line. Never a stack trace, whatever `RUST_BACKTRACE` says: these
/// are errors of input and environment (a typo, an unreachable gateway), not
/// bugs, and a backtrace only buries the one line that names the fix.
fn report(e: anyhow::Error) -> std::process::ExitCode {
    let mut text = format!("error: {e}");
    for cause in e.chain().skip(1) {
        text.push_str(&format!("\n  caused by: {cause}"));
    }
    eprintln!("{text}");
    std::process::ExitCode::from(cli::exit::ERROR as u8)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::DemoServer(args) => demo_server(args).await,
        Command::FixtureToolset { state, mode } => {
            mcptask_demo::toolset_fixture::run(state, mode).await
        }
        Command::ConformanceClient { url } => cli::conformance_client::run(url).await,
        Command::Login {
            server,
            config,
            callback_port,
            open,
            database_url,
        } => cli::login::run(&config, &server, callback_port, open, database_url).await,
        Command::Serve {
            config,
            listen,
            database_url,
        } => {
            let flags = mcptask_gateway::config::Overrides {
                listen: listen.map(|a| a.to_string()),
                database_url,
            };
            wiring::serve(&config, &flags).await
        }
        Command::Proxy {
            stdio,
            server,
            config,
            database_url,
        } => {
            if !stdio {
                anyhow::bail!(
                    "mcptask proxy serves stdio only: add --stdio\n  fix: for HTTP, set [proxy] enabled = true and run `mcptask serve` (MCP at /mcp)"
                );
            }
            let flags = mcptask_gateway::config::Overrides {
                listen: None,
                database_url,
            };
            wiring::proxy_stdio(&config, &flags, server.as_deref()).await
        }
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
            inputs,
            wait,
            timeout,
            json,
            background,
            sync,
            gateway,
        } => {
            let gw = cli::client::GatewayClient::new(&gateway)?;
            let call = cli::commands::CallArgs {
                background: (background || sync).then_some(background),
                server: &server,
                tool: &tool,
                args: &args,
                inputs: &inputs,
                wait: wait.then(|| timeout.map(Duration::from_secs)),
                json,
            };
            exit_with(cli::commands::call(&gw, call).await?)
        }
        Command::Tools {
            server,
            json,
            gateway,
        } => {
            let gw = cli::client::GatewayClient::new(&gateway)?;
            exit_with(cli::tools::list(&gw, server.as_deref(), json).await?)
        }
        Command::Tasks { action, gateway } => {
            let gw = cli::client::GatewayClient::new(&gateway)?;
            let code = match action {
                TasksCommand::List {
                    status,
                    outcome,
                    server,
                    principal,
                    active,
                    limit,
                    cursor,
                    all,
                    json,
                } => {
                    let args = cli::commands::ListArgs {
                        status: status.as_deref(),
                        outcome: outcome.as_deref(),
                        server: server.as_deref(),
                        principal: principal.as_deref(),
                        active,
                        limit,
                        cursor: cursor.as_deref(),
                        all,
                        json,
                    };
                    cli::commands::list(&gw, args).await?
                }
                TasksCommand::Show {
                    id,
                    json,
                    follow,
                    timeout,
                } => {
                    if follow {
                        cli::follow::follow(&gw, &id, timeout.map(Duration::from_secs), json)
                            .await?
                    } else {
                        cli::commands::show(&gw, &id, json).await?
                    }
                }
                TasksCommand::Cancel { id, json } => cli::commands::cancel(&gw, &id, json).await?,
                TasksCommand::Answer {
                    id,
                    key,
                    response,
                    json,
                } => cli::commands::answer(&gw, &id, &key, &response, json).await?,
            };
            exit_with(code)
        }
        Command::Servers { action, gateway } => {
            let gw = cli::client::GatewayClient::new(&gateway)?;
            let code = match action {
                ServersCommand::List { json } => {
                    cli::servers::list(&gw, mcptask_gateway::config::admin::Kind::Server, json)
                        .await?
                }
                ServersCommand::Add {
                    name,
                    url,
                    prefix,
                    definition,
                } => {
                    let add = cli::servers::AddArgs {
                        name: &name,
                        url: url.as_deref(),
                        prefix: prefix.as_deref(),
                        definition: definition.as_deref(),
                    };
                    cli::servers::add(&gw, add).await?
                }
                ServersCommand::Remove { name } => {
                    cli::servers::remove(&gw, mcptask_gateway::config::admin::Kind::Server, &name)
                        .await?
                }
            };
            exit_with(code)
        }
        Command::VirtualServers { action, gateway } => {
            use mcptask_gateway::config::admin::Kind;
            let gw = cli::client::GatewayClient::new(&gateway)?;
            let code = match action {
                VirtualServersCommand::List { json } => {
                    cli::servers::list(&gw, Kind::VirtualServer, json).await?
                }
                VirtualServersCommand::Add {
                    name,
                    tools,
                    prompts,
                    resources,
                    principals,
                    definition,
                } => {
                    let add = cli::servers::AddVirtualArgs {
                        name: &name,
                        tools,
                        prompts,
                        resources,
                        principals,
                        definition: definition.as_deref(),
                    };
                    cli::servers::add_virtual(&gw, add).await?
                }
                VirtualServersCommand::Remove { name } => {
                    cli::servers::remove(&gw, Kind::VirtualServer, &name).await?
                }
            };
            exit_with(code)
        }
        Command::Config { action } => match action {
            ConfigCommand::Init { output, force } => cli::setup::init(output.as_deref(), force),
            ConfigCommand::Export {
                config,
                output,
                gateway,
            } => {
                let gw = cli::client::GatewayClient::new(&gateway)?;
                exit_with(cli::servers::export(&gw, &config, output.as_deref()).await?)
            }
            ConfigCommand::Check {
                config,
                no_probe,
                json,
                gateway,
            } => exit_with(cli::setup::check(&config, !no_probe, json, gateway.as_deref()).await?),
        },
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "mcptask",
                &mut script,
            );
            cli::output::write(format_args!("{}", String::from_utf8_lossy(&script)));
            Ok(())
        }
        Command::Audit {
            principal,
            server,
            tool,
            outcome,
            since,
            until,
            limit,
            cursor,
            json,
            gateway,
        } => {
            let gw = cli::client::GatewayClient::new(&gateway)?;
            let args = cli::audit::AuditArgs {
                principal: principal.as_deref(),
                server: server.as_deref(),
                tool: tool.as_deref(),
                outcome: outcome.as_deref(),
                since: since.as_deref(),
                until: until.as_deref(),
                limit,
                cursor: cursor.as_deref(),
                json,
            };
            exit_with(cli::audit::list(&gw, args).await?)
        }
        Command::DeadLetters { action, gateway } => {
            let gw = cli::client::GatewayClient::new(&gateway)?;
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
                DeadLettersCommand::Redrive { task, target, json } => {
                    cli::dead_letters::redrive(&gw, task.as_deref(), target.as_deref(), json)
                        .await?
                }
            };
            exit_with(code)
        }
        Command::Migrate { database_url, json } => {
            let store = mcptask_sql::open_without_migrating(&database_url).await?;
            let applied = mcptask_sql::migrate(&store, &database_url).await?;
            let database = mcptask_sql::redact(&database_url);
            if json {
                outln!(
                    "{}",
                    serde_json::json!({"database": database, "applied": applied})
                );
            } else {
                outln!("{database}: {applied} migration(s) applied; schema is up to date");
            }
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
        let (token, principal) = pair
            .split_once('=')
            .filter(|(t, s)| !t.is_empty() && !s.is_empty())
            .with_context(|| format!("--auth-token {pair:?}: expected TOKEN=PRINCIPAL"))?;
        tokens.insert(token.to_string(), principal.to_string());
    }
    let config = mcptask_server::RuntimeConfig {
        lease_ms: args.owner_lease_ms,
        recovery_every_ms: args.recovery_every_ms,
        default_ttl_ms: (args.ttl_ms > 0).then_some(args.ttl_ms),
        retention_ms: args.retention_ms,
        max_live_tasks: (args.max_live_tasks > 0).then_some(args.max_live_tasks),
        max_live_tasks_per_principal: (args.max_live_tasks_per_principal > 0)
            .then_some(args.max_live_tasks_per_principal),
        limits: mcptask_core::payload::PayloadLimits {
            max_arguments_bytes: args.max_arguments_bytes,
            ..Default::default()
        },
        ..Default::default()
    };
    let options = mcptask_demo::DemoServerOptions {
        database_url: args.database_url,
        config,
        tokens,
        allowed_hosts: args.allowed_hosts,
        max_body_bytes: args.max_body_bytes,
    };
    wiring::demo_server(options, args.http).await
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// `--help` is the first documentation a user reads: no flag, argument or
    /// command may show up there without a line saying what it is.
    #[test]
    fn every_command_flag_and_argument_has_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                if sub.get_name() == "help" {
                    continue;
                }
                if sub.get_about().is_none() {
                    missing.push(format!("{path} {}", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "mcptask", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }

    /// One body-size default for every listener: a request the demo server
    /// takes must not be refused by a gateway started with defaults.
    #[test]
    fn the_body_size_default_is_the_same_on_every_listener() {
        let cli = super::Cli::command();
        let demo_server = cli.find_subcommand("demo-server").expect("demo-server");
        let flag = demo_server
            .get_arguments()
            .find(|a| a.get_id() == "max_body_bytes")
            .expect("--max-body-bytes");
        let default: usize = flag.get_default_values()[0]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            default,
            mcptask_gateway::config::ApiSection::default().max_body_bytes
        );
    }

    /// `--lease-ms` meant the server's owner lease on one command and the
    /// tracker's claim lease in the config: each now has its own name.
    #[test]
    fn the_owner_lease_flag_is_not_called_lease_ms() {
        let cli = super::Cli::command();
        let demo_server = cli.find_subcommand("demo-server").expect("demo-server");
        let longs: Vec<_> = demo_server
            .get_arguments()
            .filter_map(|a| a.get_long())
            .collect();
        assert!(longs.contains(&"owner-lease-ms"), "{longs:?}");
        assert!(!longs.contains(&"lease-ms"), "{longs:?}");
    }
}
