//! The sweep's CSV: rows of several kinds ([`CsvRecord`]: a cache run, a lifetime delay, an
//! LFS comparison) and the one table they make ([`csv_table`]). It knows no model: each result
//! type pushes its own cells, so the modules that make results ([`crate::analysis`],
//! [`crate::lfs`]) share this vocabulary from below.

use rustc_hash::FxHashMap;

/// One row of a CSV that holds results of several kinds: a `kind` and (column, cell) pairs.
/// A column of the same name means the same thing in every kind (`trace`, `block_accesses`,
/// `writes`, `net_write_traffic`).
#[derive(Clone, Debug, PartialEq)]
pub struct CsvRecord {
    pub cells: Vec<(String, String)>,
}

impl CsvRecord {
    pub fn new(kind: &str) -> CsvRecord {
        CsvRecord {
            cells: vec![("kind".to_string(), kind.to_string())],
        }
    }

    pub fn push(&mut self, column: &str, value: impl std::fmt::Display) -> &mut CsvRecord {
        debug_assert!(
            self.cells.iter().all(|(c, _)| c != column),
            "column {column} twice"
        );
        self.cells.push((column.to_string(), value.to_string()));
        self
    }

    /// A ratio or percentage, to six decimals.
    pub fn real(&mut self, column: &str, value: f64) -> &mut CsvRecord {
        self.push(column, format!("{value:.6}"))
    }

    /// An optional real: `NA` when undefined (as the paper's tables write it).
    pub fn real_or_na(&mut self, column: &str, value: Option<f64>) -> &mut CsvRecord {
        match value {
            Some(v) => self.real(column, v),
            None => self.push(column, "NA"),
        }
    }
}

/// Records of several kinds as one CSV: the header is the union of their columns in the order
/// first seen, and each row leaves empty the cells of the columns its kind does not have.
pub fn csv_table(records: &[CsvRecord]) -> String {
    let mut columns: Vec<&str> = Vec::new();
    let mut at: FxHashMap<&str, usize> = FxHashMap::default();
    for r in records {
        for (c, _) in &r.cells {
            at.entry(c.as_str()).or_insert_with(|| {
                columns.push(c.as_str());
                columns.len() - 1
            });
        }
    }
    let mut out = columns.join(",");
    out.push('\n');
    for r in records {
        let mut row = vec![String::new(); columns.len()];
        for (c, v) in &r.cells {
            row[at[c.as_str()]] = csv_field(v);
        }
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
