//! Which servers cannot be listed now, and why: logged when a server starts
//! failing, when it fails for another reason and when it answers again —
//! once per change, never once per retry (a server not listed yet is listed
//! again every second, and a log line a second says nothing new).

use std::collections::HashMap;
use std::sync::Mutex;

/// The last failure to list each server that has not answered since.
#[derive(Default)]
pub(super) struct ListingFailures {
    by_server: Mutex<HashMap<String, String>>,
}

impl ListingFailures {
    /// Listing `server` failed with `why`: a warning if that is news (see
    /// [`is_news`]), a debug line otherwise.
    pub(super) fn failed(&self, server: &str, why: &str) {
        let last = self
            .by_server
            .lock()
            .expect("listing failures lock")
            .insert(server.to_string(), why.to_string());
        if is_news(last.as_deref(), why) {
            tracing::warn!(%server, error = %why,
                "cannot list the tools of an upstream server; keeping its last listing and trying again (logged again when this changes)");
        } else {
            tracing::debug!(%server, error = %why, "listing the upstream server failed again");
        }
    }

    /// Listing `server` worked: said once if it was failing.
    pub(super) fn answered(&self, server: &str) {
        let was = self
            .by_server
            .lock()
            .expect("listing failures lock")
            .remove(server);
        if let Some(why) = was {
            tracing::info!(%server, last_error = %why,
                "the upstream server answers again; its tools are listed");
        }
    }

    /// Forget `server` (removed from the configuration): if it comes back
    /// and fails, that is news again.
    pub(super) fn forget(&self, server: &str) {
        self.by_server
            .lock()
            .expect("listing failures lock")
            .remove(server);
    }
}

/// Whether failing with `now` after the failure `last` (`None`: the server
/// was answering) is worth a warning: the first failure, or another reason.
fn is_news(last: Option<&str>, now: &str) -> bool {
    last != Some(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_failure_and_a_new_reason_are_news() {
        assert!(is_news(None, "cannot start"));
        assert!(!is_news(Some("cannot start"), "cannot start"));
        assert!(is_news(Some("cannot start"), "timed out"));
    }

    #[test]
    fn an_answer_ends_a_failure_and_the_next_one_is_news_again() {
        let failures = ListingFailures::default();
        failures.failed("s", "down");
        failures.answered("s");
        let last = failures.by_server.lock().unwrap().get("s").cloned();
        assert_eq!(last, None);
        failures.failed("s", "down");
        failures.forget("s");
        assert!(failures.by_server.lock().unwrap().is_empty());
    }
}
