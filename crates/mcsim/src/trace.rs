//! What a core executes: a per-thread stream of [`Op`]s, from a synthetic kernel, a vector
//! (tests) or a trace file in the versioned text format of docs/mcsim.md, read as a stream.

use nvstack_core::error::{Error, Result};
use std::collections::VecDeque;
use std::io::{BufRead, Write};

/// One step of a thread. Addresses are bytes; the simulator works on their lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// This many instructions that touch no memory.
    Gap(u32),
    Load(u64),
    Store(u64),
    /// Write the line back to memory if it is dirty (clwb): it enters the write queue.
    Flush(u64),
    /// sfence: later instructions are not fetched before it retires.
    Fence,
    /// PersistentCommit of [addr, addr+len) (PCOMMIT in global mode).
    Commit {
        addr: u64,
        len: u64,
    },
    /// PersistenceMalloc: bind [addr, addr+len) to a sub-queue (no instruction).
    Bind {
        addr: u64,
        len: u64,
    },
}

/// Per-thread streams of operations.
pub trait Workload {
    fn threads(&self) -> usize;
    /// The thread's next operation, or None at its end.
    fn next(&mut self, thread: usize) -> Result<Option<Op>>;

    /// The thread's next operations, one or more, in `ops` (cleared first); false at the
    /// thread's end. For a caller taking many (the floor): a generator hands out what it
    /// made together, saving a call per operation. The same stream as `next`'s.
    fn next_batch(&mut self, thread: usize, ops: &mut Vec<Op>) -> Result<bool> {
        ops.clear();
        ops.extend(self.next(thread)?);
        Ok(!ops.is_empty())
    }
}

/// A thread's operations taken from a workload a batch at a time (`Workload::next_batch`),
/// saving a dynamic call per operation: `peek` is the next one, `consume` takes it. The
/// engine consumes an operation only once it issues (a core stopping before a shared access
/// finds it again); the floor at once.
#[derive(Default)]
pub(crate) struct OpBuffer {
    ops: Vec<Op>,
    at: usize,
}

impl OpBuffer {
    /// The thread's next operation, taking a batch from `work` when none is left; None at
    /// the thread's end.
    #[inline]
    pub fn peek(&mut self, work: &mut dyn Workload, thread: usize) -> Result<Option<Op>> {
        if self.at == self.ops.len() {
            self.at = 0;
            if !work.next_batch(thread, &mut self.ops)? {
                return Ok(None);
            }
        }
        Ok(Some(self.ops[self.at]))
    }

    /// Take the operation `peek` gave.
    #[inline]
    pub fn consume(&mut self) {
        debug_assert!(self.at < self.ops.len(), "an operation peeked is consumed");
        self.at += 1;
    }

    /// The next operation if it is in the batch already (no call to the workload).
    #[inline]
    pub fn buffered(&self) -> Option<Op> {
        self.ops.get(self.at).copied()
    }
}

/// Operations held in memory (tests and small traces).
pub struct VecWorkload {
    ops: Vec<VecDeque<Op>>,
}

impl VecWorkload {
    pub fn new(ops: Vec<Vec<Op>>) -> VecWorkload {
        VecWorkload {
            ops: ops.into_iter().map(VecDeque::from).collect(),
        }
    }
}

impl Workload for VecWorkload {
    fn threads(&self) -> usize {
        self.ops.len()
    }
    fn next(&mut self, thread: usize) -> Result<Option<Op>> {
        Ok(self.ops[thread].pop_front())
    }
}

/// The first line of a version-1 trace file.
pub const MAGIC: &str = "nvstack-mctrace";
pub const VERSION: u32 = 1;
/// A thread's records buffered ahead of its reader beyond this many means the file does not
/// interleave its threads: refused rather than read whole into memory.
pub const BUFFERED_MAX: usize = 1 << 22;

/// Writes the text format: a header, then one `THREAD OP [ARGS]` line per operation.
pub struct TraceWriter<W: Write> {
    out: W,
}

impl<W: Write> TraceWriter<W> {
    pub fn new(mut out: W, threads: usize) -> Result<TraceWriter<W>> {
        writeln!(out, "{MAGIC} {VERSION} threads {threads}").map_err(io_err)?;
        Ok(TraceWriter { out })
    }

    pub fn op(&mut self, thread: usize, op: Op) -> Result<()> {
        let o = &mut self.out;
        match op {
            Op::Gap(n) => writeln!(o, "{thread} G {n}"),
            Op::Load(a) => writeln!(o, "{thread} L {a:x}"),
            Op::Store(a) => writeln!(o, "{thread} S {a:x}"),
            Op::Flush(a) => writeln!(o, "{thread} F {a:x}"),
            Op::Fence => writeln!(o, "{thread} B"),
            Op::Commit { addr, len } => writeln!(o, "{thread} C {addr:x} {len:x}"),
            Op::Bind { addr, len } => writeln!(o, "{thread} R {addr:x} {len:x}"),
        }
        .map_err(io_err)
    }

    pub fn finish(mut self) -> Result<W> {
        self.out.flush().map_err(io_err)?;
        Ok(self.out)
    }
}

fn io_err(e: std::io::Error) -> Error {
    Error::env(format!("trace: {e}"))
}

/// Reads the text format as a stream: lines are read only when a thread needs its next
/// operation, and records of other threads met on the way wait in per-thread buffers.
pub struct TraceReader<R: BufRead> {
    src: R,
    name: String,
    line_no: u64,
    threads: usize,
    ahead: Vec<VecDeque<Op>>,
    eof: bool,
    line: String,
}

impl<R: BufRead> TraceReader<R> {
    /// Reads the header; `name` is how errors name the source (a path).
    pub fn new(mut src: R, name: &str) -> Result<TraceReader<R>> {
        let mut line = String::new();
        src.read_line(&mut line)
            .map_err(|e| Error::bad(format!("{name}: {e}")))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let bad = |why: &str| {
            Error::bad(format!(
                "{name} line 1: {why} (expected \"{MAGIC} {VERSION} threads N\")"
            ))
        };
        if words.first() != Some(&MAGIC) {
            return Err(bad("not an nvstack memory trace"));
        }
        if words.get(1) != Some(&"1") {
            return Err(bad(&format!(
                "version {:?} is not supported",
                words.get(1).unwrap_or(&"")
            )));
        }
        let threads = match (words.get(2), words.get(3).map(|w| w.parse::<usize>())) {
            (Some(&"threads"), Some(Ok(n))) if (1..=1024).contains(&n) && words.len() == 4 => n,
            _ => return Err(bad("the thread count must be 1 to 1024")),
        };
        let ahead = vec![VecDeque::new(); threads];
        Ok(TraceReader {
            src,
            name: name.to_string(),
            line_no: 1,
            threads,
            ahead,
            eof: false,
            line,
        })
    }

    fn read_record(&mut self) -> Result<bool> {
        loop {
            self.line.clear();
            let n = self
                .src
                .read_line(&mut self.line)
                .map_err(|e| Error::bad(format!("{}: {e}", self.name)))?;
            if n == 0 {
                return Ok(false);
            }
            self.line_no += 1;
            let text = self.line.trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            let (thread, op) = parse_record(text, self.threads).map_err(|why| {
                Error::bad(format!(
                    "{} line {}: {why}: {text:?}",
                    self.name, self.line_no
                ))
            })?;
            if self.ahead[thread].len() >= BUFFERED_MAX {
                return Err(Error::bad(format!(
                    "{} line {}: thread {thread} is more than {BUFFERED_MAX} records ahead of the others; \
                     write the threads interleaved",
                    self.name, self.line_no
                )));
            }
            self.ahead[thread].push_back(op);
            return Ok(true);
        }
    }
}

fn hex(w: Option<&str>, what: &str) -> std::result::Result<u64, String> {
    let w = w.ok_or_else(|| format!("missing {what}"))?;
    u64::from_str_radix(w, 16).map_err(|_| format!("{what} {w:?} is not a hexadecimal number"))
}

/// One record: `THREAD OP [ARGS]`, checked whole.
fn parse_record(text: &str, threads: usize) -> std::result::Result<(usize, Op), String> {
    let mut w = text.split_whitespace();
    let t = w.next().unwrap_or("");
    let thread: usize = t
        .parse()
        .map_err(|_| format!("thread {t:?} is not a number"))?;
    if thread >= threads {
        return Err(format!(
            "thread {thread} is not below the header's {threads}"
        ));
    }
    let kind = w.next().ok_or("missing operation")?;
    let op = match kind {
        "G" => {
            let n = w.next().ok_or("missing instruction count")?;
            Op::Gap(
                n.parse()
                    .map_err(|_| format!("instruction count {n:?} is not a 32-bit number"))?,
            )
        }
        "L" => Op::Load(hex(w.next(), "address")?),
        "S" => Op::Store(hex(w.next(), "address")?),
        "F" => Op::Flush(hex(w.next(), "address")?),
        "B" => Op::Fence,
        "C" | "R" => {
            let addr = hex(w.next(), "address")?;
            let len = hex(w.next(), "length")?;
            if len == 0 || addr.checked_add(len).is_none() {
                return Err(format!("range {addr:x}+{len:x} is empty or wraps"));
            }
            if kind == "C" {
                Op::Commit { addr, len }
            } else {
                Op::Bind { addr, len }
            }
        }
        other => return Err(format!("unknown operation {other:?} (G L S F B C R)")),
    };
    if w.next().is_some() {
        return Err("extra words after the record".into());
    }
    Ok((thread, op))
}

impl<R: BufRead> Workload for TraceReader<R> {
    fn threads(&self) -> usize {
        self.threads
    }
    fn next(&mut self, thread: usize) -> Result<Option<Op>> {
        while self.ahead[thread].is_empty() && !self.eof {
            if !self.read_record()? {
                self.eof = true;
            }
        }
        Ok(self.ahead[thread].pop_front())
    }
}
