//! Durations and byte sizes as the configuration writes them: `2us`, `1.5ms`, `15k`, `64kb`.
//!
//! Rates have their own tc-like parser in the core (`metronome_core::Rate`'s `FromStr`); the two
//! here follow the same grammar: a decimal number (`2`, `1.5`, `.5`), optional whitespace, a unit
//! matched without regard to case. The result is rounded to the nearest nanosecond or byte.
//!
//! * Durations need a unit ([`DURATION_UNITS`]): tc's bare-number default (microseconds) is too
//!   easy to misread.
//! * Sizes follow tc(8)'s `get_size` ([`SIZE_UNITS`]): a bare number is bytes and the multiples
//!   are **1024-based**, so `15k` is 15 360 bytes and `64kb` 65 536 bytes; `kbit`, `mbit`, `gbit`
//!   count bits (`1kbit` = 128 bytes).

use metronome_core::Duration;

/// Duration units with their length in nanoseconds.
pub const DURATION_UNITS: [(&str, u64); 5] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
];

/// Size units with their value in bytes, as tc(8) reads sizes (`tc/tc_util.c`, `get_size`).
pub const SIZE_UNITS: [(&str, u64); 10] = [
    ("b", 1),
    ("k", 1 << 10),
    ("kb", 1 << 10),
    ("kbit", 1 << 7),
    ("m", 1 << 20),
    ("mb", 1 << 20),
    ("mbit", 1 << 17),
    ("g", 1 << 30),
    ("gb", 1 << 30),
    ("gbit", 1 << 27),
];

/// Why a string is not a duration or a size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ParseQuantityError {
    /// Nothing but whitespace.
    #[error("empty value")]
    Empty,
    /// A leading minus sign.
    #[error("negative value")]
    Negative,
    /// No digits where the number should be.
    #[error("no number before the unit")]
    InvalidNumber,
    /// A number without the unit this quantity requires.
    #[error("missing unit")]
    MissingUnit,
    /// A unit this quantity does not know.
    #[error("unknown unit")]
    UnknownUnit,
    /// More than 2^64 - 1 of the base unit.
    #[error("value too large")]
    Overflow,
}

/// Splits `text` (trimmed) into its number and its unit: `"100mbit"` gives `("100", "mbit")`.
pub fn split_unit(text: &str) -> (&str, &str) {
    let text = text.trim();
    let at = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    (&text[..at], text[at..].trim_start())
}

/// Parses a duration such as `2us`, `1.5ms`, `500ns`, `2s` (units: [`DURATION_UNITS`]).
pub fn parse_duration(text: &str) -> Result<Duration, ParseQuantityError> {
    parse_scaled(text, &DURATION_UNITS, None).map(Duration::from_nanos)
}

/// Parses a size in bytes such as `1514`, `15k`, `64kb`, `1.5m` (units: [`SIZE_UNITS`]).
pub fn parse_size(text: &str) -> Result<u64, ParseQuantityError> {
    parse_scaled(text, &SIZE_UNITS, Some(1))
}

/// The units of a table, for messages: `"ns, us, µs, ms, s"`.
pub fn unit_list(units: &[(&str, u64)]) -> String {
    let names: Vec<&str> = units.iter().map(|(n, _)| *n).collect();
    names.join(", ")
}

/// `number * unit` for `text` = number and unit from `units` (or `bare` when there is no unit).
fn parse_scaled(
    text: &str,
    units: &[(&str, u64)],
    bare: Option<u64>,
) -> Result<u64, ParseQuantityError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(ParseQuantityError::Empty);
    }
    if trimmed.starts_with('-') {
        return Err(ParseQuantityError::Negative);
    }
    let (number, unit) = split_unit(trimmed);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(ParseQuantityError::InvalidNumber);
    }
    let multiplier = if unit.is_empty() {
        bare.ok_or(ParseQuantityError::MissingUnit)?
    } else {
        units
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(unit) || *name == unit)
            .map(|&(_, m)| m)
            .ok_or(ParseQuantityError::UnknownUnit)?
    };
    metronome_core::rate::scale_decimal(number, multiplier).ok_or(ParseQuantityError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ns = |s: &str| parse_duration(s).map(|d| d.as_nanos());
        assert_eq!(ns("2us"), Ok(2_000));
        assert_eq!(ns("2µs"), Ok(2_000));
        assert_eq!(ns("500us"), Ok(500_000));
        assert_eq!(ns("1ms"), Ok(1_000_000));
        assert_eq!(ns("1.5ms"), Ok(1_500_000));
        assert_eq!(ns("2s"), Ok(2_000_000_000));
        assert_eq!(ns("100ns"), Ok(100));
        assert_eq!(ns(" 2 US "), Ok(2_000));
        assert_eq!(ns("0.4ns"), Ok(0));
    }

    #[test]
    fn bad_durations() {
        assert_eq!(parse_duration(""), Err(ParseQuantityError::Empty));
        assert_eq!(parse_duration("-1ms"), Err(ParseQuantityError::Negative));
        assert_eq!(parse_duration("ms"), Err(ParseQuantityError::InvalidNumber));
        assert_eq!(parse_duration("2"), Err(ParseQuantityError::MissingUnit));
        assert_eq!(parse_duration("2h"), Err(ParseQuantityError::UnknownUnit));
        assert_eq!(
            parse_duration("99999999999s"),
            Err(ParseQuantityError::Overflow)
        );
    }

    #[test]
    fn sizes_are_tc_like_and_1024_based() {
        assert_eq!(parse_size("1514"), Ok(1514));
        assert_eq!(parse_size("1514b"), Ok(1514));
        assert_eq!(parse_size("15k"), Ok(15 * 1024));
        assert_eq!(parse_size("64kb"), Ok(64 * 1024));
        assert_eq!(parse_size("1.5m"), Ok(1536 * 1024));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("8kbit"), Ok(1024));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("15kib"), Err(ParseQuantityError::UnknownUnit));
        assert_eq!(parse_size("1.2.3k"), Err(ParseQuantityError::InvalidNumber));
    }

    #[test]
    fn split_unit_separates_number_and_unit() {
        assert_eq!(split_unit("100mbitz"), ("100", "mbitz"));
        assert_eq!(split_unit(" 2 us"), ("2", "us"));
        assert_eq!(split_unit("1500"), ("1500", ""));
    }
}
