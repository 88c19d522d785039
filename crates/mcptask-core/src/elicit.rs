//! Checking an answer against the input request it answers, before it is
//! stored or sent.
//!
//! An elicitation (`elicitation/create`, form mode) carries a restricted JSON
//! Schema (`requestedSchema`): a flat object whose properties are strings
//! (with length bounds, a format, or a set of choices), numbers, integers,
//! booleans, or multi-select lists of choices. [`Form::parse`] reads it into
//! fields a person can be shown, and [`check_answer`] refuses an answer that
//! does not fit, naming the field and what it expected. The checks are strict
//! for the keywords listed in the MCP schema and permissive for everything
//! else: a keyword (or a whole schema) this module does not understand never
//! blocks an answer.
//!
//! ```
//! use mcptask_core::elicit::check_answer;
//! use serde_json::json;
//!
//! let request = json!({"method": "elicitation/create", "params": {
//!     "mode": "form", "message": "Delete it?",
//!     "requestedSchema": {"type": "object",
//!         "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}}});
//! assert!(check_answer(&request, &json!({"action": "accept", "content": {"confirm": true}})).is_ok());
//! assert!(check_answer(&request, &json!({"action": "decline"})).is_ok());
//! let err = check_answer(&request, &json!({"action": "accept", "content": {"confirm": "yes"}})).unwrap_err();
//! assert_eq!(err.field.as_deref(), Some("confirm"));
//! assert!(err.to_string().starts_with("field \"confirm\": expected a boolean, got the string \"yes\""));
//! ```

use std::fmt;

use serde_json::{Map, Value};

/// Why an answer does not fit its input request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerError {
    /// The form field at fault, when one is (`None`: the answer's shape).
    pub field: Option<String>,
    /// What was expected and what was given, in words.
    pub reason: String,
}

impl AnswerError {
    fn field(name: &str, reason: impl Into<String>) -> Self {
        Self {
            field: Some(name.to_string()),
            reason: reason.into(),
        }
    }

    fn shape(reason: impl Into<String>) -> Self {
        Self {
            field: None,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for AnswerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(name) => write!(f, "field {name:?}: {}", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for AnswerError {}

/// One choice of a single- or multi-select field.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The value the answer carries.
    pub value: String,
    /// The label shown for it, when the schema gives one.
    pub title: Option<String>,
}

/// What a field accepts.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldKind {
    /// Free text.
    String {
        /// Fewest characters.
        min_length: Option<u64>,
        /// Most characters.
        max_length: Option<u64>,
        /// `email`, `uri`, `date` or `date-time` (others are not checked).
        format: Option<String>,
    },
    /// One of a fixed set of strings.
    Choice(Vec<Choice>),
    /// A number (`integer`: a whole one).
    Number {
        /// Whether only whole numbers fit.
        integer: bool,
        /// Smallest value.
        minimum: Option<f64>,
        /// Largest value.
        maximum: Option<f64>,
    },
    /// `true` or `false`.
    Boolean,
    /// A list of strings, each one of a fixed set.
    MultiChoice {
        /// The allowed values.
        choices: Vec<Choice>,
        /// Fewest items.
        min_items: Option<u64>,
        /// Most items.
        max_items: Option<u64>,
    },
    /// A property schema this module does not understand: anything fits.
    Unchecked,
}

impl FieldKind {
    /// What fits, in words: "a boolean", "one of \"a\", \"b\"", …
    pub fn expected(&self) -> String {
        match self {
            FieldKind::String { format, .. } => match format.as_deref() {
                Some("email") => "an email address".into(),
                Some("uri") => "a URI".into(),
                Some("date") => "a date (YYYY-MM-DD)".into(),
                Some("date-time") => "a date and time (RFC 3339)".into(),
                _ => "a string".into(),
            },
            FieldKind::Choice(choices) => format!("one of {}", list(choices)),
            FieldKind::Number { integer: true, .. } => "an integer".into(),
            FieldKind::Number { .. } => "a number".into(),
            FieldKind::Boolean => "a boolean".into(),
            FieldKind::MultiChoice { choices, .. } => format!("a list of {}", list(choices)),
            FieldKind::Unchecked => "any value".into(),
        }
    }

    /// The type name a user writes about: `string`, `integer`, `boolean`, …
    pub fn type_name(&self) -> &'static str {
        match self {
            FieldKind::String { .. } => "string",
            FieldKind::Choice(_) => "enum",
            FieldKind::Number { integer: true, .. } => "integer",
            FieldKind::Number { .. } => "number",
            FieldKind::Boolean => "boolean",
            FieldKind::MultiChoice { .. } => "enum list",
            FieldKind::Unchecked => "any",
        }
    }
}

fn list(choices: &[Choice]) -> String {
    choices
        .iter()
        .map(|c| format!("{:?}", c.value))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One field of an elicitation form.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The property name (the key in the answer's `content`).
    pub name: String,
    /// The label, when the schema gives one.
    pub title: Option<String>,
    /// The help text, when the schema gives one.
    pub description: Option<String>,
    /// Whether the schema lists it in `required`.
    pub required: bool,
    /// The schema's `default`, if any.
    pub default: Option<Value>,
    /// What it accepts.
    pub kind: FieldKind,
}

/// An elicitation's `requestedSchema`, read into fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Form {
    /// The fields, in the schema's property order.
    pub fields: Vec<Field>,
    /// Whether properties beyond the fields are allowed
    /// (`additionalProperties` other than `false` given explicitly).
    pub extra_allowed: bool,
}

impl Form {
    /// The form a `requestedSchema` describes; `None` when it has no
    /// `properties` object (nothing to check or show).
    pub fn parse(schema: &Value) -> Option<Form> {
        let properties = schema.get("properties")?.as_object()?;
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let fields = properties
            .iter()
            .map(|(name, property)| Field {
                name: name.clone(),
                title: text(property, "title"),
                description: text(property, "description"),
                required: required.contains(&name.as_str()),
                default: property.get("default").cloned(),
                kind: kind_of(property),
            })
            .collect();
        // The restricted schema has no `additionalProperties`: a flat form
        // takes its own fields only, unless the server says otherwise.
        let extra_allowed = match schema.get("additionalProperties") {
            None | Some(Value::Bool(false)) => false,
            Some(_) => true,
        };
        Some(Form {
            fields,
            extra_allowed,
        })
    }

    /// Why `content` (an accepted answer's content) does not fill this form.
    pub fn check(&self, content: &Map<String, Value>) -> Result<(), AnswerError> {
        if !self.extra_allowed {
            let unknown: Vec<&String> = content
                .keys()
                .filter(|k| !self.fields.iter().any(|f| &f.name == *k))
                .collect();
            if let Some(first) = unknown.first() {
                let asked = if self.fields.is_empty() {
                    "the form has no fields".to_string()
                } else {
                    format!(
                        "the form asks for {}",
                        self.fields
                            .iter()
                            .map(|f| format!("{:?}", f.name))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                let reason = if unknown.len() == 1 {
                    format!("not a field of this form ({asked})")
                } else {
                    let others: Vec<String> =
                        unknown[1..].iter().map(|k| format!("{k:?}")).collect();
                    format!(
                        "not a field of this form, nor are {} ({asked})",
                        others.join(", ")
                    )
                };
                return Err(AnswerError::field(first, reason));
            }
        }
        for field in &self.fields {
            match content.get(&field.name) {
                Some(value) => check_value(field, value)?,
                None if field.required => {
                    return Err(AnswerError::field(
                        &field.name,
                        format!(
                            "required, expected {}; the answer leaves it out",
                            field.kind.expected()
                        ),
                    ));
                }
                None => {}
            }
        }
        Ok(())
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn uint(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// Choices given as `enum` (with legacy `enumNames` labels) or as
/// `oneOf`/`anyOf` of `{const, title}`; `None` when neither is there.
fn choices(v: &Value, any_of: &str) -> Option<Vec<Choice>> {
    if let Some(values) = v.get("enum").and_then(Value::as_array) {
        let names = v.get("enumNames").and_then(Value::as_array);
        return values
            .iter()
            .enumerate()
            .map(|(i, value)| {
                Some(Choice {
                    value: value.as_str()?.to_string(),
                    title: names
                        .and_then(|n| n.get(i))
                        .and_then(Value::as_str)
                        .map(str::to_string),
                })
            })
            .collect();
    }
    let options = v.get(any_of).and_then(Value::as_array)?;
    options
        .iter()
        .map(|o| {
            Some(Choice {
                value: o.get("const")?.as_str()?.to_string(),
                title: text(o, "title"),
            })
        })
        .collect()
}

fn kind_of(p: &Value) -> FieldKind {
    // A choice list that is not all strings is outside the restricted
    // schema: unchecked rather than wrongly refused.
    let single = || match (p.get("enum"), p.get("oneOf")) {
        (None, None) => None,
        _ => Some(choices(p, "oneOf").map_or(FieldKind::Unchecked, FieldKind::Choice)),
    };
    match p.get("type").and_then(Value::as_str) {
        Some("string") => single().unwrap_or_else(|| FieldKind::String {
            min_length: uint(p, "minLength"),
            max_length: uint(p, "maxLength"),
            format: text(p, "format"),
        }),
        Some("boolean") => FieldKind::Boolean,
        Some(t @ ("number" | "integer")) => FieldKind::Number {
            integer: t == "integer",
            minimum: p.get("minimum").and_then(Value::as_f64),
            maximum: p.get("maximum").and_then(Value::as_f64),
        },
        Some("array") => match p.get("items").and_then(|i| choices(i, "anyOf")) {
            Some(choices) => FieldKind::MultiChoice {
                choices,
                min_items: uint(p, "minItems"),
                max_items: uint(p, "maxItems"),
            },
            None => FieldKind::Unchecked,
        },
        None => single().unwrap_or(FieldKind::Unchecked),
        Some(_) => FieldKind::Unchecked,
    }
}

/// The value, as an error message names it: `the string "yes"`, `null`, …
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => {
            const MAX: usize = 40;
            if s.chars().count() > MAX {
                let cut: String = s.chars().take(MAX).collect();
                format!("the string {:?}…", cut)
            } else {
                format!("the string {s:?}")
            }
        }
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn check_value(field: &Field, value: &Value) -> Result<(), AnswerError> {
    let wrong = |hint: &str| {
        AnswerError::field(
            &field.name,
            format!(
                "expected {}, got {}{hint}",
                field.kind.expected(),
                describe(value)
            ),
        )
    };
    match &field.kind {
        FieldKind::Unchecked => Ok(()),
        FieldKind::Boolean => match value {
            Value::Bool(_) => Ok(()),
            Value::String(s)
                if matches!(
                    s.to_ascii_lowercase().as_str(),
                    "true" | "false" | "yes" | "no"
                ) =>
            {
                Err(wrong(" (write true or false, without quotes)"))
            }
            _ => Err(wrong("")),
        },
        FieldKind::Number {
            integer,
            minimum,
            maximum,
        } => {
            let Some(n) = value.as_f64() else {
                let numeric = value
                    .as_str()
                    .is_some_and(|s| s.trim().parse::<f64>().is_ok());
                return Err(wrong(if numeric {
                    " (write the number without quotes)"
                } else {
                    ""
                }));
            };
            if *integer && !(value.is_i64() || value.is_u64() || n.fract() == 0.0) {
                return Err(wrong(""));
            }
            if let Some(min) = minimum.filter(|m| n < *m) {
                return Err(AnswerError::field(
                    &field.name,
                    format!("must be at least {min}, got {n}"),
                ));
            }
            if let Some(max) = maximum.filter(|m| n > *m) {
                return Err(AnswerError::field(
                    &field.name,
                    format!("must be at most {max}, got {n}"),
                ));
            }
            Ok(())
        }
        FieldKind::String {
            min_length,
            max_length,
            format,
        } => {
            let Some(s) = value.as_str() else {
                return Err(wrong(""));
            };
            let len = s.chars().count() as u64;
            if let Some(min) = min_length.filter(|m| len < *m) {
                return Err(AnswerError::field(
                    &field.name,
                    format!("must be at least {min} characters long, got {len}"),
                ));
            }
            if let Some(max) = max_length.filter(|m| len > *m) {
                return Err(AnswerError::field(
                    &field.name,
                    format!("must be at most {max} characters long, got {len}"),
                ));
            }
            let fits = match format.as_deref() {
                Some("email") => is_email(s),
                Some("uri") => is_uri(s),
                Some("date") => is_date(s),
                Some("date-time") => chrono::DateTime::parse_from_rfc3339(s).is_ok(),
                _ => true,
            };
            if fits { Ok(()) } else { Err(wrong("")) }
        }
        FieldKind::Choice(choices) => match value.as_str() {
            Some(s) if choices.iter().any(|c| c.value == s) => Ok(()),
            _ => Err(wrong("")),
        },
        FieldKind::MultiChoice {
            choices,
            min_items,
            max_items,
        } => {
            let Some(items) = value.as_array() else {
                return Err(wrong(""));
            };
            if let Some(bad) = items.iter().find(|i| {
                !i.as_str()
                    .is_some_and(|s| choices.iter().any(|c| c.value == s))
            }) {
                return Err(AnswerError::field(
                    &field.name,
                    format!(
                        "expected each item to be one of {}, got {}",
                        list(choices),
                        describe(bad)
                    ),
                ));
            }
            let n = items.len() as u64;
            if let Some(min) = min_items.filter(|m| n < *m) {
                return Err(AnswerError::field(
                    &field.name,
                    format!("must choose at least {min}, got {n}"),
                ));
            }
            if let Some(max) = max_items.filter(|m| n > *m) {
                return Err(AnswerError::field(
                    &field.name,
                    format!("must choose at most {max}, got {n}"),
                ));
            }
            Ok(())
        }
    }
}

fn is_email(s: &str) -> bool {
    match s.rsplit_once('@') {
        Some((local, domain)) => {
            !local.is_empty()
                && !domain.is_empty()
                && !domain.contains('@')
                && !s.chars().any(char::is_whitespace)
        }
        None => false,
    }
}

/// An absolute URI: a scheme (`ALPHA *(ALPHA / DIGIT / + / - / .)`), a
/// colon, something after it, and no whitespace.
fn is_uri(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !rest.is_empty()
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn is_date(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return false;
    };
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return false;
    }
    match (y.parse(), m.parse(), d.parse()) {
        (Ok(y), Ok(m), Ok(d)) => chrono::NaiveDate::from_ymd_opt(y, m, d).is_some(),
        _ => false,
    }
}

/// Why `response` cannot answer `request`, if it cannot.
///
/// - `elicitation/create`: `action` must be `accept`, `decline` or `cancel`;
///   an accepted form answer's `content` must fill the `requestedSchema`
///   (declines, cancels and URL-mode answers carry no content and pass);
/// - `sampling/createMessage`: a result with `role`, `content` and `model`;
/// - `roots/list`: a result with a `roots` list;
/// - any other method: not checked.
pub fn check_answer(request: &Value, response: &Value) -> Result<(), AnswerError> {
    let params = request.get("params").unwrap_or(&Value::Null);
    match request.get("method").and_then(Value::as_str) {
        Some("elicitation/create") => check_elicitation(params, response),
        Some("sampling/createMessage") => {
            for (key, what) in [("role", "a string"), ("model", "a string")] {
                if !response.get(key).is_some_and(Value::is_string) {
                    return Err(AnswerError::shape(format!(
                        "a sampling answer needs {key:?} ({what}), as in {{\"role\": \"assistant\", \"content\": {{\"type\": \"text\", \"text\": \"…\"}}, \"model\": \"…\"}}"
                    )));
                }
            }
            if !response
                .get("content")
                .is_some_and(|c| c.is_object() || c.is_array())
            {
                return Err(AnswerError::shape(
                    "a sampling answer needs \"content\" (a content block such as {\"type\": \"text\", \"text\": \"…\"})",
                ));
            }
            Ok(())
        }
        Some("roots/list") => {
            let roots = response.get("roots").and_then(Value::as_array);
            match roots {
                Some(roots)
                    if roots
                        .iter()
                        .all(|r| r.get("uri").is_some_and(Value::is_string)) =>
                {
                    Ok(())
                }
                _ => Err(AnswerError::shape(
                    "a roots answer needs \"roots\": a list of {\"uri\": \"file:///…\"}",
                )),
            }
        }
        _ => Ok(()),
    }
}

fn check_elicitation(params: &Value, response: &Value) -> Result<(), AnswerError> {
    let action = response.get("action");
    match action.and_then(Value::as_str) {
        Some("decline" | "cancel") => return Ok(()),
        Some("accept") => {}
        _ => {
            return Err(AnswerError::shape(format!(
                "\"action\" must be \"accept\", \"decline\" or \"cancel\", got {}",
                action.map_or("nothing".to_string(), describe)
            )));
        }
    }
    if params.get("mode").and_then(Value::as_str) == Some("url") {
        return Ok(());
    }
    let Some(form) = params.get("requestedSchema").and_then(Form::parse) else {
        return Ok(());
    };
    let empty = Map::new();
    let content = match response.get("content") {
        None => &empty,
        Some(Value::Object(c)) => c,
        Some(other) => {
            return Err(AnswerError::shape(format!(
                "\"content\" must be an object of the form's fields, got {}",
                describe(other)
            )));
        }
    };
    form.check(content)
}

#[cfg(test)]
mod tests;
