//! Helpers every experiment shares to build its rows, and that its tests use to read them.

#[cfg(test)]
use crate::point::Row;

/// `v` rounded to `decimals` decimal places (keeps the CSV and JSON short).
pub fn round(v: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (v * scale).round() / scale
}

/// The number in `column` of `row`; panics (a failed test) when it is missing or not a number.
#[cfg(test)]
pub fn num(row: &Row, column: &str) -> f64 {
    row.get(column)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| panic!("{column} is not a number in {row:?}"))
}

/// The non-negative integer in `column` of `row`; panics (a failed test) when it is missing or
/// not one.
#[cfg(test)]
pub fn int(row: &Row, column: &str) -> u64 {
    row.get(column)
        .and_then(serde_json::Value::as_u64)
        .unwrap_or_else(|| panic!("{column} is not a non-negative integer in {row:?}"))
}
