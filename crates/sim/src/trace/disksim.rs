//! The DiskSim-style ASCII trace that MQSim reads (MQSim's `traces/tpcc-small.trace`; MQSim's
//! README "Defining a Trace-based Workload" and `src/host/ASCII_Trace_Definition.h`, summarised
//! in shared/traces/README.md).
//!
//! No header. Every line has five whole numbers separated by spaces (runs of spaces or tabs are
//! accepted):
//!
//! | # | field | meaning |
//! |---|---|---|
//! | 1 | arrival time | nanoseconds |
//! | 2 | device number | parsed, then ignored: MQSim does not use it, so every request is in one address space (stream 0) |
//! | 3 | LSA | first 512-byte sector: byte offset = `LSA * 512` |
//! | 4 | size | 512-byte sectors: bytes = `size * 512` |
//! | 5 | type | `0` write, `1` read (MQSim reads anything but `0` as a read; here anything but `0` or `1` is a bad line) |
//!
//! The format has no sync flag.

use super::lines::{count_ws, number, scaled, split_ws};
use super::{Format, LineError, Op, Request};

const SECTOR_BYTES: u64 = 512;
const FIELDS: usize = 5;

pub(crate) struct Parser;

impl Parser {
    pub fn new() -> Parser {
        Parser
    }
}

impl Format for Parser {
    const HEADER: bool = false;

    fn parse(&mut self, line: &[u8], line_no: u64) -> Result<Option<Request>, LineError> {
        let (f, n) = split_ws::<{ FIELDS + 1 }>(line);
        if n != FIELDS {
            return Err(LineError::Bad(format!(
                "{} fields: expected 5 (time_ns device lsa sectors type)",
                count_ws(line)
            )));
        }
        let time_ns = number("time", f[0], "whole nanoseconds")?;
        number("device", f[1], "a whole number")?;
        let lsa = number("lsa", f[2], "a whole number of 512-byte sectors")?;
        let sectors = number("sectors", f[3], "a whole number of 512-byte sectors")?;
        let op = match f[4] {
            b"0" => Op::Write,
            b"1" => Op::Read,
            t => {
                return Err(LineError::Bad(super::lines::bad_field(
                    "type",
                    t,
                    "0 (write) or 1 (read)",
                )))
            }
        };
        Ok(Some(Request {
            time_ns,
            op,
            offset_bytes: scaled("lsa", lsa, SECTOR_BYTES)?,
            size_bytes: scaled("sectors", sectors, SECTOR_BYTES)?,
            stream: 0,
            sync: false,
            line: line_no,
        }))
    }

    fn time_text(&self, time_ns: u64) -> String {
        format!("{time_ns} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Option<Request>, String> {
        Parser::new()
            .parse(line.as_bytes(), 1)
            .map_err(|e| match e {
                LineError::Bad(m) | LineError::Fatal(m) => m,
            })
    }

    #[test]
    fn the_readme_example() {
        let r = parse("938513000 4 264719034 16 0").unwrap().unwrap();
        assert_eq!(r.time_ns, 938_513_000);
        assert_eq!(r.op, Op::Write);
        assert_eq!(r.offset_bytes, 135_536_145_408);
        assert_eq!(r.size_bytes, 8192);
        assert_eq!((r.stream, r.sync), (0, false));
        assert_eq!(parse("1 0 0 1 1").unwrap().unwrap().op, Op::Read);
    }

    #[test]
    fn bad_fields_are_named() {
        assert_eq!(
            parse("1 0 0 1 2").unwrap_err(),
            "field 'type' is '2': expected 0 (write) or 1 (read)"
        );
        assert!(parse("1 0 0 1").unwrap_err().starts_with("4 fields"));
        assert!(parse("1 0 0 1 1 7 8").unwrap_err().starts_with("7 fields"));
        assert!(parse("1 x 0 1 1").unwrap_err().contains("'device'"));
    }
}
