//! A stdio transport to a child process that keeps the raw JSON of the
//! answers rmcp would lose on decode: the `initialize` result (SEP-1686's
//! `capabilities.tasks`) and `tools/list` results (each tool's
//! `execution.taskSupport`). Everything else passes through untouched.
//!
//! It is a `(Sink, Stream)` pair over the child's pipes, which rmcp accepts
//! as a transport. The child is owned by both halves and killed when rmcp
//! drops the transport (session closed or dropped).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::{Sink, Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// What the tap saw of a session.
#[derive(Default)]
pub(crate) struct Tap {
    /// Request ids (as JSON text) of the requests whose answers are kept.
    watched: Mutex<HashMap<String, Watched>>,
    initialize: Mutex<Option<Value>>,
    tools: Mutex<Vec<Value>>,
    /// How many `notifications/progress` lines the child has written so far
    /// (lets a call know how many progress events precede its answer).
    progress_lines: AtomicU64,
}

#[derive(Clone, Copy)]
enum Watched {
    Initialize,
    /// The first page resets the collected tools.
    Tools {
        first_page: bool,
    },
}

impl Tap {
    /// The raw `initialize` result, once answered.
    pub(crate) fn initialize(&self) -> Option<Value> {
        self.initialize.lock().expect("tap lock").clone()
    }

    /// The raw tool definitions of the last complete `tools/list`.
    pub(crate) fn tools(&self) -> Vec<Value> {
        self.tools.lock().expect("tap lock").clone()
    }

    pub(crate) fn progress_lines(&self) -> u64 {
        self.progress_lines.load(Ordering::SeqCst)
    }

    fn outgoing(&self, msg: &Value) {
        let watch = match msg.get("method").and_then(Value::as_str) {
            Some("initialize") => Watched::Initialize,
            Some("tools/list") => Watched::Tools {
                first_page: msg.pointer("/params/cursor").is_none_or(Value::is_null),
            },
            _ => return,
        };
        if let Some(id) = msg.get("id") {
            self.watched
                .lock()
                .expect("tap lock")
                .insert(id.to_string(), watch);
        }
    }

    fn incoming(&self, msg: &Value) {
        if msg.get("method").and_then(Value::as_str) == Some("notifications/progress") {
            self.progress_lines.fetch_add(1, Ordering::SeqCst);
            return;
        }
        let Some(id) = msg.get("id").filter(|_| msg.get("method").is_none()) else {
            return;
        };
        let Some(watch) = self
            .watched
            .lock()
            .expect("tap lock")
            .remove(&id.to_string())
        else {
            return;
        };
        let Some(result) = msg.get("result") else {
            return;
        };
        match watch {
            Watched::Initialize => {
                *self.initialize.lock().expect("tap lock") = Some(result.clone())
            }
            Watched::Tools { first_page } => {
                let mut tools = self.tools.lock().expect("tap lock");
                if first_page {
                    tools.clear();
                }
                if let Some(page) = result.get("tools").and_then(Value::as_array) {
                    tools.extend(page.iter().cloned());
                }
            }
        }
    }
}

/// Ask the kernel to kill the child when the thread that spawned it dies
/// (Linux): with `kill_on_drop` this covers an orderly drop, and this covers
/// a SIGKILLed proxy, which would otherwise leave a child that does not exit
/// on stdin EOF (the everything server keeps running). The signal follows
/// the spawning *thread*: a tokio worker, which lives as long as the
/// runtime. (A spawn from a thread that exits early, e.g. inside
/// `block_in_place`, would lose its child with the thread; nothing here does.)
pub(crate) fn tie_to_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// Spawn `cmd` and return an rmcp transport over its pipes, with its tap.
/// The child's stderr goes to `tracing` at debug level.
pub(crate) fn spawn(
    mut cmd: Command,
) -> std::io::Result<(
    impl Sink<ClientJsonRpcMessage, Error = std::io::Error> + Send + Unpin + 'static,
    impl Stream<Item = ServerJsonRpcMessage> + Send + Unpin + 'static,
    Arc<Tap>,
)> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    tie_to_parent(&mut cmd);
    let mut child = cmd.spawn()?;
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    if let Some(stderr) = child.stderr.take() {
        let pid = child.id();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(pid, "upstream stderr: {line}");
            }
        });
    }
    let child = Arc::new(ChildGuard(Mutex::new(child)));
    let tap = Arc::new(Tap::default());

    let sink_state = (stdin, tap.clone(), child.clone());
    let sink = Box::pin(futures::sink::unfold(
        sink_state,
        |(mut stdin, tap, child), msg: ClientJsonRpcMessage| async move {
            let value = serde_json::to_value(&msg).map_err(std::io::Error::other)?;
            tap.outgoing(&value);
            let mut line = serde_json::to_vec(&value).map_err(std::io::Error::other)?;
            line.push(b'\n');
            stdin.write_all(&line).await?;
            stdin.flush().await?;
            Ok::<_, std::io::Error>((stdin, tap, child))
        },
    ));

    let lines = BufReader::new(stdout).lines();
    let stream = Box::pin(
        futures::stream::unfold(
            (lines, tap.clone(), child),
            |(mut lines, tap, child)| async move {
                loop {
                    match lines.next_line().await {
                        Ok(Some(line)) if line.trim().is_empty() => continue,
                        Ok(Some(line)) => {
                            let Ok(value) = serde_json::from_str::<Value>(&line) else {
                                tracing::debug!("upstream wrote a non-JSON line: {line}");
                                continue;
                            };
                            tap.incoming(&value);
                            match serde_json::from_value::<ServerJsonRpcMessage>(value) {
                                Ok(msg) => return Some((msg, (lines, tap, child))),
                                Err(e) => {
                                    tracing::debug!(
                                        "upstream message rmcp cannot read ({e}): {line}"
                                    );
                                    continue;
                                }
                            }
                        }
                        // EOF or a read error: the session is over.
                        _ => return None,
                    }
                }
            },
        )
        .fuse(),
    );
    Ok((sink, stream, tap))
}

/// Holds the child so it is killed (`kill_on_drop`) when both halves are gone.
struct ChildGuard(#[allow(dead_code)] Mutex<Child>);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_initialize_and_paged_tools_and_counts_progress() {
        let tap = Tap::default();
        tap.outgoing(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}));
        tap.outgoing(&json!({"jsonrpc":"2.0","id":"a","method":"tools/list"}));
        tap.incoming(
            &json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}),
        );
        tap.incoming(&json!({"jsonrpc":"2.0","id":0,"result":{"capabilities":{"tasks":{}}}}));
        tap.incoming(
            &json!({"jsonrpc":"2.0","id":"a","result":{"tools":[{"name":"x"}],"nextCursor":"c"}}),
        );
        tap.outgoing(
            &json!({"jsonrpc":"2.0","id":"b","method":"tools/list","params":{"cursor":"c"}}),
        );
        tap.incoming(&json!({"jsonrpc":"2.0","id":"b","result":{"tools":[{"name":"y"}]}}));
        // An unwatched answer with a reused id is not taken for a tools page.
        tap.incoming(&json!({"jsonrpc":"2.0","id":"a","result":{"tools":[]}}));
        assert_eq!(tap.initialize(), Some(json!({"capabilities":{"tasks":{}}})));
        assert_eq!(tap.tools(), vec![json!({"name":"x"}), json!({"name":"y"})]);
        assert_eq!(tap.progress_lines(), 1);
    }
}
