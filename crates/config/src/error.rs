//! [`ConfigError`]: what is wrong with a configuration, in the form `FILE:LINE: FIELD: MESSAGE`.
//!
//! Every error names the file (the `source_name` given to
//! [`Config::from_toml_str`](super::Config::from_toml_str), or the path given to
//! [`Config::load`](super::Config::load)), the 1-based line and the field as a path from the
//! document root (`class[1].rate`, class indexes counting from 0 in file order):
//!
//! ```text
//! examples/demo.toml:14: class[1].rate: unknown unit "mbitz" in "100mbitz" (tc units: bit, kbit, ...)
//! ```
//!
//! Errors found by the TOML parser or by serde (syntax, unknown fields, wrong types, missing
//! fields) carry a byte span; the field path is recovered from that span by walking the parsed
//! document (`field_at`). Errors found by validation carry the span of the offending value
//! (`toml::Spanned`).

use crate::units::{unit_list, ParseQuantityError, DURATION_UNITS, SIZE_UNITS};
use core::fmt;
use core::ops::Range;
use metronome_core::rate::{ParseRateError, RATE_UNITS};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// A configuration that cannot be used, with where and why. The CLI prints it with `Display`
/// and exits with status 2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or the name the caller gave the text).
    pub source_name: String,
    /// 1-based line of the offending key or value; `None` when the file could not be read.
    pub line: Option<usize>,
    /// The field as a path from the document root (`class[1].match.dst_port`); empty when the
    /// error is not about one field (a TOML syntax error outside any key, an unreadable file).
    pub field: String,
    /// What is wrong.
    pub kind: ErrorKind,
}

impl std::error::Error for ConfigError {}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source_name)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.kind)
    }
}

/// What is wrong with a configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// The file could not be read.
    #[error("cannot read the configuration: {0}")]
    Io(String),
    /// Not valid TOML.
    #[error("TOML syntax: {0}")]
    Syntax(String),
    /// Valid TOML that does not fit the schema: an unknown field, a missing field, a value of
    /// the wrong type (serde's message).
    #[error("{0}")]
    Schema(String),
    /// Not a tc-like rate.
    #[error("{}", rate_message(value, *error))]
    Rate {
        /// The text as written.
        value: String,
        /// Why it is not a rate.
        error: ParseRateError,
    },
    /// Not a duration.
    #[error("{}", quantity_message(value, *error, &DURATION_UNITS))]
    Duration {
        /// The text as written.
        value: String,
        /// Why it is not a duration.
        error: ParseQuantityError,
    },
    /// Not a size in bytes.
    #[error("{}", quantity_message(value, *error, &SIZE_UNITS))]
    Size {
        /// The text as written.
        value: String,
        /// Why it is not a size.
        error: ParseQuantityError,
    },
    /// Not an IP prefix (`10.0.0.0/8`, `2001:db8::/32`, or a single address).
    #[error("invalid prefix {value:?}: {reason}")]
    Prefix {
        /// The text as written.
        value: String,
        /// Why it is not a prefix.
        reason: String,
    },
    /// A DSCP outside 0..=63.
    #[error("DSCP {0} is outside 0..=63")]
    Dscp(i128),
    /// Not a protocol name or number.
    #[error("unknown protocol {0:?} (tcp, udp, icmp, icmpv6 or a number 0..=255)")]
    Protocol(String),
    /// Not a port or a port range.
    #[error("invalid port {value:?}: {reason}")]
    Port {
        /// The text as written.
        value: String,
        /// Why it is not a port or range.
        reason: String,
    },
    /// A port range whose first port is above its last.
    #[error("port range {first}-{last} is reversed (write {last}-{first})")]
    PortRangeReversed {
        /// The first port as written.
        first: u16,
        /// The last port as written.
        last: u16,
    },
    /// Two classes of the same name.
    #[error("duplicate class name {name:?} (first used at line {first_line})")]
    DuplicateClass {
        /// The name.
        name: String,
        /// The line of the first class that has it.
        first_line: usize,
    },
    /// The wheel's slots are wider than the time it covers.
    #[error("granularity {granularity} is larger than the horizon {horizon}")]
    GranularityAboveHorizon {
        /// `wheel.granularity`.
        granularity: metronome_core::Duration,
        /// `wheel.horizon`.
        horizon: metronome_core::Duration,
    },
    /// A burst that does not hold one full-sized packet.
    #[error("burst of {burst} bytes is smaller than one MTU ({mtu} bytes, interfaces.mtu)")]
    BurstBelowMtu {
        /// The burst in bytes.
        burst: u64,
        /// The MTU in bytes.
        mtu: u64,
    },
    /// Any other value out of its range or inconsistent with another field; the message says
    /// what is expected.
    #[error("{0}")]
    Invalid(String),
}

fn rate_message(value: &str, error: ParseRateError) -> String {
    match error {
        ParseRateError::UnknownUnit => format!(
            "unknown unit {:?} in {value:?} (tc units: {})",
            crate::units::split_unit(value).1,
            unit_list(&RATE_UNITS)
        ),
        ParseRateError::Empty => "empty rate (write it like tc: \"100mbit\")".to_string(),
        other => format!("{other} in {value:?}"),
    }
}

fn quantity_message(value: &str, error: ParseQuantityError, units: &[(&str, u64)]) -> String {
    match error {
        ParseQuantityError::UnknownUnit => format!(
            "unknown unit {:?} in {value:?} (units: {})",
            crate::units::split_unit(value).1,
            unit_list(units)
        ),
        ParseQuantityError::MissingUnit => {
            format!("{value:?} needs a unit ({})", unit_list(units))
        }
        other => format!("{other} in {value:?}"),
    }
}

/// The 1-based line holding byte `offset` of `text`, by counting: the reference
/// [`ErrorSite::line`] is tested against.
#[cfg(test)]
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Builds errors for one document.
pub(crate) struct ErrorSite<'a> {
    pub(crate) text: &'a str,
    pub(crate) source_name: &'a str,
    /// Byte offsets of the document's newlines, so a line is found in O(log lines)
    /// ([`ErrorSite::line`]); a configuration of 100 000 classes asks for one per class.
    newlines: Vec<usize>,
}

impl<'a> ErrorSite<'a> {
    /// The site of document `text`, named `source_name` in errors.
    pub(crate) fn new(text: &'a str, source_name: &'a str) -> ErrorSite<'a> {
        let newlines = text
            .bytes()
            .enumerate()
            .filter_map(|(i, b)| (b == b'\n').then_some(i))
            .collect();
        ErrorSite {
            text,
            source_name,
            newlines,
        }
    }

    /// The 1-based line holding byte `offset`, found among the newlines' offsets.
    pub(crate) fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.newlines.partition_point(|&n| n < end) + 1
    }

    /// An error about `field`, located at byte `span` of the document.
    pub(crate) fn at(&self, span: Range<usize>, field: &str, kind: ErrorKind) -> ConfigError {
        ConfigError {
            source_name: self.source_name.to_string(),
            line: Some(self.line(span.start)),
            field: field.to_string(),
            kind,
        }
    }

    /// The error of the TOML parser or of serde, with its field recovered from its span.
    pub(crate) fn toml_error(&self, err: &toml::de::Error, syntax: bool) -> ConfigError {
        let message = err.message().trim().replace('\n', "; ");
        let kind = if syntax {
            ErrorKind::Syntax(message)
        } else {
            ErrorKind::Schema(message)
        };
        match err.span() {
            Some(span) => {
                let field = if syntax {
                    String::new()
                } else {
                    field_at(self.text, span.start)
                };
                self.at(span, &field, kind)
            }
            None => ConfigError {
                source_name: self.source_name.to_string(),
                line: None,
                field: String::new(),
                kind,
            },
        }
    }
}

/// The path (`class[1].match.dst`) of the deepest key or value of `text` that contains byte
/// `offset`; empty when none does or the text does not parse.
pub(crate) fn field_at(text: &str, offset: usize) -> String {
    let Ok(root) = DeTable::parse(text) else {
        return String::new();
    };
    let mut path = Vec::new();
    find_in_table(root.get_ref(), offset, &mut path);
    let mut out = String::new();
    for segment in path {
        if !segment.starts_with('[') && !out.is_empty() {
            out.push('.');
        }
        out.push_str(&segment);
    }
    out
}

fn contains(span: &Range<usize>, offset: usize) -> bool {
    span.start <= offset && offset < span.end.max(span.start + 1)
}

fn find_in_table(table: &DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    for (key, value) in table.iter() {
        path.push(key.get_ref().to_string());
        if contains(&key.span(), offset) || find_in_value(value, offset, path) {
            return true;
        }
        path.pop();
    }
    false
}

fn find_in_value(value: &Spanned<DeValue<'_>>, offset: usize, path: &mut Vec<String>) -> bool {
    let found_inside = match value.get_ref() {
        DeValue::Table(t) => find_in_table(t, offset, path),
        DeValue::Array(items) => {
            let mut found = false;
            for (i, item) in items.iter().enumerate() {
                path.push(format!("[{i}]"));
                if find_in_value(item, offset, path) {
                    found = true;
                    break;
                }
                path.pop();
            }
            found
        }
        _ => false,
    };
    found_inside || contains(&value.span(), offset)
}
