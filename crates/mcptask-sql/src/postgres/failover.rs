//! Following the primary of a host list: the pool connects to one host at a
//! time (the current one), and a watcher moves it when that host stops
//! accepting writes (it died, or it was demoted) to the first host of the
//! list that does (the promoted standby).
//!
//! The rules, each in one place here:
//!
//! - **A new connection is checked** ([`Primary::admit`], the pool's
//!   `after_connect`): a server in recovery (or read-only, for
//!   `read-write`) is refused, so a standby or a demoted primary never
//!   enters the pool. The pool retries the connect until its acquire
//!   timeout, by then to the host the watcher chose.
//! - **An idle connection from before a switch is closed** when it is next
//!   handed out ([`Primary::keep`], `before_acquire`): it is a session on the
//!   host the pool left.
//! - **The watcher** ([`Primary::watch`]) asks the current host every
//!   [`PROBE_EVERY`] on a session of its own; when it fails or is read-only
//!   it tries the hosts in the URL's order and points the pool at the first
//!   that qualifies (`Pool::set_connect_options`).
//!
//! Statements in flight on the old primary fail with a connection error (or
//! `57P01` admin shutdown, or `25006` read-only on a demoted server): all of
//! them transient to the store's callers (`crate::error::db_err`), which
//! retry them on the new primary. Fenced writes stay fenced: they are SQL
//! conditions, evaluated by whichever server commits them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::Connection as _;
use sqlx::pool::PoolConnectionMetadata;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};

use super::hosts::{HostList, SessionAttrs};

/// How often the watcher asks the current host whether it still accepts
/// writes.
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(500);

/// How long one connect of the watcher (or of opening the store) may take
/// before the host counts as unreachable.
const CONNECT_WITHIN: Duration = Duration::from_secs(2);

/// The hosts of a list and which one the pool uses now.
pub(crate) struct Primary {
    hosts: Vec<PgConnectOptions>,
    /// `host:port` of each, for the log.
    labels: Vec<String>,
    attrs: SessionAttrs,
    current: AtomicUsize,
    /// Bumped on every switch: a session opened under an older generation is
    /// on a host the pool left (the slot's lock session watches it).
    generation: AtomicU64,
    /// When the pool last moved: connections opened before are closed.
    switched_at: Mutex<Instant>,
}

/// Why no host of the list qualifies, host by host.
#[derive(Debug)]
pub(crate) struct NoPrimary(pub(crate) Vec<(String, String)>);

impl std::fmt::Display for NoPrimary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let each: Vec<String> = self
            .0
            .iter()
            .map(|(host, why)| format!("{host}: {why}"))
            .collect();
        write!(f, "{}", each.join("; "))
    }
}

impl Primary {
    /// The hosts of `list`, none chosen yet (host 0 until
    /// [`Primary::choose`]).
    pub(crate) fn new(list: &HostList) -> Result<Primary, sqlx::Error> {
        let hosts = list.connect_options()?;
        let labels = hosts
            .iter()
            .map(|o| format!("{}:{}", o.get_host(), o.get_port()))
            .collect();
        Ok(Primary {
            hosts,
            labels,
            attrs: list.attrs(),
            current: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            switched_at: Mutex::new(Instant::now()),
        })
    }

    /// Change every host's options alike (session settings of the store).
    pub(crate) fn map_options(&mut self, f: impl Fn(PgConnectOptions) -> PgConnectOptions) {
        self.hosts = self.hosts.drain(..).map(f).collect();
    }

    /// The connect options of the current host.
    pub(crate) fn current_options(&self) -> PgConnectOptions {
        self.hosts[self.current.load(Ordering::Acquire)].clone()
    }

    /// How many times the pool moved so far.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether a session qualifies as the list's target: any that answers
    /// for `any`; otherwise one not in recovery, and for `read-write` not
    /// read-only either. An error: the session does not answer.
    async fn qualifies(&self, conn: &mut PgConnection) -> Result<Result<(), String>, sqlx::Error> {
        if self.attrs == SessionAttrs::Any {
            // Still a round trip: the watcher's probe must notice a dead host.
            conn.ping().await?;
            return Ok(Ok(()));
        }
        let (recovery, read_only): (bool, String) =
            sqlx::query_as("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
                .fetch_one(&mut *conn)
                .await?;
        Ok(if recovery {
            Err("a standby (in recovery)".to_string())
        } else if self.attrs == SessionAttrs::ReadWrite && read_only == "on" {
            Err("read-only (default_transaction_read_only)".to_string())
        } else {
            Ok(())
        })
    }

    /// The pool's `after_connect`: refuse a session on a server that does
    /// not qualify. The pool then tries again (by then, usually, to the
    /// host the watcher moved it to).
    pub(crate) async fn admit(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        match self.qualifies(conn).await? {
            Ok(()) => Ok(()),
            Err(why) => Err(sqlx::Error::Protocol(format!(
                "refused a connection to a server that is {why}: waiting for the primary of the host list"
            ))),
        }
    }

    /// The pool's `before_acquire` part: keep only connections opened since
    /// the last switch.
    pub(crate) fn keep(&self, meta: &PoolConnectionMetadata) -> bool {
        let switched = *self.switched_at.lock().expect("switch time");
        Instant::now()
            .checked_sub(meta.age)
            .is_none_or(|opened| opened >= switched)
    }

    /// Try each host in the URL's order; the first that qualifies, or why
    /// none does.
    pub(crate) async fn find(&self) -> Result<usize, NoPrimary> {
        let mut why = Vec::new();
        for (i, options) in self.hosts.iter().enumerate() {
            let outcome = async {
                let mut conn =
                    tokio::time::timeout(CONNECT_WITHIN, PgConnection::connect_with(options))
                        .await
                        .map_err(|_| format!("no answer within {CONNECT_WITHIN:?}"))?
                        .map_err(|e| {
                            crate::diagnose::postgres_reason(options, &self.labels[i], &e)
                        })?;
                let verdict = self.qualifies(&mut conn).await.map_err(|e| e.to_string());
                let _ = conn.close().await;
                verdict?
            }
            .await;
            match outcome {
                Ok(()) => return Ok(i),
                Err(reason) => why.push((self.labels[i].clone(), reason)),
            }
        }
        Err(NoPrimary(why))
    }

    /// Make host `i` the current one and point `pool` (if any yet) at it.
    /// A move (or `renew`: the server behind the same address changed)
    /// retires every connection opened before.
    pub(crate) fn choose(&self, i: usize, pool: Option<&PgPool>, renew: bool) {
        let before = self.current.swap(i, Ordering::AcqRel);
        if let Some(pool) = pool {
            pool.set_connect_options(self.hosts[i].clone());
        }
        if before != i || renew {
            *self.switched_at.lock().expect("switch time") = Instant::now();
            self.generation.fetch_add(1, Ordering::AcqRel);
            tracing::warn!(
                from = %self.labels[before],
                to = %self.labels[i],
                "the database primary moved; the pool now connects to the new one"
            );
        }
    }

    /// Watch the current host every [`PROBE_EVERY`] and move `pool` when it
    /// no longer qualifies. Runs until the pool is closed (or the task is
    /// aborted with the store).
    pub(crate) async fn watch(self: Arc<Self>, pool: PgPool) {
        let mut probe: Option<PgConnection> = None;
        let mut outage_logged = false;
        // The current host answered but no longer qualified (demoted): the
        // pool's connections to it must go even if the same address
        // qualifies again (a `-rw` name now pointing at the new primary).
        let mut disqualified = false;
        let mut ticks = tokio::time::interval(PROBE_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !pool.is_closed() {
            ticks.tick().await;
            if let Some(conn) = probe.as_mut() {
                match tokio::time::timeout(CONNECT_WITHIN, self.qualifies(conn)).await {
                    Ok(Ok(Ok(()))) => continue,
                    Ok(Ok(Err(_))) => disqualified = true,
                    _ => {}
                }
            }
            probe = None;
            match self.find().await {
                Ok(i) => {
                    self.choose(i, Some(&pool), disqualified);
                    disqualified = false;
                    outage_logged = false;
                    probe = tokio::time::timeout(
                        CONNECT_WITHIN,
                        PgConnection::connect_with(&self.hosts[i]),
                    )
                    .await
                    .ok()
                    .and_then(Result::ok);
                }
                Err(why) if !outage_logged => {
                    outage_logged = true;
                    tracing::warn!(hosts = %why, "no host of the database list accepts writes now; looking again every {PROBE_EVERY:?}");
                }
                Err(_) => {}
            }
        }
    }
}

/// Aborts the watcher when the last handle of the store is dropped.
pub(crate) struct Watcher(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for Watcher {
    fn drop(&mut self) {
        self.0.abort();
    }
}
