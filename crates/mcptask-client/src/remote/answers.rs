//! How each HTTP upstream answers a request: with one JSON body or with an
//! SSE stream. The front answers its own callers in the same style, so a
//! client that sees SSE from a server directly sees SSE through the front
//! too (and JSON where the server answers JSON).
//!
//! The style is learnt from what the upstream actually sent (the answers to
//! session-less `server/discover` and `tools/list`, which every upstream
//! gets when it is listed), not configured: servers differ (rmcp streams
//! by default, the TypeScript SDK answers JSON when asked to), and one may
//! change when it is redeployed. Kept process-wide by URL, because the
//! front's HTTP layer and the connections that learn it are in different
//! crates and the answer belongs to the server, not to one connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

/// How an upstream answered a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerStyle {
    /// One `application/json` body.
    Json,
    /// A `text/event-stream`.
    Sse,
}

static STYLES: LazyLock<Mutex<HashMap<String, AnswerStyle>>> = LazyLock::new(Default::default);
/// Bumped whenever a URL's style is learnt or changes, so readers can cache
/// what they derived from the styles and re-derive only after a change.
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// Note that the upstream at `url` answered in `style` (the authorizing
/// client every upstream request goes through does).
pub(crate) fn saw(url: &str, style: AnswerStyle) {
    let mut styles = STYLES.lock().unwrap_or_else(|e| e.into_inner());
    let before = styles.insert(url.to_string(), style);
    if before != Some(style) {
        CHANGES.fetch_add(1, Ordering::Release);
        tracing::debug!(%url, ?style, "how the upstream answers");
    }
}

/// How the upstream at `url` answers, once it has been seen answering.
///
/// ```
/// use mcptask_client::remote::answers_of;
/// // Nothing is known of a server before it answered a listing.
/// assert_eq!(answers_of("http://127.0.0.1:10/mcp"), None);
/// ```
pub fn answers_of(url: &str) -> Option<AnswerStyle> {
    STYLES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(url)
        .copied()
}

/// A counter that moves whenever any upstream's style is learnt or changes.
pub fn answer_changes() -> u64 {
    CHANGES.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_of_style_moves_the_counter_and_a_repeat_does_not() {
        let url = "http://answers.test/mcp";
        saw(url, AnswerStyle::Json);
        let before = answer_changes();
        saw(url, AnswerStyle::Json);
        assert_eq!(answer_changes(), before);
        saw(url, AnswerStyle::Sse);
        assert!(answer_changes() > before);
        assert_eq!(answers_of(url), Some(AnswerStyle::Sse));
    }
}
