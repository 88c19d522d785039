//! `mcptask login SERVER`: authorize mcptask with an upstream server that
//! needs a user (`grant = "authorization_code"`): print the authorization
//! URL (and open a browser with `--open`), take the redirect on a loopback
//! callback, exchange the code with PKCE, and keep the tokens, sealed, in
//! the database `serve` uses. `serve` then refreshes them as they expire.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use async_trait::async_trait;
use mcptask_client::oauth::{OAuthRuntime, UserAgent};
use mcptask_gateway::config::Config;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How long the user has to approve.
const APPROVAL_LIMIT: Duration = Duration::from_secs(300);

/// Takes the user to the authorization server and waits for it to send
/// the browser back to the loopback callback.
struct LoopbackLogin {
    open_browser: bool,
}

fn parse_request_target(head: &str) -> Option<String> {
    let line = head.lines().next()?;
    let mut parts = line.split_whitespace();
    (parts.next()? == "GET").then_some(())?;
    parts.next().map(str::to_string)
}

#[async_trait]
impl UserAgent for LoopbackLogin {
    async fn approve(&self, server: &str, url: &str, redirect_uri: &str) -> Result<String, String> {
        let redirect = reqwest::Url::parse(redirect_uri)
            .map_err(|e| format!("redirect_uri {redirect_uri:?}: {e}"))?;
        let host = redirect.host_str().unwrap_or("127.0.0.1").to_string();
        let port = redirect.port_or_known_default().unwrap_or(80);
        let listener = tokio::net::TcpListener::bind((host.as_str(), port))
            .await
            .map_err(|e| {
                format!(
                    "cannot listen for the callback on {host}:{port}: {e}; free the port or pass --callback-port"
                )
            })?;
        eprintln!("To authorize mcptask with {server:?}, open this URL in a browser:\n\n  {url}\n");
        if self.open_browser {
            let opener = if cfg!(target_os = "macos") {
                "open"
            } else {
                "xdg-open"
            };
            if let Err(e) = std::process::Command::new(opener).arg(url).spawn() {
                eprintln!("(could not start {opener}: {e}; open the URL yourself)");
            }
        }
        eprintln!(
            "Waiting for the authorization server to send the browser back to {redirect_uri} …"
        );
        let wait = async {
            loop {
                let (mut socket, _) = listener.accept().await.map_err(|e| e.to_string())?;
                let mut buf = vec![0u8; 16 * 1024];
                let mut len = 0;
                // A connection that does not send its request head in time
                // is dropped: it must not hold the browser's redirect back.
                let head =
                    tokio::time::timeout(mcptask_gateway::serve::REQUEST_HEAD_TIMEOUT, async {
                        while len < buf.len() {
                            let n = socket.read(&mut buf[len..]).await?;
                            if n == 0 {
                                break;
                            }
                            len += n;
                            if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                                break;
                            }
                        }
                        Ok::<_, std::io::Error>(())
                    })
                    .await;
                match head {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(e.to_string()),
                    Err(_) => continue,
                }
                let head = String::from_utf8_lossy(&buf[..len]).to_string();
                let Some(target) = parse_request_target(&head) else {
                    continue;
                };
                if !target.starts_with(redirect.path()) {
                    let _ = socket
                        .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .await;
                    continue;
                }
                let page = "<!doctype html><title>mcptask</title><p>mcptask is authorized; you can close this window.</p>";
                let _ = socket
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
                            page.len()
                        )
                        .as_bytes(),
                    )
                    .await;
                let mut back = redirect.clone();
                let (path, query) = target.split_once('?').unwrap_or((&target, ""));
                back.set_path(path);
                back.set_query((!query.is_empty()).then_some(query));
                return Ok::<_, String>(back.to_string());
            }
        };
        tokio::time::timeout(APPROVAL_LIMIT, wait)
            .await
            .map_err(|_| format!("no authorization came back within {APPROVAL_LIMIT:?}"))?
    }
}

/// Log in to `server` of the configuration at `config_path`.
pub async fn run(
    config_path: &Path,
    server: &str,
    callback_port: Option<u16>,
    open_browser: bool,
    database_url: Option<String>,
) -> anyhow::Result<()> {
    let config = Config::load(config_path).map_err(|e| anyhow!("{e}"))?;
    let section = config
        .servers
        .iter()
        .find(|s| s.name.get_ref() == server)
        .ok_or_else(|| {
            anyhow!(
                "no server named {server:?} in {}\n  fix: use a [[servers]] name from that file",
                config_path.display()
            )
        })?;
    let Some(oauth) = &section.oauth else {
        bail!(
            "server {server:?} has no [servers.oauth]\n  fix: add [servers.oauth] with grant = \"authorization_code\" (see docs/AUTHORIZATION.md)"
        );
    };
    let url = database_url.unwrap_or_else(|| config.database.url.clone());
    let store = mcptask_sql::open(&url).await?;
    let key = config
        .secret_key(|k| std::env::var(k).ok())
        .map_err(|e| anyhow!("{e}"))?
        .ok_or_else(|| {
            anyhow!(
                "no key to seal the tokens with\n  fix: set MCPTASK_SECRET_KEY (the same one `serve` uses) or [oauth] secret_key_file"
            )
        })?;
    let runtime = OAuthRuntime::with_agent(
        store.oauth_tokens(),
        key,
        Arc::new(mcptask_client::SystemClock),
        Arc::new(LoopbackLogin { open_browser }),
    );
    let mut settings = oauth.get_ref().settings(config.secrets.get(server));
    if let Some(port) = callback_port {
        let mut redirect =
            reqwest::Url::parse(&settings.redirect_uri()).context("redirect_uri is not a URL")?;
        redirect
            .set_port(Some(port))
            .map_err(|_| anyhow!("redirect_uri cannot take a port"))?;
        settings.redirect_uri = Some(redirect.to_string());
    }
    let def = config
        .server_defs()
        .into_iter()
        .find(|d| d.name == server)
        .expect("the server is configured");
    let mcptask_client::Transport::Http {
        url: server_url, ..
    } = &def.transport
    else {
        bail!("server {server:?} is not an HTTP server");
    };
    let auth = runtime.server(server, server_url, &def.hash(), &settings);
    auth.login().await.map_err(|e| anyhow!("{e}"))?;
    let state = runtime.describe(server).await.map_err(|e| anyhow!("{e}"))?;
    eprintln!("logged in to {server:?}: {state}");
    store.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_callback_request_line_gives_the_target() {
        assert_eq!(
            parse_request_target("GET /callback?code=a&state=b HTTP/1.1\r\nHost: x\r\n\r\n")
                .as_deref(),
            Some("/callback?code=a&state=b")
        );
        assert_eq!(
            parse_request_target("POST /callback HTTP/1.1\r\n\r\n"),
            None
        );
    }
}
