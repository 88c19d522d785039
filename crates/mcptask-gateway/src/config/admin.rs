//! The configuration's second source: objects set through the admin API
//! (`crate::admin`), kept in the store as the TOML the file would hold
//! (`[[servers]]` and `[[virtual_servers]]` tables, [`Kind`]). [`Config::load_with_admin`] appends them
//! to the file's text and reads, overrides, checks and resolves the whole
//! as one file, so an object set through the API passes exactly the checks
//! of the file, with the same messages (placed in the object:
//! `admin API server "x":2:1: …`).
//!
//! **The file wins.** An object the file defines (a server, a virtual
//! server: by kind and name) is the file's: the admin API refuses to set or
//! delete it, and a stored object whose name the file defines later (an
//! edit after the API added it) is left out and listed as shadowed
//! ([`Origins::shadowed`]), never merged with the file's. The file
//! is what an operator reviews and deploys; the API adds to it, and never
//! changes what it says without leaving a trace.

use std::collections::BTreeSet;
use std::path::Path;

use mcptask_core::admin::AdminEntry;
use serde_json::Value;

use super::{Config, ConfigError, Source};

/// What the admin API sets: each kind is an array of tables of the file,
/// named by its `name` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `[[servers]]`.
    Server,
    /// `[[virtual_servers]]`.
    VirtualServer,
}

impl Kind {
    /// Every kind, in the order their tables are appended to the file.
    pub const ALL: [Kind; 2] = [Kind::Server, Kind::VirtualServer];

    /// The table's key in the file, and the kind as the store keeps it.
    pub fn table(self) -> &'static str {
        match self {
            Kind::Server => "servers",
            Kind::VirtualServer => "virtual_servers",
        }
    }

    /// The kind in words (messages, the audit trail's actions).
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Server => "server",
            Kind::VirtualServer => "virtual server",
        }
    }

    /// The kind a stored entry names, if one this release knows.
    pub fn of_stored(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.table() == kind)
    }

    /// What an example definition of this kind looks like (in messages).
    fn example(self) -> &'static str {
        match self {
            Kind::Server => r#"{"url": "http://127.0.0.1:8080/mcp"}"#,
            Kind::VirtualServer => r#"{"tools": ["reports/*"], "principals": ["team-a-*"]}"#,
        }
    }
}

/// Where a configuration's objects came from, beyond the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origins {
    /// Objects set through the admin API, in force.
    pub api: BTreeSet<(Kind, String)>,
    /// Objects set through the admin API whose name the file defines: the
    /// file's definition is in force, the stored one is left out.
    pub shadowed: BTreeSet<(Kind, String)>,
}

impl Origins {
    /// Whether the `kind` object `name` in force was set through the API.
    pub fn from_api(&self, kind: Kind, name: &str) -> bool {
        self.api.contains(&(kind, name.to_string()))
    }

    /// Whether the stored `kind` object `name` is shadowed by the file.
    pub fn is_shadowed(&self, kind: Kind, name: &str) -> bool {
        self.shadowed.contains(&(kind, name.to_string()))
    }
}

/// The `[[servers]]` keys the admin API does not set: each makes the
/// gateway read its own host (run a program: `command`, `args`, `env`,
/// `cwd`; read files or environment variables and send what they hold to
/// an endpoint: `oauth`'s and `identity`'s `*_file` and `*_env` keys). An
/// API token must not be a way to run programs or read secrets on the
/// gateway's host; those servers are defined in the file.
pub const HOST_KEYS: [&str; 6] = ["command", "args", "env", "cwd", "oauth", "identity"];

/// The first key of `definition` the admin API does not set ([`HOST_KEYS`]).
pub fn host_key(definition: &Value) -> Option<&'static str> {
    HOST_KEYS
        .into_iter()
        .find(|k| definition.get(*k).is_some_and(|v| !v.is_null()))
}

/// The stored form of a `kind` object set through the admin API: its
/// definition (the keys of its table, as JSON) written as the table the
/// file would hold. `null` leaves a key out. The name is `name`'s; one in
/// `definition` must say the same.
pub fn body(kind: Kind, name: &str, definition: &Value) -> Result<String, ConfigError> {
    let noun = kind.noun();
    let Value::Object(keys) = definition else {
        return Err(ConfigError(format!(
            "a {noun}'s definition is a JSON object of its [[{}]] keys, e.g. {}",
            kind.table(),
            kind.example()
        )));
    };
    let mut keys = keys.clone();
    match keys.get("name") {
        None | Some(Value::Null) => {}
        Some(Value::String(given)) if given == name => {}
        Some(given) => {
            return Err(ConfigError(format!(
                "the definition names the {noun} {given}, the path {name:?}\n  fix: leave \"name\" out, or make it the path's"
            )));
        }
    }
    keys.insert("name".into(), Value::String(name.into()));
    let table = without_nulls(Value::Object(keys));
    toml::to_string(&serde_json::json!({ kind.table(): [table] })).map_err(|e| {
        ConfigError(format!(
            "the definition of {noun} {name:?} cannot be written as TOML: {e}"
        ))
    })
}

/// `value` with every `null` member and element left out (TOML has none).
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .filter(|v| !v.is_null())
                .map(without_nulls)
                .collect(),
        ),
        other => other,
    }
}

/// A stored body back as JSON (what the admin listings show).
pub fn definition(kind: Kind, body: &str) -> Option<Value> {
    let table: toml::Table = toml::from_str(body).ok()?;
    let object = table.get(kind.table())?.as_array()?.first()?.clone();
    serde_json::to_value(object).ok()
}

impl Config {
    /// [`Config::load_with_env`] with the admin API's `entries` appended to
    /// the file, kind by kind (those whose name the file defines are left
    /// out: the file wins, [`Origins::shadowed`] says which; kinds this
    /// release does not know are left out too).
    pub fn load_with_admin(
        path: &Path,
        get: impl Fn(&str) -> Option<String>,
        entries: &[AdminEntry],
    ) -> Result<Config, ConfigError> {
        let file = Self::read_file(path)?;
        let path = path.display().to_string();
        let own = Config::read(&Source {
            path: &path,
            text: &file,
            appended: &[],
        })?;
        let mut text = file.clone();
        let mut appended = Vec::new();
        let mut origins = Origins::default();
        for kind in Kind::ALL {
            for entry in entries.iter().filter(|e| e.kind == kind.table()) {
                let key = (kind, entry.name.clone());
                if own.file_defines(kind, &entry.name) {
                    origins.shadowed.insert(key);
                    continue;
                }
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                appended.push((
                    text.len(),
                    format!("admin API {} {:?}", kind.noun(), entry.name),
                ));
                text.push_str(&entry.body);
                origins.api.insert(key);
            }
        }
        let src = Source {
            path: &path,
            text: &text,
            appended: &appended,
        };
        let mut config = Self::finish(src, get)?;
        config.origins = origins;
        Ok(config)
    }

    /// Whether the file (not the admin API) defines the `kind` object
    /// `name`.
    pub fn file_defines(&self, kind: Kind, name: &str) -> bool {
        let defined = match kind {
            Kind::Server => self.servers.iter().any(|s| s.name() == name),
            Kind::VirtualServer => self
                .virtual_servers
                .iter()
                .any(|v| v.name.get_ref() == name),
        };
        defined && !self.origins.from_api(kind, name)
    }

    /// The names of the `kind` objects in force.
    pub fn names_of(&self, kind: Kind) -> Vec<String> {
        match kind {
            Kind::Server => self.servers.iter().map(|s| s.name().to_string()).collect(),
            Kind::VirtualServer => self
                .virtual_servers
                .iter()
                .map(|v| v.name.get_ref().clone())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use mcptask_core::admin::AdminEntry;
    use serde_json::json;

    use super::{Config, Kind};

    fn entry(name: &str, definition: serde_json::Value) -> AdminEntry {
        AdminEntry {
            kind: Kind::Server.table().into(),
            name: name.into(),
            body: super::body(Kind::Server, name, &definition).unwrap(),
            changed_by: "ops".into(),
            changed_at_ms: 1,
        }
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    const FILE: &str = "[api]\nauth = \"none\"\n[[servers]]\nname = \"files\"\nurl = \"http://127.0.0.1:1/mcp\"\n[limits]\n";

    #[test]
    fn a_definition_becomes_the_table_the_file_would_hold_and_back() {
        let definition = json!({"url": "http://127.0.0.1:9/mcp", "prefix": null,
            "oauth": {"client_id": "x"}, "args": []});
        let body = super::body(Kind::Server, "reports", &definition).unwrap();
        assert!(body.starts_with("[[servers]]\n"), "{body}");
        assert!(body.contains("[servers.oauth]"), "{body}");
        let back = super::definition(Kind::Server, &body).unwrap();
        assert_eq!(back["name"], "reports");
        assert_eq!(back["url"], "http://127.0.0.1:9/mcp");
        assert!(back.get("prefix").is_none());
        // `[servers.identity]` reads the host's environment and files and
        // sends what they hold upstream: never set through the API.
        assert_eq!(
            super::host_key(&json!({"url": "http://127.0.0.1:9/mcp",
                "identity": {"mode": "per_principal",
                    "principals": {"alice": {"token_file": "/etc/shadow"}}}})),
            Some("identity")
        );
        let other = super::body(Kind::Server, "reports", &json!({"name": "other"})).unwrap_err();
        assert!(other.0.contains("the path \"reports\""), "{other}");
    }

    #[test]
    fn stored_servers_join_the_file_and_the_file_wins() {
        let f = file(FILE);
        let entries = [
            entry("added", json!({"url": "http://127.0.0.1:2/mcp"})),
            entry("files", json!({"url": "http://127.0.0.1:3/mcp"})),
        ];
        let config = Config::load_with_admin(f.path(), |_| None, &entries).unwrap();
        let names: Vec<&str> = config.servers.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["files", "added"]);
        assert!(config.origins.from_api(Kind::Server, "added"));
        assert!(config.origins.is_shadowed(Kind::Server, "files"));
        assert!(config.file_defines(Kind::Server, "files"));
        assert!(!config.file_defines(Kind::Server, "added"));
    }

    #[test]
    fn a_bad_stored_server_gets_the_file_message_placed_in_it() {
        let f = file(FILE);
        let both = entry(
            "bad",
            json!({"url": "http://127.0.0.1:2/mcp", "command": "x"}),
        );
        let e = Config::load_with_admin(f.path(), |_| None, &[both]).unwrap_err();
        assert!(e.0.starts_with("admin API server \"bad\":"), "{e}");
        assert!(
            e.0.contains("server \"bad\" has both url and command"),
            "{e}"
        );
        let typo = entry(
            "typo",
            json!({"url": "http://127.0.0.1:2/mcp", "timeout": 5}),
        );
        let e = Config::load_with_admin(f.path(), |_| None, &[typo]).unwrap_err();
        assert!(e.0.contains("unknown field `timeout`"), "{e}");
        // The same problem in the file reads the same, placed in the file.
        let in_file = file(&format!(
            "{FILE}[[servers]]\nname = \"bad\"\nurl = \"http://a/mcp\"\ncommand = \"x\"\n"
        ));
        let e = Config::load_with_admin(in_file.path(), |_| None, &[]).unwrap_err();
        assert!(
            e.0.contains("server \"bad\" has both url and command"),
            "{e}"
        );
    }
}
