//! Pure helpers for a front MCP server that relays an upstream's work: a
//! stable key for an input request, and a status line for a progress report.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// A key for an input request that is the same however the request's
/// objects order their keys: `"q-"` and the first 12 hex digits of the
/// SHA-256 of its canonical JSON (object keys sorted, no whitespace).
///
/// The same upstream question asked twice gets the same key, so a front can
/// recognise an answer to it across restarts without storing a map.
///
/// ```
/// use mcptask_core::front::input_key;
/// use serde_json::json;
/// let a = input_key(&json!({"method": "elicitation/create", "params": {"message": "hi", "x": 1}}));
/// let b = input_key(&json!({"params": {"x": 1, "message": "hi"}, "method": "elicitation/create"}));
/// assert_eq!(a, b);
/// assert!(a.starts_with("q-") && a.len() == 14);
/// ```
pub fn input_key(request: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(request, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("q-{hex}")
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// A one-line status message for a progress notification: `"3/8"`,
/// `"3/8 — text"`, `"40%"` (when the total is 100 or the values are
/// fractions of 1), `"3"` without a total, or the text alone when there is
/// no number worth showing.
///
/// ```
/// use mcptask_core::front::progress_message;
/// assert_eq!(progress_message(3.0, Some(8.0), None), "3/8");
/// assert_eq!(progress_message(3.0, Some(8.0), Some("indexing")), "3/8 — indexing");
/// assert_eq!(progress_message(40.0, Some(100.0), None), "40%");
/// assert_eq!(progress_message(0.25, Some(1.0), None), "25%");
/// assert_eq!(progress_message(7.0, None, None), "7");
/// ```
pub fn progress_message(progress: f64, total: Option<f64>, message: Option<&str>) -> String {
    let number = match total {
        Some(100.0) => format!("{}%", num(progress)),
        Some(t) if t == 1.0 && progress <= 1.0 => format!("{}%", num(progress * 100.0)),
        Some(t) => format!("{}/{}", num(progress), num(t)),
        None => num(progress),
    };
    match message.map(str::trim).filter(|m| !m.is_empty()) {
        Some(text) => format!("{number} — {text}"),
        None => number,
    }
}

/// Integers without a fraction, others with at most one decimal.
fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        let s = format!("{x:.1}");
        s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_is_stable_across_key_order_and_differs_by_content() {
        let a = json!({"a": [1, {"y": 2, "x": "é"}], "b": null});
        let b = json!({"b": null, "a": [1, {"x": "é", "y": 2}]});
        assert_eq!(input_key(&a), input_key(&b));
        assert_ne!(
            input_key(&a),
            input_key(&json!({"a": [1, {"x": "é", "y": 3}], "b": null}))
        );
        // Array order is meaning, not presentation.
        assert_ne!(input_key(&json!([1, 2])), input_key(&json!([2, 1])));
    }

    #[test]
    fn key_is_sha256_of_the_canonical_form() {
        // sha256("{\"a\":1,\"b\":2}") = 43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777
        assert_eq!(input_key(&json!({"b": 2, "a": 1})), "q-43258cff783f");
    }

    #[test]
    fn progress_lines() {
        assert_eq!(progress_message(1.0, Some(3.0), None), "1/3");
        assert_eq!(progress_message(1.5, Some(3.0), Some("  ")), "1.5/3");
        assert_eq!(progress_message(2.0, None, Some("copying")), "2 — copying");
        assert_eq!(progress_message(0.4, Some(1.0), Some("x")), "40% — x");
    }
}
