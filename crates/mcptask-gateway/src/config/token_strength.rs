//! Whether a static API token is fit to guard a gateway: long enough, and
//! not a placeholder copied from an example (the Kubernetes Secret's
//! `replace-with-…`, a `changeme`). One rule for `[[api.tokens]]` and
//! `MCPTASK_OPERATOR_TOKEN`, so `config check` and `serve` refuse the same.

/// The fewest characters a static token may have: 16 is 64 bits of hex
/// (`openssl rand -hex 24` gives 48 characters).
pub const MIN_TOKEN_CHARS: usize = 16;

/// Pieces of text found in example and placeholder values, never in a
/// random one (compared in lower case).
const PLACEHOLDERS: &[&str] = &[
    "replace",
    "changeme",
    "change-me",
    "change_me",
    "placeholder",
    "example",
    "your-",
    "your_",
    "xxxx",
    "<",
    ">",
    "…",
    "...",
];

/// The fix line every refusal of a weak token ends with.
pub const STRONG_TOKEN_FIX: &str = "use a long random value, e.g. from `openssl rand -hex 24`, and keep it out of the file if you can (MCPTASK_OPERATOR_TOKEN)";

/// Why `token` is not fit to be a static API token, or `None` when it is.
///
/// ```
/// use mcptask_gateway::config::weak_token;
/// assert!(weak_token("replace-with-openssl-rand-hex-24").is_some());
/// assert!(weak_token("short").is_some());
/// assert!(weak_token("9f2c41d7a0b35e6c8d14f0a2b7c9e3d5").is_none());
/// ```
pub fn weak_token(token: &str) -> Option<String> {
    let chars = token.chars().count();
    if chars < MIN_TOKEN_CHARS {
        return Some(format!(
            "this token has {chars} characters; a token needs at least {MIN_TOKEN_CHARS}"
        ));
    }
    let lower = token.to_lowercase();
    if let Some(piece) = PLACEHOLDERS.iter().find(|p| lower.contains(*p)) {
        return Some(format!(
            "this token looks like a placeholder (it contains {piece:?}), not a secret"
        ));
    }
    let mut distinct: Vec<char> = token.chars().collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 6 {
        return Some(format!(
            "this token uses only {} different characters; it is easy to guess",
            distinct.len()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::weak_token;

    #[test]
    fn placeholders_and_short_values_are_weak() {
        for weak in [
            "replace-with-openssl-rand-hex-24",
            "REPLACE-ME-0123456789",
            "changeme-changeme-1",
            "your-token-goes-here",
            "<operator-token-here>",
            "aaaaaaaaaaaaaaaaaaaaaaaa",
            "abcabcabcabcabcabcabc",
            "0123456789abcde",
        ] {
            assert!(weak_token(weak).is_some(), "{weak:?} passed");
        }
    }

    #[test]
    fn random_values_pass() {
        for strong in [
            "9f2c41d7a0b35e6c8d14f0a2b7c9e3d5",
            "operator-token-0123456789",
            "alice-token-0123456789",
            "0123456789abcdef",
        ] {
            assert_eq!(weak_token(strong), None, "{strong:?} refused");
        }
    }
}
