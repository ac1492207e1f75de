//! The one error type for malformed user input.

use std::fmt;

/// Malformed input: names where (`origin`, optionally with a line) and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    /// File path, flag name or other place the text came from.
    pub origin: String,
    /// 1-based line number, when the input is line oriented.
    pub line: Option<usize>,
    /// What was wrong and what was expected.
    pub message: String,
}

impl ParseError {
    /// An error at `origin:line`.
    pub fn at(origin: &str, line: usize, message: impl Into<String>) -> Self {
        ParseError {
            origin: origin.to_string(),
            line: Some(line),
            message: message.into(),
        }
    }

    /// An error about `origin` as a whole (a flag, a file without line structure).
    pub fn whole(origin: &str, message: impl Into<String>) -> Self {
        ParseError {
            origin: origin.to_string(),
            line: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.origin, line, self.message),
            None => write!(f, "{}: {}", self.origin, self.message),
        }
    }
}
