//! Values people write in settings (durations, regexes) and how errors quote them back: shared by
//! [`crate::config`], which merges the layers, and the collectors, which validate their own
//! settings ([`crate::collect::settings`]).

use std::time::Duration;

use regex::Regex;

pub use memlock_kernel::quote::{bounded, shown};

/// Parses `500ms`, `1s`, `1.5s`, `2m`, `1h`. A bare number is refused: units are not guessed.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 =
        number.parse().map_err(|_| format!("{} is not a duration such as \"1s\" or \"500ms\"", shown(text)))?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(format!("{} needs a unit: ms, s, m or h", shown(text))),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{} is out of range", shown(text)))
}

/// A duration between 100 ms and 1 h: a collector's interval, a full scan's, a resend's.
pub fn interval(text: &str) -> Result<Duration, String> {
    let value = parse_duration(text)?;
    if value < Duration::from_millis(100) || value > Duration::from_secs(3600) {
        return Err(format!("{} is outside 100ms..1h", shown(text)));
    }
    Ok(value)
}

/// Compiles a regex; the error shows the pattern and the regex crate's message, which quotes the
/// whole pattern, bounded.
pub fn regex(pattern: &str) -> Result<Regex, String> {
    Regex::new(pattern).map_err(|e| format!("{} is not a valid regex: {}", shown(pattern), bounded(&e.to_string())))
}

/// Compiles every pattern of a list; the first that does not compile is the error.
pub(crate) fn regexes(patterns: &[String]) -> Result<Vec<Regex>, String> {
    patterns.iter().map(|p| regex(p)).collect()
}

/// Whether two lists hold the same patterns (a [`Regex`] has no `PartialEq`; its source text
/// decides what it matches).
pub(crate) fn same_patterns(a: &[Regex], b: &[Regex]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.as_str() == b.as_str())
}
