//! libCacheSim's trace formats: a trace's block-level stream (one record per block access, exactly
//! the stream every cache model sees) in a format other simulators read, so that their results
//! can be compared with ours access for access (issue 6: libCacheSim).
//!
//! ## oracle-general (default)
//! libCacheSim's `oracleGeneral` binary trace (`TraceType.ORACLE_GENERAL_TRACE`): one packed
//! little-endian record of 24 bytes per block access, no header:
//!
//! | bytes  | type | field               | what nvstack writes                               |
//! |--------|------|---------------------|---------------------------------------------------|
//! | 0..4   | u32  | `clock_time`        | whole seconds since the trace's first access      |
//! | 4..12  | u64  | `obj_id`            | the block key (`stream << 48 \| block number`)    |
//! | 12..16 | u32  | `obj_size`          | the block size in bytes (`block_bytes`)          |
//! | 16..24 | i64  | `next_access_vtime` | 1-based index of the next access to the same block, -1 if none |
//!
//! The layout is libCacheSim's `traceReader/customizedReader/oracle/oracleGeneralBin.h` (item
//! size 24; fields read at offsets 0, 4, 12, 16; -1 means "no next access"), and
//! `next_access_vtime` is computed the way its `traceConv` does (`bin/traceUtils/
//! traceConvOracleGeneral.cpp`: the request count, starting at 1, of the next request to the same
//! object). LRU does not read it; Belady and other oracle policies do. It is filled in by one
//! backward pass over the written file, which holds one entry per distinct block, never the
//! whole trace.
//!
//! ## csv
//! A header `time,obj_id,obj_size,op` and one line per block access with the same time, key and
//! size, and `read` or `write`. libCacheSim reads it as `TraceType.CSV_TRACE` with
//! `has_header=True`, `delimiter=','`, `time_field=1`, `obj_id_field=2`, `obj_size_field=3`,
//! `op_field=4`, `obj_id_is_num=True` (fields are 1-based). It has no next-access column.
//!
//! ## Time
//! Times are rebased to the first access and truncated to whole seconds: libCacheSim's clock is
//! a 32-bit count of seconds (it also ages objects against a TTL in seconds), and raw trace
//! clocks do not fit it (MSR timestamps are Windows FILETIMEs, about 1.3e10 s). The offset
//! subtracted is reported (`time_origin_ns`). A trace longer than 2^32 s is refused.
//!
//! [`write_file`] writes either format into an open file; `nvstack sim blocks` writes into a
//! file beside the destination and renames it over the destination at the end, so an existing
//! file is replaced whole and a failed run leaves no half-written output.

use super::{BlockAccess, Op};
use nvstack_core::error::{Error, Result};
use rustc_hash::FxHashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;

/// Bytes of one oracleGeneral record.
pub const ORACLE_RECORD_BYTES: usize = 24;
/// `next_access_vtime` of an access with no later access to the same block.
pub const NO_NEXT_ACCESS: i64 = -1;
const NS_PER_S: u64 = 1_000_000_000;

/// The formats libCacheSim reads that the simulator writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutFormat {
    /// libCacheSim's oracleGeneral binary records (24 bytes each).
    OracleGeneral,
    /// `time,obj_id,obj_size,op` with a header line.
    Csv,
}

impl OutFormat {
    /// Every format, in the order the program lists them.
    pub const ALL: [OutFormat; 2] = [OutFormat::OracleGeneral, OutFormat::Csv];

    /// The format's name, as `--out-format` and the JSON report spell it.
    pub fn name(self) -> &'static str {
        match self {
            OutFormat::OracleGeneral => "oracle-general",
            OutFormat::Csv => "csv",
        }
    }

    /// The format named `name` (as [`OutFormat::name`] spells it), if any.
    pub fn parse(name: &str) -> Option<OutFormat> {
        OutFormat::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// What a run wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BlocksCount {
    /// Records written: one per block access.
    pub block_accesses: u64,
    /// Of which reads.
    pub reads: u64,
    /// Of which writes.
    pub writes: u64,
    /// Distinct block keys (oracle-general only: the next-access pass finds them).
    pub distinct_blocks: Option<u64>,
    /// The trace time subtracted from every access's time (the first access's), ns.
    pub time_origin_ns: Option<u64>,
    /// The size of the file written, bytes.
    pub output_bytes: u64,
}

/// Why writing stopped: the output failed (the caller names the file), or the trace did (a bad
/// line, a clock libCacheSim cannot hold: the error says what).
#[derive(Debug)]
pub enum WriteError {
    /// Writing, reading back or sizing the output failed.
    Output(std::io::Error),
    /// The accesses could not be written: the trace's error, or a time out of range.
    Input(Error),
}

impl From<Error> for WriteError {
    fn from(e: Error) -> WriteError {
        WriteError::Input(e)
    }
}

impl From<std::io::Error> for WriteError {
    fn from(e: std::io::Error) -> WriteError {
        WriteError::Output(e)
    }
}

/// Write `accesses` into `file` (open for reading and writing, empty) in `fmt`, then, for
/// oracle-general, fill in every record's next access. Returns the counts and the file's size.
pub fn write_file(
    file: &File,
    fmt: OutFormat,
    block_bytes: u32,
    accesses: &mut dyn Iterator<Item = Result<BlockAccess>>,
) -> std::result::Result<BlocksCount, WriteError> {
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut count = match fmt {
        OutFormat::OracleGeneral => write_oracle_general(&mut w, block_bytes, accesses)?,
        OutFormat::Csv => write_csv(&mut w, block_bytes, accesses)?,
    };
    w.flush()?;
    drop(w);
    if fmt == OutFormat::OracleGeneral {
        count.distinct_blocks = Some(fill_next_access(file, count.block_accesses)?);
    }
    count.output_bytes = file.metadata()?.len();
    Ok(count)
}

/// Seconds since `origin` of an access, as libCacheSim's 32-bit clock.
fn clock_seconds(a: &BlockAccess, origin: &mut Option<u64>) -> Result<u32> {
    let o = *origin.get_or_insert(a.time_ns);
    let rel = a.time_ns.checked_sub(o).ok_or_else(|| {
        Error::bad(format!(
            "an access at {} ns comes before the trace's first ({o} ns)",
            a.time_ns
        ))
    })?;
    u32::try_from(rel / NS_PER_S).map_err(|_| {
        Error::bad(format!(
            "an access {} s after the trace's first does not fit libCacheSim's 32-bit clock",
            rel / NS_PER_S
        ))
    })
}

fn tally(count: &mut BlocksCount, a: &BlockAccess) {
    count.block_accesses += 1;
    match a.op {
        Op::Read => count.reads += 1,
        Op::Write => count.writes += 1,
    }
}

/// One oracleGeneral record per access, with `next_access_vtime` left at [`NO_NEXT_ACCESS`]
/// (see [`fill_next_access`]).
pub fn write_oracle_general(
    w: &mut dyn Write,
    block_bytes: u32,
    accesses: &mut dyn Iterator<Item = Result<BlockAccess>>,
) -> std::result::Result<BlocksCount, WriteError> {
    let mut count = BlocksCount::default();
    let mut origin = None;
    for a in accesses {
        let a = a?;
        let t = clock_seconds(&a, &mut origin)?;
        tally(&mut count, &a);
        let mut rec = [0u8; ORACLE_RECORD_BYTES];
        rec[0..4].copy_from_slice(&t.to_le_bytes());
        rec[4..12].copy_from_slice(&a.key.to_le_bytes());
        rec[12..16].copy_from_slice(&block_bytes.to_le_bytes());
        rec[16..24].copy_from_slice(&NO_NEXT_ACCESS.to_le_bytes());
        w.write_all(&rec)?;
    }
    count.time_origin_ns = origin;
    Ok(count)
}

/// One CSV line per access, after the header line.
pub fn write_csv(
    w: &mut dyn Write,
    block_bytes: u32,
    accesses: &mut dyn Iterator<Item = Result<BlockAccess>>,
) -> std::result::Result<BlocksCount, WriteError> {
    let mut count = BlocksCount::default();
    let mut origin = None;
    w.write_all(b"time,obj_id,obj_size,op\n")?;
    for a in accesses {
        let a = a?;
        let t = clock_seconds(&a, &mut origin)?;
        tally(&mut count, &a);
        let op = match a.op {
            Op::Read => "read",
            Op::Write => "write",
        };
        writeln!(w, "{t},{},{block_bytes},{op}", a.key)?;
    }
    count.time_origin_ns = origin;
    Ok(count)
}

/// Records per chunk of the backward pass (about 1 MiB).
const CHUNK_RECORDS: u64 = 1 << 15;

/// Fill in `next_access_vtime` of the `n` oracleGeneral records of `file` with one backward
/// pass, in place, a chunk at a time; returns the number of distinct keys. Memory: one map entry
/// per distinct key.
pub fn fill_next_access(file: &File, n: u64) -> std::io::Result<u64> {
    let rec = ORACLE_RECORD_BYTES as u64;
    let len = file.metadata()?.len();
    if len != n * rec {
        return Err(std::io::Error::other(format!(
            "holds {len} bytes, expected {n} records of {rec}"
        )));
    }
    // key -> 1-based index of its earliest access seen so far (scanning backwards).
    let mut next: FxHashMap<u64, u64> = FxHashMap::default();
    let mut buf = vec![0u8; (CHUNK_RECORDS * rec) as usize];
    let mut end = n;
    while end > 0 {
        let start = end.saturating_sub(CHUNK_RECORDS);
        let bytes = ((end - start) * rec) as usize;
        let chunk = &mut buf[..bytes];
        file.read_exact_at(chunk, start * rec)?;
        for (j, r) in chunk
            .chunks_exact_mut(ORACLE_RECORD_BYTES)
            .enumerate()
            .rev()
        {
            let mut k = [0u8; 8];
            k.copy_from_slice(&r[4..12]);
            let key = u64::from_le_bytes(k);
            let vtime = start + j as u64 + 1;
            let nv = match next.insert(key, vtime) {
                Some(v) => i64::try_from(v).map_err(std::io::Error::other)?,
                None => NO_NEXT_ACCESS,
            };
            r[16..24].copy_from_slice(&nv.to_le_bytes());
        }
        file.write_all_at(chunk, start * rec)?;
        end = start;
    }
    assert!(next.len() as u64 <= n);
    Ok(next.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Writes `accesses` into a new file at `path` as `nvstack sim blocks` does.
    fn write_to(
        path: &Path,
        fmt: OutFormat,
        block_bytes: u32,
        accesses: &mut dyn Iterator<Item = Result<BlockAccess>>,
    ) -> std::result::Result<BlocksCount, WriteError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .unwrap();
        write_file(&file, fmt, block_bytes, accesses)
    }

    fn acc(time_s: u64, key: u64, op: Op) -> Result<BlockAccess> {
        Ok(BlockAccess {
            time_ns: 1_000 * NS_PER_S + time_s * NS_PER_S + 7,
            key,
            op,
            sync: false,
            last_of_request: true,
        })
    }

    fn records(bytes: &[u8]) -> Vec<(u32, u64, u32, i64)> {
        bytes
            .chunks_exact(ORACLE_RECORD_BYTES)
            .map(|r| {
                (
                    u32::from_le_bytes(r[0..4].try_into().unwrap()),
                    u64::from_le_bytes(r[4..12].try_into().unwrap()),
                    u32::from_le_bytes(r[12..16].try_into().unwrap()),
                    i64::from_le_bytes(r[16..24].try_into().unwrap()),
                )
            })
            .collect()
    }

    #[test]
    fn oracle_general_records_and_next_access() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("t.og");
        let keys = [5u64, 6, 5, 7, 6, 5];
        let mut it = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| acc(i as u64, k, if i % 2 == 0 { Op::Read } else { Op::Write }));
        let c = write_to(&tmp, OutFormat::OracleGeneral, 4096, &mut it).unwrap();
        assert_eq!(c.block_accesses, 6);
        assert_eq!((c.reads, c.writes), (3, 3));
        assert_eq!(c.distinct_blocks, Some(3));
        assert_eq!(c.time_origin_ns, Some(1_000 * NS_PER_S + 7));
        assert_eq!(c.output_bytes, 6 * 24);
        let r = records(&std::fs::read(&tmp).unwrap());
        // Next access: the 1-based index of the next request to the same key (traceConv).
        let want = [
            (0, 5, 4096, 3),
            (1, 6, 4096, 5),
            (2, 5, 4096, 6),
            (3, 7, 4096, -1),
            (4, 6, 4096, -1),
            (5, 5, 4096, -1),
        ];
        assert_eq!(r, want);
    }

    #[test]
    fn next_access_spans_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("t.og");
        let n = CHUNK_RECORDS * 2 + 17;
        // Key i % 1000: the next access of record i (0-based) is record i + 1000, 1-based i + 1001.
        let mut it = (0..n).map(|i| acc(0, i % 1000, Op::Read));
        let c = write_to(&tmp, OutFormat::OracleGeneral, 512, &mut it).unwrap();
        assert_eq!(c.distinct_blocks, Some(1000));
        let r = records(&std::fs::read(&tmp).unwrap());
        for (i, rec) in r.iter().enumerate() {
            let i = i as u64;
            let want = if i + 1000 < n { (i + 1001) as i64 } else { -1 };
            assert_eq!(rec.3, want, "record {i}");
            assert_eq!(rec.2, 512);
        }
    }

    #[test]
    fn csv_lines() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("t.csv");
        let mut it = [acc(0, 9, Op::Write), acc(3, 1 << 48 | 2, Op::Read)].into_iter();
        let c = write_to(&tmp, OutFormat::Csv, 4096, &mut it).unwrap();
        assert_eq!(c.distinct_blocks, None);
        let text = std::fs::read_to_string(&tmp).unwrap();
        assert_eq!(
            text,
            "time,obj_id,obj_size,op\n0,9,4096,write\n3,281474976710658,4096,read\n"
        );
    }

    #[test]
    fn clock_overflow_is_bad_input() {
        let mut origin = None;
        let a = acc(0, 1, Op::Read).unwrap();
        assert_eq!(clock_seconds(&a, &mut origin).unwrap(), 0);
        let mut late = a;
        late.time_ns += (u64::from(u32::MAX) + 1) * NS_PER_S;
        assert_eq!(
            clock_seconds(&late, &mut origin).unwrap_err().exit_code(),
            2
        );
        let mut early = a;
        early.time_ns -= 1;
        assert_eq!(
            clock_seconds(&early, &mut origin).unwrap_err().exit_code(),
            2
        );
    }

    #[test]
    fn an_error_stops_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("t.og");
        let mut it = [acc(0, 1, Op::Read), Err(Error::bad("t:2: bad line"))].into_iter();
        match write_to(&tmp, OutFormat::OracleGeneral, 4096, &mut it) {
            Err(WriteError::Input(e)) => assert_eq!(e.exit_code(), 2),
            other => panic!("expected the trace's error, got {other:?}"),
        }
    }

    #[test]
    fn out_format_names_parse_back_and_are_what_json_writes() {
        for f in OutFormat::ALL {
            assert_eq!(OutFormat::parse(f.name()), Some(f));
            assert_eq!(serde_json::to_value(f).unwrap(), f.name());
        }
        assert_eq!(OutFormat::parse("oracle_general"), None);
    }
}
