//! Text output shared by every command: aligned tables and counts with thousands separators.

/// A count with thousands separators (`1,141,869`); "-" for a value that is not finite.
pub fn fmt_count(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let s = format!("{:.0}", v);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
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
