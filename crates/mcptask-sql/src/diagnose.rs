//! Why a database could not be opened, in the words an operator acts on.
//!
//! The drivers' own texts name the symptom ("pool timed out", "unable to
//! open database file"); these name the cause (a refused port, a missing
//! database, a missing directory) and the fix.

use std::path::Path;
use std::time::{Duration, Instant};

use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection};

/// How long opening a PostgreSQL store tries before it says why it cannot:
/// long enough for a server that is just starting (or a container coming up
/// next to this one), short enough that a wrong host or port is reported in
/// seconds rather than after the pool's acquire timeout.
pub(crate) const PG_PROBE: Duration = Duration::from_secs(10);

/// Open one connection to check that the database is there and accepts us,
/// retrying only what passes on its own (a refused port, a server starting
/// up or out of connection slots) within `window`. The error says why, in plain words.
pub(crate) async fn probe_postgres(
    options: &PgConnectOptions,
    window: Duration,
) -> Result<(), (String, Option<sqlx::Error>)> {
    let host = options.get_host().to_string();
    let port = options.get_port();
    let at = format!("{host}:{port}");
    let deadline = Instant::now() + window;
    if options.get_socket().is_none() && !host.starts_with('/') {
        // Resolution first: a typo in the host name is then told apart from
        // a host that does not answer.
        match tokio::time::timeout(window, tokio::net::lookup_host((host.as_str(), port))).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err((
                    format!("cannot resolve the host {host:?}: {e} (check the host in the URL)"),
                    None,
                ));
            }
            Err(_) => {
                return Err((
                    format!(
                        "resolving the host {host:?} took longer than {}s (check the host in the URL and DNS)",
                        window.as_secs()
                    ),
                    None,
                ));
            }
        }
    }
    let mut pause = Duration::from_millis(50);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = tokio::time::timeout(left, PgConnection::connect_with(options)).await;
        let e = match attempt {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
                return Ok(());
            }
            Ok(Err(e)) => e,
            Err(_) => {
                return Err((
                    format!(
                        "no answer from {at} within {}s (is the host reachable? a firewall dropping packets?)",
                        window.as_secs()
                    ),
                    None,
                ));
            }
        };
        if !passes(&e) || Instant::now() + pause >= deadline {
            return Err((postgres_reason(options, &at, &e), Some(e)));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Whether a connect error passes on its own, so the probe tries again: a
/// refused port, a connection the server drops while it shuts down or
/// restarts (end of file, reset, aborted), and what sqlx's pool also
/// retries (starting up, a connection slot not yet freed). A gateway started
/// during a database restart must wait for it, not exit.
fn passes(e: &sqlx::Error) -> bool {
    use std::io::ErrorKind;
    match e {
        sqlx::Error::Io(io) => matches!(
            io.kind(),
            ErrorKind::ConnectionRefused
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::UnexpectedEof
                | ErrorKind::BrokenPipe
        ),
        sqlx::Error::Database(db) => db.is_transient_in_connect_phase(),
        _ => false,
    }
}

/// A PostgreSQL connect error as its cause and fix.
pub(crate) fn postgres_reason(options: &PgConnectOptions, at: &str, e: &sqlx::Error) -> String {
    let user = options.get_username();
    let database = options.get_database().unwrap_or(user);
    match e {
        sqlx::Error::Io(io) => match io.kind() {
            std::io::ErrorKind::ConnectionRefused => format!(
                "connection refused at {at} (is PostgreSQL running there? check the host and port in the URL)"
            ),
            std::io::ErrorKind::TimedOut => {
                format!("no answer from {at} (is the host reachable? a firewall dropping packets?)")
            }
            // rustls' handshake errors (an untrusted certificate) travel as I/O errors.
            _ if io.to_string().contains("certificate") => tls_failure(at, io),
            _ => format!("cannot connect to {at}: {io}"),
        },
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            match code.as_ref() {
                "28P01" => format!(
                    "password authentication failed for user {user:?} (check the user and password in the URL)"
                ),
                "28000" => format!(
                    "{} (check the user in the URL, and the server's pg_hba.conf)",
                    db.message()
                ),
                "3D000" => format!(
                    "database {database:?} does not exist (create it: createdb -h {} -p {} -U {user} {database})",
                    options.get_host(),
                    options.get_port()
                ),
                "57P03" => format!(
                    "PostgreSQL at {at} is starting up or shutting down ({}); try again in a moment",
                    db.message()
                ),
                "53300" => format!(
                    "PostgreSQL at {at} has too many connections ({}); raise its max_connections or run fewer processes",
                    db.message()
                ),
                _ => format!("{} (SQLSTATE {code})", db.message()),
            }
        }
        sqlx::Error::Tls(tls) => tls_failure(at, tls.as_ref()),
        other => format!("cannot connect to {at}: {other}"),
    }
}

/// Refuse an SQLite path that cannot be a database file before the driver
/// tries (and reports only "unable to open database file"). The directory is
/// not created: a mistyped path would otherwise silently start an empty
/// store somewhere unexpected.
pub(crate) fn sqlite_preflight(path: &Path) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return Err("the URL names no file (use sqlite:PATH, e.g. sqlite:mcptask.db)".into());
    }
    if path.is_dir() {
        return Err(format!(
            "{} is a directory, not a database file (name a file in it, e.g. sqlite:{})",
            path.display(),
            path.join("mcptask.db").display()
        ));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.exists() {
        return Err(format!(
            "the directory {} does not exist (create it, e.g. mkdir -p {}, or choose another path)",
            parent.display(),
            parent.display()
        ));
    }
    if !parent.is_dir() {
        return Err(format!(
            "{} is not a directory (choose another path for the database file)",
            parent.display()
        ));
    }
    Ok(())
}

/// An SQLite open error as its cause and fix: the usual causes are the
/// file's or its directory's permissions (SQLite also creates `-wal` and
/// `-shm` files next to the database).
pub(crate) fn sqlite_reason(path: &Path, e: &sqlx::Error) -> String {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().readonly()
    {
        return format!(
            "{} is read-only (make it writable, e.g. chmod u+w, or run as its owner)",
            path.display()
        );
    }
    if !writable_dir(parent) {
        return format!(
            "the directory {} is not writable (SQLite creates the database and its -wal/-shm files there; make it writable or choose another path)",
            parent.display()
        );
    }
    match e {
        sqlx::Error::Database(db) => format!("{}: {}", path.display(), db.message()),
        other => format!("{}: {other}", path.display()),
    }
}

/// Whether a file can be created in `dir` (permissions alone do not say:
/// root, ACLs, read-only mounts).
fn writable_dir(dir: &Path) -> bool {
    let probe = dir.join(format!(".mcptask-write-check-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            true
        }
        Err(e) => e.kind() == std::io::ErrorKind::AlreadyExists,
    }
}

/// A failed TLS handshake with PostgreSQL, in plain words.
fn tls_failure(at: &str, e: &(dyn std::error::Error + 'static)) -> String {
    let text = e.to_string();
    if text.contains("does not support TLS") {
        return format!(
            "PostgreSQL at {at} does not support TLS, and the URL requires it (enable ssl on the server, or use sslmode=prefer or disable on a trusted network)"
        );
    }
    if text.contains("not built with TLS") || text.contains("TLS upgrade required") {
        return format!(
            "TLS with {at} is not available: this build has no TLS support (build mcptask-sql with its `tls` feature, or use sslmode=disable on a trusted network)"
        );
    }
    let lower = text.to_ascii_lowercase();
    if lower.contains("unknownissuer") || lower.contains("unknown issuer") {
        return format!(
            "TLS with {at} failed: the server's certificate is not trusted (issued by a CA this host does not know); if it is self-signed, add its CA to the system store, point SSL_CERT_FILE at it, or name it with sslrootcert= in the URL"
        );
    }
    if lower.contains("notvalidforname") || lower.contains("not valid for name") {
        return format!(
            "TLS with {at} failed: the server's certificate is not valid for this host name (use the name it was issued for, or sslmode=verify-ca)"
        );
    }
    format!("TLS with {at} failed: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts sqlx and rustls give (the I/O error carrying rustls' is
    /// what an untrusted certificate surfaces as).
    #[test]
    fn a_connection_dropped_by_a_restarting_server_is_tried_again() {
        use std::io::{Error, ErrorKind};
        for kind in [
            ErrorKind::ConnectionRefused,
            ErrorKind::ConnectionReset,
            ErrorKind::UnexpectedEof,
        ] {
            assert!(passes(&sqlx::Error::Io(Error::from(kind))), "{kind:?}");
        }
        assert!(!passes(&sqlx::Error::Io(Error::from(
            ErrorKind::PermissionDenied
        ))));
        assert!(!passes(&sqlx::Error::Configuration("bad url".into())));
    }

    #[test]
    fn postgres_tls_failures_name_the_cause_and_fix() {
        let no_tls = sqlx::Error::Tls("server does not support TLS".into());
        let said = match &no_tls {
            sqlx::Error::Tls(e) => tls_failure("db:5432", e.as_ref()),
            _ => unreachable!(),
        };
        assert!(
            said.contains("does not support TLS") && said.contains("sslmode=prefer"),
            "{said}"
        );
        let untrusted = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "invalid peer certificate: UnknownIssuer",
        );
        let said = tls_failure("db:5432", &untrusted);
        assert!(
            said.contains("certificate is not trusted")
                && said.contains("SSL_CERT_FILE")
                && !said.contains("UnknownIssuer"),
            "{said}"
        );
    }

    #[test]
    fn sqlite_paths_that_cannot_be_a_database_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/dir/m.db");
        let said = sqlite_preflight(&missing).unwrap_err();
        assert!(
            said.contains(&dir.path().join("no/such/dir").display().to_string())
                && said.contains("does not exist")
                && said.contains("mkdir -p"),
            "{said}"
        );
        let said = sqlite_preflight(dir.path()).unwrap_err();
        assert!(said.contains("is a directory"), "{said}");
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        let said = sqlite_preflight(&file.join("m.db")).unwrap_err();
        assert!(said.contains("is not a directory"), "{said}");
        assert_eq!(sqlite_preflight(&dir.path().join("m.db")), Ok(()));
        assert_eq!(sqlite_preflight(Path::new("m.db")), Ok(()));
    }

    /// After the driver failed: a read-only file is named as such (its mode
    /// says so even to root, for whom the open itself would succeed).
    #[test]
    fn a_read_only_database_file_is_named() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.db");
        std::fs::write(&file, "").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
        let driver = sqlx::Error::Protocol("attempt to write a readonly database".into());
        let said = sqlite_reason(&file, &driver);
        assert!(
            said.contains("is read-only") && said.contains("m.db"),
            "{said}"
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let said = sqlite_reason(&file, &driver);
        assert!(
            said.contains("attempt to write a readonly database"),
            "{said}"
        );
    }
}
