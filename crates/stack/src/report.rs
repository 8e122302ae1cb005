//! What a verb found or did, as data: labelled rows for a person, the same as JSON for a
//! script, and whether it is a finding (damage: exit 1). The stack builds reports for every
//! kind; a front end (the program, Python) prints them without knowing the kind.

use nvstack_core::error::{Error, Result};

/// Longest label a report lays out (a row's text starts after it).
const LABEL_WIDTH_MAX: usize = 40;

#[derive(Clone, Debug)]
pub struct Report {
    /// Column at which each row's text starts.
    label_width: usize,
    rows: Vec<(String, String)>,
    /// The same facts for a script (`--json`); null for a verb that acts (writeback).
    pub json: serde_json::Value,
    /// Damage was found: the answer is a finding (exit 1), not an error.
    pub finding: bool,
}

impl Report {
    pub fn new(label_width: usize) -> Report {
        assert!(
            (1..=LABEL_WIDTH_MAX).contains(&label_width),
            "a label column of {label_width}"
        );
        Report {
            label_width,
            rows: Vec::new(),
            json: serde_json::Value::Null,
            finding: false,
        }
    }

    /// A row: `label` (shorter than the label column, which leaves a space) and its text.
    pub fn row(&mut self, label: &str, text: impl Into<String>) {
        assert!(
            label.len() < self.label_width,
            "label {label:?} fits the column"
        );
        self.rows.push((label.to_string(), text.into()));
    }

    /// A line of its own, with no label (a verb's sentence).
    pub fn line(&mut self, text: impl Into<String>) {
        self.rows.push((String::new(), text.into()));
    }

    pub fn rows(&self) -> &[(String, String)] {
        &self.rows
    }

    /// The JSON of anything serialisable.
    pub fn set_json<T: serde::Serialize>(&mut self, v: &T) -> Result<()> {
        self.json = serde_json::to_value(v).map_err(|e| Error::env(format!("json: {e}")))?;
        Ok(())
    }

    /// The rows laid out for a person, one per line (each ends with a newline).
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (label, text) in &self.rows {
            if label.is_empty() {
                out += &format!("{text}\n");
            } else {
                out += &format!("{label:<w$}{text}\n", w = self.label_width);
            }
        }
        out
    }

    /// 1 for a finding, else 0.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.finding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_line_up_and_a_finding_exits_one() {
        let mut r = Report::new(8);
        r.row("image", "x.img");
        r.row("result", "DAMAGED");
        r.line("a sentence");
        assert_eq!(r.text(), "image   x.img\nresult  DAMAGED\na sentence\n");
        assert_eq!(r.exit_code(), 0);
        r.finding = true;
        assert_eq!(r.exit_code(), 1);
    }

    #[test]
    #[should_panic(expected = "fits the column")]
    fn a_label_as_wide_as_the_column_is_refused() {
        Report::new(5).row("image", "x");
    }
}
