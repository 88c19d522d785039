//! A PostgreSQL primary with a synchronous streaming standby, both on
//! loopback, for failover tests: the primary can be killed (`SIGKILL` of
//! its postmaster, as a machine loss looks to its clients) and the standby
//! promoted, as Patroni or an operator would.
//!
//! Built the way a team builds one: `initdb` the primary, `pg_basebackup
//! -R` (which writes `primary_conninfo` and `standby.signal`) into the
//! standby's directory, start the standby under the `cluster_name` its WAL
//! receiver reports, then name it in the primary's
//! `synchronous_standby_names`: from then on a commit returns only once the
//! standby has flushed it.

use std::time::{Duration, Instant};

use sqlx::{AssertSqlSafe, Connection as _, Executor as _};

use super::*;

/// The standby's name as its WAL receiver reports it (`cluster_name`).
const STANDBY_NAME: &str = "mcptask_standby";

/// A primary and its synchronous standby, each a private cluster in a
/// temporary directory; both stopped (immediately) and removed on drop.
pub struct ReplicatedPair {
    primary: Cluster,
    standby: Cluster,
    primary_port: u16,
    standby_port: u16,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl ReplicatedPair {
    /// Set the pair up and wait until the standby streams synchronously,
    /// or `None` (after a loud SKIPPED line naming `test`) when PostgreSQL's
    /// tools are missing outside CI.
    pub async fn start(test: &str) -> Option<ReplicatedPair> {
        crate::peers::or_skip_with(
            "a replicated PostgreSQL",
            test,
            "install initdb, pg_ctl and pg_basebackup",
            Self::try_start().await,
        )
    }

    async fn try_start() -> Result<ReplicatedPair> {
        let temp = || {
            tempfile::Builder::new()
                .prefix("mcptask-replicated-pg-")
                .tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))
        };
        let dirs = (temp()?, temp()?);
        let as_postgres = running_as_root();
        let primary = Cluster {
            dir: dirs.0.path().to_path_buf(),
            as_postgres,
        };
        let standby = Cluster {
            dir: dirs.1.path().to_path_buf(),
            as_postgres,
        };
        let (p, s) = (primary.clone(), standby.clone());
        let (primary_port, standby_port) = blocking(move || {
            p.init_fresh()?;
            let primary_port = p.start_on_free_port("")?;
            let bins = PgBinaries::find()?;
            s.make_empty_dir(&bins)?;
            let basebackup = bins
                .pg_ctl
                .parent()
                .map(|bin| bin.join("pg_basebackup"))
                .filter(|tool| tool.is_file())
                .ok_or("pg_basebackup not found beside pg_ctl")?;
            run_checked(
                s.tool(&basebackup)
                    .arg("-D")
                    .arg(s.data_dir())
                    .args(["-R", "-X", "stream", "--checkpoint=fast", "-h", "127.0.0.1"])
                    .args(["-p", &primary_port.to_string(), "-U", PG_USER]),
            )?;
            let standby_port = s.start_on_free_port(&format!("-c cluster_name={STANDBY_NAME}"))?;
            Ok((primary_port, standby_port))
        })
        .await?;
        let pair = ReplicatedPair {
            primary,
            standby,
            primary_port,
            standby_port,
            _dirs: dirs,
        };
        pair.make_synchronous().await?;
        Ok(pair)
    }

    /// Name the standby in `synchronous_standby_names` and wait until the
    /// primary reports it `sync`.
    async fn make_synchronous(&self) -> Result<()> {
        let admin = admin_url(self.primary_port);
        let mut conn = connect(&admin)
            .await
            .map_err(|e| format!("cannot connect to the primary: {e}"))?;
        conn.execute(AssertSqlSafe(format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'"
        )))
        .await
        .map_err(|e| format!("cannot set synchronous_standby_names: {e}"))?;
        conn.execute("SELECT pg_reload_conf()")
            .await
            .map_err(|e| format!("cannot reload the primary: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state: Option<String> = sqlx::query_scalar(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1",
            )
            .bind(STANDBY_NAME)
            .fetch_optional(&mut conn)
            .await
            .map_err(|e| format!("cannot read pg_stat_replication: {e}"))?;
            if state.as_deref() == Some("sync") {
                let _ = conn.close().await;
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the standby did not become synchronous within 30 s (sync_state {state:?}); its log:\n{}",
                    log_tail(&self.standby.log_file(), 30).unwrap_or_default()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The primary's port (127.0.0.1).
    pub fn primary_port(&self) -> u16 {
        self.primary_port
    }

    /// The standby's port (127.0.0.1).
    pub fn standby_port(&self) -> u16 {
        self.standby_port
    }

    /// Create a fresh database on the primary (replicated to the standby)
    /// and return its name.
    pub async fn fresh_database(&self) -> String {
        let url = create_database(&admin_url(self.primary_port))
            .await
            .unwrap_or_else(|e| panic!("replicated PostgreSQL: {e}"));
        url.rsplit('/').next().expect("a database name").to_string()
    }

    /// `postgres://postgres@127.0.0.1:PRIMARY,127.0.0.1:STANDBY/DATABASE?target_session_attrs=read-write`.
    pub fn host_list_url(&self, database: &str) -> String {
        format!(
            "postgres://{PG_USER}@127.0.0.1:{},127.0.0.1:{}/{database}?target_session_attrs=read-write",
            self.primary_port, self.standby_port
        )
    }

    /// The URL of `database` on the primary alone.
    pub fn primary_url(&self, database: &str) -> String {
        format!(
            "postgres://{PG_USER}@127.0.0.1:{}/{database}",
            self.primary_port
        )
    }

    /// The URL of `database` on the standby alone.
    pub fn standby_url(&self, database: &str) -> String {
        format!(
            "postgres://{PG_USER}@127.0.0.1:{}/{database}",
            self.standby_port
        )
    }

    /// `SIGKILL` the primary's postmaster: its port closes at once, and its
    /// backends end when they notice (their clients' connections break).
    /// Nothing is checkpointed or shipped any more.
    pub fn kill_primary(&self) {
        let pid = self
            .primary
            .postmaster_pid()
            .expect("the primary's postmaster.pid");
        crate::process::sigkill(pid);
    }

    /// `pg_ctl promote -w` the standby: returns once it accepts writes, with
    /// how long the promotion took.
    pub async fn promote_standby(&self) -> Duration {
        let began = Instant::now();
        let standby = self.standby.clone();
        blocking(move || {
            let bins = PgBinaries::find()?;
            run_checked(
                standby
                    .tool(&bins.pg_ctl)
                    .arg("-D")
                    .arg(standby.data_dir())
                    .args(["-w", "promote"]),
            )
        })
        .await
        .unwrap_or_else(|e| panic!("promote the standby: {e}"));
        began.elapsed()
    }

    /// The ends of both servers' logs (for failure messages).
    pub fn log_tails(&self, lines: usize) -> String {
        format!(
            "--- primary ---\n{}\n--- standby ---\n{}",
            log_tail(&self.primary.log_file(), lines).unwrap_or_default(),
            log_tail(&self.standby.log_file(), lines).unwrap_or_default()
        )
    }
}

impl Drop for ReplicatedPair {
    fn drop(&mut self) {
        let Ok(bins) = PgBinaries::find() else { return };
        for cluster in [&self.standby, &self.primary] {
            if cluster.postmaster_running() {
                let _ = run_checked(
                    cluster
                        .tool(&bins.pg_ctl)
                        .arg("-D")
                        .arg(cluster.data_dir())
                        .args(["-m", "immediate", "stop"]),
                );
            }
        }
    }
}
