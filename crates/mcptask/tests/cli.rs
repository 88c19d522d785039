//! The command line as a user meets it: the binary run the way a shell runs
//! it, with what a user's environment commonly holds.

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_mcptask");

/// `mcptask … | head -1` where `head` has already exited: the pipe's reader
/// is gone before the first write. `println!` would panic (exit 101); the
/// command must end quietly with 0.
#[test]
fn a_closed_stdout_pipe_ends_quietly_with_exit_zero() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("m.db").display());
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(BIN)
        .args(["migrate", "--database-url", &url])
        .env("MCPTASK_LOG", "warn")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Ordinary errors print the message and its causes, never a stack trace,
/// even in a shell that exports `RUST_BACKTRACE=1`.
#[test]
fn errors_print_their_cause_and_no_backtrace_even_with_rust_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.toml");
    let out = Command::new(BIN)
        .arg("serve")
        .arg("--config")
        .arg(&missing)
        .env("RUST_BACKTRACE", "1")
        .env("MCPTASK_LOG", "warn")
        .env_remove("MCPTASK_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains("nowhere.toml"),
        "the message names the file: {stderr}"
    );
    assert!(stderr.contains("fix:"), "and a fix: {stderr}");
    assert!(
        !stderr.to_lowercase().contains("backtrace") && stderr.lines().count() < 8,
        "no stack trace: {stderr}"
    );
}
