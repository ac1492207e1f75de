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

/// Unsigned integer types [`parse_whole`] reads.
pub trait Whole:
    std::str::FromStr<Err = std::num::ParseIntError> + Copy + Ord + fmt::Display
{
    /// The largest value of the type.
    const MAX: Self;
}

impl Whole for u16 {
    const MAX: Self = u16::MAX;
}
impl Whole for u32 {
    const MAX: Self = u32::MAX;
}
impl Whole for u64 {
    const MAX: Self = u64::MAX;
}
impl Whole for usize {
    const MAX: Self = usize::MAX;
}

/// Reads `text` (surrounding spaces ignored) as a whole number ≥ `min`. The error
/// says which of three things is wrong, quoting `text`: it is not a whole number
/// at all, it is too large for the type (and the largest accepted), or it is
/// below `min` (negative numbers included). Callers prefix the place.
///
/// ```
/// use pacer_model::error::parse_whole;
/// assert_eq!(parse_whole::<u32>(" 16 ", 1), Ok(16));
/// assert_eq!(parse_whole::<u32>("4x", 1).unwrap_err(), "`4x` is not a whole number");
/// assert_eq!(
///     parse_whole::<u32>("4294967296", 1).unwrap_err(),
///     "`4294967296` is too large (at most 4294967295)"
/// );
/// assert_eq!(parse_whole::<u32>("0", 1).unwrap_err(), "`0` must be ≥ 1");
/// assert_eq!(parse_whole::<u32>("-3", 1).unwrap_err(), "`-3` must be ≥ 1");
/// ```
pub fn parse_whole<T: Whole>(text: &str, min: T) -> Result<T, String> {
    use std::num::IntErrorKind;
    let t = text.trim();
    match t.parse::<T>() {
        Ok(v) if v >= min => Ok(v),
        Ok(_) => Err(format!("`{t}` must be ≥ {min}")),
        Err(e) => match e.kind() {
            IntErrorKind::PosOverflow => Err(format!("`{t}` is too large (at most {})", T::MAX)),
            // An unsigned parse calls "-3" an invalid digit; it is a whole number,
            // just below the range.
            _ if t
                .strip_prefix('-')
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())) =>
            {
                Err(format!("`{t}` must be ≥ {min}"))
            }
            _ => Err(format!("`{t}` is not a whole number")),
        },
    }
}
