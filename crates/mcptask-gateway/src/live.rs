//! Live configuration: what a reload of `mcptask.toml` changes.
//!
//! A running gateway keeps the configuration in force in [`LiveConfig`]; a
//! reload ([`crate::Gateway::reload`], SIGHUP for `mcptask serve`) parses
//! and checks the file as at start, then puts in force each section that
//! declares [`Reload::Live`] (the authenticator, the calls' policy and
//! limits, the upstream registry and catalog, the tracker's notifiers). The
//! sections that declare [`Reload::AtStart`] ([`Config::at_start`]) are read
//! once: a reload that changes one says so and leaves it as it was.
//!
//! [`Reload::Live`]: crate::config::Reload::Live
//! [`Reload::AtStart`]: crate::config::Reload::AtStart
//!
//! What changes is described by a [`Fingerprint`] of each configuration,
//! with every secret (tokens, headers, webhook secrets, OAuth credentials)
//! reduced to a short hash, so that `GET /api/v1/config` can show the one in
//! force and `mcptask config check` can say what a reload of a file would
//! change, by the same [`Changes::between`] the reload logs.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::config::Config;
use crate::config::reload::short_hash;

/// The configuration in force, replaced whole by a reload. Cheap to clone.
#[derive(Clone)]
pub struct LiveConfig {
    current: Arc<RwLock<Arc<Config>>>,
}

impl LiveConfig {
    /// Put `config` in force (at start; reloads replace it).
    pub fn new(config: Config) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(config))),
        }
    }

    /// The configuration in force now.
    pub fn get(&self) -> Arc<Config> {
        self.current.read().expect("live config lock").clone()
    }

    pub(crate) fn set(&self, config: Config) {
        *self.current.write().expect("live config lock") = Arc::new(config);
    }
}

/// One server as a reload compares it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerPrint {
    /// `http URL` or `stdio COMMAND ARGS` (URLs redacted of credentials).
    pub endpoint: String,
    /// The endpoint's identity: live tasks are pinned to it.
    pub endpoint_hash: String,
    /// Everything else (headers, timeouts, OAuth, prefix, toolsets, …).
    pub settings_hash: String,
}

/// A configuration as a reload compares it: secrets as short hashes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Server name → how it is reached and configured.
    pub servers: BTreeMap<String, ServerPrint>,
    /// `token` or `none`.
    pub auth: String,
    /// Token hash → principal (`null`: an operator token).
    pub tokens: BTreeMap<String, Option<String>>,
    /// Issuer → hash of its settings.
    pub issuers: BTreeMap<String, String>,
    /// `[api] public_url`, as written.
    pub public_url: Option<String>,
    /// `[api] metrics_principals`, sorted.
    #[serde(default)]
    pub metrics_principals: Vec<String>,
    /// The `[[policy]]` rules, in order.
    pub policy: Value,
    /// The `[[virtual_servers]]`, in order.
    #[serde(default)]
    pub virtual_servers: Value,
    /// `[limits]`.
    pub limits: Value,
    /// Webhook URL (redacted) → hash of its settings (secret, timeout).
    pub webhooks: BTreeMap<String, String>,
    /// Settings read once at start: name → hash.
    pub at_start: BTreeMap<String, String>,
}

impl Fingerprint {
    /// `config` as a reload compares it: the live sections in detail, the
    /// rest (what its sections declare [`Reload::AtStart`]) as prints.
    ///
    /// [`Reload::AtStart`]: crate::config::Reload::AtStart
    pub fn of(config: &Config) -> Fingerprint {
        let servers = config
            .servers
            .iter()
            .map(|section| {
                let def = section.def(config.secrets.get(section.name()), None);
                let endpoint = match &def.transport {
                    mcptask_client::Transport::Http { url, .. } => {
                        format!("http {}", mcptask_client::redact_url(url))
                    }
                    mcptask_client::Transport::Stdio { command, args, .. } => {
                        format!("stdio {command} {}", args.join(" "))
                            .trim_end()
                            .to_string()
                    }
                };
                let settings = json!({
                    "def": serde_json::to_value(&def).unwrap_or_default(),
                    "oauth": section.oauth.as_ref().map(|o| o.get_ref()),
                    "secrets": config.secrets.get(section.name()).map(|s| s.print()),
                    "front": section.front_print(),
                });
                (
                    def.name.clone(),
                    ServerPrint {
                        endpoint,
                        endpoint_hash: def.hash(),
                        settings_hash: short_hash(&settings),
                    },
                )
            })
            .collect();
        let tokens = config
            .api
            .tokens
            .iter()
            .map(|t| (short_hash(t.token.get_ref()), t.principal.clone()))
            .collect();
        let issuers = config
            .api
            .oauth
            .iter()
            .map(|o| (o.issuer.get_ref().clone(), short_hash(&o.print())))
            .collect();
        let policy = json!(config.policy.iter().map(|p| p.print()).collect::<Vec<_>>());
        let limits = serde_json::to_value(&config.limits).unwrap_or_default();
        let virtual_servers = json!(
            config
                .virtual_servers
                .iter()
                .map(|v| v.definition())
                .collect::<Vec<_>>()
        );
        let webhooks = config
            .webhooks
            .iter()
            .map(|w| {
                (
                    mcptask_client::redact_url(w.url.get_ref()),
                    short_hash(&(&w.secret, w.timeout_ms, w.url.get_ref())),
                )
            })
            .collect();
        Fingerprint {
            servers,
            auth: config.api.auth.as_str().into(),
            tokens,
            issuers,
            public_url: config.api.public_url.as_ref().map(|u| u.get_ref().clone()),
            metrics_principals: {
                let mut readers = config.api.metrics_principals.clone();
                readers.sort();
                readers.dedup();
                readers
            },
            policy,
            virtual_servers,
            limits,
            webhooks,
            at_start: config.at_start(),
        }
    }
}

/// How a server changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerChange {
    /// Another endpoint (URL; or command, args, cwd): its live tasks were
    /// started elsewhere and cannot be reached there.
    Endpoint,
    /// Headers, credentials, timeouts, prefix…: live tasks carry on, the new
    /// settings apply from the next request.
    Settings,
}

/// What a reload from one configuration to another changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Changes {
    /// Servers the new configuration adds, by name.
    pub servers_added: Vec<String>,
    /// Servers it drops: no new calls; their live tasks are followed to their end.
    pub servers_removed: Vec<String>,
    /// Servers kept under the same name, with what changed.
    pub servers_changed: Vec<(String, ServerChange)>,
    /// `[api] auth` before and after, when it changed.
    pub auth_mode: Option<(String, String)>,
    /// Principals (`operator` for operator tokens) whose tokens were added.
    pub tokens_added: Vec<String>,
    /// … and removed (a rotated token is one of each).
    pub tokens_removed: Vec<String>,
    /// `[[api.oauth]]` issuers added, by issuer URL.
    pub issuers_added: Vec<String>,
    /// … removed.
    pub issuers_removed: Vec<String>,
    /// … kept under the same issuer with other settings.
    pub issuers_changed: Vec<String>,
    /// Whether `[api] public_url` changed.
    pub public_url: bool,
    /// `[api] metrics_principals` before and after, when they changed.
    pub metrics_principals: Option<(Vec<String>, Vec<String>)>,
    /// Whether the `[[policy]]` rules changed (they apply to new calls).
    pub policy: bool,
    /// Whether the `[[virtual_servers]]` changed (they apply to new
    /// requests).
    pub virtual_servers: bool,
    /// `[limits]` before and after, when they changed.
    pub limits: Option<(Value, Value)>,
    /// Webhooks added, by redacted URL.
    pub webhooks_added: Vec<String>,
    /// Webhooks removed, by redacted URL.
    pub webhooks_removed: Vec<String>,
    /// Webhooks kept with another secret or timeout.
    pub webhooks_changed: Vec<String>,
    /// Settings read only at start that differ: they take effect at the
    /// next restart.
    pub need_restart: Vec<String>,
}

fn diff_keys<V: PartialEq>(
    old: &BTreeMap<String, V>,
    new: &BTreeMap<String, V>,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let added = new.keys().filter(|k| !old.contains_key(*k)).cloned();
    let removed = old.keys().filter(|k| !new.contains_key(*k)).cloned();
    let changed = new
        .iter()
        .filter(|(k, v)| old.get(*k).is_some_and(|o| o != *v))
        .map(|(k, _)| k.clone());
    (added.collect(), removed.collect(), changed.collect())
}

fn who(principal: &Option<String>) -> String {
    principal.clone().unwrap_or_else(|| "operator".into())
}

impl Changes {
    /// What putting `new` in force where `old` is would change.
    pub fn between(old: &Fingerprint, new: &Fingerprint) -> Changes {
        let (servers_added, servers_removed, changed) = diff_keys(&old.servers, &new.servers);
        let servers_changed = changed
            .into_iter()
            .map(|name| {
                let kind = if old.servers[&name].endpoint_hash != new.servers[&name].endpoint_hash {
                    ServerChange::Endpoint
                } else {
                    ServerChange::Settings
                };
                (name, kind)
            })
            .collect();
        let mut tokens_added: Vec<String> = new
            .tokens
            .iter()
            .filter(|(k, _)| !old.tokens.contains_key(*k))
            .map(|(_, p)| who(p))
            .collect();
        let mut tokens_removed: Vec<String> = old
            .tokens
            .iter()
            .filter(|(k, _)| !new.tokens.contains_key(*k))
            .map(|(_, p)| who(p))
            .collect();
        // A token kept but given to another principal: one of each.
        for (k, p) in &new.tokens {
            if let Some(was) = old.tokens.get(k)
                && was != p
            {
                tokens_added.push(who(p));
                tokens_removed.push(who(was));
            }
        }
        tokens_added.sort();
        tokens_removed.sort();
        let (issuers_added, issuers_removed, issuers_changed) =
            diff_keys(&old.issuers, &new.issuers);
        let (webhooks_added, webhooks_removed, webhooks_changed) =
            diff_keys(&old.webhooks, &new.webhooks);
        let (_, _, mut need_restart) = diff_keys(&old.at_start, &new.at_start);
        for (k, _) in new.at_start.iter() {
            if !old.at_start.contains_key(k) {
                need_restart.push(k.clone());
            }
        }
        Changes {
            servers_added,
            servers_removed,
            servers_changed,
            auth_mode: (old.auth != new.auth).then(|| (old.auth.clone(), new.auth.clone())),
            tokens_added,
            tokens_removed,
            issuers_added,
            issuers_removed,
            issuers_changed,
            public_url: old.public_url != new.public_url,
            metrics_principals: (old.metrics_principals != new.metrics_principals).then(|| {
                (
                    old.metrics_principals.clone(),
                    new.metrics_principals.clone(),
                )
            }),
            policy: old.policy != new.policy,
            virtual_servers: old.virtual_servers != new.virtual_servers,
            limits: (old.limits != new.limits).then(|| (old.limits.clone(), new.limits.clone())),
            webhooks_added,
            webhooks_removed,
            webhooks_changed,
            need_restart,
        }
    }

    /// Whether a reload would change anything at all.
    pub fn is_empty(&self) -> bool {
        self == &Changes::default()
    }

    /// One line per change, for logs and `mcptask config check`.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let list = |v: &[String]| v.join(", ");
        if !self.servers_added.is_empty() {
            lines.push(format!("servers added: {}", list(&self.servers_added)));
        }
        if !self.servers_removed.is_empty() {
            lines.push(format!(
                "servers removed: {} (no new calls; their live tasks are followed to their end)",
                list(&self.servers_removed)
            ));
        }
        for (name, kind) in &self.servers_changed {
            lines.push(match kind {
                ServerChange::Endpoint => format!(
                    "server {name}: endpoint changed (its live tasks cannot be reached there and fail at their next step)"
                ),
                ServerChange::Settings => format!(
                    "server {name}: settings changed (headers, credentials, timeouts…; live tasks carry on)"
                ),
            });
        }
        if let Some((old, new)) = &self.auth_mode {
            lines.push(format!("api auth: {old} -> {new}"));
        }
        if !self.tokens_added.is_empty() {
            lines.push(format!(
                "api tokens added for: {}",
                list(&self.tokens_added)
            ));
        }
        if !self.tokens_removed.is_empty() {
            lines.push(format!(
                "api tokens removed for: {} (refused from the reload on)",
                list(&self.tokens_removed)
            ));
        }
        for (what, v) in [
            ("added", &self.issuers_added),
            ("removed", &self.issuers_removed),
            ("changed", &self.issuers_changed),
        ] {
            if !v.is_empty() {
                lines.push(format!("oauth issuers {what}: {}", list(v)));
            }
        }
        if self.public_url {
            lines.push("public_url changed".into());
        }
        if let Some((old, new)) = &self.metrics_principals {
            lines.push(format!(
                "metrics readers: [{}] -> [{}]",
                list(old),
                list(new)
            ));
        }
        if self.policy {
            lines
                .push("policy changed (for new calls; calls already made run to their end)".into());
        }
        if self.virtual_servers {
            lines.push("virtual servers changed (for new requests)".into());
        }
        if let Some((old, new)) = &self.limits {
            lines.push(format!("limits: {old} -> {new}"));
        }
        for (what, v) in [
            ("added", &self.webhooks_added),
            ("removed", &self.webhooks_removed),
            ("changed", &self.webhooks_changed),
        ] {
            if !v.is_empty() {
                lines.push(format!("webhooks {what}: {}", list(v)));
            }
        }
        if !self.need_restart.is_empty() {
            lines.push(format!(
                "not applied until a restart: {}",
                list(&self.need_restart)
            ));
        }
        lines
    }

    /// The servers whose tools must be listed again: added or redefined.
    pub fn servers_to_list(&self) -> Vec<String> {
        self.servers_added
            .iter()
            .cloned()
            .chain(self.servers_changed.iter().map(|(n, _)| n.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[api]
[[api.tokens]]
token = "operator-0123456789"
[[api.tokens]]
token = "alice-0123456789"
principal = "alice"
[[servers]]
name = "a"
url = "http://127.0.0.1:1/mcp"
[[servers]]
name = "b"
url = "http://127.0.0.1:2/mcp"
[[webhooks]]
url = "http://127.0.0.1:9/hook"
secret = "s"
"#;

    fn changes(old: &str, new: &str) -> Changes {
        let old = Config::parse("old.toml", old).unwrap();
        let new = Config::parse("new.toml", new).unwrap();
        Changes::between(&Fingerprint::of(&old), &Fingerprint::of(&new))
    }

    #[test]
    fn the_same_file_changes_nothing_even_moved_around() {
        assert!(changes(BASE, BASE).is_empty());
        let moved = format!("\n\n# a comment\n{BASE}");
        assert!(changes(BASE, &moved).is_empty());
    }

    /// What a section declares is what a reload reports: an edit of a
    /// live section is a change applied now, one of an at-start section a
    /// setting that waits for a restart.
    #[test]
    fn each_section_is_reloaded_as_it_declares() {
        use crate::config::{
            ApiSection, DatabaseSection, LimitsSection, OAuthGlobalSection, PolicySection,
            ProxySection, Reload, ServerSection, TelemetrySection, WebhookSection, reload,
        };
        let edits = [
            (
                "[database]\nurl = \"sqlite:other.db\"\n",
                DatabaseSection::RELOAD,
            ),
            ("[proxy]\nenabled = true\n", ProxySection::RELOAD),
            ("[tracker]\npoll_min_ms = 200\n", reload::TRACKER_RELOAD),
            (
                "[oauth]\nsecret_key_file = \"k.key\"\n",
                OAuthGlobalSection::RELOAD,
            ),
            ("[telemetry]\nenabled = true\n", TelemetrySection::RELOAD),
            ("[limits]\nper_principal_rate = 5\n", LimitsSection::RELOAD),
            ("[[policy]]\ndeny = [\"a/*\"]\n", PolicySection::RELOAD),
            (
                "[[virtual_servers]]\nname = \"v\"\ntools = [\"a/*\"]\n",
                crate::config::VirtualServerSection::RELOAD,
            ),
            (
                "[[servers]]\nname = \"c\"\ncommand = \"c\"\n",
                ServerSection::RELOAD,
            ),
            (
                "[[webhooks]]\nurl = \"http://127.0.0.1:8/h\"\nsecret = \"s\"\n",
                WebhookSection::RELOAD,
            ),
        ];
        for (edit, declared) in edits {
            let c = changes(BASE, &format!("{BASE}{edit}"));
            assert!(!c.is_empty(), "{edit}");
            let waits = !c.need_restart.is_empty();
            assert_eq!(waits, declared == Reload::AtStart, "{edit}: {c:?}");
        }
        let listen = BASE.replace("[api]\n", "[api]\nlisten = \"127.0.0.1:9\"\n");
        assert_eq!(changes(BASE, &listen).need_restart, ["[api] listen"]);
        assert_eq!(ApiSection::LISTENER_RELOAD, Reload::AtStart);
        let rotated = BASE.replace("operator-0123456789", "operator-rotated-0123");
        let c = changes(BASE, &rotated);
        assert!(!c.is_empty() && c.need_restart.is_empty());
        assert_eq!(ApiSection::RELOAD, Reload::Live);
    }

    /// In a running gateway, a reload puts each live section in force: what
    /// the request path reads (the authenticator, the calls' policy and
    /// limiter, the upstream registry) follows the file from the reload on,
    /// while the configuration read at start keeps the at-start settings.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reload_puts_the_live_sections_in_force_in_a_running_gateway() {
        use mcptask_core::access::Caller;
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("gateway.db");
        let database = format!("[database]\nurl = \"sqlite:{}\"\n", db.display());
        let load = |text: &str| Config::parse("mcptask.toml", text).expect("a valid file");
        let start = format!("{database}{BASE}");
        let gateway = crate::Gateway::start(load(&start))
            .await
            .expect("the gateway starts");
        let carol = "carol-0123456789";
        let alice = Caller {
            principal: Some("alice"),
            ..Caller::default()
        };
        // Before: carol's token is unknown, alice may call a/x, calls are
        // not capped, and there is no server c.
        assert!(gateway.auth.authenticate(Some(carol)).await.is_err());
        assert!(
            gateway
                .calls
                .policy()
                .permits(&alice, mcptask_core::access::Item::tool("a", "x"))
        );
        let first = gateway.calls.limiter.admit(Some("alice")).expect("no cap");
        let second = gateway.calls.limiter.admit(Some("alice")).expect("no cap");
        drop((first, second));
        assert!(!gateway.calls.upstreams.is_configured("c"));

        let edited = format!(
            "{database}{}[[api.tokens]]\ntoken = \"{carol}\"\nprincipal = \"carol\"\n\
             [[servers]]\nname = \"c\"\nurl = \"http://127.0.0.1:3/mcp\"\n\
             [limits]\nper_principal_in_flight = 1\n\
             [[policy]]\nprincipal = \"alice\"\ndeny = [\"a/*\"]\n\
             [tracker]\npoll_min_ms = 200\n",
            BASE
        );
        let changes = gateway.reload(load(&edited)).await.expect("the reload");
        assert_eq!(changes.tokens_added, ["carol"], "{changes:?}");
        assert_eq!(changes.need_restart, ["[tracker]"], "{changes:?}");

        // [api] (Live): carol's token is accepted from now on.
        let caller = gateway.auth.authenticate(Some(carol)).await;
        assert_eq!(
            caller.map(|c| c.principal).ok().flatten().as_deref(),
            Some("carol")
        );
        // [[policy]] (Live): alice may not call a/* any more.
        assert!(
            !gateway
                .calls
                .policy()
                .permits(&alice, mcptask_core::access::Item::tool("a", "x"))
        );
        // [limits] (Live): one call in flight per principal.
        let held = gateway
            .calls
            .limiter
            .admit(Some("alice"))
            .expect("the first");
        assert!(
            gateway.calls.limiter.admit(Some("alice")).is_err(),
            "capped at 1"
        );
        drop(held);
        // [[servers]] (Live): c is configured and the tracker knows it.
        assert!(gateway.calls.upstreams.is_configured("c"));
        assert!(gateway.tracker.servers().get("c").is_some());
        // [tracker] (AtStart): the file in force says 200, the gateway
        // keeps what it started with.
        assert_eq!(gateway.live.get().tracker.policy.poll.min_ms, 200);
        assert_ne!(gateway.config.tracker.policy.poll.min_ms, 200);
        gateway.shutdown().await;
    }

    #[test]
    fn each_kind_of_edit_is_named_and_no_secret_is_shown() {
        let new = BASE
            .replace("alice-0123456789", "alice-rotated-0123456789")
            .replace("http://127.0.0.1:2/mcp", "http://127.0.0.1:3/mcp")
            .replace("secret = \"s\"", "secret = \"t\"")
            .replace(
                "[[servers]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"",
                "[[servers]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = { Authorization = \"Bearer x\" }\n[[servers]]\nname = \"c\"\ncommand = \"c\"",
            )
            + "[limits]\nper_principal_rate = 5\n[[policy]]\nprincipal = \"bob\"\ndeny = [\"a/*\"]\n[tracker]\npoll_min_ms = 200\n";
        let c = changes(BASE, &new);
        assert_eq!(c.servers_added, ["c"]);
        assert_eq!(
            c.servers_changed,
            [
                ("a".to_string(), ServerChange::Settings),
                ("b".to_string(), ServerChange::Endpoint)
            ]
        );
        assert_eq!(
            (c.tokens_added.clone(), c.tokens_removed.clone()),
            (vec!["alice".to_string()], vec!["alice".to_string()])
        );
        assert!(c.policy && c.limits.is_some());
        assert_eq!(c.webhooks_changed, ["http://127.0.0.1:9/hook"]);
        assert_eq!(c.need_restart, ["[tracker]"]);
        let text = c.lines().join("\n");
        for secret in ["alice-rotated", "Bearer x", "\"t\""] {
            assert!(!text.contains(secret), "{text}");
        }
        let removed = changes(&new, BASE);
        assert_eq!(removed.servers_removed, ["c"]);
    }
}
