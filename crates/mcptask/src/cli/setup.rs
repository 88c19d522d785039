//! `mcptask config init` and `mcptask config check`: the first run of a
//! gateway, without reading the whole configuration reference first.

use std::io::Write;
use std::path::Path;

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use mcptask_client::remote::Timeouts;
use mcptask_client::{Cursor, ListFilter, ServerDef, ServerRegistry, Transport};

use super::output::outln;
use mcptask_gateway::config::{AuthMode, Config};

/// A commented `mcptask.toml` that `serve` accepts as it is: SQLite next to
/// the working directory, token auth with a fresh operator token, the bundled demo server
/// as a stdio server to try things with.
pub fn template(operator_token: &str, key_file: Option<&str>) -> String {
    let oauth = match key_file {
        Some(file) => format!(
            "# The OAuth tokens of [servers.oauth] servers are kept sealed in the database\n# with this key (MCPTASK_SECRET_KEY wins over it). Keep it secret, and back it up:\n[oauth]\nsecret_key_file = \"{file}\"\n"
        ),
        None => "# The OAuth tokens of [servers.oauth] servers are kept sealed in the database\n# with MCPTASK_SECRET_KEY (`openssl rand -base64 32`), or a key file:\n#   [oauth]\n#   secret_key_file = \"mcptask-secret.key\"\n".to_string(),
    };
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
# or with OAuth 2.1 (docs/AUTHORIZATION.md):
#   [servers.oauth]
#   grant = "client_credentials"          # or "authorization_code", then `mcptask login reports`
#   client_id = "mcptask"
#   client_secret_env = "REPORTS_CLIENT_SECRET"
# or stdio (a child process per gateway); the bundled demo server, keeping
# its own tasks in a file of its own:
[[servers]]
name = "demo"
command = "mcptask"
args = ["demo-server", "--stdio", "--database-url", "sqlite:mcptask-demo-server.db"]

# Every task event, POSTed as signed JSON:
#   [[webhooks]]
#   url = "https://example.com/hooks/mcptask"
#   secret = "…"

{oauth}"#
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
    let Some(path) = output else {
        let text = template(&fresh_token(), None);
        super::output::write(format_args!("{text}"));
        return Ok(());
    };
    // The key that seals stored OAuth tokens, next to the configuration
    // (an existing key is kept: tokens sealed with it stay readable).
    const KEY_FILE: &str = "mcptask-secret.key";
    let key_path = path.parent().unwrap_or(Path::new(".")).join(KEY_FILE);
    let text = template(&fresh_token(), Some(KEY_FILE));
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    // It holds the operator token: readable by its owner only.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = match options.open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} already exists\n  fix: pass --force to replace it, or choose another --output",
            path.display()
        ),
        other => other.with_context(|| format!("cannot create {}", path.display()))?,
    };
    // A file replaced with --force keeps its old mode unless told.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot make {} private", path.display()))?;
    }
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    if !key_path.exists() {
        let key = mcptask_client::oauth::SecretKey::generate().map_err(anyhow::Error::msg)?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut key_file = options
            .open(&key_path)
            .with_context(|| format!("cannot create {}", key_path.display()))?;
        key_file
            .write_all(format!("{}\n", key.to_base64()).as_bytes())
            .with_context(|| format!("cannot write {}", key_path.display()))?;
        eprintln!(
            "wrote {}: the key that seals OAuth tokens in the database (keep it secret)",
            key_path.display()
        );
    }
    eprintln!(
        "wrote {}: an operator token was generated for you (see [[api.tokens]]); start with `mcptask serve --config {}`",
        path.display(),
        path.display()
    );
    Ok(())
}

/// Validate a configuration file with the environment overrides `serve`
/// would apply, and summarise what `serve` would run. Unless `probe` is
/// false, also contact each server (connect and list its tools, bounded by
/// the configured timeouts); and read the configured database (without
/// migrating it) for live tasks that this configuration would fail: tasks of
/// a server that is no longer configured, or whose endpoint changed since
/// they started. Returns exit code 0 when all is well, 1 otherwise (after a
/// summary of what is wrong). With `json`, the same findings are printed as
/// one JSON object (a configuration that does not load is still an error
/// message, as for every command).
pub async fn check(
    path: &Path,
    probe: bool,
    json: bool,
    gateway: Option<&str>,
) -> anyhow::Result<i32> {
    let config = Config::load(path)?;
    let say = |line: String| {
        if !json {
            outln!("{line}");
        }
    };
    let mut report = serde_json::json!({
        "config": path.display().to_string(),
        "valid": true,
        "database": mcptask_sql::redact(&config.database.url),
        "listen": config.api.listen.to_string(),
    });
    say(format!("{}: valid", path.display()));
    say(format!(
        "  database  {}",
        mcptask_sql::redact(&config.database.url)
    ));
    let principals: Vec<&str> = config
        .api
        .tokens
        .iter()
        .filter_map(|t| t.principal.as_deref())
        .collect();
    let operators = config.api.tokens.len() - principals.len();
    report["auth"] = serde_json::json!(match config.api.auth {
        AuthMode::None => serde_json::json!({"mode": "none"}),
        AuthMode::Token => serde_json::json!({
            "mode": "token",
            "operatorTokens": operators,
            "principals": principals,
        }),
    });
    say(format!(
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
    ));
    // OAuth servers are probed with the tokens `serve` would use (those
    // `mcptask login` stored), when the database and the key are at hand.
    let oauth = if probe && config.uses_oauth() {
        check_oauth_runtime(&config).await
    } else {
        None
    };
    let defs = config.server_defs_with(oauth.as_ref());
    let probes = if probe {
        probe_servers(&config, &defs).await
    } else {
        vec![None; defs.len()]
    };
    let mut unreachable = 0;
    let mut servers = Vec::new();
    for (def, probed) in defs.iter().zip(probes) {
        let endpoint = match &def.transport {
            Transport::Http { url, .. } => url.clone(),
            Transport::Stdio { command, args, .. } => {
                format!("stdio: {command} {}", args.join(" "))
            }
        };
        let endpoint = endpoint.trim_end().to_string();
        let (outcome, probe_json) = match probed {
            None => (String::new(), serde_json::Value::Null),
            Some(Ok(n)) => (
                format!("  (ok, {n} tools)"),
                serde_json::json!({"ok": true, "tools": n}),
            ),
            Some(Err(e)) => {
                unreachable += 1;
                let json = serde_json::json!({"ok": false, "error": e});
                (format!("  (error: {e})"), json)
            }
        };
        say(format!("  server    {}  {endpoint}{outcome}", def.name));
        servers
            .push(serde_json::json!({"name": def.name, "endpoint": endpoint, "probe": probe_json}));
    }
    report["servers"] = serde_json::json!(servers);
    if config.servers.is_empty() {
        say("  server    (none: add [[servers]] to track remote tasks)".into());
    }
    for w in &config.webhooks {
        say(format!("  webhook   {}", w.url.get_ref()));
    }
    report["webhooks"] = serde_json::json!(
        config
            .webhooks
            .iter()
            .map(|w| w.url.get_ref().clone())
            .collect::<Vec<_>>()
    );
    let mut problems = Vec::new();
    let stranded = match live_tasks_that_would_fail(&config, &defs).await {
        Ok(found) => {
            for line in found.lines() {
                say(line);
            }
            report["tasks"] = found.to_json();
            found.count()
        }
        Err(e) => {
            say(format!("  tasks     cannot be read: {e:#}"));
            report["tasks"] = serde_json::json!({"error": format!("{e:#}")});
            problems.push(
                "the database cannot be read; `serve` would fail to start with it".to_string(),
            );
            0
        }
    };
    if let Some(url) = gateway {
        match reload_preview(url, path, &config).await {
            Ok(preview) => {
                for line in preview.lines() {
                    say(line);
                }
                report["reload"] = preview.to_json(url);
            }
            Err(e) => {
                say(format!(
                    "  reload    cannot read the configuration in force at {url}: {e:#}"
                ));
                report["reload"] = serde_json::json!({"gateway": url, "error": format!("{e:#}")});
                problems.push(format!(
                    "the configuration in force at {url} cannot be read"
                ));
            }
        }
    }
    if unreachable > 0 {
        problems.push(format!(
            "{unreachable} server(s) could not be reached (their calls would fail until they can)"
        ));
    }
    if stranded > 0 {
        problems.push(format!(
            "{stranded} live task(s) would fail at their next step (see above; restore the server's definition to keep them)"
        ));
    }
    report["problems"] = serde_json::json!(problems);
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    }
    if problems.is_empty() {
        return Ok(super::exit::OK);
    }
    eprintln!("config check: {}", problems.join("; "));
    Ok(super::exit::ERROR)
}

/// The OAuth runtime `serve` would have: the configured database (not
/// migrated, not created) and key; `None` (tokens in memory) when either
/// is missing.
async fn check_oauth_runtime(config: &Config) -> Option<mcptask_client::oauth::OAuthRuntime> {
    let url = &config.database.url;
    if sqlite_file(url).is_some_and(|f| !f.exists()) {
        return None;
    }
    let key = config.secret_key(|k| std::env::var(k).ok()).ok()??;
    let store = mcptask_sql::open_without_migrating(url).await.ok()?;
    // A database not migrated yet has no token table: probe without it.
    store.oauth_tokens().load_token("").await.ok()?;
    Some(mcptask_client::oauth::OAuthRuntime::new(
        store.oauth_tokens(),
        key,
        std::sync::Arc::new(mcptask_client::SystemClock),
    ))
}

/// Contact each server (connect and `tools/list`) at once, each bounded by
/// its connect and call timeouts: the number of tools or the cause.
async fn probe_servers(config: &Config, defs: &[ServerDef]) -> Vec<Option<Result<usize, String>>> {
    let registry = ServerRegistry::new();
    for def in defs {
        registry.upsert(def.clone());
    }
    let bounds = Timeouts {
        connect: config.tracker.connect_timeout,
        call: config.tracker.call_timeout,
    };
    let probes = defs.iter().map(|def| {
        let registry = registry.clone();
        async move {
            Some(
                registry
                    .list_tools(&def.name, bounds)
                    .await
                    .map(|tools| tools.len())
                    .map_err(|e| e.to_string()),
            )
        }
    });
    // The registry logs a failing server as "degraded ... retried within
    // their error budget": true of `serve`, misleading here, where the
    // probe's own line already names the cause.
    tracing::instrument::WithSubscriber::with_subscriber(
        futures::future::join_all(probes),
        tracing::subscriber::NoSubscriber::default(),
    )
    .await
}

/// What the configured database holds that this configuration would fail.
struct LiveTasks {
    /// A SQLite file that does not exist yet (nothing to fail).
    missing_file: Option<std::path::PathBuf>,
    live: usize,
    /// (server, why) -> ids, in server order.
    stranded: BTreeMap<(String, &'static str), Vec<String>>,
}

impl LiveTasks {
    fn count(&self) -> usize {
        self.stranded.values().map(Vec::len).sum()
    }

    fn lines(&self) -> Vec<String> {
        if let Some(file) = &self.missing_file {
            return vec![format!(
                "  tasks     none: {} does not exist yet (`serve` creates it)",
                file.display()
            )];
        }
        let count = self.count();
        let mut lines = vec![format!(
            "  tasks     {} live (working or input_required); {}",
            self.live,
            if count == 0 {
                "none would fail".to_string()
            } else {
                format!("{count} would fail:")
            }
        )];
        for ((server, why), ids) in &self.stranded {
            let shown: Vec<&str> = ids.iter().take(SHOWN_IDS).map(String::as_str).collect();
            let more = ids.len().saturating_sub(SHOWN_IDS);
            lines.push(format!(
                "    {server}: {} task(s), {why}: {}{}",
                ids.len(),
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        lines
    }

    fn to_json(&self) -> serde_json::Value {
        let groups: Vec<_> = self
            .stranded
            .iter()
            .map(|((server, why), ids)| {
                serde_json::json!({"server": server, "reason": why, "count": ids.len(), "ids": ids})
            })
            .collect();
        serde_json::json!({
            "databaseExists": self.missing_file.is_none(),
            "live": self.live,
            "wouldFail": groups,
        })
    }
}

/// Find the live tasks (working / input_required) of the configured database
/// that `serve` with this configuration would fail, grouped per server. The
/// database is opened without migrating it; a SQLite file that does not
/// exist yet is reported, not created.
async fn live_tasks_that_would_fail(
    config: &Config,
    defs: &[ServerDef],
) -> anyhow::Result<LiveTasks> {
    let url = &config.database.url;
    let mut found = LiveTasks {
        missing_file: None,
        live: 0,
        stranded: BTreeMap::new(),
    };
    if let Some(file) = sqlite_file(url)
        && !file.exists()
    {
        found.missing_file = Some(file);
        return Ok(found);
    }
    let store = mcptask_sql::open_without_migrating(url)
        .await
        .with_context(|| format!("opening the database {}", mcptask_sql::redact(url)))?;
    let tasks = store.remote_tasks();
    let filter = ListFilter {
        active_only: true,
        ..Default::default()
    };
    let mut cursor: Option<Cursor> = None;
    loop {
        let page = tasks
            .list_remote(&filter, cursor.as_ref(), PAGE)
            .await
            .context("listing the live tasks (has this database been migrated? `mcptask migrate` or `serve` does it)")?;
        found.live += page.len();
        for task in &page {
            let why = match defs.iter().find(|d| d.name == task.server) {
                None => "the server is no longer configured",
                Some(def) if !def.pins(&task.server_hash) => {
                    "the server's endpoint changed since they started"
                }
                Some(_) => continue,
            };
            found
                .stranded
                .entry((task.server.clone(), why))
                .or_default()
                .push(task.id.clone());
        }
        match page.last() {
            Some(last) if page.len() as i64 == PAGE => {
                cursor = Some(Cursor {
                    created_at: last.created_at,
                    id: last.id.clone(),
                })
            }
            _ => break,
        }
    }
    store.close().await;
    Ok(found)
}

/// What reloading this configuration into a running gateway would change,
/// and the live tasks the edit touches.
struct ReloadPreview {
    changes: mcptask_gateway::Changes,
    /// (what happens, ids), in a stable order.
    affected: BTreeMap<String, Vec<String>>,
}

impl ReloadPreview {
    fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.changes.is_empty() {
            lines.push(
                "  reload    nothing would change (the file is what the gateway runs)".into(),
            );
            return lines;
        }
        lines.push("  reload    would change (SIGHUP to the gateway):".into());
        for line in self.changes.lines() {
            lines.push(format!("    {line}"));
        }
        for (what, ids) in &self.affected {
            let shown: Vec<&str> = ids.iter().take(SHOWN_IDS).map(String::as_str).collect();
            let more = ids.len().saturating_sub(SHOWN_IDS);
            lines.push(format!(
                "    live tasks: {} {what}: {}{}",
                ids.len(),
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        lines
    }

    fn to_json(&self, url: &str) -> serde_json::Value {
        let affected: Vec<_> = self
            .affected
            .iter()
            .map(|(what, ids)| serde_json::json!({"effect": what, "count": ids.len(), "ids": ids}))
            .collect();
        serde_json::json!({
            "gateway": url,
            "changes": self.changes,
            "lines": self.changes.lines(),
            "affectedTasks": affected,
        })
    }
}

/// The fingerprint of the configuration in force at `url`
/// (`GET /api/v1/config`, an operator's): with `MCPTASK_API_TOKEN`, else
/// the operator tokens of the file being checked, else none.
async fn running_fingerprint(
    url: &str,
    config: &Config,
) -> anyhow::Result<mcptask_gateway::Fingerprint> {
    let http = mcptask_client::tls::build_http_client(|| {
        reqwest::Client::builder().timeout(std::time::Duration::from_secs(10))
    })
    .context("building the HTTP client")?;
    let mut tokens: Vec<Option<String>> = Vec::new();
    if let Ok(token) = std::env::var("MCPTASK_API_TOKEN") {
        tokens.push(Some(token));
    }
    tokens.extend(
        config
            .api
            .tokens
            .iter()
            .filter(|t| t.principal.is_none())
            .map(|t| Some(t.token.get_ref().clone())),
    );
    tokens.push(None);
    let endpoint = format!("{}/api/v1/config", url.trim_end_matches('/'));
    let mut last = String::new();
    for token in tokens {
        let mut request = http.get(&endpoint);
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {endpoint}"))?;
        let status = response.status();
        if status.is_success() {
            let body: serde_json::Value = response.json().await?;
            return serde_json::from_value(body["fingerprint"].clone())
                .context("the gateway's answer is not a configuration fingerprint");
        }
        last = format!("{status}: {}", response.text().await.unwrap_or_default());
        if status != reqwest::StatusCode::UNAUTHORIZED && status != reqwest::StatusCode::FORBIDDEN {
            break;
        }
    }
    bail!("{endpoint} answered {last} (an operator token is needed: MCPTASK_API_TOKEN)")
}

/// The servers the admin API stored in the database at `url` (none in a
/// SQLite file that does not exist yet).
async fn admin_entries(url: &str) -> anyhow::Result<Vec<mcptask_core::admin::AdminEntry>> {
    if sqlite_file(url).is_some_and(|f| !f.exists()) {
        return Ok(Vec::new());
    }
    let store = mcptask_sql::open_without_migrating(url)
        .await
        .with_context(|| format!("opening the database {}", mcptask_sql::redact(url)))?;
    let entries = store
        .admin_config()
        .list_admin_entries()
        .await
        .context("reading the servers stored by the admin API");
    store.close().await;
    entries
}

async fn reload_preview(url: &str, path: &Path, file: &Config) -> anyhow::Result<ReloadPreview> {
    use mcptask_gateway::live::ServerChange;
    let running = running_fingerprint(url, file).await?;
    // A reload reads the servers the admin API stored as well as the file:
    // the preview compares what it would put in force.
    let stored = admin_entries(&file.database.url).await?;
    let with_stored = Config::load_with_admin(path, |k| std::env::var(k).ok(), &stored)?;
    let config = &with_stored;
    let changes =
        mcptask_gateway::Changes::between(&running, &mcptask_gateway::Fingerprint::of(config));
    let mut preview = ReloadPreview {
        changes,
        affected: BTreeMap::new(),
    };
    let url_db = &config.database.url;
    if preview.changes.is_empty() || sqlite_file(url_db).is_some_and(|f| !f.exists()) {
        return Ok(preview);
    }
    let store = mcptask_sql::open_without_migrating(url_db)
        .await
        .with_context(|| format!("opening the database {}", mcptask_sql::redact(url_db)))?;
    let policy = config.policy();
    let tasks = store.remote_tasks();
    let filter = ListFilter {
        active_only: true,
        ..Default::default()
    };
    let mut cursor: Option<Cursor> = None;
    loop {
        let page = tasks.list_remote(&filter, cursor.as_ref(), PAGE).await?;
        for task in &page {
            let c = &preview.changes;
            let effect = if c.servers_removed.contains(&task.server) {
                Some("on removed servers: followed to their end (no new calls there)")
            } else if c
                .servers_changed
                .iter()
                .any(|(n, k)| n == &task.server && *k == ServerChange::Endpoint)
            {
                Some("on servers whose endpoint changed: they fail at their next step")
            } else if c.policy
                && !policy.permits(
                    &mcptask_core::access::Caller {
                        principal: task.principal.as_deref(),
                        scopes: &[],
                        claims: None,
                    },
                    mcptask_core::access::Item::tool(&task.server, &task.tool),
                )
            {
                Some(
                    "of tools the new policy denies their principal: they run to their end; new calls are refused",
                )
            } else {
                None
            };
            if let Some(effect) = effect {
                preview
                    .affected
                    .entry(effect.to_string())
                    .or_default()
                    .push(task.id.clone());
            }
        }
        match page.last() {
            Some(last) if page.len() as i64 == PAGE => {
                cursor = Some(Cursor {
                    created_at: last.created_at,
                    id: last.id.clone(),
                })
            }
            _ => break,
        }
    }
    store.close().await;
    Ok(preview)
}

/// Tasks read per page while looking for live tasks.
const PAGE: i64 = 500;
/// Task ids named per group (the count says how many there are).
const SHOWN_IDS: usize = 5;

/// The file of a `sqlite:` URL (`sqlite:PATH`, `sqlite://PATH`, with or
/// without `?options`), relative to the working directory as `serve` opens it.
fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty()).then(|| std::path::PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_is_a_valid_configuration() {
        let token = fresh_token();
        assert_eq!(token.len(), 48);
        let config = Config::parse(
            "mcptask.toml",
            &template(&token, Some("mcptask-secret.key")),
        )
        .unwrap();
        assert_eq!(config.api.auth, AuthMode::Token);
        assert_eq!(config.api.tokens.len(), 1);
        assert_eq!(config.api.tokens[0].token.get_ref(), &token);
        assert_eq!(config.api.tokens[0].principal, None);
        assert_eq!(config.servers.len(), 1);
        assert_ne!(fresh_token(), token);
    }

    #[test]
    fn sqlite_urls_name_their_file() {
        assert_eq!(sqlite_file("sqlite:mcptask.db"), Some("mcptask.db".into()));
        assert_eq!(
            sqlite_file("sqlite:///var/lib/m.db?mode=rwc"),
            Some("/var/lib/m.db".into())
        );
        assert_eq!(sqlite_file("postgres://u@h/db"), None);
    }
}
