//! A configuration error, phrased for humans: where in the file (line and
//! column, from the parser's spans), what is wrong and the fix.

use std::ops::Range;

/// A configuration error, already phrased for humans.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The file being checked: its name (for messages) and its text (to turn a
/// parser's byte span into a line and a column).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    pub path: &'a str,
    pub text: &'a str,
    /// Objects appended after the file's own text (the admin API's,
    /// `super::admin`): where each starts and what it is called, so that a
    /// problem in one is placed in it, not past the file's end.
    pub appended: &'a [(usize, String)],
}

impl Source<'_> {
    /// `path:line:col: problem` and its fix, at the start of `span` (in an
    /// appended object: `its name:line:col`, counted from its start).
    pub fn at(&self, span: Range<usize>, problem: &str, fix: &str) -> ConfigError {
        let (name, start) = self
            .appended
            .iter()
            .rev()
            .find(|(start, _)| *start <= span.start)
            .map_or((self.path, 0), |(start, name)| (name.as_str(), *start));
        let (line, col) = self.line_of(start, span.start);
        ConfigError(format!("{name}:{line}:{col}: {problem}\n  fix: {fix}"))
    }

    /// A syntax error, or a value the file's types refuse.
    pub fn invalid(&self, e: &toml::de::Error) -> ConfigError {
        self.at(
            e.span().unwrap_or(0..0),
            e.message().trim(),
            "correct this entry; every key is documented in the README (Configuration)",
        )
    }

    /// The line and column (both from 1) of a byte offset, counted from
    /// `start`.
    fn line_of(&self, start: usize, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[start.min(offset)..offset];
        let line = before.matches('\n').count() + 1;
        let col = before
            .rfind('\n')
            .map_or(before.len(), |i| before.len() - i - 1)
            + 1;
        (line, col)
    }
}
