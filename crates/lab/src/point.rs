//! What goes into an experiment and what comes out of it.
//!
//! A [`Point`] is one set of parameters: the plan's `[base]` table with one combination of sweep
//! values laid over it (see [`crate::plan::Plan::points`]). Experiments read it with typed getters
//! that name the parameter in their error ([`Point::u64`], [`Point::f64`], [`Point::str`],
//! [`Point::bool`]), so a plan with `flows = "many"` fails with "parameter `flows`: expected an
//! integer, found string".
//!
//! A [`Row`] is one line of results: an ordered list of (column, JSON value). The runner checks
//! every column against the plan's `[columns]` and writes them in the plan's column order, so the
//! CSV header and the JSON keys are stable whatever order an experiment pushes them in.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use crate::error::LabError;

/// One point of a plan: the merged parameter table handed to an experiment.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Position in the expanded plan (0-based); outputs are sorted by it.
    pub index: usize,
    /// Name of the `[[sweep]]` entry that produced the point (`"base"` when the plan has none).
    pub sweep: String,
    /// The parameters: `[base]`, overridden by the sweep's values for this point.
    pub params: toml::Table,
}

impl Point {
    /// A point with `params`, index 0 and sweep `"base"` (for tests and for callers that run one
    /// experiment directly).
    pub fn new(params: toml::Table) -> Self {
        Self {
            index: 0,
            sweep: "base".to_string(),
            params,
        }
    }

    /// The raw value of `name`, or a [`LabError::Param`] saying it is missing.
    pub fn get(&self, name: &str) -> Result<&toml::Value, LabError> {
        self.params.get(name).ok_or_else(|| {
            LabError::param(self.index, name, "missing (set it in [base] or a sweep)")
        })
    }

    /// `name` as a non-negative integer.
    pub fn u64(&self, name: &str) -> Result<u64, LabError> {
        match self.get(name)? {
            toml::Value::Integer(i) => u64::try_from(*i).map_err(|_| {
                LabError::param(self.index, name, format!("must not be negative, found {i}"))
            }),
            other => Err(self.wrong_type(name, "a non-negative integer", other)),
        }
    }

    /// `name` as an integer of at least 1.
    pub fn positive(&self, name: &str) -> Result<u64, LabError> {
        match self.u64(name)? {
            0 => Err(LabError::param(self.index, name, "must be at least 1")),
            v => Ok(v),
        }
    }

    /// `name` as an integer of at least 1 that fits in a `u32`.
    pub fn positive_u32(&self, name: &str) -> Result<u32, LabError> {
        let v = self.positive(name)?;
        u32::try_from(v)
            .map_err(|_| LabError::param(self.index, name, format!("must be at most {}", u32::MAX)))
    }

    /// `name` as an integer in `min..=max`.
    pub fn u64_in(&self, name: &str, min: u64, max: u64) -> Result<u64, LabError> {
        let v = self.u64(name)?;
        if v < min || v > max {
            return Err(LabError::param(
                self.index,
                name,
                format!("must be in {min}..={max}, found {v}"),
            ));
        }
        Ok(v)
    }

    /// `name` as a number (an integer is accepted and converted).
    pub fn f64(&self, name: &str) -> Result<f64, LabError> {
        match self.get(name)? {
            toml::Value::Float(f) => Ok(*f),
            toml::Value::Integer(i) => Ok(*i as f64),
            other => Err(self.wrong_type(name, "a number", other)),
        }
    }

    /// `name` as a string.
    pub fn str(&self, name: &str) -> Result<&str, LabError> {
        match self.get(name)? {
            toml::Value::String(s) => Ok(s),
            other => Err(self.wrong_type(name, "a string", other)),
        }
    }

    /// `name` as a boolean.
    pub fn bool(&self, name: &str) -> Result<bool, LabError> {
        match self.get(name)? {
            toml::Value::Boolean(b) => Ok(*b),
            other => Err(self.wrong_type(name, "a boolean", other)),
        }
    }

    fn wrong_type(&self, name: &str, expected: &str, found: &toml::Value) -> LabError {
        LabError::param(
            self.index,
            name,
            format!("expected {expected}, found {} {found}", found.type_str()),
        )
    }
}

/// One row of results: columns in the order the experiment pushed them, each with a JSON value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    cells: Vec<(String, Value)>,
}

impl Row {
    /// An empty row.
    pub fn new() -> Self {
        Self::default()
    }

    /// The row with `column` set to `value` (builder form of [`Row::set`]).
    #[must_use]
    pub fn with(mut self, column: &str, value: impl Into<Value>) -> Self {
        self.set(column, value);
        self
    }

    /// Sets `column` to `value`, replacing an earlier value of the same column in place.
    pub fn set(&mut self, column: &str, value: impl Into<Value>) {
        let value = value.into();
        match self.cells.iter_mut().find(|(c, _)| c == column) {
            Some(cell) => cell.1 = value,
            None => self.cells.push((column.to_string(), value)),
        }
    }

    /// The value of `column`, if set.
    pub fn get(&self, column: &str) -> Option<&Value> {
        self.cells.iter().find(|(c, _)| c == column).map(|(_, v)| v)
    }

    /// The columns, in order.
    pub fn columns(&self) -> impl Iterator<Item = &str> {
        self.cells.iter().map(|(c, _)| c.as_str())
    }

    /// (column, value) pairs, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.cells.iter().map(|(c, v)| (c.as_str(), v))
    }

    /// Number of columns set.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// True when no column is set.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The same cells reordered to follow `order`; columns not in `order` keep their relative
    /// order after the others (the runner rejects them before this matters).
    #[must_use]
    pub fn ordered_by<'a>(mut self, order: impl IntoIterator<Item = &'a str>) -> Self {
        let mut cells = Vec::with_capacity(self.cells.len());
        for column in order {
            if let Some(i) = self.cells.iter().position(|(c, _)| c == column) {
                cells.push(self.cells.remove(i));
            }
        }
        cells.append(&mut self.cells);
        Self { cells }
    }
}

impl Serialize for Row {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.cells.len()))?;
        for (column, value) in &self.cells {
            map.serialize_entry(column, value)?;
        }
        map.end()
    }
}

/// Converts a TOML value into the JSON value a row or a reference row carries (datetimes become
/// strings).
pub fn toml_to_json(value: &toml::Value) -> Value {
    match value {
        toml::Value::String(s) => Value::from(s.as_str()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => Value::from(*f),
        toml::Value::Boolean(b) => Value::from(*b),
        toml::Value::Datetime(d) => Value::from(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(text: &str) -> Point {
        Point::new(toml::from_str(text).expect("test table parses"))
    }

    #[test]
    fn typed_getters_name_the_parameter() {
        let p = point("flows = 10\nrate = 2.5\nname = \"x\"\nneg = -1\non = true");
        assert_eq!(p.u64("flows").unwrap(), 10);
        assert_eq!(p.f64("flows").unwrap(), 10.0);
        assert_eq!(p.f64("rate").unwrap(), 2.5);
        assert_eq!(p.str("name").unwrap(), "x");
        assert!(p.bool("on").unwrap());
        let e = p.u64("name").unwrap_err().to_string();
        assert!(e.contains("`name`") && e.contains("string"), "{e}");
        let e = p.u64("neg").unwrap_err().to_string();
        assert!(e.contains("`neg`") && e.contains("negative"), "{e}");
        let e = p.u64("missing").unwrap_err().to_string();
        assert!(e.contains("`missing`") && e.contains("missing"), "{e}");
    }

    #[test]
    fn row_keeps_order_and_reorders() {
        let row = Row::new().with("b", 2).with("a", "x").with("b", 3);
        assert_eq!(row.columns().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(row.get("b"), Some(&Value::from(3)));
        let json = serde_json::to_string(&row).unwrap();
        assert_eq!(json, r#"{"b":3,"a":"x"}"#);
        let row = row.ordered_by(["a", "b"]);
        assert_eq!(serde_json::to_string(&row).unwrap(), r#"{"a":"x","b":3}"#);
    }
}
