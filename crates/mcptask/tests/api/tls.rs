//! https:// end to end: an MCP server and a webhook behind a TLS-terminating
//! forwarder whose certificate is signed by a private CA made here with the
//! `openssl` CLI. With `SSL_CERT_FILE` naming that CA a task runs to
//! completion and its events reach the webhook; without it the call fails
//! saying the certificate is not trusted. PostgreSQL with `sslmode=require`
//! against a server without TLS says that the server does not support TLS.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mcptask_testkit::*;
use serde_json::json;

const SECRET: &str = "tls-webhook-secret";

/// A CA and a server certificate for 127.0.0.1 signed by it, or `None`
/// (after a loud SKIPPED line) without the `openssl` CLI outside CI.
fn make_certificates(dir: &Path) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let run = |args: &[&str]| {
        std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
    };
    match run(&["version"]) {
        Ok(out) if out.status.success() => {}
        _ if in_ci() => panic!("the openssl CLI is required for tests/tls.rs under CI"),
        _ => {
            eprintln!("SKIPPED: tests/tls.rs needs the openssl CLI (not found)");
            return None;
        }
    }
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let steps: Vec<Vec<&str>> = vec![
        [
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=mcptask test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign",
            ],
        ]
        .concat(),
        [
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        ]
        .concat(),
        vec![
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    ];
    for step in steps {
        let out = run(&step).expect("run openssl");
        assert!(
            out.status.success(),
            "openssl {step:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some((
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    ))
}

/// Terminates TLS on an ephemeral port and forwards every connection to
/// `upstream` in plain TCP. Returns the port; stops with the runtime.
async fn tls_forwarder(cert: &Path, key: &Path, upstream: SocketAddr) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    port
}

fn addr_of(url: &str) -> SocketAddr {
    let rest = url.split("://").nth(1).unwrap();
    rest.split('/').next().unwrap().parse().unwrap()
}

/// `mcptask serve` on `toml`; `ca` becomes `SSL_CERT_FILE`, or the
/// system's store is used (no `SSL_CERT_FILE`/`SSL_CERT_DIR` inherited).
async fn serve(dir: &Path, toml: &str, ca: Option<&Path>) -> (LoggedChild, Api) {
    let config = dir.join("mcptask.toml");
    std::fs::write(&config, toml).unwrap();
    let mut command = serve_command(&config);
    command
        .current_dir(dir)
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR");
    if let Some(ca) = ca {
        command.env("SSL_CERT_FILE", ca);
    }
    let (process, url) = LoggedChild::spawn("gateway", command, GATEWAY_LISTENING, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let api = Api::new(url.trim_end_matches('/'), None);
    (process, api)
}

fn gateway_toml(database_url: &str, server_url: &str, webhook_url: &str) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap();
    format!(
        "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n\
         [tracker]\npoll_default_ms = 250\npoll_min_ms = 100\npoll_max_ms = 1000\n\n\
         [[servers]]\nname = \"demo\"\nurl = {}\nconnect_timeout_ms = 20000\n\n\
         [[webhooks]]\nurl = {}\nsecret = {}\n",
        q(database_url),
        q(server_url),
        q(webhook_url),
        q(SECRET)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_servers_and_webhooks_work_with_a_trusted_ca_and_fail_plainly_without() {
    with_deadline(Duration::from_secs(180), async {
        let certs = tempfile::tempdir().unwrap();
        let Some((ca, cert, key)) = make_certificates(certs.path()) else {
            return;
        };
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        let demo = DemoServer::start(&server_db.url, &[]).await;
        let mcp_port = tls_forwarder(&cert, &key, addr_of(&demo.url)).await;
        let hook = WebhookReceiver::start(SECRET).await;
        let hook_port = tls_forwarder(&cert, &key, addr_of(&hook.url)).await;
        let server_url = format!("https://127.0.0.1:{mcp_port}/mcp");
        let webhook_url = format!("https://127.0.0.1:{hook_port}/hook");
        let toml = gateway_toml(&gateway_db.url, &server_url, &webhook_url);

        // Trusted through SSL_CERT_FILE: the task runs to completion over
        // https and its events reach the https webhook.
        let dir = tempfile::tempdir().unwrap();
        let (gateway, api) = serve(dir.path(), &toml, Some(&ca)).await;
        let task = api.start_task("slow_compute", json!({"seconds": 1})).await;
        let id = task["id"].as_str().unwrap().to_string();
        let done = api.wait_status(&id, "completed").await;
        assert_eq!(done["status"], "completed", "{done:#}");
        let deadline = tokio::time::Instant::now() + WAIT;
        // Every POST is signature-checked by the receiver.
        while hook.unique() == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the https webhook got no event; gateway log:\n{}",
                gateway.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(hook.bad().is_empty(), "bad deliveries: {:?}", hook.bad());
        drop(gateway);

        // The system's store does not know the private CA: the call fails,
        // saying so and what to do, in plain words.
        let dir = tempfile::tempdir().unwrap();
        let gateway_db = TestDatabase::sqlite();
        let toml = gateway_toml(&gateway_db.url, &server_url, &webhook_url);
        let (gateway, api) = serve(dir.path(), &toml, None).await;
        let reply = api
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": "slow_compute", "arguments": {"seconds": 1}}),
            )
            .await;
        let text = reply.json.to_string();
        assert!(
            reply.status >= 400,
            "an untrusted certificate must fail the call: {reply:#?}"
        );
        for needle in [
            "certificate is not trusted",
            "SSL_CERT_FILE",
            &format!("https://127.0.0.1:{mcp_port}/mcp"),
        ] {
            assert!(text.contains(needle), "{needle:?} missing in {text}");
        }
        assert!(
            !text.contains("::") && !text.contains("UnknownIssuer"),
            "Rust names in {text}"
        );
        drop(gateway);

        // No CA certificates at all (SSL_CERT_FILE naming a missing file
        // replaces the system store): the gateway still starts and calls,
        // and https:// fails saying so.
        let dir = tempfile::tempdir().unwrap();
        let gateway_db = TestDatabase::sqlite();
        let toml = gateway_toml(&gateway_db.url, &server_url, &webhook_url);
        let missing = certs.path().join("no-such-ca.pem");
        let (gateway, api) = serve(dir.path(), &toml, Some(&missing)).await;
        let reply = api
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": "slow_compute", "arguments": {"seconds": 1}}),
            )
            .await;
        let text = reply.json.to_string();
        assert!(reply.status >= 400, "{reply:#?}");
        assert!(
            text.contains("no trusted CA certificates were found")
                && text.contains("SSL_CERT_FILE"),
            "{text}"
        );
        drop(gateway);
    })
    .await;
}

/// `sslmode=require` against a PostgreSQL without TLS: refused, saying the
/// server does not support TLS (no longer "built without TLS").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sslmode_require_without_server_tls_says_so() {
    with_deadline(Duration::from_secs(120), async {
        let Some(db) = TestDatabase::postgres().await else {
            return;
        };
        let sep = if db.url.contains('?') { '&' } else { '?' };
        let url = format!("{}{sep}sslmode=require", db.url);
        let err = match mcptask_sql::open(&url).await {
            Ok(_) => panic!("sslmode=require must fail against a server without TLS"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("does not support TLS"), "{err}");
        assert!(err.contains("sslmode="), "{err}");
        assert!(!err.contains("no TLS support"), "{err}");
    })
    .await;
}
