//! The TypeScript "everything" MCP server (pinned by
//! `scripts/interop/package-lock.json`, installed into `.tools/interop` by
//! `scripts/install-test-tools`): a real peer no one here wrote, run over
//! stdio with the Node 22 of `.tools`.

use std::path::PathBuf;

use crate::repo_root;

/// Where the everything server and the Node that runs it are.
#[derive(Debug, Clone)]
pub struct Everything {
    /// Node 22.
    pub node: PathBuf,
    /// The server's entry point (`dist/index.js`); run with the argument `stdio`.
    pub entry: PathBuf,
}

impl Everything {
    /// Both paths, canonical, or what is missing.
    pub fn find() -> Result<Everything, String> {
        let root = repo_root();
        let node = root.join(".tools/node_modules/.bin/node");
        let entry = root.join(
            ".tools/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
        );
        for path in [&node, &entry] {
            if !path.exists() {
                return Err(format!("{} is missing", path.display()));
            }
        }
        let canonical = |p: PathBuf| p.canonicalize().unwrap_or(p);
        Ok(Everything {
            node: canonical(node),
            entry: canonical(entry),
        })
    }

    /// The server, or `None` after a loud SKIPPED line naming `test`; under
    /// `CI=true` a missing server fails the test instead.
    pub fn or_skip(test: &str) -> Option<Everything> {
        crate::peers::or_skip("the everything server", test, Everything::find())
    }

    /// A `[[servers]]` entry running it over stdio as `name`, with `extra`
    /// TOML lines (each ending in a newline) inside the entry.
    pub fn server_toml(&self, name: &str, extra: &str) -> String {
        let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
        format!(
            "\n[[servers]]\nname = {}\ncommand = {}\nargs = [{}, \"stdio\"]\n{extra}",
            q(name),
            q(&self.node.display().to_string()),
            q(&self.entry.display().to_string()),
        )
    }
}

/// The line the server prints once its Streamable HTTP transport listens.
const HTTP_LISTENING: &str = "MCP Streamable HTTP Server listening on port ";

impl Everything {
    /// Run it over Streamable HTTP on `127.0.0.1:port` (a fixed port, so a
    /// restarted server is reached at the same URL) until it listens;
    /// returns the process (SIGKILLed on drop) and its MCP URL. Retries while
    /// the port is still held by a process just killed.
    pub async fn start_http(&self, name: &str, port: u16) -> (crate::LoggedChild, String) {
        let mut last = String::new();
        for _ in 0..20 {
            let mut command = tokio::process::Command::new(&self.node);
            command
                .arg(&self.entry)
                .arg("streamableHttp")
                .env("PORT", port.to_string());
            match crate::LoggedChild::spawn(
                name,
                command,
                HTTP_LISTENING,
                std::time::Duration::from_secs(60),
            )
            .await
            {
                Ok((child, _)) => return (child, format!("http://127.0.0.1:{port}/mcp")),
                Err(e) => {
                    last = e;
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                }
            }
        }
        panic!("{name}: could not start on port {port}: {last}");
    }
}
