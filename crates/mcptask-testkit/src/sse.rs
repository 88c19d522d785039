//! A reader of the gateway's Server-Sent Events stream (`/api/v1/events`).

use std::time::Duration;

use serde_json::Value;

/// One message of an event stream.
#[derive(Debug, Clone, Default)]
pub struct SseMessage {
    pub event: String,
    pub data: String,
    pub id: Option<String>,
}

impl SseMessage {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// A connected `GET /api/v1/events` stream, parsed incrementally.
pub struct SseStream {
    response: reqwest::Response,
    buffer: String,
    pub status: u16,
    pub content_type: String,
}

impl SseStream {
    /// Connect to `url` (with whatever auth the request carries).
    pub async fn connect(request: reqwest::RequestBuilder) -> SseStream {
        let response = request
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .expect("connect to the event stream");
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        SseStream {
            response,
            buffer: String::new(),
            status,
            content_type,
        }
    }

    /// The next message (comments and keep-alives skipped); panics after `within`.
    pub async fn next(&mut self, within: Duration) -> SseMessage {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Normalise line endings, then take one complete message.
            if self.buffer.contains('\r') {
                self.buffer = self.buffer.replace("\r\n", "\n").replace('\r', "\n");
            }
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut message = SseMessage::default();
                let mut data = Vec::new();
                for line in block.lines() {
                    if line.is_empty() || line.starts_with(':') {
                        continue;
                    }
                    let (field, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match field {
                        "event" => message.event = value.to_string(),
                        "data" => data.push(value.to_string()),
                        "id" => message.id = Some(value.to_string()),
                        _ => {}
                    }
                }
                if data.is_empty() && message.event.is_empty() {
                    continue; // a keep-alive comment
                }
                message.data = data.join("\n");
                if message.event.is_empty() {
                    message.event = "message".into();
                }
                return message;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.response.chunk()).await {
                Ok(Ok(Some(bytes))) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Ok(Ok(None)) => panic!("the event stream ended; unparsed: {:?}", self.buffer),
                Ok(Err(e)) => panic!("reading the event stream: {e}"),
                Err(_) => panic!("no event within {within:?}; unparsed: {:?}", self.buffer),
            }
        }
    }

    /// Read messages until `wanted` holds for one (returned with everything
    /// seen before it).
    pub async fn until(
        &mut self,
        within: Duration,
        wanted: impl Fn(&SseMessage) -> bool,
    ) -> (SseMessage, Vec<SseMessage>) {
        let deadline = tokio::time::Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                panic!("no wanted event within {within:?}; seen: {seen:#?}");
            }
            let m = self.next(left).await;
            if wanted(&m) {
                return (m, seen);
            }
            seen.push(m);
        }
    }
}
