//! Third-party MCP peers the interop tests run, installed into `.tools` by
//! `scripts/install-test-tools`: FastMCP's client (PyPI, a virtual
//! environment at `.tools/fastmcp`, driven by
//! `scripts/interop/fastmcp_probe.py`) and the npm "filesystem" server
//! (`.tools/interop`, beside the everything server). A missing peer skips
//! its test loudly, or fails it under `CI=true`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{in_ci, repo_root};

/// `found`, or `None` after a loud SKIPPED line naming `test` and `peer`;
/// under `CI=true` a missing peer fails the test instead.
pub fn or_skip<T>(peer: &str, test: &str, found: Result<T, String>) -> Option<T> {
    or_skip_with(peer, test, "run scripts/install-test-tools", found)
}

/// [`or_skip`] for a peer that `fix` installs (`apt-get install nginx`):
/// the one rule of every test that needs something outside the repository.
pub fn or_skip_with<T>(peer: &str, test: &str, fix: &str, found: Result<T, String>) -> Option<T> {
    match found {
        Ok(found) => Some(found),
        Err(why) if in_ci() => panic!("{peer} is required under CI: {why}; {fix}"),
        Err(why) => {
            eprintln!("SKIPPED ({test}: no {peer}): {why} — {fix}");
            None
        }
    }
}

/// `paths` under the repository, or the first that is missing. Not made
/// canonical: a virtual environment's `python` is a symlink that must be run
/// by its own name.
fn installed<const N: usize>(paths: [&str; N]) -> Result<[PathBuf; N], String> {
    let root = repo_root();
    let found = paths.map(|p| root.join(p));
    if let Some(missing) = found.iter().find(|path| !path.exists()) {
        return Err(format!("{} is missing", missing.display()));
    }
    Ok(found)
}

/// FastMCP's default client, run by the probe script.
#[derive(Debug, Clone)]
pub struct FastMcp {
    python: PathBuf,
    probe: PathBuf,
}

impl FastMcp {
    /// The virtual environment's Python and the probe, or what is missing.
    pub fn find() -> Result<FastMcp, String> {
        let [python, probe] = installed([
            ".tools/fastmcp/bin/python",
            "scripts/interop/fastmcp_probe.py",
        ])?;
        Ok(FastMcp { python, probe })
    }

    /// The client, or `None` (see [`or_skip`]).
    pub fn or_skip(test: &str) -> Option<FastMcp> {
        or_skip("FastMCP's client", test, FastMcp::find())
    }

    /// Run the probe with `plans` (a JSON list; each plan names a server and
    /// the tools, prompts and resources to ask of it:
    /// `scripts/interop/fastmcp_probe.py`) and return its reports, one per
    /// plan, or the client's error.
    pub async fn probe(&self, plans: &Value) -> Result<Vec<Value>, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let file = dir.path().join("plan.json");
        std::fs::write(&file, plans.to_string()).map_err(|e| e.to_string())?;
        let run = tokio::process::Command::new(&self.python)
            .arg(&self.probe)
            .arg(&file)
            // Warnings of the SDK about deprecated fields are not failures.
            .env("PYTHONWARNINGS", "ignore")
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(std::time::Duration::from_secs(300), run)
            .await
            .map_err(|_| "the FastMCP probe ran for more than 300 s".to_string())?
            .map_err(|e| format!("cannot run {}: {e}", self.python.display()))?;
        if !out.status.success() {
            return Err(format!(
                "the FastMCP probe failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "the FastMCP probe printed no report ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }
}

/// The npm "filesystem" MCP server (stdio), serving the directories it is
/// given.
#[derive(Debug, Clone)]
pub struct Filesystem {
    /// Node 22.
    pub node: PathBuf,
    /// The server's entry point (`dist/index.js`).
    pub entry: PathBuf,
}

impl Filesystem {
    /// Both paths, or what is missing.
    pub fn find() -> Result<Filesystem, String> {
        let [node, entry] = installed([
            ".tools/node_modules/.bin/node",
            ".tools/interop/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
        ])?;
        Ok(Filesystem { node, entry })
    }

    /// The server, or `None` (see [`or_skip`]).
    pub fn or_skip(test: &str) -> Option<Filesystem> {
        or_skip("the filesystem server", test, Filesystem::find())
    }

    /// The command line that serves `root` over stdio: program, arguments.
    pub fn command(&self, root: &Path) -> (String, Vec<String>) {
        let path = |p: &Path| p.display().to_string();
        (path(&self.node), vec![path(&self.entry), path(root)])
    }

    /// A `[[servers]]` entry serving `root` as `name`, with `extra` TOML
    /// lines (each ending in a newline) inside the entry.
    pub fn server_toml(&self, name: &str, root: &Path, extra: &str) -> String {
        let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
        let (program, args) = self.command(root);
        let args: Vec<String> = args.iter().map(|a| q(a)).collect();
        format!(
            "\n[[servers]]\nname = {}\ncommand = {}\nargs = [{}]\n{extra}",
            q(name),
            q(&program),
            args.join(", "),
        )
    }
}
