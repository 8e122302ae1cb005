//! nvstack's own device trace: every request a served device saw, in the order the device
//! finished them, with the time the device spent on each (`nvstack serve --record-trace FILE`
//! writes it; docs/format.md section 13 is the reference). Text, one request per line, so a
//! person can read it and `grep` it; versioned, counted and checksummed, so a trace cut short (a
//! killed daemon) or edited is refused rather than replayed as if whole.
//!
//! ```text
//! nvstack-trace 1 block_bytes=4096 blocks=262144
//! 1200 350 W 0 1
//! 1900 90 R 8 2
//! 2500 14000 F 0 0
//! 3100 700 D 16 4
//! end 4 9a3c01f7
//! ```
//!
//! | line | fields |
//! |---|---|
//! | header (line 1) | `nvstack-trace`, the version (1), `block_bytes=B` (512 to 1 MiB, a power of two), `blocks=N` (the device's size, at least 1) |
//! | request | `time_ns` (when the device finished it, from the start of the recording; never decreasing), `wait_ns` (how long the device took: start = time - wait), the op (`R` read, `W` write, `F` flush, `D` discard), `lba`, `blocks` (at least 1 and inside the device for R, W and D; `0 0` for F) |
//! | end (last line) | `end`, the number of request lines, their CRC-32C (8 hex digits) over each request line's bytes and its `\n` |
//!
//! The simulator's readers yield reads and writes ([`Request`]); flushes and discards are
//! checked and counted but carry no request, since the client-cache models have no such
//! operation. [`DeviceEvents`] yields every line, for replays that need them (seed 004's).

use super::lines::{number, split_ws};
use super::{Format, LineError, Op, Request};
use nvstack_core::blockdev::{BlockDevice, Caps};
use nvstack_core::error::{Error, Result};
use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

/// The first word of the header line.
pub const MAGIC: &str = "nvstack-trace";
/// The format version this build writes and reads.
pub const VERSION: u64 = 1;
/// Block sizes a trace may declare (those of the devices nvstack serves).
pub const BLOCK_BYTES_MIN: u64 = 512;
pub const BLOCK_BYTES_MAX: u64 = 1 << 20;

/// What the device was asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceOp {
    Read,
    Write,
    Flush,
    Discard,
}

impl DeviceOp {
    fn letter(self) -> char {
        match self {
            DeviceOp::Read => 'R',
            DeviceOp::Write => 'W',
            DeviceOp::Flush => 'F',
            DeviceOp::Discard => 'D',
        }
    }
}

/// One request line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceEvent {
    /// When the device finished the request, ns from the start of the recording.
    pub time_ns: u64,
    /// How long the device took, ns.
    pub wait_ns: u64,
    pub op: DeviceOp,
    pub lba: u64,
    pub blocks: u64,
}

/// The header's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TraceHeader {
    pub block_bytes: u64,
    pub blocks: u64,
}

/// Parse the header line.
pub fn parse_header(line: &[u8]) -> std::result::Result<TraceHeader, String> {
    let (f, n) = split_ws::<5>(line);
    if n == 0 || f[0] != MAGIC.as_bytes() {
        return Err(format!(
            "not an nvstack trace: the first line must start with '{MAGIC}'"
        ));
    }
    if n != 4 {
        return Err(format!(
            "header has {n} fields: expected '{MAGIC} {VERSION} block_bytes=B blocks=N'"
        ));
    }
    let version = number("version", f[1], "a whole number")?;
    if version != VERSION {
        return Err(format!(
            "trace format version {version}: this build reads version {VERSION} only"
        ));
    }
    let block_bytes = keyed(f[2], "block_bytes")?;
    if !(BLOCK_BYTES_MIN..=BLOCK_BYTES_MAX).contains(&block_bytes) || !block_bytes.is_power_of_two()
    {
        return Err(format!(
            "block_bytes={block_bytes}: expected a power of two from {BLOCK_BYTES_MIN} to {BLOCK_BYTES_MAX}"
        ));
    }
    let blocks = keyed(f[3], "blocks")?;
    if blocks == 0 {
        return Err("blocks=0: a device has at least one block".to_string());
    }
    Ok(TraceHeader {
        block_bytes,
        blocks,
    })
}

fn keyed(field: &[u8], key: &str) -> std::result::Result<u64, String> {
    let text = String::from_utf8_lossy(field);
    match text.strip_prefix(key).and_then(|t| t.strip_prefix('=')) {
        Some(v) => number(key, v.as_bytes(), "a whole number"),
        None => Err(format!("header field '{text}': expected {key}=N")),
    }
}

/// Parse one request line of a trace with header `h`.
pub fn parse_event(line: &[u8], h: &TraceHeader) -> std::result::Result<DeviceEvent, String> {
    let (f, n) = split_ws::<6>(line);
    if n != 5 {
        return Err(format!(
            "{n} fields: expected 5 (time_ns wait_ns op lba blocks)"
        ));
    }
    let time_ns = number("time_ns", f[0], "whole nanoseconds")?;
    let wait_ns = number("wait_ns", f[1], "whole nanoseconds")?;
    let op = match f[2] {
        b"R" => DeviceOp::Read,
        b"W" => DeviceOp::Write,
        b"F" => DeviceOp::Flush,
        b"D" => DeviceOp::Discard,
        t => {
            return Err(super::lines::bad_field(
                "op",
                t,
                "R (read), W (write), F (flush) or D (discard)",
            ))
        }
    };
    let lba = number("lba", f[3], "a whole number of blocks")?;
    let blocks = number("blocks", f[4], "a whole number of blocks")?;
    check_extent(op, lba, blocks, h)?;
    if wait_ns > time_ns {
        return Err(format!(
            "wait_ns {wait_ns} is longer than time_ns {time_ns}: the request would start before the recording"
        ));
    }
    Ok(DeviceEvent {
        time_ns,
        wait_ns,
        op,
        lba,
        blocks,
    })
}

fn check_extent(
    op: DeviceOp,
    lba: u64,
    blocks: u64,
    h: &TraceHeader,
) -> std::result::Result<(), String> {
    if op == DeviceOp::Flush {
        return match (lba, blocks) {
            (0, 0) => Ok(()),
            _ => Err(format!(
                "a flush names lba {lba} and {blocks} blocks: expected 0 0"
            )),
        };
    }
    if blocks == 0 {
        return Err("0 blocks: a read, write or discard names at least one".to_string());
    }
    // A discard may name the whole device (mkfs discards it); a read or write is bounded by
    // the simulator's largest request.
    let bytes = blocks.saturating_mul(h.block_bytes);
    if op != DeviceOp::Discard && bytes > super::REQUEST_BYTES_MAX {
        return Err(format!(
            "{blocks} blocks ({bytes} bytes): a read or write is at most {} bytes",
            super::REQUEST_BYTES_MAX
        ));
    }
    match lba.checked_add(blocks) {
        Some(end) if end <= h.blocks => Ok(()),
        _ => Err(format!(
            "blocks {lba}..{lba}+{blocks} end beyond the device's {} blocks",
            h.blocks
        )),
    }
}

/// The CRC and count of the request lines read or written so far, and the end line's check.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    pub requests: u64,
    pub crc: u32,
}

impl Tally {
    /// Count one request line (`line` without its `\n`).
    pub fn add(&mut self, line: &[u8]) {
        self.crc = crc32c::crc32c_append(self.crc, line);
        self.crc = crc32c::crc32c_append(self.crc, b"\n");
        self.requests += 1;
    }

    /// The end line that closes these request lines.
    pub fn end_line(&self) -> String {
        format!("end {} {:08x}", self.requests, self.crc)
    }

    /// Check an end line against the request lines before it.
    pub fn check_end(&self, line: &[u8]) -> std::result::Result<(), String> {
        let (f, n) = split_ws::<4>(line);
        if n != 3 || f[0] != b"end" {
            return Err("a malformed end line: expected 'end REQUESTS CRC32C'".to_string());
        }
        let count = number("requests", f[1], "a whole number")?;
        let crc = std::str::from_utf8(f[2])
            .ok()
            .filter(|t| t.len() == 8)
            .and_then(|t| u32::from_str_radix(t, 16).ok())
            .ok_or_else(|| super::lines::bad_field("crc32c", f[2], "8 hex digits"))?;
        if count != self.requests {
            return Err(format!(
                "the end line counts {count} requests but the trace has {}: lines were added or removed",
                self.requests
            ));
        }
        if crc != self.crc {
            return Err(format!(
                "the end line's CRC-32C {crc:08x} does not match the request lines' {:08x}: the trace was changed after it was recorded",
                self.crc
            ));
        }
        Ok(())
    }
}

/// Where a reader is in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Header,
    Requests(TraceHeader),
    Ended,
}

/// The simulator's reader of this format ([`super::TraceFormat::Nvstack`]).
pub(crate) struct Parser {
    stage: Stage,
    tally: Tally,
}

impl Parser {
    pub fn new() -> Parser {
        Parser {
            stage: Stage::Header,
            tally: Tally::default(),
        }
    }

    /// One line: the header (None), a request (Some), or the end line (None).
    fn line(&mut self, line: &[u8]) -> std::result::Result<Option<DeviceEvent>, LineError> {
        match self.stage {
            Stage::Header => {
                let h = parse_header(line).map_err(LineError::Fatal)?;
                self.stage = Stage::Requests(h);
                Ok(None)
            }
            Stage::Ended => Err(LineError::Fatal(
                "a line after the end line: the trace was changed after it was recorded"
                    .to_string(),
            )),
            Stage::Requests(h) => {
                if line.starts_with(b"end") {
                    self.tally.check_end(line).map_err(LineError::Fatal)?;
                    self.stage = Stage::Ended;
                    return Ok(None);
                }
                // A bad request line makes the checksum useless: the whole trace is refused.
                let ev = parse_event(line, &h).map_err(LineError::Fatal)?;
                self.tally.add(line);
                Ok(Some(ev))
            }
        }
    }

    fn finish_text(&self) -> std::result::Result<(), String> {
        match self.stage {
            Stage::Ended => Ok(()),
            Stage::Header => Err("empty: an nvstack trace starts with its header".to_string()),
            Stage::Requests(_) => Err(format!(
                "no end line after {} requests: the trace was cut short (the recording did not \
                 stop cleanly)",
                self.tally.requests
            )),
        }
    }
}

impl Format for Parser {
    const HEADER: bool = true;

    fn parse(
        &mut self,
        line: &[u8],
        line_no: u64,
    ) -> std::result::Result<Option<Request>, LineError> {
        let Some(ev) = self.line(line)? else {
            return Ok(None);
        };
        let Stage::Requests(h) = self.stage else {
            unreachable!("a request is only parsed after the header");
        };
        let op = match ev.op {
            DeviceOp::Read => Op::Read,
            DeviceOp::Write => Op::Write,
            DeviceOp::Flush | DeviceOp::Discard => return Ok(None),
        };
        Ok(Some(Request {
            time_ns: ev.time_ns,
            op,
            offset_bytes: ev.lba * h.block_bytes,
            size_bytes: ev.blocks * h.block_bytes,
            stream: 0,
            sync: false,
            line: line_no,
        }))
    }

    fn finish(&mut self, _lines: u64) -> std::result::Result<(), String> {
        self.finish_text()
    }

    fn time_text(&self, time_ns: u64) -> String {
        format!("{time_ns} ns")
    }
}

/// Every line of a trace as [`DeviceEvent`]s, checked as the simulator's reader checks them
/// (header, version, extents, time order, count and checksum), for replays that need flushes,
/// discards and device times.
pub struct DeviceEvents {
    path: std::path::PathBuf,
    lines: super::lines::LineReader,
    parser: Parser,
    last_time_ns: u64,
    done: bool,
}

impl DeviceEvents {
    /// Open `path`; its header is read now, so a foreign file fails here.
    pub fn open(path: &std::path::Path) -> Result<(TraceHeader, DeviceEvents)> {
        let file = std::fs::File::open(path)
            .map_err(|e| Error::bad(format!("{}: cannot open the trace: {e}", path.display())))?;
        let input = Box::new(std::io::BufReader::with_capacity(256 * 1024, file));
        let mut events = DeviceEvents {
            path: path.to_path_buf(),
            lines: super::lines::LineReader::new(input),
            parser: Parser::new(),
            last_time_ns: 0,
            done: false,
        };
        // The header line yields no event; a missing or foreign header is an error here.
        let first = events.next_line()?;
        debug_assert!(first.is_none(), "the first line is the header");
        let Stage::Requests(h) = events.parser.stage else {
            unreachable!("the header was read");
        };
        Ok((h, events))
    }

    /// The next line's event, None at a header or end line or at the end of the file.
    fn next_line(&mut self) -> Result<Option<DeviceEvent>> {
        let read = self.lines.read().map_err(|e| {
            Error::bad(format!(
                "{}: cannot read the trace: {e}",
                self.path.display()
            ))
        })?;
        let line_no = self.lines.line_no;
        let bad = |m: String| super::bad_line(&self.path, line_no, m);
        match read {
            super::lines::LineRead::Eof => {
                self.done = true;
                self.parser
                    .finish_text()
                    .map_err(|m| Error::bad(format!("{}: {m}", self.path.display())))?;
                Ok(None)
            }
            super::lines::LineRead::TooLong => Err(bad("line too long".to_string())),
            super::lines::LineRead::Line => {
                let ev = self.parser.line(self.lines.line()).map_err(|e| match e {
                    LineError::Bad(m) | LineError::Fatal(m) => bad(m),
                })?;
                if let Some(ev) = ev {
                    if ev.time_ns < self.last_time_ns {
                        return Err(bad(format!(
                            "time {} ns is before the previous request's {} ns: a trace's times must not decrease",
                            ev.time_ns, self.last_time_ns
                        )));
                    }
                    self.last_time_ns = ev.time_ns;
                }
                Ok(ev)
            }
        }
    }
}

impl Iterator for DeviceEvents {
    type Item = Result<DeviceEvent>;

    fn next(&mut self) -> Option<Result<DeviceEvent>> {
        while !self.done {
            match self.next_line() {
                Ok(Some(ev)) => return Some(Ok(ev)),
                Ok(None) => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

/// Writes a trace: the header when made, a line per request, the end line at [`close`].
///
/// [`close`]: TraceWriter::close
pub struct TraceWriter {
    inner: Mutex<WriterState>,
    start: Instant,
}

struct WriterState {
    out: Option<Box<dyn Write + Send>>,
    /// The data log (`--record-data`): each write line's bytes, in line order.
    data: Option<super::nvdata::DataWriter>,
    tally: Tally,
    /// The first write error: recording stops, and [`TraceWriter::close`] reports it.
    failed: Option<String>,
}

impl TraceWriter {
    /// A writer for a device of `blocks` blocks of `block_bytes`, writing to `out` (buffer it).
    pub fn new(
        mut out: Box<dyn Write + Send>,
        block_bytes: u32,
        blocks: u64,
    ) -> Result<TraceWriter> {
        let header = format!("{MAGIC} {VERSION} block_bytes={block_bytes} blocks={blocks}\n");
        parse_header(header.trim_end().as_bytes()).map_err(Error::bad)?;
        out.write_all(header.as_bytes())
            .map_err(|e| Error::env(format!("cannot write the trace: {e}")))?;
        Ok(TraceWriter {
            inner: Mutex::new(WriterState {
                out: Some(out),
                data: None,
                tally: Tally::default(),
                failed: None,
            }),
            start: Instant::now(),
        })
    }

    /// Also log every write's bytes into `out` (docs/format.md section 13.1).
    pub fn log_data(&self, out: Box<dyn Write + Send>, block_bytes: u32) -> Result<()> {
        let w = super::nvdata::DataWriter::new(out, block_bytes)
            .map_err(|e| Error::env(format!("cannot write the data log: {e}")))?;
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).data = Some(w);
        Ok(())
    }

    /// Record a request that started at `started` and has just finished. The finish time is
    /// taken under the lock, so the lines' times never decrease.
    pub fn record(&self, op: DeviceOp, lba: u64, blocks: u64, started: Instant) {
        self.record_data(op, lba, blocks, started, &[]);
    }

    /// [`TraceWriter::record`] with a write's bytes for the data log (if one is kept).
    pub fn record_data(&self, op: DeviceOp, lba: u64, blocks: u64, started: Instant, data: &[u8]) {
        if blocks == 0 && op != DeviceOp::Flush {
            return; // An empty request touches nothing; the format has no line for it.
        }
        let mut st = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let time_ns = now.duration_since(self.start).as_nanos() as u64;
        // A request that started before the recording did counts from the recording's start.
        let wait_ns = now.duration_since(started.max(self.start)).as_nanos() as u64;
        let line = format!("{time_ns} {wait_ns} {} {lba} {blocks}", op.letter());
        let WriterState {
            out,
            data: log,
            tally,
            failed,
        } = &mut *st;
        let (Some(w), None) = (out.as_mut(), failed.as_ref()) else {
            return;
        };
        if let (Some(d), DeviceOp::Write) = (log.as_mut(), op) {
            if let Err(e) = d.add(data) {
                *failed = Some(format!("cannot write the data log: {e}"));
                return;
            }
        }
        match writeln!(w, "{line}") {
            Ok(()) => tally.add(line.as_bytes()),
            Err(e) => *failed = Some(format!("cannot write the trace: {e}")),
        }
    }

    /// Write the end line and flush; the request lines written, or the first write error.
    pub fn close(&self) -> Result<u64> {
        let mut st = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = st.failed.clone() {
            return Err(Error::env(m));
        }
        let end = st.tally.end_line();
        let requests = st.tally.requests;
        let Some(mut w) = st.out.take() else {
            return Err(Error::env("the trace was already closed"));
        };
        if let Some(d) = st.data.as_mut() {
            d.finish()
                .map_err(|e| Error::env(format!("cannot write the data log: {e}")))?;
        }
        writeln!(w, "{end}")
            .and_then(|()| w.flush())
            .map_err(|e| Error::env(format!("cannot write the trace: {e}")))?;
        Ok(requests)
    }
}

/// A device that records every request it serves into a [`TraceWriter`] and passes it on.
pub struct RecordingDevice {
    inner: std::sync::Arc<dyn BlockDevice>,
    trace: std::sync::Arc<TraceWriter>,
}

impl RecordingDevice {
    pub fn new(
        inner: std::sync::Arc<dyn BlockDevice>,
        trace: std::sync::Arc<TraceWriter>,
    ) -> RecordingDevice {
        RecordingDevice { inner, trace }
    }

    fn blocks_of(&self, bytes: usize) -> u64 {
        bytes as u64 / u64::from(self.inner.block_bytes())
    }
}

impl BlockDevice for RecordingDevice {
    fn block_bytes(&self) -> u32 {
        self.inner.block_bytes()
    }
    fn blocks(&self) -> u64 {
        self.inner.blocks()
    }
    fn caps(&self) -> Caps {
        self.inner.caps()
    }
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        let started = Instant::now();
        self.inner.read(lba, buf)?;
        self.trace
            .record(DeviceOp::Read, lba, self.blocks_of(buf.len()), started);
        Ok(())
    }
    fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
        let started = Instant::now();
        self.inner.write(lba, data)?;
        let n = self.blocks_of(data.len());
        self.trace
            .record_data(DeviceOp::Write, lba, n, started, data);
        Ok(())
    }
    /// One line per block (the format has no scattered write), all with the same times.
    fn write_scattered(&self, lbas: &[u64], data: &[u8]) -> Result<()> {
        let started = Instant::now();
        self.inner.write_scattered(lbas, data)?;
        let bb = self.inner.block_bytes() as usize;
        for (&lba, d) in lbas.iter().zip(data.chunks(bb)) {
            self.trace.record_data(DeviceOp::Write, lba, 1, started, d);
        }
        Ok(())
    }
    fn discard(&self, lba: u64, count: u64) -> Result<()> {
        let started = Instant::now();
        self.inner.discard(lba, count)?;
        self.trace.record(DeviceOp::Discard, lba, count, started);
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        let started = Instant::now();
        self.inner.flush()?;
        self.trace.record(DeviceOp::Flush, 0, 0, started);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{from_reader, ReaderOptions, TraceFormat};
    use std::path::Path;
    use std::sync::Arc;

    /// A shared buffer a writer can own while the test still reads it.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A RAM device of 64 blocks of 512 bytes.
    struct Ram(Mutex<Vec<u8>>);

    impl BlockDevice for Ram {
        fn block_bytes(&self) -> u32 {
            512
        }
        fn blocks(&self) -> u64 {
            64
        }
        fn caps(&self) -> Caps {
            Caps {
                atomic_blocks: 1,
                scattered: false,
                durability: nvstack_core::blockdev::Durability::OnReturn,
            }
        }
        fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
            let at = lba as usize * 512;
            buf.copy_from_slice(&self.0.lock().unwrap()[at..at + buf.len()]);
            Ok(())
        }
        fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
            let at = lba as usize * 512;
            self.0.lock().unwrap()[at..at + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn discard(&self, _lba: u64, _count: u64) -> Result<()> {
            Ok(())
        }
        fn flush(&self) -> Result<()> {
            Ok(())
        }
    }

    fn recorded() -> String {
        let buf = Shared::default();
        let w = Arc::new(TraceWriter::new(Box::new(buf.clone()), 512, 64).unwrap());
        let dev = RecordingDevice::new(Arc::new(Ram(Mutex::new(vec![0; 64 * 512]))), w.clone());
        dev.write(3, &[7; 1024]).unwrap();
        let mut b = [0; 512];
        dev.read(4, &mut b).unwrap();
        assert_eq!(b, [7; 512]);
        dev.flush().unwrap();
        dev.discard(10, 6).unwrap();
        dev.discard(10, 0).unwrap();
        assert_eq!(w.close().unwrap(), 4);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        text
    }

    fn read_sim(text: &str) -> Result<Vec<Request>> {
        let input = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        let opts = ReaderOptions::default();
        from_reader(Path::new("t"), input, TraceFormat::Nvstack, &opts)?.collect()
    }

    fn message(r: Result<Vec<Request>>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(v) => panic!("accepted: {v:?}"),
        }
    }

    #[test]
    fn a_recording_reads_back_as_its_requests() {
        let text = recorded();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "nvstack-trace 1 block_bytes=512 blocks=64");
        assert_eq!(
            lines.len(),
            6,
            "header, 4 requests (the empty discard is not one), end"
        );
        let ops: Vec<&str> = lines[1..5]
            .iter()
            .map(|l| l.split(' ').nth(2).unwrap())
            .collect();
        assert_eq!(ops, ["W", "R", "F", "D"]);
        assert!(lines[5].starts_with("end 4 "));
        let reqs = read_sim(&text).unwrap();
        assert_eq!(reqs.len(), 2, "flushes and discards carry no request");
        assert_eq!(
            (reqs[0].op, reqs[0].offset_bytes, reqs[0].size_bytes),
            (Op::Write, 1536, 1024)
        );
        assert_eq!(
            (reqs[1].op, reqs[1].offset_bytes, reqs[1].size_bytes),
            (Op::Read, 2048, 512)
        );
        assert!(reqs[0].time_ns <= reqs[1].time_ns);
    }

    #[test]
    fn device_events_yield_every_line() {
        let text = recorded();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.trace");
        std::fs::write(&p, &text).unwrap();
        let (h, events) = DeviceEvents::open(&p).unwrap();
        assert_eq!(
            h,
            TraceHeader {
                block_bytes: 512,
                blocks: 64
            }
        );
        let ev: Vec<DeviceEvent> = events.collect::<Result<_>>().unwrap();
        let ops: Vec<DeviceOp> = ev.iter().map(|e| e.op).collect();
        assert_eq!(
            ops,
            [
                DeviceOp::Write,
                DeviceOp::Read,
                DeviceOp::Flush,
                DeviceOp::Discard
            ]
        );
        assert_eq!((ev[3].lba, ev[3].blocks), (10, 6));
        assert!(ev.iter().all(|e| e.wait_ns <= e.time_ns));
    }

    #[test]
    fn a_cut_or_changed_trace_is_refused() {
        let text = recorded();
        let cut: String = text.lines().take(3).map(|l| format!("{l}\n")).collect();
        assert!(message(read_sim(&cut)).contains("no end line after 2 requests"));
        let changed = text.replacen(" W 3 2", " W 5 2", 1);
        assert!(
            message(read_sim(&changed)).contains("does not match"),
            "{changed}"
        );
        let dropped: String = text
            .lines()
            .filter(|l| !l.contains(" R "))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(message(read_sim(&dropped)).contains("counts 4 requests but the trace has 3"));
        let extra = format!("{text}1 0 R 0 1\n");
        assert!(message(read_sim(&extra)).contains("after the end line"));
    }

    #[test]
    fn bad_headers_and_lines_are_named() {
        let h = "nvstack-trace 1 block_bytes=512 blocks=64\n";
        let cases = [
            ("msr,1,2\n", "not an nvstack trace"),
            ("nvstack-trace 2 block_bytes=512 blocks=64\n", "version 2"),
            (
                "nvstack-trace 1 block_bytes=500 blocks=64\n",
                "power of two",
            ),
            (
                "nvstack-trace 1 blocks=64 block_bytes=512\n",
                "expected block_bytes=N",
            ),
            ("nvstack-trace 1 block_bytes=512 blocks=0\n", "blocks=0"),
            (&format!("{h}5 1 X 0 1\n"), "field 'op'"),
            (&format!("{h}5 1 R 60 8\n"), "beyond the device's 64 blocks"),
            (&format!("{h}5 1 R 0 0\n"), "0 blocks"),
            (&format!("{h}5 1 F 3 0\n"), "a flush names lba 3"),
            (&format!("{h}5 9 W 0 1\n"), "longer than time_ns"),
            (&format!("{h}5 1 W 0\n"), "4 fields"),
            (&format!("{h}9 1 W 0 1\n5 1 W 0 1\n"), "must not decrease"),
            ("", "empty"),
        ];
        for (text, needle) in cases {
            let m = message(read_sim(text));
            assert!(m.contains(needle), "{text:?}: {m}");
            assert!(m.starts_with("t"), "the message names the file: {m}");
        }
    }

    #[test]
    fn a_discard_may_name_the_whole_device() {
        let mut t = Tally::default();
        let line = "7 2 D 0 64";
        t.add(line.as_bytes());
        let text = format!(
            "nvstack-trace 1 block_bytes=512 blocks=64\n{line}\n{}\n",
            t.end_line()
        );
        assert_eq!(read_sim(&text).unwrap(), vec![]);
    }
}
