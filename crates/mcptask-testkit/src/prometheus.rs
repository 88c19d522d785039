//! A strict parser of the Prometheus text exposition format (`/metrics`).

use std::collections::BTreeMap;

/// One sample: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed exposition.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub samples: Vec<Sample>,
    /// `# TYPE` of each family.
    pub types: BTreeMap<String, String>,
}

fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parse a sample value (floats, `+Inf`, `-Inf`, `NaN`).
fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s
            .parse::<f64>()
            .map_err(|e| format!("value {s:?} is not a float: {e}")),
    }
}

/// Parse `{a="x",b="y"}` starting at `rest` (after the `{`); returns the
/// labels and what follows the closing brace.
fn parse_labels(mut rest: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest
            .find('=')
            .ok_or_else(|| format!("label without '=' in {rest:?}"))?;
        let name = rest[..eq].trim();
        if !is_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or_else(|| format!("label {name} value is not quoted"))?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    other => return Err(format!("bad escape {other:?} in label {name}")),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated value of label {name}")),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} repeated"));
        }
        rest = rest[end + 1..].trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err(format!("expected ',' or '}}' in {rest:?}"));
        }
    }
}

/// Parse the Prometheus text exposition format (0.0.4): every non-comment
/// line must be `name{labels} value [timestamp]` with a float value; `# TYPE`
/// lines must name a known type, once per family.
pub fn parse_prometheus(text: &str) -> Result<Metrics, String> {
    let mut m = Metrics::default();
    for (n, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        let line = line.trim_end();
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.split_whitespace();
            if words.next() == Some("TYPE") {
                let name = words.next().ok_or_else(|| at("TYPE without name".into()))?;
                let kind = words.next().ok_or_else(|| at("TYPE without type".into()))?;
                if !is_metric_name(name) {
                    return Err(at(format!("bad metric name {name:?}")));
                }
                if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                    return Err(at(format!("unknown type {kind:?}")));
                }
                if m.types.insert(name.to_string(), kind.to_string()).is_some() {
                    return Err(at(format!("second TYPE line for {name}")));
                }
            }
            continue;
        }
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .ok_or_else(|| at("no value".into()))?;
        let name = &line[..name_end];
        if !is_metric_name(name) {
            return Err(at(format!("bad metric name {name:?}")));
        }
        let (labels, rest) = match line[name_end..].strip_prefix('{') {
            Some(after) => parse_labels(after).map_err(at)?,
            None => (BTreeMap::new(), &line[name_end..]),
        };
        let mut fields = rest.split_whitespace();
        let value = parse_value(fields.next().ok_or_else(|| at("no value".into()))?).map_err(at)?;
        if let Some(ts) = fields.next() {
            ts.parse::<i64>()
                .map_err(|e| at(format!("bad timestamp {ts:?}: {e}")))?;
        }
        if fields.next().is_some() {
            return Err(at("trailing fields".into()));
        }
        m.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    // Every sample belongs to a declared family (histograms and summaries
    // expose _bucket/_sum/_count series).
    for s in &m.samples {
        let family = [s.name.as_str()]
            .into_iter()
            .chain(
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .filter_map(|suffix| s.name.strip_suffix(suffix)),
            )
            .find(|f| m.types.contains_key(*f));
        match family {
            Some(f) => {
                let kind = m.types[f].as_str();
                if kind == "histogram"
                    && s.name.ends_with("_bucket")
                    && !s.labels.contains_key("le")
                {
                    return Err(format!("histogram bucket without le: {s:?}"));
                }
                if kind == "counter" && s.value < 0.0 {
                    return Err(format!("negative counter: {s:?}"));
                }
            }
            None => return Err(format!("sample of an undeclared family: {s:?}")),
        }
    }
    Ok(m)
}

impl Metrics {
    /// The sum of the samples named `name` whose labels include `labels`
    /// (0 when there is none).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .sum()
    }

    /// Whether any sample named `name` exists.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }
}
