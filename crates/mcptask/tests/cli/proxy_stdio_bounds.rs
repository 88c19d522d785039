//! `mcptask proxy --stdio` against a host that misbehaves: SIGTERM is
//! answered before the host's first message; a line longer than `[api]
//! max_body_bytes` (no newline: a broken host, `/dev/zero`) ends the
//! process with an error instead of being buffered without bound; the end
//! of the input ends it, also after lines that are not JSON-RPC.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use mcptask_testkit::{LoggedChild, proxy_stdio_command, with_deadline};

/// The line `proxy --stdio` writes on stderr once it answers SIGTERM.
const SERVING: &str = "mcptask proxy serving MCP on stdin/stdout";

/// How long an exit may take here: far more than it needs.
const EXIT: Duration = Duration::from_secs(20);

/// `proxy --stdio` on an empty configuration (no servers, no auth),
/// lines up to `max_body_bytes`, its stdin piped to the test.
async fn proxy(
    name: &str,
    dir: &std::path::Path,
    max_body_bytes: usize,
) -> (LoggedChild, tokio::process::ChildStdin) {
    let config = dir.join("mcptask.toml");
    let db = format!("sqlite:{}", dir.join("gateway.db").display());
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = {db:?}\n\n[api]\nauth = \"none\"\nmax_body_bytes = {max_body_bytes}\n"
        ),
    )
    .unwrap();
    LoggedChild::spawn_with_stdin(
        name,
        proxy_stdio_command(&config),
        SERVING,
        Duration::from_secs(60),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The exit status within [`EXIT`], or a panic with the log.
async fn exits(proxy: &mut LoggedChild, why: &str) -> std::process::ExitStatus {
    match tokio::time::timeout(EXIT, proxy.child.wait()).await {
        Ok(status) => status.expect("wait"),
        Err(_) => panic!("{why}: still running after {EXIT:?}; log:\n{}", proxy.log()),
    }
}

/// SIGTERM before the host sent anything: a clean stop. It used to wait
/// for `initialize` (rmcp's handshake was awaited without the stop signal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_before_the_first_message_stops_the_proxy() {
    with_deadline(Duration::from_secs(120), async {
        let dir = tempfile::tempdir().unwrap();
        let (mut proxy, _stdin) = proxy("stdio-sigterm", dir.path(), 1 << 20).await;
        proxy.sigterm();
        let status = exits(&mut proxy, "SIGTERM before initialize").await;
        assert!(status.success(), "{status:?}; log:\n{}", proxy.log());
    })
    .await;
}

/// A host that writes without ever sending a newline: the proxy reads up to
/// the bound, says why on stderr and exits non-zero; the writer sees the
/// pipe close after little more than the bound. It used to buffer the line
/// for as long as input came (50 MB: 81 MB of memory; `/dev/zero`: for
/// ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_over_the_bound_ends_the_proxy_with_an_error() {
    const MAX: usize = 64 * 1024;
    with_deadline(Duration::from_secs(120), async {
        let dir = tempfile::tempdir().unwrap();
        let (mut proxy, mut stdin) = proxy("stdio-long-line", dir.path(), MAX).await;
        let writer = tokio::spawn(async move {
            let chunk = vec![b'x'; 8 * 1024];
            let mut written = 0usize;
            // Far more than the bound; stops when the proxy closes the pipe.
            while written < 200 * MAX {
                if stdin.write_all(&chunk).await.is_err() {
                    break;
                }
                written += chunk.len();
            }
            written
        });
        let status = exits(&mut proxy, "an endless line").await;
        assert!(!status.success(), "{status:?}; log:\n{}", proxy.log());
        assert!(
            proxy
                .logged_within(&format!("longer than {MAX} bytes"), Duration::from_secs(5))
                .await,
            "the reason is on stderr; log:\n{}",
            proxy.log()
        );
        let written = writer.await.unwrap();
        assert!(
            written < 200 * MAX,
            "the proxy read {written} bytes of one line before ending"
        );
    })
    .await;
}

/// Lines that are not JSON-RPC are skipped; the end of the input then ends
/// the proxy, cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_the_input_ends_the_proxy_after_garbage() {
    with_deadline(Duration::from_secs(120), async {
        let dir = tempfile::tempdir().unwrap();
        let (mut proxy, mut stdin) = proxy("stdio-eof", dir.path(), 1 << 20).await;
        for _ in 0..1000 {
            stdin.write_all(b"not json at all\n").await.unwrap();
        }
        drop(stdin);
        let status = exits(&mut proxy, "end of input").await;
        assert!(status.success(), "{status:?}; log:\n{}", proxy.log());
    })
    .await;
}
