//! The simulator's trace readers (crates/sim/src/trace/) and what `trace::stat` counts: exact
//! counts on the real traces in `../shared/traces/` (as their README states them) and on the
//! samples in crates/sim/tests/data/sim/ (README there says how each was made), the requests that
//! documented example lines become, bad lines (message, skipping, what still stops), and no panic
//! on any input. The program's side (`nvstack sim stat`, exit codes and messages) is tested in
//! crates/cli/tests/sim_stat.rs.

use nvstack_core::error::Error;
use nvstack_sim::trace::{
    self, BlockAccesses, Op, ReaderOptions, Request, RequestSource, TraceFormat, TraceStat,
    REQUEST_BYTES_MAX,
};
use proptest::prelude::*;
use rustc_hash::FxHashSet;
use std::path::{Path, PathBuf};

use nvstack_test_support::{sample_trace as data, shared_trace as shared};

fn opts() -> ReaderOptions {
    ReaderOptions::default()
}

fn skipping() -> ReaderOptions {
    ReaderOptions {
        skip_bad_lines: true,
        interarrival_ns: None,
    }
}

fn requests(
    path: &Path,
    format: TraceFormat,
    o: &ReaderOptions,
) -> nvstack_core::error::Result<Vec<Request>> {
    trace::open(path, format, o)?.collect()
}

/// The library's counts ([`trace::stat`], 4 KiB blocks), checked against the requests read
/// again (no read is sync) and against [`BlockAccesses`], the expansion every model uses, so
/// that the two ways of cutting requests into blocks agree.
fn summarize(
    path: &Path,
    format: TraceFormat,
    o: &ReaderOptions,
) -> nvstack_core::error::Result<TraceStat> {
    let s = trace::stat(path, format, 4096, o)?;
    for r in trace::open(path, format, o)? {
        let r = r?;
        assert!(r.op == Op::Write || !r.sync, "a read is never sync: {r:?}");
    }
    let mut blocks = FxHashSet::default();
    let mut written = FxHashSet::default();
    let (mut reads, mut writes) = (0u64, 0u64);
    let mut accesses = BlockAccesses::new(trace::open(path, format, o)?, 4096);
    for a in accesses.by_ref() {
        let a = a?;
        blocks.insert(a.key);
        if a.op == Op::Write {
            writes += 1;
            written.insert(a.key);
        } else {
            reads += 1;
        }
    }
    assert_eq!(accesses.requests, s.requests);
    assert_eq!(
        (accesses.read_bytes, accesses.write_bytes),
        (s.read_bytes, s.write_bytes)
    );
    assert_eq!(
        (reads + writes, reads, writes),
        (s.block_accesses, s.reads, s.writes)
    );
    assert_eq!(
        (blocks.len() as u64, written.len() as u64),
        (s.distinct_blocks, s.distinct_written_blocks)
    );
    Ok(s)
}

fn request_at(path: &Path, format: TraceFormat, o: &ReaderOptions, line: u64) -> Request {
    let all = requests(path, format, o).unwrap();
    *all.iter()
        .find(|r| r.line == line)
        .unwrap_or_else(|| panic!("no request from line {line} of {}", path.display()))
}

fn message(e: Error) -> String {
    match e {
        Error::BadInput(m) => m,
        other => panic!("expected bad input (exit 2), got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The real traces: every figure as shared/traces/README.md gives it.

#[test]
fn cloudphysics_counts_match_the_readme() {
    let p = shared("cloudPhysicsIO.csv");
    let s = summarize(&p, TraceFormat::Cloudphysics, &opts()).unwrap();
    assert_eq!(
        s,
        TraceStat {
            trace: p.display().to_string(),
            format: TraceFormat::Cloudphysics,
            block_bytes: 4096,
            requests: 113_872,
            read_requests: 46_974,
            write_requests: 66_898,
            sync_writes: 0,
            read_bytes: 1_797_412_352,
            write_bytes: 2_408_565_760,
            block_accesses: 1_141_869,
            reads: 485_700,
            writes: 656_169,
            distinct_blocks: 269_210,
            distinct_written_blocks: 208_696,
            streams: 1,
            first_time_ns: Some(5_633_898_000_000_000),
            last_time_ns: Some(5_641_098_000_000_000),
            skipped_lines: 0,
        }
    );
}

#[test]
fn cloudphysics_readme_example_line() {
    // `1,5633898,2a,512,42932745`, line 2 (after the header): a 512-byte WRITE at sector
    // 42,932,745 (byte 21,981,565,440) at 5,633,898 s.
    let r = request_at(
        &shared("cloudPhysicsIO.csv"),
        TraceFormat::Cloudphysics,
        &opts(),
        2,
    );
    assert_eq!(
        r,
        Request {
            time_ns: 5_633_898_000_000_000,
            op: Op::Write,
            offset_bytes: 21_981_565_440,
            size_bytes: 512,
            stream: 0,
            sync: false,
            line: 2,
        }
    );
}

#[test]
fn tpcc_counts_match_the_readme() {
    let p = shared("tpcc-small.trace");
    let s = summarize(&p, TraceFormat::Disksim, &opts()).unwrap();
    assert_eq!(
        s,
        TraceStat {
            trace: p.display().to_string(),
            format: TraceFormat::Disksim,
            block_bytes: 4096,
            requests: 6_999,
            read_requests: 4_381,
            write_requests: 2_618,
            sync_writes: 0,
            read_bytes: 36_315_136,
            write_bytes: 23_403_520,
            block_accesses: 20_669,
            reads: 12_674,
            writes: 7_995,
            distinct_blocks: 20_422,
            distinct_written_blocks: 7_859,
            streams: 1,
            first_time_ns: Some(938_513_000),
            last_time_ns: Some(1_075_002_000),
            skipped_lines: 0,
        }
    );
}

#[test]
fn tpcc_readme_example_line() {
    // `938513000 4 264719034 16 0`, line 1: a write of 16 sectors at sector 264,719,034
    // (byte 135,536,145,408), device 4 (ignored), at 938,513,000 ns; blocks 33,089,879..=881.
    let p = shared("tpcc-small.trace");
    let r = request_at(&p, TraceFormat::Disksim, &opts(), 1);
    assert_eq!(
        r,
        Request {
            time_ns: 938_513_000,
            op: Op::Write,
            offset_bytes: 135_536_145_408,
            size_bytes: 8192,
            stream: 0,
            sync: false,
            line: 1,
        }
    );
    assert_eq!(
        trace::block_range(&r, 4096, &p).unwrap(),
        33_089_879..33_089_882
    );
}

// ---------------------------------------------------------------------------------------------
// The samples in tests/data/sim/.

#[test]
fn msr_sample() {
    let p = data("sample.msr.csv");
    let s = summarize(&p, TraceFormat::Msr, &opts()).unwrap();
    assert_eq!(
        s,
        TraceStat {
            trace: p.display().to_string(),
            format: TraceFormat::Msr,
            block_bytes: 4096,
            requests: 8,
            read_requests: 3,
            write_requests: 5,
            sync_writes: 0,
            read_bytes: 32_768 + 512 + 8192,
            write_bytes: 4096 + 8192 + 4096 + 8192 + 2,
            // Reads: 8 + 1 + 3 blocks; writes: 1 + 3 + 1 + 2 + 2 (the 2-byte write at 4095
            // straddles blocks 0 and 1).
            block_accesses: 21,
            reads: 12,
            writes: 9,
            distinct_blocks: 16,
            distinct_written_blocks: 7,
            streams: 3,
            first_time_ns: Some(12_816_637_200_306_162_900),
            last_time_ns: Some(12_816_637_200_400_162_900),
            skipped_lines: 0,
        }
    );
    let all = requests(&p, TraceFormat::Msr, &opts()).unwrap();
    // (hm, 1) -> 0, (prxy, 0) -> 1, (hm, 0) -> 2, in order of first appearance.
    let streams: Vec<u32> = all.iter().map(|r| r.stream).collect();
    assert_eq!(streams, vec![0, 0, 1, 2, 0, 1, 0, 2]);
    assert_eq!(
        all[7],
        Request {
            time_ns: 12_816_637_200_400_162_900,
            op: Op::Write,
            offset_bytes: 4095,
            size_bytes: 2,
            stream: 2,
            sync: false,
            line: 8,
        }
    );
}

#[test]
fn blkparse_sample() {
    let p = data("sample.blkparse");
    let s = summarize(&p, TraceFormat::Blkparse, &opts()).unwrap();
    assert_eq!(
        s,
        TraceStat {
            trace: p.display().to_string(),
            format: TraceFormat::Blkparse,
            block_bytes: 4096,
            requests: 53,
            read_requests: 39,
            write_requests: 14,
            // Every write here is O_DIRECT, O_DSYNC or fsync write-back: RWBS `WS`.
            sync_writes: 14,
            read_bytes: 368_640,
            write_bytes: 61_440,
            block_accesses: 105,
            reads: 90,
            writes: 15,
            distinct_blocks: 99,
            distinct_written_blocks: 15,
            streams: 2,
            first_time_ns: Some(42_717),
            last_time_ns: Some(641_335_366),
            skipped_lines: 0,
        }
    );
    // Line 5: `  7,0    0        5     0.000042717 24513  D  WS 2048 + 8 [(null)]`.
    let r = request_at(&p, TraceFormat::Blkparse, &opts(), 5);
    assert_eq!(
        (
            r.time_ns,
            r.op,
            r.offset_bytes,
            r.size_bytes,
            r.stream,
            r.sync
        ),
        (42_717, Op::Write, 2048 * 512, 4096, 0, true)
    );
    let all = requests(&p, TraceFormat::Blkparse, &opts()).unwrap();
    // Line 29 is the 8 KiB direct read; line 41 a pure flush (`FN`), which gives no request;
    // line 48 the first event of the second device (7,1): stream 1.
    let r29 = all.iter().find(|r| r.line == 29).unwrap();
    assert_eq!(
        (r29.op, r29.offset_bytes, r29.size_bytes, r29.sync),
        (Op::Read, 2048 * 512, 8192, false)
    );
    assert!(all.iter().all(|r| r.line != 41));
    let r48 = all.iter().find(|r| r.line == 48).unwrap();
    assert_eq!(
        (r48.op, r48.offset_bytes, r48.stream),
        (Op::Write, 8312 * 512, 1)
    );
    // The discard on line 344 and the summary at the end give nothing.
    assert_eq!(all.last().unwrap().line, 336);
}

#[test]
fn fio_v3_sample() {
    let p = data("fio-v3.iolog");
    let s = summarize(&p, TraceFormat::Fio, &opts()).unwrap();
    assert_eq!(
        s,
        TraceStat {
            trace: p.display().to_string(),
            format: TraceFormat::Fio,
            block_bytes: 4096,
            requests: 16,
            read_requests: 0,
            write_requests: 16,
            // --fsync=4: the first 12 writes are followed by a sync, the last 4 are not.
            sync_writes: 12,
            read_bytes: 0,
            write_bytes: 16 * 4096,
            block_accesses: 16,
            reads: 0,
            writes: 16,
            distinct_blocks: 16,
            distinct_written_blocks: 16,
            streams: 1,
            first_time_ns: Some(138_000),
            last_time_ns: Some(1_663_000),
            skipped_lines: 0,
        }
    );
    let all = requests(&p, TraceFormat::Fio, &opts()).unwrap();
    let sync: Vec<bool> = all.iter().map(|r| r.sync).collect();
    assert_eq!(sync, [[true; 12].as_slice(), &[false; 4]].concat());
    // Line 5: `161 /tmp/fio-sample/one.0.0 write 45056 4096`.
    assert_eq!(
        all[1],
        Request {
            time_ns: 161_000,
            op: Op::Write,
            offset_bytes: 45_056,
            size_bytes: 4096,
            stream: 0,
            sync: true,
            line: 5,
        }
    );
}

#[test]
fn fio_v3_two_files() {
    let p = data("fio-v3-two-files.iolog");
    let s = summarize(&p, TraceFormat::Fio, &opts()).unwrap();
    assert_eq!(
        (s.requests, s.read_requests, s.write_requests, s.streams),
        (16, 8, 8, 2)
    );
    let all = requests(&p, TraceFormat::Fio, &opts()).unwrap();
    // The datasyncs are all on two.0.1 (stream 1): the one at 612 us makes its write at 606 us
    // durable, the one at 1366 us its write at 1232 us; the two between have nothing new.
    let synced: Vec<(u64, u32)> = all
        .iter()
        .filter(|r| r.sync)
        .map(|r| (r.time_ns, r.stream))
        .collect();
    assert_eq!(synced, vec![(606_000, 1), (1_232_000, 1)]);
    assert!(all.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
}

#[test]
fn fio_v2_needs_interarrival() {
    let p = data("fio-v2.iolog");
    let e = message(requests(&p, TraceFormat::Fio, &opts()).unwrap_err());
    assert!(
        e.contains("fio-v2.iolog:1:") && e.contains("interarrival_ns"),
        "{e}"
    );
    // Even when skipping bad lines: without times there is nothing to simulate.
    assert!(requests(&p, TraceFormat::Fio, &skipping()).is_err());
    let o = ReaderOptions {
        skip_bad_lines: false,
        interarrival_ns: Some(100_000),
    };
    let all = requests(&p, TraceFormat::Fio, &o).unwrap();
    assert_eq!(all.len(), 16);
    for (i, r) in all.iter().enumerate() {
        assert_eq!(r.time_ns, i as u64 * 100_000);
        assert_eq!(r.sync, i < 12);
    }
    // The same requests as the version 3 log it was made from, but for the times.
    let v3 = requests(&data("fio-v3.iolog"), TraceFormat::Fio, &opts()).unwrap();
    let strip = |r: &Request| (r.op, r.offset_bytes, r.size_bytes, r.stream, r.sync, r.line);
    assert_eq!(
        all.iter().map(strip).collect::<Vec<_>>(),
        v3.iter().map(strip).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input.

/// Writes `text` to a file `name` in a fresh directory.
fn file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

/// One malformed line per format: the message names the file, the line and the problem; with
/// `skip_bad_lines` the line is skipped and counted and the other requests remain.
#[test]
fn a_bad_line_is_named_or_skipped() {
    let cases: &[(TraceFormat, &str, u64, &str)] = &[
        (
            TraceFormat::Cloudphysics,
            "version,time,op,size,lbn\n1,5,2a,512,7\n1,5,2b,512,7\n1,6,28,512,7\n",
            3,
            "field 'op' is '2b': expected 2a (write) or 28 (read)",
        ),
        (
            TraceFormat::Cloudphysics,
            "version,time,op,size,lbn\n1,5,2a,512,7\n1,5,2a,512\n1,6,28,512,7\n",
            3,
            "4 fields: expected 5",
        ),
        (
            TraceFormat::Disksim,
            "1 0 0 1 0\n2 0 0 1 7\n3 0 0 1 1\n",
            2,
            "field 'type' is '7': expected 0 (write) or 1 (read)",
        ),
        (
            TraceFormat::Msr,
            "1,hm,0,Read,0,512,1\n2,hm,0,Erase,0,512,1\n3,hm,0,Write,0,512,1\n",
            2,
            "field 'Type' is 'Erase': expected Read or Write",
        ),
        (
            TraceFormat::Blkparse,
            "  8,0 1 1 0.000000001 5 D W 0 + 8 [a]\n  8,0 1 2 0.000000002 5 D W zero + 8 [a]\n  8,0 1 3 0.000000003 5 D R 0 + 8 [a]\nCPU0 (8,0):\n",
            2,
            "field 'sector' is 'zero'",
        ),
        (
            TraceFormat::Fio,
            "fio version 3 iolog\n1 /f add\n2 /f write 0 4096\n3 /f scribble 0 4096\n4 /f read 0 4096\n",
            4,
            "field 'action' is 'scribble'",
        ),
        // A time that runs backwards (equal times are fine).
        (
            TraceFormat::Disksim,
            "5 0 0 1 0\n4 0 0 1 0\n5 0 0 1 1\n",
            2,
            "time 4 ns is before the previous request's 5 ns (line 1)",
        ),
        (
            TraceFormat::Cloudphysics,
            "version,time,op,size,lbn\n1,9,2a,512,7\n1,8,2a,512,7\n1,9,28,512,7\n",
            3,
            "time 8 s is before the previous request's 9 s (line 2)",
        ),
        // A request above REQUEST_BYTES_MAX.
        (
            TraceFormat::Msr,
            "1,hm,0,Read,0,512,1\n2,hm,0,Read,0,2147483648,1\n3,hm,0,Write,0,512,1\n",
            2,
            "size 2147483648 bytes is above the largest request accepted",
        ),
        // An address beyond 2^48 blocks of 512 bytes.
        (
            TraceFormat::Msr,
            "1,hm,0,Read,0,512,1\n2,hm,0,Read,18446744073709551615,512,1\n3,hm,0,Write,0,512,1\n",
            2,
            "ends beyond the simulator's address space",
        ),
    ];
    for (format, text, line, what) in cases {
        let (_dir, p) = file("trace.txt", text);
        let e = message(requests(&p, *format, &opts()).unwrap_err());
        let want = format!("{}:{line}: ", p.display());
        assert!(
            e.starts_with(&want) && e.contains(what),
            "{format:?}: got '{e}', want '{want}...{what}...'"
        );
        let mut src = trace::open(&p, *format, &skipping()).unwrap();
        let got: Vec<Request> = src
            .by_ref()
            .collect::<nvstack_core::error::Result<_>>()
            .unwrap();
        assert_eq!(
            (got.len(), src.skipped_lines()),
            (2, 1),
            "{format:?} {text}"
        );
        assert!(got.iter().all(|r| r.line != *line));
    }
}

#[test]
fn a_bad_header_stops_even_when_skipping() {
    for (format, text, what) in [
        (
            TraceFormat::Cloudphysics,
            "time,op,size\n1,5,2a,512,7\n",
            "the header is 'time,op,size'",
        ),
        (
            TraceFormat::Cloudphysics,
            "1,5,2a,512,7\n",
            "expected 'version,time,op,size,lbn'",
        ),
        (
            TraceFormat::Cloudphysics,
            "\nversion,time,op,size,lbn\n",
            "the header is ''",
        ),
        (
            TraceFormat::Fio,
            "fio version 1 iolog\n",
            "expected 'fio version 2 iolog' or",
        ),
        (TraceFormat::Fio, "/f write 0 4096\n", "the header is"),
    ] {
        let (_dir, p) = file("t", text);
        for o in [opts(), skipping()] {
            let e = message(requests(&p, format, &o).unwrap_err());
            assert!(e.contains(":1: ") && e.contains(what), "{format:?}: {e}");
        }
    }
    // A header longer than a line may be is no header either.
    let (_dir, p) = file("t", &"x".repeat(trace::LINE_BYTES_MAX + 1));
    assert!(requests(&p, TraceFormat::Cloudphysics, &skipping()).is_err());
}

#[test]
fn empty_traces_and_blank_lines() {
    // An empty trace is zero requests; a header-only file is an empty trace.
    for (format, text) in [
        (TraceFormat::Cloudphysics, "version,time,op,size,lbn\n"),
        (TraceFormat::Disksim, ""),
        (TraceFormat::Msr, ""),
        (TraceFormat::Blkparse, ""),
        (TraceFormat::Fio, "fio version 3 iolog\n"),
        (TraceFormat::Disksim, "\n  \n\t\n"),
    ] {
        let (_dir, p) = file("t", text);
        assert_eq!(requests(&p, format, &opts()).unwrap(), vec![], "{format:?}");
    }
    // Formats with a header need it: a zero-byte file has none.
    for format in [TraceFormat::Cloudphysics, TraceFormat::Fio] {
        let (_dir, p) = file("t", "");
        let e = message(requests(&p, format, &opts()).unwrap_err());
        assert!(e.contains("empty file"), "{e}");
    }
    // Blank lines between requests are skipped, not counted; CRLF line ends are accepted.
    let (_dir, p) = file(
        "t",
        "version,time,op,size,lbn\r\n1,5,2a,512,7\r\n\r\n1,6,28,512,7\r\n",
    );
    let mut src = trace::open(&p, TraceFormat::Cloudphysics, &opts()).unwrap();
    assert_eq!(src.by_ref().count(), 2);
    assert_eq!(src.skipped_lines(), 0);
    // A file of text that is not blkparse output is refused, not read as zero requests.
    let (_dir, p) = file("t", "hello\nworld\n");
    let e = message(requests(&p, TraceFormat::Blkparse, &skipping()).unwrap_err());
    assert!(e.contains("no blkparse event line in 2 lines"), "{e}");
}

#[test]
fn a_missing_or_unreadable_file_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such.csv");
    let e = message(
        trace::open(&missing, TraceFormat::Cloudphysics, &opts())
            .err()
            .unwrap(),
    );
    assert!(
        e.contains("no-such.csv") && e.contains("cannot open"),
        "{e}"
    );
    let e = message(
        trace::open(dir.path(), TraceFormat::Disksim, &opts())
            .err()
            .unwrap(),
    );
    assert!(e.contains("is a directory"), "{e}");
}

#[test]
fn an_overlong_line_is_a_bad_line() {
    let text = format!(
        "1 0 0 1 0\n{}\n2 0 0 1 1\n",
        "9".repeat(trace::LINE_BYTES_MAX + 10)
    );
    let (_dir, p) = file("t", &text);
    let e = message(requests(&p, TraceFormat::Disksim, &opts()).unwrap_err());
    assert!(e.contains(":2: line longer than"), "{e}");
    let mut src = trace::open(&p, TraceFormat::Disksim, &skipping()).unwrap();
    assert_eq!(src.by_ref().count(), 2);
    assert_eq!(src.skipped_lines(), 1);
}

#[test]
fn after_an_error_a_source_yields_nothing() {
    let (_dir, p) = file("t", "1 0 0 1 0\nbad\n2 0 0 1 1\n");
    let mut src = trace::open(&p, TraceFormat::Disksim, &opts()).unwrap();
    assert!(src.next().unwrap().is_ok());
    assert!(src.next().unwrap().is_err());
    assert!(src.next().is_none());
    assert!(src.next().is_none());
}

// ---------------------------------------------------------------------------------------------
// No panic on any input.

const FORMATS: [TraceFormat; 5] = [
    TraceFormat::Cloudphysics,
    TraceFormat::Disksim,
    TraceFormat::Msr,
    TraceFormat::Blkparse,
    TraceFormat::Fio,
];

/// Reads `bytes` as `format` to the end or the first error; every request yielded keeps the
/// readers' promises: times never decrease, sizes are bounded, and every block expansion works.
fn read_all(format: TraceFormat, bytes: Vec<u8>, skip: bool) {
    let o = ReaderOptions {
        skip_bad_lines: skip,
        interarrival_ns: Some(1000),
    };
    let src: Box<dyn RequestSource> = trace::from_reader(
        Path::new("fuzz"),
        Box::new(std::io::Cursor::new(bytes)),
        format,
        &o,
    )
    .unwrap();
    let mut prev = 0;
    for r in src {
        let Ok(r) = r else { break };
        assert!(r.time_ns >= prev);
        prev = r.time_ns;
        assert!(r.size_bytes <= REQUEST_BYTES_MAX);
        for b in [512, 4096, 1 << 20] {
            trace::block_range(&r, b, Path::new("fuzz")).unwrap();
        }
    }
}

/// Lines made of the tokens the formats use, so that the fuzzing reaches past field splitting.
fn line_strategy() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("0".to_string()),
        Just("1".to_string()),
        Just("2a".to_string()),
        Just("28".to_string()),
        Just("Read".to_string()),
        Just("Write".to_string()),
        Just("D".to_string()),
        Just("WS".to_string()),
        Just("FWFSM".to_string()),
        Just("+".to_string()),
        Just("8,0".to_string()),
        Just("1.5".to_string()),
        Just("write".to_string()),
        Just("sync".to_string()),
        Just("/f".to_string()),
        Just("18446744073709551615".to_string()),
        Just("36028797018963968".to_string()),
        "[0-9]{1,21}",
        "[a-z,.+ ]{0,6}",
    ];
    (
        prop::collection::vec(token, 0..9),
        prop_oneof![Just(" "), Just(","), Just("\t")],
    )
        .prop_map(|(t, sep)| t.join(sep))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048), skip: bool) {
        for f in FORMATS {
            read_all(f, bytes.clone(), skip);
        }
    }

    /// The committed samples with a few bytes changed: inputs that are nearly right reach
    /// every field's parser.
    #[test]
    fn mutated_samples_never_panic(
        which in 0usize..5,
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
        skip: bool,
    ) {
        let (name, format) = [
            ("sample.blkparse", TraceFormat::Blkparse),
            ("sample.msr.csv", TraceFormat::Msr),
            ("fio-v3.iolog", TraceFormat::Fio),
            ("fio-v3-two-files.iolog", TraceFormat::Fio),
            ("fio-v2.iolog", TraceFormat::Fio),
        ][which];
        let mut bytes = std::fs::read(data(name)).unwrap();
        for (at, byte, kind) in edits {
            let i = at.index(bytes.len());
            match kind {
                0 => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ => {
                    bytes.remove(i);
                }
            }
        }
        read_all(format, bytes, skip);
    }

    #[test]
    fn random_lines_never_panic(lines in prop::collection::vec(line_strategy(), 0..24), skip: bool) {
        for (f, header) in [
            (TraceFormat::Cloudphysics, "version,time,op,size,lbn\n"),
            (TraceFormat::Disksim, ""),
            (TraceFormat::Msr, ""),
            (TraceFormat::Blkparse, ""),
            (TraceFormat::Fio, "fio version 3 iolog\n"),
            (TraceFormat::Fio, "fio version 2 iolog\n"),
        ] {
            let text = format!("{header}{}", lines.join("\n"));
            read_all(f, text.into_bytes(), skip);
        }
    }
}
