//! The HTTP the image tests send from the host to a published port: a GET
//! over a plain TCP stream (the probes, the API), no client library.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Poll `path` on the published port until it answers 200.
pub fn wait_for(port: u16, path: &str, limit: Duration) {
    let started = Instant::now();
    let mut last = Err("not tried".to_string());
    while started.elapsed() < limit {
        last = get(port, path, None);
        if matches!(last, Ok((200, _))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("{path} on 127.0.0.1:{port} did not answer 200 within {limit:?}: last {last:?}");
}

/// A GET over HTTP/1.1 with `Connection: close`: the status and the body.
pub fn get(port: u16, path: &str, token: Option<&str>) -> Result<(u16, String), String> {
    let timeout = Duration::from_secs(5);
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&address, timeout).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(timeout)).ok();
    stream.set_write_timeout(Some(timeout)).ok();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}Connection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}
