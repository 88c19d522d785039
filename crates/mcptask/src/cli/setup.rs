//! `mcptask config init` and `mcptask config check`: the first run of a
//! gateway, without reading the whole configuration reference first.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};
use mcptask_client::Transport;

use super::output::outln;
use crate::gateway::config::{AuthMode, Config};

/// A commented `mcptask.toml` that `serve` accepts as it is: SQLite next to
/// the working directory, token auth with a fresh operator token, the bundled demo server
/// as a stdio server to try things with.
pub fn template(operator_token: &str) -> String {
    format!(
        r#"# mcptask gateway configuration. Every key: README.md, "Configuration".

[database]
# Embedded SQLite (relative to the directory `serve` runs in); for several gateways on one store use
# PostgreSQL: url = "postgres://mcptask:PASSWORD@HOST/mcptask"
url = "sqlite:mcptask.db"

[api]
listen = "127.0.0.1:7777"   # the HTTP API, the dashboard (/) and /metrics
auth = "token"              # "none" only for local development

# The operator token sees and acts on every task. Keep it secret; give each
# application a principal token of its own (it sees only its own tasks):
#   [[api.tokens]]
#   token = "…"             # e.g. from `openssl rand -hex 24`
#   principal = "alice"
[[api.tokens]]
token = "{operator_token}"

# The remote MCP servers whose tasks the gateway tracks. Streamable HTTP:
#   [[servers]]
#   name = "reports"
#   url = "https://reports.example.com/mcp"
#   headers = {{ Authorization = "Bearer …" }}
# or stdio (a child process per gateway); the bundled demo server:
[[servers]]
name = "demo"
command = "mcptask"
args = ["demo-server", "--stdio"]

# Every task event, POSTed as signed JSON:
#   [[webhooks]]
#   url = "https://example.com/hooks/mcptask"
#   secret = "…"
"#
    )
}

/// A fresh random token: 48 hex digits (192 bits).
fn fresh_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        &uuid::Uuid::new_v4().simple().to_string()[..16]
    )
}

/// Write the template to `output` (never over an existing file unless
/// `force`), or print it when there is no `output`.
pub fn init(output: Option<&Path>, force: bool) -> anyhow::Result<()> {
    let text = template(&fresh_token());
    let Some(path) = output else {
        super::output::write(format_args!("{text}"));
        return Ok(());
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut file = match options.open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} already exists\n  fix: pass --force to replace it, or choose another --output",
            path.display()
        ),
        other => other.with_context(|| format!("cannot create {}", path.display()))?,
    };
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!(
        "wrote {}: an operator token was generated for you (see [[api.tokens]]); start with `mcptask serve --config {}`",
        path.display(),
        path.display()
    );
    Ok(())
}

/// Validate a configuration file with the environment overrides `serve`
/// would apply, and summarise what `serve` would run.
pub fn check(path: &Path) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    outln!("{}: valid", path.display());
    outln!("  database  {}", mcptask_sql::redact(&config.database.url));
    let principals: Vec<&str> = config
        .api
        .tokens
        .iter()
        .filter_map(|t| t.principal.as_deref())
        .collect();
    let operators = config.api.tokens.len() - principals.len();
    outln!(
        "  api       {} ({})",
        config.api.listen,
        match config.api.auth {
            AuthMode::None => "no authentication: local development only".to_string(),
            AuthMode::Token => format!(
                "{operators} operator token(s); principal tokens: {}",
                if principals.is_empty() {
                    "none".to_string()
                } else {
                    principals.join(", ")
                }
            ),
        }
    );
    for def in config.server_defs() {
        let endpoint = match &def.transport {
            Transport::Http { url, .. } => url.clone(),
            Transport::Stdio { command, args, .. } => {
                format!("stdio: {command} {}", args.join(" "))
            }
        };
        outln!("  server    {}  {}", def.name, endpoint.trim_end());
    }
    if config.servers.is_empty() {
        outln!("  server    (none: add [[servers]] to track remote tasks)");
    }
    for w in &config.webhooks {
        outln!("  webhook   {}", w.url.get_ref());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_is_a_valid_configuration() {
        let token = fresh_token();
        assert_eq!(token.len(), 48);
        let config = Config::parse("mcptask.toml", &template(&token)).unwrap();
        assert_eq!(config.api.auth, AuthMode::Token);
        assert_eq!(config.api.tokens.len(), 1);
        assert_eq!(config.api.tokens[0].token.get_ref(), &token);
        assert_eq!(config.api.tokens[0].principal, None);
        assert_eq!(config.servers.len(), 1);
        assert_ne!(fresh_token(), token);
    }
}
