//! The MSR Cambridge block traces (Narayanan, Donnelly, Rowstron, "Write Off-Loading", FAST
//! 2008; published by SNIA IOTTA as CSV files, one per volume, e.g. `hm_0.csv`).
//!
//! No header. Every line has seven comma-separated fields:
//!
//! | # | field | meaning |
//! |---|---|---|
//! | 1 | `Timestamp` | Windows FILETIME: 100 ns ticks since 1601-01-01 (ns = ticks * 100) |
//! | 2 | `Hostname` | the server, e.g. `hm`, `prxy`, `usr`; not empty |
//! | 3 | `DiskNumber` | the volume on that server, a whole number |
//! | 4 | `Type` | `Read` or `Write` (any case) |
//! | 5 | `Offset` | bytes |
//! | 6 | `Size` | bytes |
//! | 7 | `ResponseTime` | 100 ns ticks; checked to be a whole number, not used |
//!
//! Each distinct (Hostname, DiskNumber) pair is its own address space: its stream id is
//! numbered from 0 in order of first appearance, so several volumes' files concatenated (and
//! merged by time) keep their blocks apart. The format has no sync flag.

use super::lines::{bad_field, number, scaled, split_exact, StreamIds};
use super::{Format, LineError, Op, Request};

const NS_PER_TICK: u64 = 100;

pub(crate) struct Parser {
    streams: StreamIds,
    /// The stream key being built: hostname, a 0 byte, the disk number's 8 bytes.
    key: Vec<u8>,
}

impl Parser {
    pub fn new() -> Parser {
        Parser {
            streams: StreamIds::new(),
            key: Vec::with_capacity(32),
        }
    }
}

impl Format for Parser {
    const HEADER: bool = false;

    fn parse(&mut self, line: &[u8], line_no: u64) -> Result<Option<Request>, LineError> {
        let [time, host, disk, op, offset, size, response] = split_exact::<7>(line, b',')
            .map_err(|n| {
                format!(
                    "{n} fields: expected 7 (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime)"
                )
            })?;
        let ticks = number("Timestamp", time, "a whole number of 100 ns ticks")?;
        if host.is_empty() {
            return Err(LineError::Bad("field 'Hostname' is empty".to_string()));
        }
        let disk = number("DiskNumber", disk, "a whole number")?;
        let op = if op.eq_ignore_ascii_case(b"Write") {
            Op::Write
        } else if op.eq_ignore_ascii_case(b"Read") {
            Op::Read
        } else {
            return Err(LineError::Bad(bad_field("Type", op, "Read or Write")));
        };
        let offset_bytes = number("Offset", offset, "a whole number of bytes")?;
        let size_bytes = number("Size", size, "a whole number of bytes")?;
        number("ResponseTime", response, "a whole number of 100 ns ticks")?;
        let time_ns = scaled("Timestamp", ticks, NS_PER_TICK)?;
        // Last, so that a bad line never takes a stream id.
        self.key.clear();
        self.key.extend_from_slice(host);
        self.key.push(0);
        self.key.extend_from_slice(&disk.to_le_bytes());
        let stream = self.streams.id(&self.key)?;
        Ok(Some(Request {
            time_ns,
            op,
            offset_bytes,
            size_bytes,
            stream,
            sync: false,
            line: line_no,
        }))
    }

    fn time_text(&self, time_ns: u64) -> String {
        format!("{} (100 ns ticks)", time_ns / NS_PER_TICK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(p: &mut Parser, line: &str) -> Result<Request, String> {
        match p.parse(line.as_bytes(), 1) {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err("no request".into()),
            Err(LineError::Bad(m) | LineError::Fatal(m)) => Err(m),
        }
    }

    #[test]
    fn fields_and_streams() {
        let mut p = Parser::new();
        let r = parse(&mut p, "128166372003061629,hm,1,Read,383496192,32768,4235").unwrap();
        assert_eq!(r.time_ns, 12_816_637_200_306_162_900);
        assert_eq!(
            (r.op, r.offset_bytes, r.size_bytes, r.stream, r.sync),
            (Op::Read, 383_496_192, 32_768, 0, false)
        );
        let w = parse(&mut p, "128166372003061630,prxy,0,Write,0,4096,1").unwrap();
        assert_eq!((w.op, w.stream), (Op::Write, 1));
        assert_eq!(parse(&mut p, "1,hm,0,write,0,1,1").unwrap().stream, 2);
        assert_eq!(parse(&mut p, "1,hm,1,READ,0,1,1").unwrap().stream, 0);
        // A bad line takes no stream id.
        assert!(parse(&mut p, "1,new,0,Trim,0,1,1").is_err());
        assert_eq!(parse(&mut p, "1,new2,0,Read,0,1,1").unwrap().stream, 3);
    }

    #[test]
    fn bad_fields_are_named() {
        let mut p = Parser::new();
        assert_eq!(
            parse(&mut p, "1,hm,1,Trim,0,1,1").unwrap_err(),
            "field 'Type' is 'Trim': expected Read or Write"
        );
        assert!(parse(&mut p, "1,hm,1,Read,0,1")
            .unwrap_err()
            .starts_with("6 fields"));
        assert!(parse(&mut p, "1,,1,Read,0,1,1")
            .unwrap_err()
            .contains("Hostname"));
        assert!(parse(&mut p, "1,hm,x,Read,0,1,1")
            .unwrap_err()
            .contains("DiskNumber"));
        assert!(parse(&mut p, "1,hm,1,Read,0,1,")
            .unwrap_err()
            .contains("ResponseTime"));
        assert!(parse(&mut p, "184467440737095517,hm,1,Read,0,1,1")
            .unwrap_err()
            .contains("too large"));
    }
}
