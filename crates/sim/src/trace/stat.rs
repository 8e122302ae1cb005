//! What a trace holds, as the simulator reads it: requests, block accesses, distinct blocks,
//! streams, the time span and the lines skipped. A first look at a trace before simulating it,
//! and a check that a reader reads it as its documentation says (`nvstack sim stat`).

use super::{block_range, open, Op, ReaderOptions, TraceFormat};
use nvstack_core::error::Result;
use rustc_hash::FxHashSet;
use std::path::Path;

/// The counts of one trace. Serialized as `nvstack sim stat --json` prints it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TraceStat {
    /// The trace file, as given.
    pub trace: String,
    /// How it was read.
    pub format: TraceFormat,
    /// The block size the requests were cut into.
    pub block_bytes: u32,
    /// Requests read (skipped lines not counted).
    pub requests: u64,
    /// Requests that read.
    pub read_requests: u64,
    /// Requests that write.
    pub write_requests: u64,
    /// Writes flagged sync (blkparse S/F, fio fsync/fdatasync).
    pub sync_writes: u64,
    /// Bytes the read requests transfer.
    pub read_bytes: u64,
    /// Bytes the write requests transfer.
    pub write_bytes: u64,
    /// Block accesses: every block a request touches, once per request.
    pub block_accesses: u64,
    /// Block accesses by reads.
    pub reads: u64,
    /// Block accesses by writes.
    pub writes: u64,
    /// Distinct block keys touched.
    pub distinct_blocks: u64,
    /// Distinct block keys written at least once.
    pub distinct_written_blocks: u64,
    /// Distinct streams (MSR hostname/disk pairs; 1 for single-device formats).
    pub streams: u64,
    /// The first request's time, ns (None for an empty trace).
    pub first_time_ns: Option<u64>,
    /// The last request's time, ns.
    pub last_time_ns: Option<u64>,
    /// Malformed lines skipped (only with `skip_bad_lines`).
    pub skipped_lines: u64,
}

impl TraceStat {
    fn empty(path: &Path, format: TraceFormat, block_bytes: u32) -> TraceStat {
        TraceStat {
            trace: path.display().to_string(),
            format,
            block_bytes,
            requests: 0,
            read_requests: 0,
            write_requests: 0,
            sync_writes: 0,
            read_bytes: 0,
            write_bytes: 0,
            block_accesses: 0,
            reads: 0,
            writes: 0,
            distinct_blocks: 0,
            distinct_written_blocks: 0,
            streams: 0,
            first_time_ns: None,
            last_time_ns: None,
            skipped_lines: 0,
        }
    }
}

/// Read the whole trace at `path` in `format` and count what it holds, cut into blocks of
/// `block_bytes`. Memory: one set entry per distinct block and per stream. A bad line stops the
/// count with the reader's error (exit 2) unless `options` skip bad lines.
pub fn stat(
    path: &Path,
    format: TraceFormat,
    block_bytes: u32,
    options: &ReaderOptions,
) -> Result<TraceStat> {
    let mut src = open(path, format, options)?;
    let mut s = TraceStat::empty(path, format, block_bytes);
    let mut blocks = FxHashSet::default();
    let mut written = FxHashSet::default();
    let mut streams = FxHashSet::default();
    for req in src.by_ref() {
        let req = req?;
        s.requests += 1;
        s.first_time_ns.get_or_insert(req.time_ns);
        s.last_time_ns = Some(req.time_ns);
        streams.insert(req.stream);
        let range = block_range(&req, block_bytes, path)?;
        let n = range.end - range.start;
        s.block_accesses += n;
        match req.op {
            Op::Read => {
                s.read_requests += 1;
                s.read_bytes += req.size_bytes;
                s.reads += n;
                blocks.extend(range);
            }
            Op::Write => {
                s.write_requests += 1;
                s.write_bytes += req.size_bytes;
                s.writes += n;
                s.sync_writes += u64::from(req.sync);
                for key in range {
                    blocks.insert(key);
                    written.insert(key);
                }
            }
        }
    }
    s.skipped_lines = src.skipped_lines();
    s.distinct_blocks = blocks.len() as u64;
    s.distinct_written_blocks = written.len() as u64;
    s.streams = streams.len() as u64;
    // Every block access is a read or a write; a block written is a block touched.
    assert_eq!(s.reads + s.writes, s.block_accesses);
    assert_eq!(s.read_requests + s.write_requests, s.requests);
    assert!(s.distinct_written_blocks <= s.distinct_blocks);
    assert!(s.distinct_blocks <= s.block_accesses);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn stat_by_hand() {
        // DiskSim: time_ns device sector sectors type (0 write, 1 read); 4 KiB blocks = 8 sectors.
        // Write blocks 0-1 at 5 ns, read block 1 at 7 ns, write block 3 at 9 ns, read 0 bytes.
        let mut f = tempfile::NamedTempFile::new().unwrap();
        write!(f, "5 0 0 16 0\n7 0 8 8 1\n9 0 24 8 0\n11 0 0 0 1\n").unwrap();
        let s = stat(
            f.path(),
            TraceFormat::Disksim,
            4096,
            &ReaderOptions::default(),
        )
        .unwrap();
        assert_eq!((s.requests, s.read_requests, s.write_requests), (4, 2, 2));
        assert_eq!((s.read_bytes, s.write_bytes), (4096, 3 * 4096));
        assert_eq!((s.block_accesses, s.reads, s.writes), (4, 1, 3));
        assert_eq!((s.distinct_blocks, s.distinct_written_blocks), (3, 3));
        assert_eq!((s.first_time_ns, s.last_time_ns), (Some(5), Some(11)));
        assert_eq!((s.streams, s.sync_writes, s.skipped_lines), (1, 0, 0));
        assert_eq!(s.trace, f.path().display().to_string());
        // An empty trace is zero of everything, with no times.
        let e = tempfile::NamedTempFile::new().unwrap();
        let s = stat(
            e.path(),
            TraceFormat::Disksim,
            512,
            &ReaderOptions::default(),
        )
        .unwrap();
        assert_eq!((s.requests, s.block_accesses, s.streams), (0, 0, 0));
        assert_eq!((s.first_time_ns, s.block_bytes), (None, 512));
    }
}
