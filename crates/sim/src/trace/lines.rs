//! What every text trace reader shares: a line reader that reuses one buffer and bounds a line's
//! length, field splitting and number parsing that allocate nothing, and stream ids for formats
//! that carry several address spaces (MSR hosts and disks, blkparse devices, fio files).

use super::STREAMS_MAX;
use rustc_hash::FxHashMap;
use std::io::{BufRead, ErrorKind};

/// The longest line any reader accepts, in bytes. Real trace lines are under 200 bytes; the
/// bound keeps a file with no line ends (a binary trace given as text) from being read into
/// memory whole.
pub const LINE_BYTES_MAX: usize = 64 * 1024;

/// How many bytes of a bad field a message quotes.
const QUOTE_BYTES_MAX: usize = 40;

pub(crate) enum LineRead {
    /// A line is in [`LineReader::line`].
    Line,
    /// The line was longer than [`LINE_BYTES_MAX`]; it has been read past and dropped.
    TooLong,
    Eof,
}

/// Reads a trace a line at a time into one reused buffer.
pub(crate) struct LineReader {
    input: Box<dyn BufRead + Send>,
    buf: Vec<u8>,
    /// 1-based number of the line in `buf`.
    pub line_no: u64,
}

impl LineReader {
    pub fn new(input: Box<dyn BufRead + Send>) -> LineReader {
        LineReader {
            input,
            buf: Vec::with_capacity(256),
            line_no: 0,
        }
    }

    /// The current line without its end (`\n` or `\r\n`).
    pub fn line(&self) -> &[u8] {
        &self.buf
    }

    pub fn read(&mut self) -> std::io::Result<LineRead> {
        self.buf.clear();
        let mut any = false;
        let mut too_long = false;
        loop {
            let avail = match self.input.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                break;
            }
            any = true;
            let newline = avail.iter().position(|&b| b == b'\n');
            let chunk = &avail[..newline.unwrap_or(avail.len())];
            if !too_long {
                if self.buf.len() + chunk.len() > LINE_BYTES_MAX {
                    too_long = true;
                    self.buf.clear();
                } else {
                    self.buf.extend_from_slice(chunk);
                }
            }
            let used = newline.map_or(avail.len(), |i| i + 1);
            self.input.consume(used);
            if newline.is_some() {
                break;
            }
        }
        if !any {
            return Ok(LineRead::Eof);
        }
        self.line_no += 1;
        if too_long {
            return Ok(LineRead::TooLong);
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(LineRead::Line)
    }
}

/// True for a line with nothing but spaces and tabs.
pub(crate) fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| b.is_ascii_whitespace())
}

/// Splits `line` at every `sep` into exactly `N` fields; `Err(count)` with the number of fields
/// found otherwise.
pub(crate) fn split_exact<const N: usize>(
    line: &[u8],
    sep: u8,
) -> std::result::Result<[&[u8]; N], usize> {
    let mut out: [&[u8]; N] = [&[]; N];
    let mut n = 0;
    for f in line.split(|&b| b == sep) {
        if n < N {
            out[n] = f;
        }
        n += 1;
    }
    if n == N {
        Ok(out)
    } else {
        Err(n)
    }
}

/// Splits `line` at runs of spaces and tabs into at most `N` fields (the rest are not looked
/// at); returns the fields and how many there were, up to `N`.
pub(crate) fn split_ws<const N: usize>(line: &[u8]) -> ([&[u8]; N], usize) {
    let mut out: [&[u8]; N] = [&[]; N];
    let mut n = 0;
    for f in line
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
    {
        if n == N {
            break;
        }
        out[n] = f;
        n += 1;
    }
    (out, n)
}

/// Counts the whitespace-separated fields of `line` (for messages).
pub(crate) fn count_ws(line: &[u8]) -> usize {
    line.split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .count()
}

/// A decimal whole number: digits only, no sign, no spaces; None if empty, not a number or
/// above `u64::MAX`.
#[inline]
pub(crate) fn parse_u64(field: &[u8]) -> Option<u64> {
    // Up to 19 digits cannot overflow (10^19 - 1 < 2^64), so only a 20-digit field pays for
    // checked arithmetic: this is the reader's inner loop.
    const DIGITS_UNCHECKED_MAX: usize = 19;
    if field.is_empty() || field.len() > DIGITS_UNCHECKED_MAX + 1 {
        return None;
    }
    let mut v: u64 = 0;
    if field.len() <= DIGITS_UNCHECKED_MAX {
        for &b in field {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            v = v * 10 + u64::from(d);
        }
        return Some(v);
    }
    for &b in field {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

/// A field quoted in a message: lossy UTF-8, cut to a few dozen bytes.
pub(crate) fn quote(field: &[u8]) -> String {
    if field.len() > QUOTE_BYTES_MAX {
        format!("{}...", String::from_utf8_lossy(&field[..QUOTE_BYTES_MAX]))
    } else {
        String::from_utf8_lossy(field).into_owned()
    }
}

/// `field 'NAME' is 'VALUE': expected WHAT`, the message of a field that does not parse.
#[cold]
pub(crate) fn bad_field(name: &str, field: &[u8], expected: &str) -> String {
    format!("field '{name}' is '{}': expected {expected}", quote(field))
}

/// A numeric field, or the message naming it.
#[inline]
pub(crate) fn number(name: &str, field: &[u8], expected: &str) -> Result<u64, String> {
    parse_u64(field).ok_or_else(|| bad_field(name, field, expected))
}

/// `a * b`, or a message saying the field's value is too large.
#[inline]
pub(crate) fn scaled(name: &str, value: u64, unit: u64) -> Result<u64, String> {
    value
        .checked_mul(unit)
        .ok_or_else(|| format!("field '{name}' is {value}: too large (overflows 64 bits)"))
}

/// Stream ids for the address spaces of one trace, numbered from 0 in order of first appearance.
/// Keys are raw bytes (a host and disk, a device, a file name); the last key is checked first
/// because consecutive requests almost always share a stream.
pub(crate) struct StreamIds {
    ids: FxHashMap<Box<[u8]>, u32>,
    keys: Vec<Box<[u8]>>,
    last: usize,
}

impl StreamIds {
    pub fn new() -> StreamIds {
        StreamIds {
            ids: FxHashMap::default(),
            keys: Vec::new(),
            last: 0,
        }
    }

    /// The id of `key`, given a new one on first sight; an error once [`STREAMS_MAX`] are taken.
    pub fn id(&mut self, key: &[u8]) -> Result<u32, String> {
        if let Some(k) = self.keys.get(self.last) {
            if &**k == key {
                return Ok(self.last as u32);
            }
        }
        if let Some(&id) = self.ids.get(key) {
            self.last = id as usize;
            return Ok(id);
        }
        if self.keys.len() as u64 >= u64::from(STREAMS_MAX) {
            return Err(format!(
                "more than {STREAMS_MAX} streams (distinct devices or files) in one trace"
            ));
        }
        let id = self.keys.len() as u32;
        self.keys.push(key.into());
        self.ids.insert(key.into(), id);
        self.last = id as usize;
        Ok(id)
    }

    /// The id of `key` if it has one, without giving it one.
    pub fn get(&self, key: &[u8]) -> Option<u32> {
        self.ids.get(key).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: &'static [u8]) -> LineReader {
        LineReader::new(Box::new(std::io::BufReader::with_capacity(7, bytes)))
    }

    fn lines(bytes: &'static [u8]) -> Vec<Result<String, &'static str>> {
        let mut r = reader(bytes);
        let mut out = Vec::new();
        loop {
            match r.read().unwrap() {
                LineRead::Line => out.push(Ok(String::from_utf8_lossy(r.line()).into_owned())),
                LineRead::TooLong => out.push(Err("too long")),
                LineRead::Eof => return out,
            }
        }
    }

    #[test]
    fn lines_end_at_lf_or_crlf_and_the_last_may_lack_one() {
        let ok = |s: &str| Ok(s.to_string());
        assert_eq!(
            lines(b"ab\r\nc\n\nlong line here\nend"),
            vec![ok("ab"), ok("c"), ok(""), ok("long line here"), ok("end")]
        );
        assert!(lines(b"").is_empty());
    }

    #[test]
    fn a_line_beyond_the_bound_is_dropped_and_counted() {
        let mut big = vec![b'x'; LINE_BYTES_MAX + 1];
        big.extend_from_slice(b"\nnext\n");
        let big: &'static [u8] = Box::leak(big.into_boxed_slice());
        let mut r = reader(big);
        assert!(matches!(r.read().unwrap(), LineRead::TooLong));
        assert_eq!(r.line_no, 1);
        assert!(matches!(r.read().unwrap(), LineRead::Line));
        assert_eq!(r.line(), b"next");
        assert_eq!(r.line_no, 2);
    }

    #[test]
    fn numbers_and_fields() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b" 1"), None);
        assert_eq!(
            split_exact::<3>(b"a,b,c", b','),
            Ok([&b"a"[..], b"b", b"c"])
        );
        assert_eq!(split_exact::<3>(b"a,b", b','), Err(2));
        assert_eq!(split_exact::<3>(b"a,b,c,d", b','), Err(4));
        let (f, n) = split_ws::<4>(b"  1 \t 2  3 ");
        assert_eq!((n, f[0], f[1], f[2]), (3, &b"1"[..], &b"2"[..], &b"3"[..]));
        assert_eq!(count_ws(b" a b  c "), 3);
    }

    #[test]
    fn streams_are_numbered_in_order_of_first_appearance() {
        let mut s = StreamIds::new();
        assert_eq!(s.id(b"b"), Ok(0));
        assert_eq!(s.id(b"a"), Ok(1));
        assert_eq!(s.id(b"b"), Ok(0));
        assert_eq!(s.id(b"a"), Ok(1));
        assert_eq!(s.get(b"c"), None);
        assert_eq!(s.id(b"c"), Ok(2));
    }
}
