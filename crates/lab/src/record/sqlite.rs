//! The SQLite journal store's persistent-memory traffic as a committing-simulator trace
//! (`nvstack sim commit-record --workload sqlite`). One real SQLite (the `sqlite3` tool with
//! nvstack's VFS extension loaded) per simulated core, all running at once: each opens its own database
//! whose WAL lives in the journal store on its own region, recorded by the extension
//! (`record=`), and commits `writes` single-row transactions (WAL, synchronous=FULL, 100-byte
//! rows). The per-database traces are then merged, database t on core t: its region is placed
//! at t x REGION_BYTES and bound to a sub-queue of its own (PersistenceMalloc per region).
//!
//! A process per core, not a thread: the program links no SQLite (the workspace's only SQLite
//! is the extension's), and the `sqlite3` tool is the real one. Each database is served by
//! one thread of its process, so each recording is one thread's.

use nvstack_core::error::{Error, Result};
use nvstack_mcsim::{Op, TraceReader, TraceWriter, Workload};
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Each database's region (also the stride between regions in the merged trace).
const REGION_BYTES: u64 = 16 << 20;
/// Records of one thread written before the next thread's (keeps the reader's buffers small).
const CHUNK_RECORDS: usize = 256;

/// Directories of our own, removed at the end whatever happens: one for the databases and
/// per-database traces, one under /dev/shm for the regions (emulated NVRAM must be on tmpfs
/// or DAX: the VFS refuses an image whose stores would not be durable).
struct Scratch {
    dir: PathBuf,
    shm: PathBuf,
}

impl Scratch {
    fn new() -> Result<Scratch> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("nvstack-sqlite-record-{}-{nanos}", std::process::id());
        let make = |d: PathBuf| {
            std::fs::create_dir(&d)
                .map_err(|e| Error::env(format!("scratch directory {}: {e}", d.display())))
                .map(|_| d)
        };
        let dir = make(std::env::temp_dir().join(&name))?;
        let shm = make(Path::new("/dev/shm").join(&name)).inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        Ok(Scratch { dir, shm })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(&self.shm);
    }
}

/// Record `threads` databases of `writes` transactions each through the extension at `ext`,
/// and write the merged trace to the writer `open` gives.
pub fn record_sqlite<W: Write>(
    ext: &Path,
    threads: u32,
    writes: u64,
    open: impl FnOnce() -> Result<W>,
) -> Result<BufWriter<W>> {
    assert!(threads >= 1, "a recording has at least one database");
    let scratch = Scratch::new()?;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let scratch = &scratch;
                s.spawn(move || one_database(ext, scratch, t, writes))
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| Error::env("a sqlite3 driver thread panicked"))?
        })
    })?;
    merge(&scratch.dir, threads, open)
}

fn trace_of(dir: &Path, t: u32) -> PathBuf {
    dir.join(format!("db{t}.trace"))
}

/// Run one sqlite3 on database `t`: `writes` autocommitted inserts, its WAL on the store.
fn one_database(ext: &Path, scratch: &Scratch, t: u32, writes: u64) -> Result<()> {
    let dir = &scratch.dir;
    let uri = format!(
        "file:{}?vfs=nvstack&region={}&region_size={REGION_BYTES}&record={}",
        dir.join(format!("db{t}.db")).display(),
        scratch.shm.join(format!("db{t}.region")).display(),
        trace_of(dir, t).display()
    );
    let mut script = format!(
        ".bail on\n.log stderr\n.load {}\n.open {uri}\npragma journal_mode=wal;\npragma synchronous=full;\n\
         create table t(id integer primary key, v blob);\n",
        ext.display()
    );
    for _ in 0..writes {
        script.push_str("insert into t(v) values (randomblob(100));\n");
    }
    script.push_str(".quit\n");
    let mut child = Command::new("sqlite3")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::env(format!("sqlite3 (the SQLite command-line tool): {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    let fed = stdin.write_all(script.as_bytes());
    drop(stdin);
    let out = child
        .wait_with_output()
        .map_err(|e| Error::env(format!("sqlite3: {e}")))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || fed.is_err() || !trace_of(dir, t).is_file() {
        return Err(Error::env(format!(
            "sqlite3 on database {t} failed ({}): {}",
            out.status,
            stderr.trim()
        )));
    }
    Ok(())
}

/// Database t's one-thread trace becomes thread t of the output, its addresses moved to its
/// region's place, its region bound first.
fn merge<W: Write>(
    dir: &Path,
    threads: u32,
    open: impl FnOnce() -> Result<W>,
) -> Result<BufWriter<W>> {
    let mut readers = Vec::new();
    for t in 0..threads {
        let path = trace_of(dir, t);
        let f = std::fs::File::open(&path)
            .map_err(|e| Error::env(format!("{}: {e}", path.display())))?;
        let r = TraceReader::new(BufReader::new(f), &path.display().to_string())?;
        if r.threads() != 1 {
            return Err(Error::env(format!(
                "{}: {} threads recorded, expected the one serving the database",
                path.display(),
                r.threads()
            )));
        }
        readers.push(r);
    }
    let mut w = TraceWriter::new(BufWriter::new(open()?), readers.len())?;
    for t in 0..readers.len() {
        let addr = t as u64 * REGION_BYTES;
        w.op(
            t,
            Op::Bind {
                addr,
                len: REGION_BYTES,
            },
        )?;
    }
    let mut live = readers.len();
    let mut done = vec![false; readers.len()];
    while live > 0 {
        for (t, r) in readers.iter_mut().enumerate() {
            for _ in 0..CHUNK_RECORDS {
                if done[t] {
                    break;
                }
                match r.next(0)? {
                    Some(op) => w.op(t, moved(op, t as u64 * REGION_BYTES))?,
                    None => {
                        done[t] = true;
                        live -= 1;
                    }
                }
            }
        }
    }
    w.finish()
}

fn moved(op: Op, base: u64) -> Op {
    match op {
        Op::Load(x) => Op::Load(x + base),
        Op::Store(x) => Op::Store(x + base),
        Op::Flush(x) => Op::Flush(x + base),
        Op::Commit { addr, len } => Op::Commit {
            addr: addr + base,
            len,
        },
        Op::Bind { addr, len } => Op::Bind {
            addr: addr + base,
            len,
        },
        Op::Gap(_) | Op::Fence => op,
    }
}
