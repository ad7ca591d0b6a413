//! The one table printer of `metronome compare`'s side-by-side tables: a key column, then one
//! block of columns per shaper (or per shaper and direction), each block opened by ` | ` under
//! its title. The kernel grid ([`crate::compare_cmd::format_table`]), the attach comparison's
//! workloads and the CNI comparison's pods print through it.

use std::fmt::Write;

/// One block of a side-by-side table: its title and its columns (name, width), right-aligned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// Written over the block, left-aligned (a longer title is not cut).
    pub title: String,
    /// The columns' names and widths.
    pub columns: Vec<(&'static str, usize)>,
}

impl Block {
    /// A block titled `title` with `columns`.
    pub fn new(title: impl Into<String>, columns: &[(&'static str, usize)]) -> Block {
        Block {
            title: title.into(),
            columns: columns.to_vec(),
        }
    }

    /// Its width: the columns and one space between two.
    pub fn width(&self) -> usize {
        let widths: usize = self.columns.iter().map(|c| c.1).sum();
        widths + self.columns.len().saturating_sub(1)
    }

    /// ` | ` and the title, padded to the block's width.
    pub fn title_cell(&self) -> String {
        format!(" | {:<width$}", self.title, width = self.width())
    }

    /// ` | ` and the columns' names.
    pub fn names(&self) -> String {
        let names: Vec<&str> = self.columns.iter().map(|c| c.0).collect();
        self.cells(&names)
    }

    /// ` | ` and `cells`, each right-aligned in its column.
    pub fn cells<S: AsRef<str>>(&self, cells: &[S]) -> String {
        let mut out = " |".to_owned();
        for (cell, &(_, width)) in cells.iter().zip(&self.columns) {
            let _ = write!(out, " {:>width$}", cell.as_ref());
        }
        out
    }

    /// ` | ` and `-` in every column: a run without figures.
    pub fn dashes(&self) -> String {
        self.cells(&vec!["-"; self.columns.len()])
    }

    /// ` | ` and one `-` over the whole block: no run.
    pub fn dash(&self) -> String {
        format!(" | {:<width$}", "-", width = self.width())
    }
}

/// The two header lines of a table of `blocks`: `top_key` then the titles, `sub_key` then the
/// column names (the keys already padded to the key column's width).
pub fn header(top_key: &str, sub_key: &str, blocks: &[Block]) -> (String, String) {
    let mut top = top_key.to_owned();
    let mut sub = sub_key.to_owned();
    for b in blocks {
        top += &b.title_cell();
        sub += &b.names();
    }
    (top, sub)
}

/// The columns of a rate against a limit: Mbit/s and the mean absolute deviation.
pub const RATE_COLUMNS: [(&str, usize); 2] = [("Mbit/s", 9), ("dev %", 7)];

/// The cells of a [`RATE_COLUMNS`] block: the rate (bit/s, shown in Mbit/s) and its deviation
/// (percent), or dashes without figures.
pub fn rate_cells(block: &Block, figures: Option<(f64, f64)>) -> String {
    match figures {
        Some((bps, dev)) => block.cells(&[fixed(bps / 1e6, 2), fixed(dev, 2)]),
        None => block.dashes(),
    }
}

/// A figure with `decimals` decimals (for [`Block::cells`]).
pub fn fixed(value: f64, decimals: usize) -> String {
    format!("{value:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_align_their_titles_names_and_cells() {
        let b = Block::new("metronome", &[("Mbit/s", 9), ("dev %", 7)]);
        assert_eq!(b.width(), 17);
        assert_eq!(b.title_cell(), " | metronome        ");
        assert_eq!(b.names(), " |    Mbit/s   dev %");
        assert_eq!(
            b.cells(&[fixed(99.5, 2), fixed(2.0, 2)]),
            " |     99.50    2.00"
        );
        assert_eq!(b.dashes(), " |         -       -");
        assert_eq!(b.dash(), " | -                ");
        let (top, sub) = header("key ", "    ", &[b]);
        assert_eq!((top.len(), sub.len()), (4 + 20, 4 + 20));
    }
}
