//! fio's I/O logs (`fio --write_iolog=FILE`; `man fio`, "TRACE FILE FORMAT", versions 2 and 3;
//! fio's iolog.c for what the man page leaves out). fio 3.31 and later write version 3.
//!
//! Line 1 is the header, `fio version 2 iolog` or `fio version 3 iolog` (version 1, with no
//! header, has not been read by fio since 1.20 and is refused). Every other line is
//!
//! | version | file action | I/O action |
//! |---|---|---|
//! | 2 | `FILENAME ACTION` | `FILENAME ACTION OFFSET LENGTH` |
//! | 3 | `TIME FILENAME ACTION` | `TIME FILENAME ACTION OFFSET LENGTH` |
//!
//! - `TIME` (version 3 only): microseconds since the job started (fio writes
//!   `utime_since_now(&td->io_log_start_time)`).
//! - `FILENAME`: a path without spaces (fio reads it with `%256s`). Each distinct file name is its
//!   own address space: its stream id is numbered from 0 in order of first appearance.
//! - `ACTION`: `add`, `open`, `close` (file actions: no request); `read`, `write` (a request of
//!   `LENGTH` bytes at byte `OFFSET`); `sync`, `datasync` (fsync(2), fdatasync(2): fio writes
//!   them with the offset of the I/O before and a length of 0, and both forms are accepted);
//!   `trim` (no request: the models have no discard); `wait` (version 2: a pause, ignored, since
//!   times come from the interarrival time; version 3 forbids it, a bad line);
//!   `sync_file_range` (no request: it starts write-back but makes nothing durable).
//!
//! Times: version 3 uses its timestamps. Version 2 has none, so the caller must give an
//! interarrival time (`--interarrival`): request i (from 0) is at `i * interarrival`.
//!
//! Sync: an fsync or fdatasync of a file makes every write of that file since its previous sync
//! durable, so it marks those writes `sync`. Requests are held back in a window of
//! [`PENDING_REQUESTS_MAX`] before they are yielded, so that a sync can still mark them; a write
//! more than that many requests before its sync is yielded unmarked. fio's `--fsync=N` and
//! `--fdatasync=N` sync after every N writes, far inside the window.

use super::lines::{bad_field, count_ws, number, scaled, split_ws, StreamIds};
use super::{Format, LineError, Op, Request};
use std::collections::VecDeque;

const HEADER_V2: &[u8] = b"fio version 2 iolog";
const HEADER_V3: &[u8] = b"fio version 3 iolog";
/// Requests held back so that a later sync can mark them (see the module comment).
pub const PENDING_REQUESTS_MAX: usize = 1024;
const NS_PER_US: u64 = 1000;

pub(crate) struct Parser {
    /// 2 or 3 once the header is read.
    version: u8,
    interarrival_ns: Option<u64>,
    /// Requests produced so far (version 2 times).
    requests: u64,
    streams: StreamIds,
    pending: VecDeque<Request>,
}

impl Parser {
    pub fn new(opts: &super::ReaderOptions) -> Parser {
        Parser {
            version: 0,
            interarrival_ns: opts.interarrival_ns,
            requests: 0,
            streams: StreamIds::new(),
            pending: VecDeque::with_capacity(PENDING_REQUESTS_MAX + 1),
        }
    }

    fn header(&mut self, line: &[u8]) -> Result<(), LineError> {
        let line = line.trim_ascii_end();
        if line == HEADER_V2 {
            if self.interarrival_ns.is_none() {
                return Err(LineError::Fatal(
                    "a fio iolog of version 2 has no times: it needs interarrival_ns (the time between requests)"
                        .to_string(),
                ));
            }
            self.version = 2;
        } else if line == HEADER_V3 {
            self.version = 3;
        } else {
            return Err(LineError::Fatal(format!(
                "the header is '{}': expected 'fio version 2 iolog' or 'fio version 3 iolog' (is this a fio iolog? version 1 is not supported)",
                super::lines::quote(line)
            )));
        }
        Ok(())
    }

    /// Marks the writes of `stream` since its previous sync.
    fn sync(&mut self, stream: u32) {
        for r in self.pending.iter_mut().rev() {
            if r.stream != stream || r.op != Op::Write {
                continue;
            }
            if r.sync {
                break;
            }
            r.sync = true;
        }
    }

    /// What a line's action does: the I/O operation of a read or write line; None for an
    /// action that only names a file (add, open, close) or is not replayed (sync, trim, wait),
    /// after applying its effect (a new stream, a sync of the stream's pending writes).
    fn action(
        &mut self,
        line: &[u8],
        file: &[u8],
        action: &[u8],
        io: bool,
        timed: bool,
    ) -> Result<Option<Op>, LineError> {
        let op = match (action, io) {
            (b"add" | b"open" | b"close", false) => {
                self.streams.id(file)?;
                return Ok(None);
            }
            (b"sync" | b"datasync", _) => {
                if let Some(stream) = self.streams.get(file) {
                    self.sync(stream);
                }
                return Ok(None);
            }
            (b"read", true) => Op::Read,
            (b"write", true) => Op::Write,
            (b"trim" | b"sync_file_range", true) => return Ok(None),
            (b"wait", true) if self.version == 2 => return Ok(None),
            (b"wait", true) => {
                return Err(LineError::Bad(
                    "action 'wait' is not allowed in a version 3 iolog".to_string(),
                ))
            }
            (b"add" | b"open" | b"close" | b"read" | b"write" | b"trim", _) => {
                return Err(LineError::Bad(format!(
                    "{} fields for action '{}': expected {}",
                    count_ws(line),
                    super::lines::quote(action),
                    expected_fields(timed)
                )))
            }
            _ => {
                return Err(LineError::Bad(bad_field(
                    "action",
                    action,
                    "add, open, close, read, write, sync, datasync, trim or wait",
                )))
            }
        };
        Ok(Some(op))
    }

    /// A request's time: the line's (version 3) or its rank times interarrival_ns (version 2).
    fn time_ns(&self, time_us: Option<u64>) -> Result<u64, LineError> {
        let time_ns = match (time_us, self.interarrival_ns) {
            (Some(us), _) => scaled("time", us, NS_PER_US)?,
            (None, Some(gap_ns)) => self.requests.checked_mul(gap_ns).ok_or_else(|| {
                format!(
                    "request {} at {gap_ns} ns apart is beyond 2^64 ns",
                    self.requests
                )
            })?,
            // The header refuses version 2 without one; kept an error, never a panic.
            (None, None) => {
                return Err(LineError::Fatal(
                    "no time for a request: a version 2 iolog needs interarrival_ns".to_string(),
                ))
            }
        };
        Ok(time_ns)
    }
}

/// The field counts a line may have, with the time field (version 3) or without.
fn expected_fields(timed: bool) -> &'static str {
    if timed {
        "3 (TIME FILENAME ACTION) or 5 (TIME FILENAME ACTION OFFSET LENGTH)"
    } else {
        "2 (FILENAME ACTION) or 4 (FILENAME ACTION OFFSET LENGTH)"
    }
}

impl Format for Parser {
    const HEADER: bool = true;

    fn parse(&mut self, line: &[u8], line_no: u64) -> Result<Option<Request>, LineError> {
        if line_no == 1 {
            self.header(line)?;
            return Ok(None);
        }
        let (f, n) = split_ws::<6>(line);
        // Version 3 lines start with the time; the rest is laid out as in version 2.
        let (time_us, f, n) = if self.version == 3 {
            let time_us = number("time", f[0], "whole microseconds")?;
            (Some(time_us), &f[1..], n.saturating_sub(1))
        } else {
            (None, &f[..5], n.min(5))
        };
        if n != 2 && n != 4 {
            return Err(LineError::Bad(format!(
                "{} fields: expected {}",
                count_ws(line),
                expected_fields(time_us.is_some())
            )));
        }
        let (file, action) = (f[0], f[1]);
        let io = n == 4;
        let Some(op) = self.action(line, file, action, io, time_us.is_some())? else {
            return Ok(None);
        };
        let offset_bytes = number("offset", f[2], "a whole number of bytes")?;
        let size_bytes = number("length", f[3], "a whole number of bytes")?;
        let time_ns = self.time_ns(time_us)?;
        let stream = self.streams.id(file)?;
        self.requests += 1;
        self.pending.push_back(Request {
            time_ns,
            op,
            offset_bytes,
            size_bytes,
            stream,
            sync: false,
            line: line_no,
        });
        if self.pending.len() > PENDING_REQUESTS_MAX {
            return Ok(self.pending.pop_front());
        }
        Ok(None)
    }

    fn finish(&mut self, lines: u64) -> Result<(), String> {
        if lines == 0 {
            return Err(
                "empty file: expected the header 'fio version 2 iolog' or 'fio version 3 iolog'"
                    .to_string(),
            );
        }
        Ok(())
    }

    fn drain(&mut self) -> Option<Request> {
        self.pending.pop_front()
    }

    fn time_text(&self, time_ns: u64) -> String {
        if self.version == 3 {
            format!("{} us", time_ns / NS_PER_US)
        } else {
            format!("{time_ns} ns")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::ReaderOptions;

    fn run(p: &mut Parser, text: &str) -> Result<Vec<Request>, String> {
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            match p.parse(line.as_bytes(), i as u64 + 1) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => {}
                Err(LineError::Bad(m) | LineError::Fatal(m)) => return Err(m),
            }
        }
        p.finish(text.lines().count() as u64)?;
        while let Some(r) = p.drain() {
            out.push(r);
        }
        Ok(out)
    }

    fn v3() -> Parser {
        Parser::new(&ReaderOptions::default())
    }

    #[test]
    fn version_3_times_files_and_syncs() {
        let text = "fio version 3 iolog\n\
            21 /a add\n23 /b add\n125 /a open\n129 /a read 0 4096\n\
            594 /a write 24576 4096\n606 /b write 12288 4096\n609 /a write 12288 8192\n\
            612 /b datasync 12288 0\n700 /a sync 0 0\n800 /b trim 0 4096\n900 /a close\n";
        let r = run(&mut v3(), text).unwrap();
        let got: Vec<_> = r
            .iter()
            .map(|r| {
                (
                    r.time_ns,
                    r.op,
                    r.offset_bytes,
                    r.size_bytes,
                    r.stream,
                    r.sync,
                    r.line,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (129_000, Op::Read, 0, 4096, 0, false, 5),
                (594_000, Op::Write, 24576, 4096, 0, true, 6),
                (606_000, Op::Write, 12288, 4096, 1, true, 7),
                (609_000, Op::Write, 12288, 8192, 0, true, 8),
            ]
        );
    }

    #[test]
    fn a_sync_marks_only_writes_since_the_previous_sync() {
        let text = "fio version 3 iolog\n1 /a write 0 1\n2 /a sync 0 0\n3 /a write 0 1\n\
                    4 /a write 0 1\n5 /a sync 0 0\n6 /a write 0 1\n";
        let syncs: Vec<bool> = run(&mut v3(), text)
            .unwrap()
            .iter()
            .map(|r| r.sync)
            .collect();
        assert_eq!(syncs, vec![true, true, true, false]);
    }

    #[test]
    fn version_2_needs_an_interarrival_time() {
        let text = "fio version 2 iolog\n/a add\n/a open\n/a write 0 4096\n/a sync 0 0\n\
                    /a wait 500 0\n/a read 4096 4096\n/a close\n";
        assert!(run(&mut v3(), text)
            .unwrap_err()
            .contains("interarrival_ns"));
        let opts = ReaderOptions {
            skip_bad_lines: false,
            interarrival_ns: Some(1000),
        };
        let r = run(&mut Parser::new(&opts), text).unwrap();
        assert_eq!(
            r.iter()
                .map(|r| (r.time_ns, r.op, r.sync))
                .collect::<Vec<_>>(),
            vec![(0, Op::Write, true), (1000, Op::Read, false)]
        );
    }

    #[test]
    fn the_window_is_bounded() {
        let mut text = String::from("fio version 3 iolog\n");
        for i in 0..PENDING_REQUESTS_MAX + 10 {
            text.push_str(&format!("{i} /a write 0 512\n"));
        }
        let mut p = v3();
        let mut yielded = 0;
        for (i, line) in text.lines().enumerate() {
            if let Ok(Some(_)) = p.parse(line.as_bytes(), i as u64 + 1) {
                yielded += 1;
            }
            assert!(p.pending.len() <= PENDING_REQUESTS_MAX);
        }
        assert_eq!(yielded, 10);
    }

    #[test]
    fn bad_lines_are_named() {
        let bad =
            |body: &str| run(&mut v3(), &format!("fio version 3 iolog\n{body}\n")).unwrap_err();
        assert!(bad("1 /a wait 5 0").contains("'wait' is not allowed"));
        assert!(bad("1 /a punch 0 1").contains("field 'action' is 'punch'"));
        assert!(bad("1 /a write 0").contains("4 fields"));
        assert!(bad("1 /a write").contains("3 fields for action 'write'"));
        assert!(bad("x /a write 0 1").contains("'time'"));
        assert!(bad("1 /a write 0 y").contains("'length'"));
        assert!(run(&mut v3(), "fio version 1 iolog\n")
            .unwrap_err()
            .contains("header"));
        assert!(run(&mut v3(), "").unwrap_err().contains("empty file"));
    }
}
