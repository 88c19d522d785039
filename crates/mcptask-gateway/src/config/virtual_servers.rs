//! `[[virtual_servers]]`: named selections of the servers' tools, prompts
//! and resources, each served at `/mcp/<name>` ([`crate::virtual_server`]),
//! and their checks.

use std::collections::BTreeSet;

use serde::Deserialize;
use toml::Spanned;
use wildmatch::WildMatch;

use super::{ConfigError, Reload, ServerSection, Source};
use crate::virtual_server::VirtualServer;

/// A virtual server as the file writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtualServerSection {
    /// Its name: served at `/mcp/<name>`.
    pub name: Spanned<String>,
    /// `"server/tool"` globs of the tools it offers.
    #[serde(default)]
    pub tools: Vec<Spanned<String>>,
    /// `"server/prompt"` globs of the prompts it offers.
    #[serde(default)]
    pub prompts: Vec<Spanned<String>>,
    /// `"server/uri"` globs of the resources it offers.
    #[serde(default)]
    pub resources: Vec<Spanned<String>>,
    /// Principal globs of who may use it (absent: anyone the gateway
    /// admits).
    #[serde(default)]
    pub principals: Option<Vec<String>>,
}

/// Whether `name` can stand as one path segment as it is: letters, digits,
/// `-`, `_` and `.`, not only dots.
fn url_safe(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.chars().any(|c| c != '.')
}

impl VirtualServerSection {
    /// Virtual servers are added, edited and removed by a reload, for new
    /// requests.
    pub const RELOAD: Reload = Reload::Live;

    /// Each name is URL-safe and unique, each virtual server selects
    /// something, and each glob names a configured server.
    pub(crate) fn check_all(
        virtuals: &[VirtualServerSection],
        servers: &[ServerSection],
        src: &Source,
    ) -> Result<(), ConfigError> {
        let mut seen = BTreeSet::new();
        for v in virtuals {
            let name = v.name.get_ref();
            if !url_safe(name) {
                return Err(src.at(
                    v.name.span(),
                    &format!("the virtual server name {name:?} cannot be a URL path segment"),
                    "use letters, digits, '-', '_' and '.' only (it is served at /mcp/<name>)",
                ));
            }
            if !seen.insert(name.as_str()) {
                return Err(src.at(
                    v.name.span(),
                    &format!("a second virtual server is named {name:?}"),
                    "give each [[virtual_servers]] its own name",
                ));
            }
            if v.tools.is_empty() && v.prompts.is_empty() && v.resources.is_empty() {
                return Err(src.at(
                    v.name.span(),
                    &format!("the virtual server {name:?} selects nothing"),
                    "add tools = [\"server/tool\", …] (\"server/name\" globs; prompts and resources likewise)",
                ));
            }
            for glob in v.tools.iter().chain(&v.prompts).chain(&v.resources) {
                Self::check_glob(glob, servers, src)?;
            }
        }
        Ok(())
    }

    /// `glob` is `"server/name"` and its server part matches a configured
    /// server: one that matches none would select nothing, silently.
    fn check_glob(
        glob: &Spanned<String>,
        servers: &[ServerSection],
        src: &Source,
    ) -> Result<(), ConfigError> {
        let text = glob.get_ref();
        let Some((server, _)) = text.split_once('/') else {
            return Err(src.at(
                glob.span(),
                &format!("{text:?} names no server"),
                "write \"server/name\" (globs with * and ?), e.g. \"demo/greet\" or \"demo/*\"",
            ));
        };
        let pattern = WildMatch::new(server);
        if !servers.iter().any(|s| pattern.matches(s.name())) {
            let known: Vec<&str> = servers.iter().map(ServerSection::name).collect();
            return Err(src.at(
                glob.span(),
                &format!("{text:?} names no configured server (servers: {known:?})"),
                "name a server of [[servers]] before the '/'",
            ));
        }
        Ok(())
    }

    /// Its definition, as the front serves it.
    pub fn definition(&self) -> VirtualServer {
        let texts = |list: &[Spanned<String>]| list.iter().map(|g| g.get_ref().clone()).collect();
        VirtualServer {
            name: self.name.get_ref().clone(),
            tools: texts(&self.tools),
            prompts: texts(&self.prompts),
            resources: texts(&self.resources),
            principals: self.principals.clone(),
        }
    }
}
