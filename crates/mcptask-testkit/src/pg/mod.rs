//! A real, throwaway PostgreSQL database for each test.
//!
//! Two sources, in order of preference:
//!
//! 1. `MCPTASK_TEST_DATABASE_URL`: an admin URL of a server someone else runs
//!    (a CI service container, a developer's local server). Each test gets its
//!    own `mcptask_t_<hex>` database on it.
//! 2. A shared cluster this harness creates with `initdb` and starts with
//!    `pg_ctl`, living next to the build output (`<target>/mcptask-test-pg`).
//!    Every test process of a run (cargo runs several test binaries, nextest
//!    runs one process per test) reuses the same cluster; an exclusive file
//!    lock serialises the check-initialise-start step so exactly one process
//!    starts it.
//!
//! Without either, tests skip loudly, except under CI, where a missing
//! PostgreSQL is an error rather than a silently shrunken test suite.
//!
//! The cluster is disposable: whenever a process finds it not running, it
//! wipes the directory and runs `initdb` again. That bounds disk use (every
//! test leaves a database of a few MB behind) and heals half-initialised or
//! corrupted clusters without anyone having to know about them.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use std::{env, io};

use sqlx::{AssertSqlSafe, Connection as _, Executor as _, PgConnection};

use crate::in_ci;

mod replicated;
pub use replicated::ReplicatedPair;

/// Admin URL of an existing server to create test databases on.
const URL_ENV: &str = "MCPTASK_TEST_DATABASE_URL";
/// Name of the shared cluster directory (and, with `.lock`, of its lock file).
const CLUSTER_DIR_NAME: &str = "mcptask-test-pg";
/// Unprivileged account the cluster runs as when we are root.
const PG_USER: &str = "postgres";
/// A connection attempt that takes longer than this means nobody usable is
/// listening; a healthy local server answers in milliseconds.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bind races (another process grabbing the port we picked) are retried.
const START_ATTEMPTS: usize = 3;

type Result<T, E = String> = std::result::Result<T, E>;

/// URL of a fresh, empty database for one test, or None when PostgreSQL cannot be had and we are not in CI.
/// Under CI=true (env var CI equal to "true" or "1"), failing to get PostgreSQL panics with a clear message.
/// When skipping, prints a loud line to stderr: "SKIPPED (no PostgreSQL): REASON — set MCPTASK_TEST_DATABASE_URL or install initdb/pg_ctl".
pub async fn fresh_database() -> Option<String> {
    let (outcome, cluster) = match env::var(URL_ENV) {
        Ok(admin_url) if !admin_url.is_empty() => (create_database(&admin_url).await, None),
        _ => {
            let cluster = Cluster::locate();
            let outcome = match cluster.admin_url().await {
                Ok(admin_url) => create_database(&admin_url).await,
                Err(e) => Err(e),
            };
            (outcome, Some(cluster))
        }
    };

    match outcome {
        Ok(url) => Some(url),
        Err(reason) if in_ci() => {
            let log = cluster
                .as_ref()
                .and_then(|c| log_tail(&c.log_file(), 40))
                .map(|tail| format!("\n--- tail of PostgreSQL log ---\n{tail}"))
                .unwrap_or_default();
            panic!("PostgreSQL is required under CI but could not be provided: {reason}{log}");
        }
        Err(reason) => {
            // Straight to the process's stderr rather than `eprintln!`: the
            // test harness captures `eprintln!` output of passing tests, and a
            // skip must be visible precisely because the test "passes".
            let _ = writeln!(
                io::stderr(),
                "SKIPPED (no PostgreSQL): {reason} — set {URL_ENV} or install initdb/pg_ctl"
            );
            None
        }
    }
}

/// Stop the shared throwaway cluster, if this harness started one (used by scripts/test at the end). Synchronous.
pub fn stop_shared_cluster() {
    let cluster = Cluster::locate();
    if !cluster.dir.exists() {
        return;
    }
    // Waiting for the lock keeps us from stopping a cluster halfway through
    // another process's start-up.
    let Ok(_lock) = cluster.lock() else { return };
    if cluster.postmaster_running()
        && let Ok(bins) = PgBinaries::find()
    {
        let mut stop = cluster.tool(&bins.pg_ctl);
        let _ = run_checked(
            stop.arg("-D")
                .arg(cluster.data_dir())
                .args(["-m", "fast", "stop"]),
        );
    }
    // Without a port file the next run does not even try to connect.
    let _ = fs::remove_file(cluster.port_file());
}

/// A PostgreSQL cluster of one test alone, in a temporary directory: for
/// tests that restart or stop PostgreSQL, which must never happen to the
/// shared cluster other tests are using. Stopped (immediately) and removed on
/// drop.
///
/// Needs `initdb`/`pg_ctl` (an external `MCPTASK_TEST_DATABASE_URL` cannot be
/// restarted by a test); without them [`PrivateCluster::start`] skips loudly,
/// or panics under CI.
pub struct PrivateCluster {
    cluster: Cluster,
    port: u16,
    /// Removes the directory after the cluster has been stopped.
    _dir: tempfile::TempDir,
}

impl PrivateCluster {
    /// `initdb` and start a cluster of our own, or `None` (after a loud
    /// SKIPPED line) when PostgreSQL's tools are missing outside CI.
    pub async fn start() -> Option<PrivateCluster> {
        let started = blocking(|| {
            let dir = tempfile::Builder::new()
                .prefix("mcptask-private-pg-")
                .tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let cluster = Cluster {
                dir: dir.path().to_path_buf(),
                as_postgres: running_as_root(),
            };
            let port = cluster.start_fresh()?;
            Ok(PrivateCluster {
                cluster,
                port,
                _dir: dir,
            })
        })
        .await;
        match started {
            Ok(private) => match private.cluster.probe(private.port).await {
                Probe::Ours => Some(private),
                _ => private.unavailable(format!(
                    "started a private PostgreSQL on port {} but cannot query it",
                    private.port
                )),
            },
            Err(reason) if in_ci() => {
                panic!(
                    "a private PostgreSQL is required under CI but could not be started: {reason}"
                )
            }
            Err(reason) => {
                let _ = writeln!(
                    io::stderr(),
                    "SKIPPED (no private PostgreSQL): {reason} — install initdb/pg_ctl"
                );
                None
            }
        }
    }

    fn unavailable(&self, reason: String) -> Option<PrivateCluster> {
        let log = log_tail(&self.cluster.log_file(), 40).unwrap_or_default();
        if in_ci() {
            panic!("{reason}\n--- tail of PostgreSQL log ---\n{log}");
        }
        let _ = writeln!(
            io::stderr(),
            "SKIPPED (no private PostgreSQL): {reason}\n{log}"
        );
        None
    }

    /// The port it listens on (127.0.0.1); kept across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// URL of a fresh, empty database on this cluster.
    pub async fn fresh_database(&self) -> String {
        create_database(&admin_url(self.port))
            .await
            .unwrap_or_else(|e| panic!("private PostgreSQL: {e}"))
    }

    /// `pg_ctl restart -m immediate`: every backend is killed without a
    /// checkpoint (every client connection breaks), then the server goes
    /// through crash recovery and listens again on the same port. Returns
    /// how long it took until the server accepted queries again.
    pub async fn restart_immediate(&self) -> Duration {
        let began = std::time::Instant::now();
        self.stop_immediate().await;
        self.start_again().await;
        began.elapsed()
    }

    /// `pg_ctl stop -m immediate`: the server is down (connections refused)
    /// until [`PrivateCluster::start_again`].
    pub async fn stop_immediate(&self) {
        let cluster = self.cluster.clone();
        blocking(move || {
            let bins = PgBinaries::find()?;
            run_checked(
                cluster
                    .tool(&bins.pg_ctl)
                    .arg("-D")
                    .arg(cluster.data_dir())
                    .args(["-m", "immediate", "-w", "stop"]),
            )
        })
        .await
        .unwrap_or_else(|e| panic!("private PostgreSQL: stop: {e}"));
    }

    /// Start the stopped cluster again on its port and wait until it answers
    /// queries.
    pub async fn start_again(&self) {
        let (cluster, port) = (self.cluster.clone(), self.port);
        blocking(move || {
            let bins = PgBinaries::find()?;
            let mut start = cluster.tool(&bins.pg_ctl);
            start
                .arg("-D")
                .arg(cluster.data_dir())
                .arg("-l")
                .arg(cluster.log_file())
                .arg("-o")
                .arg(cluster.server_options(port))
                .args(["-w", "start"]);
            run_checked(&mut start)
        })
        .await
        .unwrap_or_else(|e| panic!("private PostgreSQL: start: {e}"));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !matches!(self.cluster.probe(self.port).await, Probe::Ours) {
            assert!(
                std::time::Instant::now() < deadline,
                "private PostgreSQL did not answer after its restart; log:\n{}",
                log_tail(&self.cluster.log_file(), 40).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The end of the server's log (for failure messages).
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.cluster.log_file(), lines).unwrap_or_default()
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        if self.cluster.postmaster_running()
            && let Ok(bins) = PgBinaries::find()
        {
            let mut stop = self.cluster.tool(&bins.pg_ctl);
            let _ = run_checked(stop.arg("-D").arg(self.cluster.data_dir()).args([
                "-m",
                "immediate",
                "stop",
            ]));
        }
    }
}

/// Create `mcptask_t_<random>` through `admin_url` and return the URL of it.
async fn create_database(admin_url: &str) -> Result<String> {
    // 12 hex digits of a v4 UUID: collisions between concurrent tests are
    // astronomically unlikely, and the name stays short and readable.
    let name = format!(
        "mcptask_t_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let url = with_database(admin_url, &name)?;
    let shown = mcptask_sql::redact(admin_url);

    let mut conn = connect(admin_url)
        .await
        .map_err(|e| format!("cannot connect to {shown}: {e}"))?;
    // The name is `[a-z0-9_]` only, so interpolating it is safe; identifiers
    // cannot be bound as parameters.
    conn.execute(AssertSqlSafe(format!(r#"CREATE DATABASE "{name}""#)))
        .await
        .map_err(|e| format!("CREATE DATABASE {name} on {shown} failed: {e}"))?;
    let _ = conn.close().await;
    Ok(url)
}

/// `url` with its path (the database name) replaced by `database`, keeping
/// the scheme, credentials, host, port and any query parameters.
fn with_database(url: &str, database: &str) -> Result<String> {
    let authority_start = url
        .find("://")
        .map(|i| i + 3)
        .ok_or_else(|| format!("{URL_ENV} is not a URL: {:?}", mcptask_sql::redact(url)))?;
    let rest = &url[authority_start..];
    let authority_end = authority_start + rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let after_path = &url[authority_end..];
    let suffix = &after_path[after_path.find(['?', '#']).unwrap_or(after_path.len())..];
    Ok(format!("{}/{database}{suffix}", &url[..authority_end]))
}

async fn connect(url: &str) -> Result<PgConnection, sqlx::Error> {
    tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect(url))
        .await
        .unwrap_or_else(|_| {
            let message = format!("no answer within {CONNECT_TIMEOUT:?}");
            Err(sqlx::Error::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                message,
            )))
        })
}

/// What is listening on the port recorded in the cluster's `port` file.
enum Probe {
    /// Our cluster, answering queries.
    Ours,
    /// A server that refuses us for lack of resources (SQLSTATE class 53,
    /// e.g. too many connections): alive, so it must not be restarted under
    /// the tests that are using it.
    Busy,
    /// Nothing usable.
    Absent,
}

/// The shared cluster: `<dir>/data` (the cluster), `<dir>/log`, `<dir>/port`,
/// the Unix socket in `<dir>`, and the lock file `<dir>.lock` beside it (it
/// must outlive wiping `<dir>`).
#[derive(Debug, Clone)]
struct Cluster {
    dir: PathBuf,
    /// We are root: PostgreSQL refuses to run as root, so initdb and pg_ctl
    /// run as the `postgres` user, which must own the directory.
    as_postgres: bool,
}

impl Cluster {
    /// Work out where the shared cluster lives. Every process of a run must
    /// arrive at the same answer, so this depends only on the environment,
    /// the executable's location and directory permissions, never on timing.
    fn locate() -> Self {
        let as_postgres = running_as_root();
        // scripts/test names the directory explicitly, so it can stop the
        // cluster without re-deriving this logic.
        if let Some(dir) = env::var_os("MCPTASK_TEST_PG_DIR").filter(|d| !d.is_empty()) {
            return Cluster {
                dir: PathBuf::from(dir),
                as_postgres,
            };
        }
        let dir = match target_dir() {
            // The `postgres` user has to reach the directory; under a
            // root-only home or checkout it cannot, so use /tmp, keyed by the
            // target dir so separate checkouts keep separate clusters.
            Some(target) if as_postgres && !traversable_by_others(&target) => env::temp_dir().join(
                format!("{CLUSTER_DIR_NAME}-{:016x}", fnv1a(target.as_os_str())),
            ),
            Some(target) => target.join(CLUSTER_DIR_NAME),
            None => env::temp_dir().join(CLUSTER_DIR_NAME),
        };
        Cluster { dir, as_postgres }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join("log")
    }

    fn port_file(&self) -> PathBuf {
        self.dir.join("port")
    }

    fn lock_file(&self) -> PathBuf {
        let mut path = self.dir.clone().into_os_string();
        path.push(".lock");
        path.into()
    }

    /// Block until this process holds the cluster lock; it is released when
    /// the returned file is dropped (or the process dies, so a crashed test
    /// cannot wedge later runs).
    fn lock(&self) -> Result<File> {
        let path = self.lock_file();
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot open lock file {}: {e}", path.display()))?;
        file.lock()
            .map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
        Ok(file)
    }

    /// Admin URL of the running shared cluster, starting it if needed.
    async fn admin_url(&self) -> Result<String> {
        let this = self.clone();
        let _lock = blocking(move || this.lock()).await?;

        if let Some(port) = self.recorded_port() {
            match self.probe(port).await {
                Probe::Ours | Probe::Busy => return Ok(admin_url(port)),
                Probe::Absent => {}
            }
        }

        let this = self.clone();
        let port = blocking(move || this.start_fresh()).await?;
        match self.probe(port).await {
            Probe::Ours => Ok(admin_url(port)),
            _ => Err(format!(
                "started PostgreSQL on port {port} but cannot query it (see {})",
                self.log_file().display()
            )),
        }
    }

    fn recorded_port(&self) -> Option<u16> {
        fs::read_to_string(self.port_file())
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Connect to `port` and make sure it is *our* cluster answering: after a
    /// reboot or a crash, the port in a stale `port` file may belong to
    /// anyone, including another PostgreSQL that trusts `postgres`.
    async fn probe(&self, port: u16) -> Probe {
        let check = async {
            let mut conn = connect(&admin_url(port)).await?;
            let dir: String = sqlx::query_scalar("SELECT current_setting('data_directory')")
                .fetch_one(&mut conn)
                .await?;
            let _ = conn.close().await;
            Ok::<_, sqlx::Error>(dir)
        };
        match check.await {
            Ok(dir) if same_path(Path::new(&dir), &self.data_dir()) => Probe::Ours,
            Ok(_) => Probe::Absent,
            Err(sqlx::Error::Database(e))
                if e.code().is_some_and(|code| code.starts_with("53")) =>
            {
                Probe::Busy
            }
            Err(_) => Probe::Absent,
        }
    }

    /// Throw away whatever is in the directory and bring up a new cluster;
    /// returns its port. Runs under the lock, with no server of ours
    /// answering, so nobody can be using the old data.
    fn start_fresh(&self) -> Result<u16> {
        self.init_fresh()?;
        self.start_on_free_port("")
    }

    /// Wipe the directory and `initdb` a new cluster in it (not started).
    fn init_fresh(&self) -> Result<()> {
        let bins = PgBinaries::find()?;
        self.make_empty_dir(&bins)?;
        // --locale=C: independent of the host's locale settings (an unset or
        // uninstalled LANG makes initdb fail) and gives byte-order collation
        // everywhere. --no-sync: a throwaway cluster need not survive a crash.
        run_checked(
            self.tool(&bins.initdb)
                .arg("-D")
                .arg(self.data_dir())
                .args([
                    "-U",
                    PG_USER,
                    "--auth=trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ]),
        )
    }

    /// Stop whatever still runs on the directory and leave it empty, owned
    /// by the user the tools run as.
    fn make_empty_dir(&self, bins: &PgBinaries) -> Result<()> {
        // A postmaster that is alive but unreachable (port file lost,
        // wedged) would keep the data directory locked: stop it hard.
        if self.postmaster_running() {
            let mut stop = self.tool(&bins.pg_ctl);
            let _ =
                run_checked(
                    stop.arg("-D")
                        .arg(self.data_dir())
                        .args(["-m", "immediate", "stop"]),
                );
        }
        if self.dir.exists() {
            fs::remove_dir_all(&self.dir)
                .map_err(|e| format!("cannot remove old cluster {}: {e}", self.dir.display()))?;
        }
        fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        if self.as_postgres {
            let owner = format!("{PG_USER}:{PG_USER}");
            run_checked(Command::new("chown").arg("-R").arg(owner).arg(&self.dir))?;
        }
        Ok(())
    }

    /// Start the initialised cluster on a free port, with `extra` server
    /// options after the usual ones; returns the port.
    fn start_on_free_port(&self, extra: &str) -> Result<u16> {
        let bins = PgBinaries::find()?;
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            let mut start = self.tool(&bins.pg_ctl);
            start
                .arg("-D")
                .arg(self.data_dir())
                .arg("-l")
                .arg(self.log_file());
            start
                .arg("-o")
                .arg(format!("{} {extra}", self.server_options(port)))
                .args(["-w", "start"]);
            match run_checked(&mut start) {
                Ok(_) => {
                    fs::write(self.port_file(), port.to_string())
                        .map_err(|e| format!("cannot write {}: {e}", self.port_file().display()))?;
                    return Ok(port);
                }
                // Most likely someone took the port between our probe and
                // the postmaster's bind; try another one.
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// Server settings, as one string for `pg_ctl -o`, which hands it to a
    /// shell: hence the quoting.
    fn server_options(&self, port: u16) -> String {
        // The socket goes into our own directory: the default
        // (/var/run/postgresql) may be missing or not writable. Unix socket
        // paths are limited to ~107 bytes, though; with a deep target dir,
        // do without the socket (tests use TCP, and `pg_ctl -w` watches
        // postmaster.pid rather than connecting).
        let socket = self.dir.join(format!(".s.PGSQL.{port}"));
        let socket_dirs = if socket.as_os_str().len() < 100 {
            shell_quote(&self.dir.to_string_lossy())
        } else {
            "''".to_owned()
        };
        format!(
            "-p {port} -k {socket_dirs} -c listen_addresses=127.0.0.1 -c fsync=off \
             -c max_connections=400 -c shared_buffers=64MB"
        )
    }

    /// The postmaster's pid as `postmaster.pid` records it, if the file is
    /// there.
    fn postmaster_pid(&self) -> Option<u32> {
        fs::read_to_string(self.data_dir().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()
            .and_then(|line| line.trim().parse::<u32>().ok())
    }

    /// Whether the postmaster recorded in `postmaster.pid` is still alive.
    ///
    /// `pg_ctl stop` signals whatever PID the file names; after a reboot that
    /// PID may belong to an unrelated process (and we may be root), so check
    /// it really is a postgres process first when /proc lets us.
    fn postmaster_running(&self) -> bool {
        let Some(pid) = self.postmaster_pid() else {
            return false;
        };
        let proc = Path::new("/proc");
        if !proc.join("self").exists() {
            return true; // Cannot tell; let pg_ctl decide.
        }
        let process = proc.join(pid.to_string());
        let is_postgres =
            fs::read_to_string(process.join("comm")).is_ok_and(|comm| comm.trim() == "postgres");
        // A dead postmaster can linger as a zombie (containers whose PID 1
        // reaps lazily); it still says "postgres" but is gone. The state is
        // the field after the parenthesised command name in /proc/PID/stat.
        let is_zombie = fs::read_to_string(process.join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        });
        is_postgres && !is_zombie
    }

    /// A command running a PostgreSQL tool, as the `postgres` user when we
    /// are root; the caller adds the tool's arguments.
    fn tool(&self, program: &Path) -> Command {
        let mut command = if self.as_postgres {
            let mut runuser = Command::new("runuser");
            runuser.args(["-u", PG_USER, "--"]).arg(program);
            runuser
        } else {
            Command::new(program)
        };
        // Our working directory (the crate under test) may be unreadable
        // for `postgres`, which makes the tools complain or fail.
        if self.dir.is_dir() {
            command.current_dir(&self.dir);
        }
        command
    }
}

/// Run `command` to completion; a failure carries the command line and the
/// end of its output.
fn run_checked(command: &mut Command) -> Result<()> {
    let shown = format!("{command:?}");
    // stdin from /dev/null: nothing may wait for a terminal. Piped output is
    // safe even for `pg_ctl start`: the server it leaves running has its
    // output redirected to the log, so our pipes reach EOF.
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Err(format!(
        "{shown} failed ({}):\n{}",
        output.status,
        tail(&text, 20)
    ))
}

/// Where `initdb` and `pg_ctl` live (absolute and resolved, so `runuser`'s
/// PATH does not matter).
#[derive(Debug)]
struct PgBinaries {
    initdb: PathBuf,
    pg_ctl: PathBuf,
}

impl PgBinaries {
    /// Both tools from one directory, so they are of the same version: first
    /// on PATH, then Debian's versioned `/usr/lib/postgresql/<v>/bin`,
    /// newest version first.
    fn find() -> Result<Self> {
        let on_path = env::var_os("PATH")
            .map(|p| env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default();
        let mut debian: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let version = entry.file_name().to_str()?.parse().ok()?;
                Some((version, entry.path().join("bin")))
            })
            .collect();
        debian.sort_by_key(|&(version, _)| std::cmp::Reverse(version));

        on_path
            .into_iter()
            .chain(debian.into_iter().map(|(_, bin)| bin))
            .find_map(|dir| {
                let initdb = fs::canonicalize(dir.join("initdb")).ok()?;
                let pg_ctl = fs::canonicalize(dir.join("pg_ctl")).ok()?;
                (initdb.is_file() && pg_ctl.is_file()).then_some(PgBinaries { initdb, pg_ctl })
            })
            .ok_or_else(|| {
                "initdb/pg_ctl not found on PATH nor in /usr/lib/postgresql/*/bin".to_owned()
            })
    }
}

fn admin_url(port: u16) -> String {
    format!("postgres://{PG_USER}@127.0.0.1:{port}/postgres")
}

/// The cargo target directory the test binary was built into.
fn target_dir() -> Option<PathBuf> {
    // A relative CARGO_TARGET_DIR is relative to wherever cargo was started,
    // which tests cannot know (they run in the package directory).
    if let Some(dir) = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
    {
        return Some(dir);
    }
    // Test binaries live in target/<profile>/deps (or
    // target/<triple>/<profile>/deps when cross-compiling).
    let exe = env::current_exe().ok()?;
    exe.ancestors()
        .find(|dir| dir.file_name() == Some(OsStr::new("target")))
        .map(Path::to_path_buf)
}

/// Whether the effective user is root. Reads /proc to avoid a libc
/// dependency; falls back to `id -u` where there is no /proc.
fn running_as_root() -> bool {
    if let Ok(status) = fs::read_to_string("/proc/self/status") {
        // "Uid:\treal\teffective\tsaved\tfilesystem"
        if let Some(uids) = status.lines().find_map(|line| line.strip_prefix("Uid:")) {
            return uids.split_whitespace().nth(1) == Some("0");
        }
    }
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.status.success() && out.stdout.trim_ascii() == b"0")
}

/// Whether a user who is neither owner nor in the group can reach entries
/// under `dir`: every ancestor (including `dir`) must grant others "x".
/// Directories that do not exist yet are skipped so that creating them does
/// not change the answer between processes (in practice cargo has created
/// the target dir before any test binary runs).
#[cfg(unix)]
fn traversable_by_others(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    dir.ancestors()
        .filter_map(|a| fs::metadata(a).ok())
        .all(|m| m.permissions().mode() & 0o001 != 0)
}

#[cfg(not(unix))]
fn traversable_by_others(_dir: &Path) -> bool {
    true
}

/// FNV-1a: a hash that, unlike `DefaultHasher`, is the same in every build,
/// so differently compiled binaries agree on the fallback directory name.
fn fnv1a(bytes: &OsStr) -> u64 {
    bytes
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
            (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

/// A port that was free a moment ago. Racy by nature; `start_fresh` retries.
fn free_port() -> Result<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

fn same_path(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Single-quote for `sh`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.trim_end().lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn log_tail(log: &Path, lines: usize) -> Option<String> {
    fs::read_to_string(log).ok().map(|text| tail(&text, lines))
}

/// Run blocking work (file locks, child processes) off the async runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(format!("PostgreSQL harness task failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fresh_databases_are_separate_and_empty() {
        let Some(first) = fresh_database().await else {
            eprintln!("skipped: no PostgreSQL (see the SKIPPED line above)");
            return;
        };
        let second = fresh_database()
            .await
            .expect("PostgreSQL vanished between two calls");
        assert_ne!(first, second, "each call must get its own database");

        let mut one = PgConnection::connect(&first)
            .await
            .expect("connect to first database");
        let mut two = PgConnection::connect(&second)
            .await
            .expect("connect to second database");
        let probe_exists = "SELECT to_regclass('public.probe') IS NOT NULL";

        sqlx::raw_sql("CREATE TABLE probe (id integer PRIMARY KEY)")
            .execute(&mut one)
            .await
            .expect("create table in first database");
        let in_one: bool = sqlx::query_scalar(probe_exists)
            .fetch_one(&mut one)
            .await
            .unwrap();
        let in_two: bool = sqlx::query_scalar(probe_exists)
            .fetch_one(&mut two)
            .await
            .unwrap();
        assert!(in_one, "table must exist where it was created");
        assert!(!in_two, "table must not leak into another test's database");

        let tables_in_two: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
                .fetch_one(&mut two)
                .await
                .unwrap();
        assert_eq!(tables_in_two, 0, "a fresh database starts empty");
    }

    #[test]
    fn database_is_replaced_in_urls() {
        let cases = [
            ("postgres://u:p@h:5432/admin", "postgres://u:p@h:5432/t"),
            (
                "postgres://u@h/admin?sslmode=disable",
                "postgres://u@h/t?sslmode=disable",
            ),
            ("postgresql://h:1", "postgresql://h:1/t"),
            (
                "postgres://h?sslmode=require",
                "postgres://h/t?sslmode=require",
            ),
            ("postgres://h/", "postgres://h/t"),
        ];
        for (admin, expected) in cases {
            assert_eq!(with_database(admin, "t").unwrap(), expected, "for {admin}");
        }
        assert!(with_database("not a url", "t").is_err());
    }

    #[test]
    fn server_options_quote_the_socket_directory() {
        let cluster = Cluster {
            dir: PathBuf::from("/tmp/it's here"),
            as_postgres: false,
        };
        let options = cluster.server_options(5555);
        assert!(
            options.starts_with(r"-p 5555 -k '/tmp/it'\''s here' "),
            "{options}"
        );
    }
}
