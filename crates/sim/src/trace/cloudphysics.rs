//! The CloudPhysics CSV trace (libCacheSim's `data/cloudPhysicsIO.csv`, a CSV rendering of a
//! VMware vscsi trace; described byte for byte in shared/traces/README.md).
//!
//! Line 1 is the header `version,time,op,size,lbn`; every other line has five comma-separated
//! fields:
//!
//! | # | field | meaning |
//! |---|---|---|
//! | 1 | `version` | vscsi record version (1 in the sample); a whole number, not otherwise used |
//! | 2 | `time` | whole seconds (truncated from the vscsi trace's microseconds) |
//! | 3 | `op` | SCSI opcode in hex without `0x`: `2a` WRITE(10), `28` READ(10); any case |
//! | 4 | `size` | bytes |
//! | 5 | `lbn` | first 512-byte sector: byte offset = `lbn * 512` |
//!
//! One address space (stream 0); the format has no sync flag. This reader is on the hot path of
//! every simulation over the sample, so a line is parsed in place with no allocation.

use super::lines::{number, scaled, split_exact};
use super::{Format, LineError, Op, Request};

const HEADER: &[u8] = b"version,time,op,size,lbn";
const SECTOR_BYTES: u64 = 512;
const NS_PER_S: u64 = 1_000_000_000;

pub(crate) struct Parser;

impl Parser {
    pub fn new() -> Parser {
        Parser
    }
}

impl Format for Parser {
    const HEADER: bool = true;

    fn parse(&mut self, line: &[u8], line_no: u64) -> Result<Option<Request>, LineError> {
        if line_no == 1 {
            if line != HEADER {
                return Err(LineError::Fatal(format!(
                    "the header is '{}': expected '{}' (is this a CloudPhysics CSV trace?)",
                    super::lines::quote(line),
                    String::from_utf8_lossy(HEADER)
                )));
            }
            return Ok(None);
        }
        let [version, time, op, size, lbn] = split_exact::<5>(line, b',')
            .map_err(|n| format!("{n} fields: expected 5 (version,time,op,size,lbn)"))?;
        number("version", version, "a whole number")?;
        let time_s = number("time", time, "whole seconds")?;
        let op = match op {
            b"2a" | b"2A" => Op::Write,
            b"28" => Op::Read,
            _ => {
                return Err(LineError::Bad(super::lines::bad_field(
                    "op",
                    op,
                    "2a (write) or 28 (read)",
                )))
            }
        };
        let size_bytes = number("size", size, "a whole number of bytes")?;
        let lbn = number("lbn", lbn, "a whole number of 512-byte sectors")?;
        Ok(Some(Request {
            time_ns: scaled("time", time_s, NS_PER_S)?,
            op,
            offset_bytes: scaled("lbn", lbn, SECTOR_BYTES)?,
            size_bytes,
            stream: 0,
            sync: false,
            line: line_no,
        }))
    }

    fn finish(&mut self, lines: u64) -> Result<(), String> {
        if lines == 0 {
            return Err(format!(
                "empty file: expected the header '{}'",
                String::from_utf8_lossy(HEADER)
            ));
        }
        Ok(())
    }

    fn time_text(&self, time_ns: u64) -> String {
        format!("{} s", time_ns / NS_PER_S)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Option<Request>, String> {
        Parser::new()
            .parse(line.as_bytes(), 2)
            .map_err(|e| match e {
                LineError::Bad(m) | LineError::Fatal(m) => m,
            })
    }

    #[test]
    fn the_readme_example() {
        let r = parse("1,5633898,2a,512,42932745").unwrap().unwrap();
        assert_eq!(r.time_ns, 5_633_898 * NS_PER_S);
        assert_eq!(r.op, Op::Write);
        assert_eq!(r.offset_bytes, 21_981_565_440);
        assert_eq!(r.size_bytes, 512);
        assert_eq!((r.stream, r.sync, r.line), (0, false, 2));
        assert_eq!(parse("1,0,28,4096,8").unwrap().unwrap().op, Op::Read);
    }

    #[test]
    fn bad_fields_are_named() {
        assert_eq!(
            parse("1,5,2b,512,7").unwrap_err(),
            "field 'op' is '2b': expected 2a (write) or 28 (read)"
        );
        assert!(parse("1,5,2a,512").unwrap_err().starts_with("4 fields"));
        assert!(parse("1,5,2a,x,7").unwrap_err().contains("'size'"));
        assert!(parse("1,-5,2a,1,7").unwrap_err().contains("'time'"));
        assert!(parse("1,5,2a,1,36028797018963968")
            .unwrap_err()
            .contains("too large"));
        assert!(matches!(
            Parser::new().parse(b"time,op", 1),
            Err(LineError::Fatal(_))
        ));
    }
}
