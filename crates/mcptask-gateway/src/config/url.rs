//! The one rule for a setting that holds a URL: http or https.

/// Whether `value` is an http(s) URL (every URL setting's check).
pub(crate) fn is_http_url(value: &str) -> bool {
    value.starts_with("http://") || value.starts_with("https://")
}

/// Whether `value` is an https URL (settings that must not be plain http).
pub(crate) fn is_https_url(value: &str) -> bool {
    value.starts_with("https://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_and_https_pass() {
        assert!(is_http_url("http://127.0.0.1:8080/mcp"));
        assert!(is_http_url("https://example.com"));
        for bad in ["ftp://x/mcp", "example.com", "", "HTTP://x"] {
            assert!(!is_http_url(bad), "{bad}");
        }
        assert!(is_https_url("https://app.example.com/client.json"));
        assert!(!is_https_url("http://app.example.com/client.json"));
    }
}
