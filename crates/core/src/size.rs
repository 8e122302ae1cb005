//! SIZE arguments: a byte count, or a number with a KiB, MiB or GiB suffix (design brief).
//! Anything else is refused with a message naming the bad text; nothing is rounded.

use crate::error::{Error, Result};

pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let (digits, mult) = if let Some(d) = t.strip_suffix("GiB") {
        (d, 1u64 << 30)
    } else if let Some(d) = t.strip_suffix("MiB") {
        (d, 1u64 << 20)
    } else if let Some(d) = t.strip_suffix("KiB") {
        (d, 1u64 << 10)
    } else {
        (t, 1u64)
    };
    let digits = digits.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::bad(format!(
            "bad size '{text}': expected a byte count or a number with a KiB, MiB or GiB suffix (e.g. 64MiB)"
        )));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| Error::bad(format!("bad size '{text}': number too large")))?;
    n.checked_mul(mult)
        .ok_or_else(|| Error::bad(format!("bad size '{text}': more than 2^64 bytes")))
}

pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, unit) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{}", bytes / unit, name);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("3KiB").unwrap(), 3072);
        for bad in [
            "",
            "MiB",
            "1.5GiB",
            "-1",
            "10MB",
            "1 G",
            "99999999999999999999",
        ] {
            assert!(parse_size(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(format_size(1 << 30), "1GiB");
        assert_eq!(format_size(1000), "1000 B");
    }
}
