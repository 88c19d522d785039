//! The push listener of one server: keeps a `subscriptions/listen` stream open
//! for the server's live tasks and turns each notification into "poll this
//! task now".
//!
//! The loop: read the server's live tasks from the store; open a stream for
//! them; when it is acknowledged, poll at once the tasks it newly covers (they
//! may have changed before it existed); then follow it. A task tracked later
//! opens a new stream for the larger set (the old one is closed once the new
//! one is acknowledged). A stream the server ends gracefully is reopened for
//! whatever is still live; a lost one is reopened with backoff, and every
//! task is then polled once (changes may have been missed meanwhile). A
//! server that refuses the method is asked again only after a long pause.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use mcptask_core::client::{ListFilter, RemoteDriver};
use tokio::sync::broadcast::error::RecvError;

use super::subscription::{End, Heard, Subscription};
use crate::remote::{ServerDef, Transport};
use crate::shared::Inner;

/// Live tasks one stream watches at most (the server's own bound); tasks
/// beyond it are polled on their schedule only.
const MAX_WATCHED: i64 = 1024;
/// First wait before reopening a lost stream; doubles up to [`MAX_BACKOFF`].
const BASE_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Wait before asking again a server that refused the method.
const REFUSED_RETRY: Duration = Duration::from_secs(300);
/// Re-read the server's live tasks this often, for tasks another tracker
/// process recorded (this process hears only of its own).
const RESCAN_EVERY: Duration = Duration::from_secs(10);
/// Let a burst of newly tracked tasks gather into one new stream.
const GATHER: Duration = Duration::from_millis(20);

/// Ids of tasks already found not to call for a new stream (another
/// server's, settled, or older than every task a full stream watches) are
/// remembered up to this many, then forgotten all at once.
const MAX_SEEN: usize = 65_536;

/// The tasks a stream watches: local id per remote id, and what a new task
/// must be to displace one of them.
#[derive(Default)]
struct Watched {
    by_remote: HashMap<String, String>,
    locals: HashSet<String>,
    /// The oldest watched task's creation time, when the stream is full.
    full_from: Option<i64>,
}

impl Watched {
    /// `rows` (remote id, local id, creation time) of a listing that was cut
    /// at its limit when `full`.
    fn new(rows: Vec<(String, String, i64)>, full: bool) -> Self {
        let full_from = full
            .then(|| rows.iter().map(|(_, _, at)| *at).min())
            .flatten();
        let locals = rows.iter().map(|(_, l, _)| l.clone()).collect();
        let by_remote = rows.into_iter().map(|(r, l, _)| (r, l)).collect();
        Watched {
            by_remote,
            locals,
            full_from,
        }
    }

    fn is_empty(&self) -> bool {
        self.by_remote.is_empty()
    }

    fn local_of(&self, remote: &str) -> Option<&String> {
        self.by_remote.get(remote)
    }

    fn covers(&self, local: &str) -> bool {
        self.locals.contains(local)
    }

    /// Whether a live task created at `created_at` belongs in a new stream:
    /// always while this one has room; once it is full (the newest
    /// [`MAX_WATCHED`]), only if it is newer than all it watches. An older
    /// one is polled on its schedule, and must not cost a rescan of the
    /// server's live tasks at each of its polls (that was a read of 1,024
    /// rows per poll once more tasks were live than a stream watches).
    fn would_take(&self, created_at: i64) -> bool {
        self.full_from.is_none_or(|oldest| created_at > oldest)
    }
}

/// Remember a task that needs no new stream, forgetting all once too many.
fn remember(seen: &mut HashSet<String>, local: &str) {
    if seen.len() >= MAX_SEEN {
        seen.clear();
    }
    seen.insert(local.to_string());
}

/// A stream and what it watches.
struct Live {
    subscription: Subscription,
    watched: Watched,
    /// Whether the stream has brought any notification yet.
    heard_any: bool,
}

enum Next {
    /// Look at the live tasks again (a new one may need a new stream).
    Rescan,
    /// The server ended the stream (every watched task ended): open a new
    /// one for whatever is live now.
    Finished,
    /// The stream is gone; back off before reopening.
    Lost,
    /// The server ended the stream without reporting anything: reopen at
    /// once the first time (its tasks may have ended in a window the stream
    /// did not see, and a new task may be waiting), back off if it repeats.
    EndedUnheard,
    /// The server does not serve task notifications.
    Refused,
    /// The tracker is stopping or the server was removed.
    Stop,
}

/// Run the listener of server `name` until shutdown or the server's removal.
pub(super) async fn run(inner: Arc<Inner>, name: String) {
    let mut changes = inner.changes.subscribe();
    let mut live: Option<Live> = None;
    // Outlives each stream: a task already looked at costs no read again.
    let mut seen: HashSet<String> = HashSet::new();
    let mut backoff = BASE_BACKOFF;
    // Streams in a row that ended without reporting anything.
    let mut unheard = 0u32;
    loop {
        // Shutdown must not wait for a connect or an acknowledgement.
        let next = tokio::select! {
            _ = inner.shutdown.cancelled() => Next::Stop,
            next = step(&inner, &name, &mut live, &mut changes, &mut backoff, &mut seen) => next,
        };
        // A stream that reported something, or a new task to cover, ends
        // the streak.
        if matches!(next, Next::Finished | Next::Rescan) {
            unheard = 0;
        }
        let mut back_off = || {
            let pause = backoff;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            pause
        };
        let pause = match next {
            Next::Rescan | Next::Finished => Duration::ZERO,
            Next::EndedUnheard => {
                unheard += 1;
                if unheard == 1 {
                    Duration::ZERO
                } else {
                    back_off()
                }
            }
            Next::Lost => back_off(),
            Next::Refused => REFUSED_RETRY,
            Next::Stop => break,
        };
        if matches!(
            next,
            Next::Lost | Next::EndedUnheard | Next::Refused | Next::Finished
        ) && let Some(old) = live.take()
        {
            old.subscription.close().await;
        }
        if !pause.is_zero() {
            tokio::select! {
                _ = inner.shutdown.cancelled() => break,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
    if let Some(old) = live.take() {
        old.subscription.close().await;
    }
}

/// One turn: make sure a stream covers the live tasks, then follow it until
/// something calls for another look.
async fn step(
    inner: &Inner,
    name: &str,
    live: &mut Option<Live>,
    changes: &mut tokio::sync::broadcast::Receiver<String>,
    backoff: &mut Duration,
    seen: &mut HashSet<String>,
) -> Next {
    let Some(def) = http_server(inner, name) else {
        return Next::Stop;
    };
    let watched = match live_tasks(inner, name).await {
        Ok(w) => w,
        Err(e) => {
            tracing::debug!(server = name, error = %e, "push: cannot list live tasks");
            return Next::Lost;
        }
    };
    if watched.is_empty() {
        if let Some(old) = live.take() {
            old.subscription.close().await;
        }
        return idle(inner, name, &Watched::default(), changes, seen).await;
    }
    let covered: HashSet<&String> = live
        .as_ref()
        .map(|l| l.watched.by_remote.keys().collect())
        .unwrap_or_default();
    let fresh: Vec<String> = watched
        .by_remote
        .iter()
        .filter(|(remote, _)| !covered.contains(remote))
        .map(|(_, local)| local.clone())
        .collect();
    if !fresh.is_empty() {
        match open(&def, &watched).await {
            Ok(subscription) => {
                *backoff = BASE_BACKOFF;
                if let Some(old) = live.take() {
                    follow_buffered(inner, old).await;
                }
                // Changes before the stream existed are not on it.
                for local in &fresh {
                    poll_now(inner, local).await;
                }
                *live = Some(Live {
                    subscription,
                    watched,
                    heard_any: false,
                });
            }
            Err(End::Refused(why)) => {
                tracing::info!(
                    server = name,
                    why,
                    "push: the server does not serve task notifications; polling only"
                );
                return Next::Refused;
            }
            Err(End::Lost(why)) => {
                tracing::debug!(
                    server = name,
                    why,
                    "push: cannot subscribe; polling meanwhile"
                );
                return Next::Lost;
            }
            // Ended before acknowledging: as good as lost.
            Err(End::Finished) => return Next::Lost,
        }
    }
    let current = live.as_mut().expect("a live stream");
    follow(inner, name, current, changes, seen).await
}

/// Open a stream for `watched` and wait for its acknowledgement.
async fn open(def: &ServerDef, watched: &Watched) -> Result<Subscription, End> {
    let ids: Vec<String> = watched.by_remote.keys().cloned().collect();
    let mut subscription = Subscription::open(def, ids)
        .await
        .map_err(|e| End::Lost(e.to_string()))?;
    let bound = def.connect_timeout.unwrap_or(Duration::from_secs(30));
    let acknowledged = tokio::time::timeout(bound, async {
        loop {
            tokio::select! {
                heard = subscription.heard.recv() => match heard {
                    Some(Heard::Acknowledged) => return Ok(()),
                    Some(Heard::Changed(_)) => {}
                    None => return Err(End::Lost("the session closed".into())),
                },
                end = Subscription::ended(&mut subscription.response) => return Err(end),
            }
        }
    })
    .await;
    match acknowledged {
        Ok(Ok(())) => Ok(subscription),
        Ok(Err(end)) => {
            subscription.close().await;
            Err(end)
        }
        Err(_) => {
            subscription.close().await;
            Err(End::Lost("no acknowledgement in time".into()))
        }
    }
}

/// Act on what an old stream already brought, then close it.
async fn follow_buffered(inner: &Inner, mut old: Live) {
    while let Ok(heard) = old.subscription.heard.try_recv() {
        if let Heard::Changed(remote) = heard
            && let Some(local) = old.watched.local_of(&remote)
        {
            poll_now(inner, local).await;
        }
    }
    old.subscription.close().await;
}

/// Follow a stream until it ends, a new task of this server is tracked, or
/// the periodic rescan is due.
async fn follow(
    inner: &Inner,
    name: &str,
    live: &mut Live,
    changes: &mut tokio::sync::broadcast::Receiver<String>,
    seen: &mut HashSet<String>,
) -> Next {
    let rescan = tokio::time::sleep(RESCAN_EVERY);
    tokio::pin!(rescan);
    loop {
        tokio::select! {
            _ = inner.shutdown.cancelled() => return Next::Stop,
            _ = &mut rescan => return Next::Rescan,
            heard = live.subscription.heard.recv() => match heard {
                Some(Heard::Changed(remote)) => {
                    live.heard_any = true;
                    if let Some(local) = live.watched.local_of(&remote) {
                        poll_now(inner, local).await;
                    }
                }
                Some(Heard::Acknowledged) => {}
                None => return Next::Lost,
            },
            end = Subscription::ended(&mut live.subscription.response) => {
                // What the stream brought before it ended may still be queued.
                while let Ok(heard) = live.subscription.heard.try_recv() {
                    if let Heard::Changed(remote) = heard {
                        live.heard_any = true;
                        if let Some(local) = live.watched.local_of(&remote) {
                            poll_now(inner, local).await;
                        }
                    }
                }
                return match end {
                    // Every watched task ended: look again at what is live.
                    End::Finished if live.heard_any => Next::Finished,
                    // Ended without reporting anything while the tasks are
                    // live here: they ended in a window the stream did not
                    // see (the usual case: a task settling while its stream
                    // was being replaced), or the server accepted none of
                    // them. The first time, reopen at once (reopening polls
                    // every task): waiting would delay a task created
                    // meanwhile by the whole pause. In a row, back off as
                    // after a lost stream, so a server that accepts none
                    // cannot make this spin (not the long pause of a
                    // refusal, which left push off for minutes).
                    End::Finished => Next::EndedUnheard,
                    End::Refused(_) => Next::Refused,
                    End::Lost(why) => {
                        tracing::debug!(server = name, why, "push: stream lost; polling meanwhile, reconnecting");
                        Next::Lost
                    }
                };
            }
            change = changes.recv() => match change {
                Ok(local) => {
                    if is_new_task_of(inner, name, &local, &live.watched, seen).await {
                        tokio::time::sleep(GATHER).await;
                        return Next::Rescan;
                    }
                }
                Err(RecvError::Lagged(_)) => return Next::Rescan,
                Err(RecvError::Closed) => return Next::Stop,
            },
        }
    }
}

/// Wait (no live task) for a task of this server to be tracked, or the rescan.
async fn idle(
    inner: &Inner,
    name: &str,
    watched: &Watched,
    changes: &mut tokio::sync::broadcast::Receiver<String>,
    seen: &mut HashSet<String>,
) -> Next {
    let rescan = tokio::time::sleep(RESCAN_EVERY);
    tokio::pin!(rescan);
    loop {
        tokio::select! {
            _ = inner.shutdown.cancelled() => return Next::Stop,
            _ = &mut rescan => return Next::Rescan,
            change = changes.recv() => match change {
                Ok(local) => {
                    if is_new_task_of(inner, name, &local, watched, seen).await {
                        tokio::time::sleep(GATHER).await;
                        return Next::Rescan;
                    }
                }
                Err(RecvError::Lagged(_)) => return Next::Rescan,
                Err(RecvError::Closed) => return Next::Stop,
            },
        }
    }
}

/// Whether local task `local` is a live SEP-2663 task of server `name` that
/// a new stream would cover and `watched` does not. Every other task is
/// remembered in `seen`, so its frequent changes (one per poll) cost one
/// read in all, not one each.
async fn is_new_task_of(
    inner: &Inner,
    name: &str,
    local: &str,
    watched: &Watched,
    seen: &mut HashSet<String>,
) -> bool {
    if seen.contains(local) || watched.covers(local) {
        return false;
    }
    match inner.store.get_remote(local).await {
        Ok(Some(r))
            if r.server == name
                && !r.status.is_terminal()
                && r.driver == RemoteDriver::Sep2663
                && watched.would_take(r.created_at) =>
        {
            true
        }
        Ok(_) => {
            remember(seen, local);
            false
        }
        Err(_) => false,
    }
}

/// The server's definition while it is an HTTP server in the registry.
fn http_server(inner: &Inner, name: &str) -> Option<ServerDef> {
    let (def, _) = inner.servers.get(name)?;
    matches!(def.transport, Transport::Http { .. }).then_some(def)
}

/// The server's live SEP-2663 tasks (newest first, at most [`MAX_WATCHED`]).
async fn live_tasks(inner: &Inner, name: &str) -> Result<Watched, mcptask_core::StoreError> {
    let filter = ListFilter {
        server: Some(name.to_string()),
        active_only: true,
        ..Default::default()
    };
    let rows = inner.store.list_remote(&filter, None, MAX_WATCHED).await?;
    let full = rows.len() as i64 >= MAX_WATCHED;
    Ok(Watched::new(
        rows.into_iter()
            .filter(|r| r.driver == RemoteDriver::Sep2663)
            .map(|r| (r.remote_task_id, r.id, r.created_at))
            .collect(),
        full,
    ))
}

/// "Poll this task now": make its poll due and wake the poll loop. The poll
/// reads the task as usual; the notification itself is only the hint.
async fn poll_now(inner: &Inner, local: &str) {
    if let Err(e) = inner.expedite(local).await {
        tracing::debug!(task = local, error = %e, "push: cannot expedite a poll");
    }
}
