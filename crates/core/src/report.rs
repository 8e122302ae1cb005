//! Text output shared by every command: aligned tables and counts with thousands separators.

/// A count with thousands separators (`1,141,869`, `-1,234`); "-" for a value that is not finite.
pub fn fmt_count(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let s = format!("{:.0}", v);
    // Group the digits only: a separator counted from the sign's position gave "-,123".
    let (sign, digits) = s.split_at(usize::from(s.starts_with('-')));
    let mut out = String::from(sign);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Render rows of cells with each column as wide as its widest cell; `right[i]` right-aligns
/// column i.
pub fn render(header: &[&str], cells: &[Vec<String>], right: &[bool]) -> String {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in cells {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |r: &[String]| {
        let parts: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if right[i] {
                    format!("{c:>width$}", width = w[i])
                } else {
                    format!("{c:<width$}", width = w[i])
                }
            })
            .collect();
        parts.join("  ").trim_end().to_string()
    };
    let mut s = line(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    s.push('\n');
    s.push_str(&line(&w.iter().map(|&n| "-".repeat(n)).collect::<Vec<_>>()));
    s.push('\n');
    for r in cells {
        s.push_str(&line(r));
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fmt_count_groups_thousands_after_the_sign() {
        for (v, want) in [
            (0.0, "0"),
            (7.0, "7"),
            (999.0, "999"),
            (1000.0, "1,000"),
            (123_456.0, "123,456"),
            (1_141_869.0, "1,141,869"),
            (999.6, "1,000"),
            (-7.0, "-7"),
            (-123.0, "-123"),
            (-999.0, "-999"),
            (-1000.0, "-1,000"),
            (-123_456.0, "-123,456"),
            (-1_234_567.0, "-1,234,567"),
        ] {
            assert_eq!(fmt_count(v), want, "fmt_count({v})");
        }
    }

    #[test]
    fn fmt_count_of_a_value_that_is_not_finite_is_a_dash() {
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(fmt_count(v), "-", "fmt_count({v})");
        }
    }
}
