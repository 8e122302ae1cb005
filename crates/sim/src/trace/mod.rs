//! Trace readers: real block-I/O trace formats, streamed a line at a time into [`Request`]s, and
//! the expansion of a request into the block accesses every model counts.
//!
//! Rules every reader keeps (issue 6, design brief):
//! - A trace is streamed, never loaded whole: memory does not grow with its length.
//! - Times become nanoseconds of virtual time, as the trace gives them (no rebasing). A time
//!   earlier than the previous request's is a bad line: the models' clocks never run backwards,
//!   and a silent reorder or clamp would change what they count.
//! - A malformed line is an [`Error::BadInput`] naming the file, the line number (1-based, the
//!   header counts) and what is wrong; with `skip_bad_lines` it is skipped and counted instead.
//!   Malformed: a wrong field count, a field that does not parse, a value the format does not
//!   define, a time that decreases, a size above [`REQUEST_BYTES_MAX`], an end address beyond
//!   [`ADDRESS_BYTES_MAX`], a line longer than [`LINE_BYTES_MAX`]. A missing or wrong header, a
//!   file that cannot be read, and a fio v2 log without an interarrival time stop the run even
//!   with `skip_bad_lines`: no line after them can be trusted.
//! - Blank lines (after a header line) carry nothing and are skipped without being counted. An
//!   empty trace (a header alone, or an empty file for formats without a header) is zero
//!   requests.
//! - A request covering bytes [offset, offset+size) touches every block from offset/B to
//!   (offset+size-1)/B; a size-0 request touches nothing; a partial write dirties the whole block
//!   with no fill read ([`BlockAccesses`]).
//!
//! The formats, each documented field by field in its file: [`TraceFormat::Cloudphysics`]
//! (cloudphysics.rs), [`TraceFormat::Disksim`] (disksim.rs), [`TraceFormat::Msr`] (msr.rs),
//! [`TraceFormat::Blkparse`] (blkparse.rs), [`TraceFormat::Fio`] (fio.rs); lines.rs holds the
//! line reader, field parsing and stream ids they share. Formats with several address spaces
//! (MSR host and disk, blkparse device, fio file) number them as streams in order of first
//! appearance.

mod blkparse;
mod cloudphysics;
mod disksim;
mod fio;
pub mod libcachesim;
mod lines;
mod msr;
pub mod nvdata;
pub mod nvstack;
mod stat;

pub use lines::LINE_BYTES_MAX;
pub use stat::{stat, TraceStat};

use lines::{LineRead, LineReader};
use nvstack_core::error::{Error, Result};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// The block size the simulator uses unless told otherwise (`--block-size`).
pub const BLOCK_BYTES_DEFAULT: u32 = 4096;
/// Block numbers of one stream must fit below 2^48 so that `stream << 48 | block` is a unique key.
pub const STREAM_SHIFT: u32 = 48;
/// At most this many streams (MSR hostname/disk pairs) in one trace.
pub const STREAMS_MAX: u32 = 1 << (64 - STREAM_SHIFT);
/// The longest request any reader accepts, in bytes (1 GiB). Larger is a bad line: it is no
/// block I/O any real device issues, and it would expand into 2^18 block accesses.
pub const REQUEST_BYTES_MAX: u64 = 1 << 30;

/// A trace format the simulator reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    /// CSV with header `version,time,op,size,lbn` (libCacheSim's cloudPhysicsIO sample).
    Cloudphysics,
    /// DiskSim / MQSim ASCII: `time_ns device lsa sectors type(0 write, 1 read)`.
    Disksim,
    /// MSR Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`.
    Msr,
    /// blkparse default text output: D (issue) events only.
    Blkparse,
    /// fio iolog version 2 or 3 (`fio --write_iolog`).
    Fio,
    /// nvstack's own device trace (`nvstack serve --record-trace`): reads and writes, with
    /// flushes and discards checked and counted.
    Nvstack,
}

impl TraceFormat {
    /// Every format, in the order the program lists them.
    pub const ALL: [TraceFormat; 6] = [
        TraceFormat::Cloudphysics,
        TraceFormat::Disksim,
        TraceFormat::Msr,
        TraceFormat::Blkparse,
        TraceFormat::Fio,
        TraceFormat::Nvstack,
    ];

    /// The format named `name` (as [`TraceFormat::name`] spells it), if any.
    pub fn parse(name: &str) -> Option<TraceFormat> {
        TraceFormat::ALL.into_iter().find(|f| f.name() == name)
    }

    /// What a file of this format holds, in one line (the program's help shows it).
    pub fn describe(self) -> &'static str {
        match self {
            TraceFormat::Cloudphysics => {
                "CSV with header `version,time,op,size,lbn` (libCacheSim's cloudPhysicsIO sample)"
            }
            TraceFormat::Disksim => {
                "DiskSim / MQSim ASCII: `time_ns device lsa sectors type(0 write, 1 read)`"
            }
            TraceFormat::Msr => {
                "MSR Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`"
            }
            TraceFormat::Blkparse => "blkparse default text output: D (issue) events only",
            TraceFormat::Fio => "fio iolog version 2 or 3 (`fio --write_iolog`)",
            TraceFormat::Nvstack => {
                "nvstack's device trace (`nvstack serve --record-trace`, docs/format.md section 13)"
            }
        }
    }

    /// The format's name, as `--format` and the JSON reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Cloudphysics => "cloudphysics",
            TraceFormat::Disksim => "disksim",
            TraceFormat::Msr => "msr",
            TraceFormat::Blkparse => "blkparse",
            TraceFormat::Fio => "fio",
            TraceFormat::Nvstack => "nvstack",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Write,
}

/// One request of a trace, in the trace's own units turned into bytes and nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Virtual time, ns. Never less than the previous request's.
    pub time_ns: u64,
    pub op: Op,
    /// Byte offset on the stream's device.
    pub offset_bytes: u64,
    /// Bytes transferred (0 touches nothing).
    pub size_bytes: u64,
    /// The address space the request belongs to: 0 for single-device formats; for MSR one id per
    /// (hostname, disk number), numbered in order of first appearance.
    pub stream: u32,
    /// The request is synchronous: a write that must be durable when it completes (blkparse
    /// RWBS `S` or `F`, fio `fsync`/`fdatasync` applied to the write before it). False where
    /// the format cannot say.
    pub sync: bool,
    /// 1-based line number in the trace file (for messages).
    pub line: u64,
}

/// How a reader treats its input.
#[derive(Clone, Debug, Default)]
pub struct ReaderOptions {
    /// Skip malformed lines (counted in [`RequestSource::skipped_lines`]) instead of stopping.
    pub skip_bad_lines: bool,
    /// fio iolog v2 has no times: requests are spaced this many ns apart. Required for v2.
    pub interarrival_ns: Option<u64>,
}

/// A stream of requests read from a trace. Each item is a request or the error that stops the
/// run; after an error the source yields nothing more.
pub trait RequestSource: Iterator<Item = Result<Request>> + Send {
    /// Malformed lines skipped so far (only with `skip_bad_lines`).
    fn skipped_lines(&self) -> u64;
    /// The trace's path, for messages.
    fn path(&self) -> &Path;
}

/// A bad line, as every reader reports it.
pub fn bad_line(path: &Path, line: u64, what: impl std::fmt::Display) -> Error {
    Error::bad(format!("{}:{}: {}", path.display(), line, what))
}

/// Open a trace file of `format` as a request stream. A missing or unreadable file, or a
/// directory, is bad input naming the path.
pub fn open(
    path: &Path,
    format: TraceFormat,
    opts: &ReaderOptions,
) -> Result<Box<dyn RequestSource>> {
    let file = std::fs::File::open(path)
        .map_err(|e| Error::bad(format!("{}: cannot open the trace: {e}", path.display())))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::bad(format!("{}: cannot open the trace: {e}", path.display())))?;
    if meta.is_dir() {
        return Err(Error::bad(format!(
            "{}: is a directory, not a trace file",
            path.display()
        )));
    }
    from_reader(path, Box::new(file), format, opts)
}

/// A request stream over any byte source (a pipe, a buffer in tests); `path` names it in
/// messages.
pub fn from_reader(
    path: &Path,
    input: Box<dyn Read + Send>,
    format: TraceFormat,
    opts: &ReaderOptions,
) -> Result<Box<dyn RequestSource>> {
    let input: Box<dyn BufRead + Send> =
        Box::new(BufReader::with_capacity(READ_BUFFER_BYTES, input));
    let path = path.to_path_buf();
    Ok(match format {
        TraceFormat::Cloudphysics => Reader::boxed(path, input, opts, cloudphysics::Parser::new()),
        TraceFormat::Disksim => Reader::boxed(path, input, opts, disksim::Parser::new()),
        TraceFormat::Msr => Reader::boxed(path, input, opts, msr::Parser::new()),
        TraceFormat::Blkparse => Reader::boxed(path, input, opts, blkparse::Parser::new()),
        TraceFormat::Fio => Reader::boxed(path, input, opts, fio::Parser::new(opts)),
        TraceFormat::Nvstack => Reader::boxed(path, input, opts, nvstack::Parser::new()),
    })
}

/// Why a line gives no request.
pub(crate) enum LineError {
    /// A malformed line: skipped and counted with `skip_bad_lines`, an error otherwise.
    Bad(String),
    /// A line that makes the whole file unreadable (a missing or wrong header, fio v2 without
    /// an interarrival time): an error even with `skip_bad_lines`.
    Fatal(String),
}

impl From<String> for LineError {
    fn from(s: String) -> LineError {
        LineError::Bad(s)
    }
}

/// One trace format: turns lines into requests. The [`Reader`] around it owns the file, the
/// line numbers, blank lines, skipping, and the checks every format shares (time order, size and
/// address bounds).
pub(crate) trait Format: Send {
    /// The format's first line is a header: line 1 is passed even if blank.
    const HEADER: bool;
    /// One line (without its end, never blank past line 1); `Ok(None)` for a line that carries
    /// no request (a header, a summary, an event of no interest).
    fn parse(
        &mut self,
        line: &[u8],
        line_no: u64,
    ) -> std::result::Result<Option<Request>, LineError>;
    /// The input has ended after `lines` lines: an error about the file as a whole, if any.
    fn finish(&mut self, lines: u64) -> std::result::Result<(), String> {
        let _ = lines;
        Ok(())
    }
    /// After [`Format::finish`]: requests still held back, one per call.
    fn drain(&mut self) -> Option<Request> {
        None
    }
    /// A time as the format writes it, for the message of a time that runs backwards.
    fn time_text(&self, time_ns: u64) -> String;
}

/// The largest byte address (exclusive) of any request: 2^48 blocks of the smallest block size
/// (512 bytes), so that [`block_range`] accepts every request a reader yields, whatever the
/// block size. Beyond it is a bad line, caught (and skippable) while reading.
pub const ADDRESS_BYTES_MAX: u64 = 1 << (STREAM_SHIFT + 9);

/// Read buffer size: large enough that reading is a small part of the parse time.
const READ_BUFFER_BYTES: usize = 256 * 1024;

/// The line-reading loop shared by every format.
struct Reader<F: Format> {
    path: PathBuf,
    lines: LineReader,
    format: F,
    skip_bad_lines: bool,
    skipped: u64,
    /// The last request yielded: its time and line, for the time-order check.
    last_time_ns: Option<(u64, u64)>,
    eof: bool,
    done: bool,
}

impl<F: Format + 'static> Reader<F> {
    fn boxed(
        path: PathBuf,
        input: Box<dyn BufRead + Send>,
        opts: &ReaderOptions,
        format: F,
    ) -> Box<dyn RequestSource> {
        Box::new(Reader {
            path,
            lines: LineReader::new(input),
            format,
            skip_bad_lines: opts.skip_bad_lines,
            skipped: 0,
            last_time_ns: None,
            eof: false,
            done: false,
        })
    }
}

impl<F: Format> Reader<F> {
    /// The checks every format shares; the message of a failed one.
    fn check(&self, req: &Request) -> std::result::Result<(), String> {
        if req.size_bytes > REQUEST_BYTES_MAX {
            return Err(format!(
                "size {} bytes is above the largest request accepted ({REQUEST_BYTES_MAX} bytes)",
                req.size_bytes
            ));
        }
        match req.offset_bytes.checked_add(req.size_bytes) {
            Some(end) if end <= ADDRESS_BYTES_MAX => {}
            _ => {
                return Err(format!(
                    "offset {} + size {} bytes ends beyond the simulator's address space ({ADDRESS_BYTES_MAX} bytes)",
                    req.offset_bytes, req.size_bytes
                ))
            }
        }
        if let Some((prev_ns, prev_line)) = self.last_time_ns {
            if req.time_ns < prev_ns {
                return Err(format!(
                    "time {} is before the previous request's {} (line {prev_line}): a trace's times must not decrease",
                    self.format.time_text(req.time_ns),
                    self.format.time_text(prev_ns)
                ));
            }
        }
        Ok(())
    }

    /// A bad line: skipped (None) or the error that ends the stream.
    fn bad(&mut self, line: u64, msg: String) -> Option<Result<Request>> {
        if self.skip_bad_lines {
            self.skipped += 1;
            return None;
        }
        self.done = true;
        Some(Err(bad_line(&self.path, line, msg)))
    }

    /// The line just read: what to yield (a request, or the error that ends the stream), or
    /// None to read on (a blank line, a line without a request, a bad line skipped).
    fn parse_line(&mut self, line_no: u64) -> Option<Result<Request>> {
        let line = self.lines.line();
        if (line_no > 1 || !F::HEADER) && lines::is_blank(line) {
            return None;
        }
        match self.format.parse(line, line_no) {
            Ok(None) => None,
            Ok(Some(req)) => self.yield_request(req),
            Err(LineError::Bad(msg)) => self.bad(line_no, msg),
            Err(LineError::Fatal(msg)) => {
                self.done = true;
                Some(Err(bad_line(&self.path, line_no, msg)))
            }
        }
    }

    /// A request the format produced: checked, then yielded or treated as a bad line.
    fn yield_request(&mut self, req: Request) -> Option<Result<Request>> {
        match self.check(&req) {
            Ok(()) => {
                self.last_time_ns = Some((req.time_ns, req.line));
                Some(Ok(req))
            }
            Err(msg) => self.bad(req.line, msg),
        }
    }
}

impl<F: Format> Iterator for Reader<F> {
    type Item = Result<Request>;

    fn next(&mut self) -> Option<Result<Request>> {
        loop {
            if self.done {
                return None;
            }
            if self.eof {
                match self.format.drain() {
                    Some(req) => match self.yield_request(req) {
                        Some(r) => return Some(r),
                        None => continue,
                    },
                    None => {
                        self.done = true;
                        return None;
                    }
                }
            }
            let read = match self.lines.read() {
                Ok(r) => r,
                Err(e) => {
                    self.done = true;
                    return Some(Err(Error::bad(format!(
                        "{}: cannot read the trace after line {}: {e}",
                        self.path.display(),
                        self.lines.line_no
                    ))));
                }
            };
            let line_no = self.lines.line_no;
            match read {
                LineRead::Eof => {
                    if let Err(msg) = self.format.finish(line_no) {
                        self.done = true;
                        return Some(Err(Error::bad(format!("{}: {msg}", self.path.display()))));
                    }
                    self.eof = true;
                }
                LineRead::TooLong => {
                    let msg = format!("line longer than {LINE_BYTES_MAX} bytes");
                    if line_no == 1 && F::HEADER {
                        // The header: without it no later line can be read.
                        self.done = true;
                        return Some(Err(bad_line(&self.path, line_no, msg)));
                    }
                    if let Some(r) = self.bad(line_no, msg) {
                        return Some(r);
                    }
                }
                LineRead::Line => {
                    if let Some(r) = self.parse_line(line_no) {
                        return Some(r);
                    }
                }
            }
        }
    }
}

impl<F: Format> RequestSource for Reader<F> {
    fn skipped_lines(&self) -> u64 {
        self.skipped
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// One block access: the unit every model counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockAccess {
    pub time_ns: u64,
    /// `stream << STREAM_SHIFT | block number`.
    pub key: u64,
    pub op: Op,
    /// The request this access belongs to is synchronous (see [`Request::sync`]).
    pub sync: bool,
    /// This is the last block of its request (a sync takes effect after it).
    pub last_of_request: bool,
}

/// The blocks `[offset/B, (offset+size-1)/B]` of a request, as keys; empty for size 0.
/// Errors if a block number does not fit below 2^48 or the stream id is out of range.
pub fn block_range(req: &Request, block_bytes: u32, path: &Path) -> Result<std::ops::Range<u64>> {
    assert!(block_bytes.is_power_of_two() && block_bytes >= 512);
    if req.size_bytes == 0 {
        return Ok(0..0);
    }
    let b = u64::from(block_bytes);
    let end_byte = req
        .offset_bytes
        .checked_add(req.size_bytes - 1)
        .ok_or_else(|| bad_line(path, req.line, "offset + size overflows 64 bits"))?;
    let first = req.offset_bytes / b;
    let last = end_byte / b;
    if last >= 1u64 << STREAM_SHIFT {
        return Err(bad_line(
            path,
            req.line,
            format!("block {last} is beyond the simulator's 2^48-block address space"),
        ));
    }
    if req.stream >= STREAMS_MAX {
        return Err(bad_line(
            path,
            req.line,
            "more than 65536 streams in one trace",
        ));
    }
    let base = u64::from(req.stream) << STREAM_SHIFT;
    Ok(base + first..base + last + 1)
}

/// Expands a request stream into block accesses, keeping at most one request in memory.
pub struct BlockAccesses {
    src: Box<dyn RequestSource>,
    block_bytes: u32,
    cur: Option<(Request, std::ops::Range<u64>)>,
    /// Requests read so far.
    pub requests: u64,
    /// Application bytes of read and write requests (for byte-based figures).
    pub read_bytes: u64,
    pub write_bytes: u64,
    done: bool,
}

impl BlockAccesses {
    pub fn new(src: Box<dyn RequestSource>, block_bytes: u32) -> BlockAccesses {
        BlockAccesses {
            src,
            block_bytes,
            cur: None,
            requests: 0,
            read_bytes: 0,
            write_bytes: 0,
            done: false,
        }
    }

    pub fn skipped_lines(&self) -> u64 {
        self.src.skipped_lines()
    }

    pub fn path(&self) -> &Path {
        self.src.path()
    }
}

impl Iterator for BlockAccesses {
    type Item = Result<BlockAccess>;

    fn next(&mut self) -> Option<Result<BlockAccess>> {
        loop {
            if self.done {
                return None;
            }
            if let Some((req, range)) = &mut self.cur {
                if let Some(key) = range.next() {
                    return Some(Ok(BlockAccess {
                        time_ns: req.time_ns,
                        key,
                        op: req.op,
                        sync: req.sync,
                        last_of_request: range.is_empty(),
                    }));
                }
                self.cur = None;
            }
            match self.src.next() {
                None => {
                    self.done = true;
                    return None;
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Some(Ok(req)) => {
                    self.requests += 1;
                    match req.op {
                        Op::Read => self.read_bytes += req.size_bytes,
                        Op::Write => self.write_bytes += req.size_bytes,
                    }
                    match block_range(&req, self.block_bytes, self.src.path()) {
                        Ok(r) => self.cur = Some((req, r)),
                        Err(e) => {
                            self.done = true;
                            return Some(Err(e));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(offset: u64, size: u64) -> Request {
        Request {
            time_ns: 0,
            op: Op::Write,
            offset_bytes: offset,
            size_bytes: size,
            stream: 0,
            sync: false,
            line: 1,
        }
    }

    #[test]
    fn block_range_covers_every_touched_block() {
        let p = Path::new("t");
        assert_eq!(block_range(&req(0, 0), 4096, p).unwrap(), 0..0);
        assert_eq!(block_range(&req(0, 1), 4096, p).unwrap(), 0..1);
        assert_eq!(block_range(&req(0, 4096), 4096, p).unwrap(), 0..1);
        assert_eq!(block_range(&req(0, 4097), 4096, p).unwrap(), 0..2);
        assert_eq!(block_range(&req(4095, 2), 4096, p).unwrap(), 0..2);
        // The tpcc README example: sector 264,719,034, 16 sectors -> blocks 33,089,879..=881.
        let r = block_range(&req(264_719_034 * 512, 8192), 4096, p).unwrap();
        assert_eq!(r, 33_089_879..33_089_882);
        let mut s = req(8192, 1);
        s.stream = 3;
        assert_eq!(block_range(&s, 4096, p).unwrap().start, (3u64 << 48) + 2);
        assert!(block_range(&req(u64::MAX, 2), 4096, p).is_err());
        assert!(block_range(&req(1u64 << 62, 1), 4096, p).is_err());
    }
}
