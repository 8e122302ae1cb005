//! The default text output of `blkparse` (blktrace 1.x, `man blkparse`: "DEFAULT OUTPUT"; the
//! RWBS letters as `fill_rwbs()` in blkparse_fmt.c writes them).
//!
//! An event line is
//!
//! ```text
//!   8,0    1        1     0.000000000  1234  D  WS 2048 + 8 [fio]
//! ```
//!
//! | # | field | meaning |
//! |---|---|---|
//! | 1 | `MAJOR,MINOR` | the device; each distinct pair is its own address space (stream), numbered from 0 in order of first appearance |
//! | 2 | CPU | whole number, not used |
//! | 3 | sequence | whole number, not used |
//! | 4 | time | `SECONDS.NANOSECONDS` since the trace began |
//! | 5 | PID | whole number, not used |
//! | 6 | action | `Q` queued, `G`, `I`, `D` issued to the device, `C` completed, ...: only `D` is used |
//! | 7 | RWBS | an optional `F` (preflush), then `R` read, `W` write, `D` discard or `N` no data, then any of `F` (FUA), `A` (readahead), `S` (sync), `M` (metadata), `E` (secure erase) |
//! | 8.. | payload | for a D event of a file-system request `SECTOR + COUNT [COMMAND]` (512-byte sectors); for a SCSI pass-through request `BYTES (CDB) [COMMAND]` |
//!
//! Decisions where blkparse's output leaves a choice:
//! - Only D (issue) events become requests: they are what reached the device, after merging
//!   and splitting; the other actions of a request would count it several times.
//! - A line whose first field is not `MAJOR,MINOR` is not an event and is skipped silently: the
//!   per-CPU and total summaries blkparse prints at the end (`CPU0 (8,0):`, `Total (8,0):`,
//!   ` Reads Queued: ...`, `Throughput (R/W): ...`, `Events (8,0): ...`, `Skips: ...`) and
//!   blank lines. An event line that is cut short, or a D event whose time, RWBS or payload does
//!   not parse, is a bad line. A file with lines but no event line at all is not blkparse
//!   output and is an error.
//! - D events that move no data produce no request: `N` (a pure flush `FN`, a pass-through
//!   command), a count of 0, a pass-through request (it has no sector address), and discards
//!   (`D`, `DE`): the models have no discard, and counting a discard as a write would invent
//!   traffic.
//! - `sync` is set on writes whose RWBS has `S` (REQ_SYNC: O_DIRECT and O_SYNC writes, journal
//!   commits, fsync write-back) or `F` (a preflush or FUA: the data must be durable). A read is
//!   never marked: the flag means a write that must be durable when it completes.

use super::lines::{bad_field, count_ws, number, parse_u64, split_ws, StreamIds};
use super::{Format, LineError, Op, Request};

const SECTOR_BYTES: u64 = 512;
const NS_PER_S: u64 = 1_000_000_000;
/// Digits of the fraction of a second that blkparse prints (nanoseconds).
const FRACTION_DIGITS_MAX: usize = 9;
/// Fields up to the payload's `COUNT`.
const FIELDS_MAX: usize = 10;

pub(crate) struct Parser {
    streams: StreamIds,
    event_lines: u64,
    other_lines: u64,
}

impl Parser {
    pub fn new() -> Parser {
        Parser {
            streams: StreamIds::new(),
            event_lines: 0,
            other_lines: 0,
        }
    }
}

/// `MAJOR,MINOR` as the stream key's 8 bytes, or None if `field` is not a device.
fn device(field: &[u8]) -> Option<[u8; 8]> {
    let comma = field.iter().position(|&b| b == b',')?;
    let major = u32::try_from(parse_u64(&field[..comma])?).ok()?;
    let minor = u32::try_from(parse_u64(&field[comma + 1..])?).ok()?;
    let mut key = [0u8; 8];
    key[..4].copy_from_slice(&major.to_le_bytes());
    key[4..].copy_from_slice(&minor.to_le_bytes());
    Some(key)
}

/// `SECONDS.FRACTION` (1 to 9 fraction digits) in nanoseconds.
fn time_ns(field: &[u8]) -> Result<u64, String> {
    let expected = "SECONDS.NANOSECONDS";
    let bad = || bad_field("time", field, expected);
    let dot = field.iter().position(|&b| b == b'.').ok_or_else(bad)?;
    let (secs, frac) = (&field[..dot], &field[dot + 1..]);
    if frac.is_empty() || frac.len() > FRACTION_DIGITS_MAX {
        return Err(bad());
    }
    let secs = parse_u64(secs).ok_or_else(bad)?;
    let mut frac_ns = parse_u64(frac).ok_or_else(bad)?;
    for _ in frac.len()..FRACTION_DIGITS_MAX {
        frac_ns *= 10;
    }
    secs.checked_mul(NS_PER_S)
        .and_then(|ns| ns.checked_add(frac_ns))
        .ok_or_else(|| format!("field 'time' is {}: too large", super::lines::quote(field)))
}

/// The RWBS field: the operation (None for no data or a discard) and whether a write is sync.
fn rwbs(field: &[u8]) -> Result<(Option<Op>, bool), String> {
    let bad = || bad_field("RWBS", field, "[F]R|W|D|N then any of F, A, S, M, E");
    let (preflush, rest) = match field {
        [b'F', rest @ ..] if !rest.is_empty() => (true, rest),
        _ => (false, field),
    };
    let (op, flags) = match rest.split_first() {
        Some((b'R', f)) => (Some(Op::Read), f),
        Some((b'W', f)) => (Some(Op::Write), f),
        Some((b'D' | b'N', f)) => (None, f),
        _ => return Err(bad()),
    };
    let mut sync = preflush;
    for &b in flags {
        match b {
            b'F' | b'S' => sync = true,
            b'A' | b'M' | b'E' => {}
            _ => return Err(bad()),
        }
    }
    Ok((op, sync && op == Some(Op::Write)))
}

impl Format for Parser {
    const HEADER: bool = false;

    fn parse(&mut self, line: &[u8], line_no: u64) -> Result<Option<Request>, LineError> {
        let (f, n) = split_ws::<FIELDS_MAX>(line);
        let Some(dev) = device(f[0]) else {
            self.other_lines += 1;
            return Ok(None);
        };
        self.event_lines += 1;
        if n < 7 {
            return Err(LineError::Bad(format!(
                "{} fields: an event line has at least 7 (MAJOR,MINOR CPU SEQUENCE TIME PID ACTION RWBS ...)",
                count_ws(line)
            )));
        }
        if f[5] != b"D" {
            return Ok(None);
        }
        number("CPU", f[1], "a whole number")?;
        number("sequence", f[2], "a whole number")?;
        let time_ns = time_ns(f[3])?;
        number("PID", f[4], "a whole number")?;
        let (op, sync) = rwbs(f[6])?;
        let Some(op) = op else {
            return Ok(None);
        };
        if n < 10 || f[8] != b"+" {
            // A pass-through request: `BYTES (CDB) [COMMAND]` or `BYTES [COMMAND]`.
            let passthrough = n >= 8
                && parse_u64(f[7]).is_some()
                && (n == 8 || f[8].starts_with(b"(") || f[8].starts_with(b"["));
            if passthrough {
                return Ok(None);
            }
            return Err(LineError::Bad(
                "the payload of a D event is not 'SECTOR + COUNT'".to_string(),
            ));
        }
        let sector = number("sector", f[7], "a whole number of 512-byte sectors")?;
        let count = number("count", f[9], "a whole number of 512-byte sectors")?;
        if count == 0 {
            return Ok(None);
        }
        let offset_bytes = super::lines::scaled("sector", sector, SECTOR_BYTES)?;
        let size_bytes = super::lines::scaled("count", count, SECTOR_BYTES)?;
        let stream = self.streams.id(&dev)?;
        Ok(Some(Request {
            time_ns,
            op,
            offset_bytes,
            size_bytes,
            stream,
            sync,
            line: line_no,
        }))
    }

    fn finish(&mut self, _lines: u64) -> Result<(), String> {
        if self.event_lines == 0 && self.other_lines > 0 {
            return Err(format!(
                "no blkparse event line in {} lines: expected lines like '8,0 1 1 0.000000000 1234 D WS 2048 + 8 [fio]' (is this blkparse's default output?)",
                self.other_lines
            ));
        }
        Ok(())
    }

    fn time_text(&self, time_ns: u64) -> String {
        format!("{}.{:09} s", time_ns / NS_PER_S, time_ns % NS_PER_S)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(p: &mut Parser, line: &str) -> Result<Option<Request>, String> {
        p.parse(line.as_bytes(), 9).map_err(|e| match e {
            LineError::Bad(m) | LineError::Fatal(m) => m,
        })
    }

    #[test]
    fn d_events_become_requests() {
        let mut p = Parser::new();
        let line = "  8,0    1        1     0.000000000  1234  D  WS 2048 + 8 [fio]";
        let r = parse(&mut p, line).unwrap().unwrap();
        assert_eq!(
            (
                r.time_ns,
                r.op,
                r.offset_bytes,
                r.size_bytes,
                r.stream,
                r.sync,
                r.line
            ),
            (0, Op::Write, 2048 * 512, 4096, 0, true, 9)
        );
        let r = parse(&mut p, "8,16 0 7 12.5 99 D R 8 + 16 [dd]")
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                r.time_ns,
                r.op,
                r.offset_bytes,
                r.size_bytes,
                r.stream,
                r.sync
            ),
            (12_500_000_000, Op::Read, 4096, 8192, 1, false)
        );
        let r = parse(&mut p, "8,0 0 8 13.000000001 99 D RS 0 + 1 (   42) [dd]").unwrap();
        let r = r.unwrap();
        assert_eq!((r.time_ns, r.stream, r.sync), (13_000_000_001, 0, false));
        for (rwbs, sync) in [("W", false), ("FW", true), ("WF", true), ("WM", false)] {
            let line = format!("8,0 0 9 14.0 1 D {rwbs} 0 + 8 [x]");
            assert_eq!(parse(&mut p, &line).unwrap().unwrap().sync, sync, "{rwbs}");
        }
    }

    #[test]
    fn other_events_and_lines_without_data_give_nothing() {
        let mut p = Parser::new();
        for line in [
            "  8,0    1        2     0.000000100  1234  Q  WS 2048 + 8 [fio]",
            "  8,0    1        3     0.000000200  1234  C  WS 2048 + 8 [0]",
            "  8,0    0       15     0.003215045    10  D  FN [kworker/0:1H]",
            "  8,0    0       16     0.003215045    10  D  FWS 0 + 0 [jbd2]",
            "  8,0    1      249     0.575146748    44  D  DS 2048 + 128 [blkdiscard]",
            "  8,0    1      250     0.575146748    44  D  R 512 (12 00 00) [sg_inq]",
            "  8,0    1      251     0.575146748    44  D  W 4096 [sg_dd]",
            "  8,0    1        0     0.000000000  1234  m   N cfq1234 alloced",
            "CPU0 (8,0):",
            " Reads Queued:           0,        0KiB\t Writes Queued:           4,       16KiB",
            "Total (8,0):",
            "Throughput (R/W): 0KiB/s / 8000KiB/s",
            "Events (8,0): 18 entries",
            "Skips: 0 forward (0 -   0.0%)",
        ] {
            assert_eq!(parse(&mut p, line), Ok(None), "{line}");
        }
        assert!(p.finish(14).is_ok());
    }

    #[test]
    fn bad_event_lines_are_named() {
        let mut p = Parser::new();
        let bad = |p: &mut Parser, line: &str| parse(p, line).unwrap_err();
        assert!(bad(&mut p, "8,0 1 1 0.0").contains("4 fields"));
        assert!(bad(&mut p, "8,0 1 1 0,5 1 D W 0 + 8 [x]").contains("'time'"));
        assert!(bad(&mut p, "8,0 1 1 0.1234567890 1 D W 0 + 8 [x]").contains("'time'"));
        assert!(bad(&mut p, "8,0 1 1 0.5 1 D X 0 + 8 [x]").contains("'RWBS'"));
        assert!(bad(&mut p, "8,0 1 1 0.5 1 D WQ 0 + 8 [x]").contains("'RWBS'"));
        assert!(bad(&mut p, "8,0 1 1 0.5 1 D F 0 + 8 [x]").contains("'RWBS'"));
        assert!(bad(&mut p, "8,0 1 1 0.5 1 D W 0 - 8 [x]").contains("SECTOR + COUNT"));
        assert!(bad(&mut p, "8,0 1 1 0.5 1 D W x + 8 [x]").contains("'sector'"));
        assert!(bad(&mut p, "8,0 x 1 0.5 1 D W 0 + 8 [x]").contains("'CPU'"));
    }

    #[test]
    fn a_file_of_no_events_is_refused() {
        let mut p = Parser::new();
        assert_eq!(parse(&mut p, "hello world"), Ok(None));
        assert!(p.finish(1).unwrap_err().contains("no blkparse event line"));
        assert!(Parser::new().finish(0).is_ok());
    }
}
