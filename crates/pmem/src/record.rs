//! A region that records what each thread does to persistent memory, for the committing
//! simulator (nvstack-mcsim, seed 003): per thread, the lines it loads and stores, its
//! flushes, fences and commits of a range, and the instructions between them. The region
//! underneath does the real work, so the recorded code runs as it always does.
//!
//! Instructions are estimated, since user space cannot count them cheaply: a copy executes one
//! instruction per 8-byte word (the first of a line's words is its load or store), and each
//! call costs `call_instructions` more (the code that decided to make it).

use crate::{FlushKind, Region, LINE_BYTES};
use std::collections::HashMap;
use std::sync::Mutex;
use std::thread::ThreadId;

/// One recorded step of a thread; addresses are offsets in the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    Gap(u32),
    Load(u64),
    Store(u64),
    Flush(u64),
    Fence,
    /// A commit of [off, off+len): a commit domain's, through the region's `committed` hook
    /// (the span it stored into in one of its ranges), or explicit
    /// ([`RecordingRegion::commit`]).
    Commit {
        off: u64,
        len: u64,
    },
    /// A range bound to the thread (PersistenceMalloc).
    Bind {
        off: u64,
        len: u64,
    },
}

#[derive(Default)]
struct ThreadLog {
    events: Vec<Recorded>,
}

#[derive(Default)]
struct Threads {
    index: HashMap<ThreadId, usize>,
    logs: Vec<ThreadLog>,
}

/// Wraps a region and records, per thread (numbered in the order they first touch it).
pub struct RecordingRegion<R: Region> {
    inner: R,
    threads: Mutex<Threads>,
    call_instructions: u32,
}

impl<R: Region> RecordingRegion<R> {
    /// `call_instructions`: plain instructions charged per call for the code around it.
    pub fn new(inner: R, call_instructions: u32) -> RecordingRegion<R> {
        RecordingRegion {
            inner,
            threads: Mutex::default(),
            call_instructions,
        }
    }

    pub fn inner(&self) -> &R {
        &self.inner
    }

    fn with_log(&self, f: impl FnOnce(&mut ThreadLog)) {
        let mut t = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let id = std::thread::current().id();
        let next = t.index.len();
        let i = *t.index.entry(id).or_insert(next);
        if i == t.logs.len() {
            t.logs.push(ThreadLog::default());
        }
        f(&mut t.logs[i]);
    }

    /// A copy of `len` bytes at `off`: per line, its access and the rest of its words.
    fn copy(&self, off: u64, len: u64, store: bool, flush: bool) {
        let call = self.call_instructions;
        self.with_log(|log| {
            if call > 0 {
                log.events.push(Recorded::Gap(call));
            }
            let (first, last) = (off / LINE_BYTES, (off + len.max(1) - 1) / LINE_BYTES);
            for line in first..=last {
                let a = line * LINE_BYTES;
                let words = (a + LINE_BYTES)
                    .min(off + len)
                    .saturating_sub(a.max(off))
                    .div_ceil(8);
                log.events.push(if store {
                    Recorded::Store(a)
                } else {
                    Recorded::Load(a)
                });
                if flush {
                    log.events.push(Recorded::Flush(a));
                }
                if words > 1 {
                    log.events.push(Recorded::Gap(words as u32 - 1));
                }
            }
        });
    }

    /// Record a commit of [off, off+len) by the calling thread.
    pub fn commit(&self, off: u64, len: u64) {
        assert!(
            len > 0 && off.checked_add(len).is_some(),
            "a commit covers a range"
        );
        self.with_log(|log| log.events.push(Recorded::Commit { off, len }));
    }

    /// Record that the calling thread binds [off, off+len) to a sub-queue of its own.
    pub fn bind(&self, off: u64, len: u64) {
        assert!(
            len > 0 && off.checked_add(len).is_some(),
            "a bind covers a range"
        );
        self.with_log(|log| log.events.push(Recorded::Bind { off, len }));
    }

    /// Every thread's record so far (the record starts afresh).
    pub fn take(&self) -> Vec<Vec<Recorded>> {
        let mut t = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let logs = std::mem::take(&mut t.logs);
        t.index.clear();
        logs.into_iter().map(|l| l.events).collect()
    }
}

impl<R: Region> Region for RecordingRegion<R> {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, off: u64, dst: &mut [u8]) {
        self.copy(off, dst.len() as u64, false, false);
        self.inner.read(off, dst)
    }
    fn load_u64(&self, off: u64) -> u64 {
        self.copy(off, 8, false, false);
        self.inner.load_u64(off)
    }
    fn write(&self, off: u64, src: &[u8]) {
        self.copy(off, src.len() as u64, true, false);
        self.inner.write(off, src)
    }
    fn store_u64(&self, off: u64, v: u64) {
        self.copy(off, 8, true, false);
        self.inner.store_u64(off, v)
    }
    // A non-temporal store bypasses the caches into the write queue: a store and a flush.
    fn write_nt(&self, off: u64, src: &[u8]) {
        self.copy(off, src.len() as u64, true, true);
        self.inner.write_nt(off, src)
    }
    fn store_u64_nt(&self, off: u64, v: u64) {
        self.copy(off, 8, true, true);
        self.inner.store_u64_nt(off, v)
    }
    fn flush(&self, off: u64, len: u64, kind: FlushKind) {
        self.with_log(|log| {
            let (first, last) = (off / LINE_BYTES, (off + len.max(1) - 1) / LINE_BYTES);
            for line in first..=last {
                log.events.push(Recorded::Flush(line * LINE_BYTES));
            }
        });
        self.inner.flush(off, len, kind)
    }
    fn fence(&self) {
        self.with_log(|log| log.events.push(Recorded::Fence));
        self.inner.fence()
    }
    fn has_flush(&self, kind: FlushKind) -> bool {
        self.inner.has_flush(kind)
    }
    /// A commit domain's commit of a range: recorded as PersistentCommit of it (a plain fence
    /// is only a fence), and passed on in case the region underneath records too.
    fn committed(&self, off: u64, len: u64) {
        self.commit(off, len);
        self.inner.committed(off, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MmapRegion;

    #[test]
    fn records_per_thread_lines_words_and_commits() {
        let r = RecordingRegion::new(MmapRegion::anonymous(1 << 16).expect("maps"), 3);
        r.write(60, &[1u8; 16]); // lines 0 and 1: 4 bytes (1 word) and 12 bytes (2 words)
        r.flush(60, 16, FlushKind::Clflush);
        r.fence();
        r.committed(60, 16);
        r.fence(); // a fence alone is no commit
        std::thread::scope(|s| {
            s.spawn(|| {
                assert_eq!(r.load_u64(128), 0, "reads go to the region");
                r.bind(0, 4096);
            });
        });
        let mut b = [0u8; 16];
        r.read(60, &mut b);
        assert_eq!(b, [1u8; 16], "writes reach the region");
        let logs = r.take();
        use Recorded::*;
        assert_eq!(
            logs[0][..9],
            [
                Gap(3),
                Store(0),
                Store(64),
                Gap(1),
                Flush(0),
                Flush(64),
                Fence,
                Commit { off: 60, len: 16 },
                Fence,
            ]
        );
        assert_eq!(logs[1], vec![Gap(3), Load(128), Bind { off: 0, len: 4096 }]);
        assert!(r.take().is_empty(), "taking starts afresh");
    }

    #[test]
    fn a_domain_commit_is_recorded_as_commits_of_the_spans_it_stored() {
        use crate::domain::CommitDomain;
        use crate::latency::LatencyInjection;
        use crate::Method;
        let r = RecordingRegion::new(MmapRegion::anonymous(1 << 16).expect("maps"), 0);
        let ranges = [(0, 4096), (8192, 8192)];
        let mut d = CommitDomain::new(1, &ranges, LatencyInjection::default());
        let m = Method::Flush(FlushKind::Clflush);
        d.store(&r, m, 100, &[1u8; 8]);
        d.store_u64(&r, m, 200, 7);
        d.store(&r, Method::Nt, 12288, &[2u8; 64]);
        d.commit(&r);
        d.commit(&r); // nothing stored since: a fence, no commit
        let logs = r.take();
        let commits: Vec<Recorded> = logs[0]
            .iter()
            .copied()
            .filter(|e| matches!(e, Recorded::Commit { .. }))
            .collect();
        assert_eq!(
            commits,
            vec![
                Recorded::Commit { off: 100, len: 108 },
                Recorded::Commit {
                    off: 12288,
                    len: 64
                },
            ],
            "one commit per range stored into, of the span stored"
        );
        let fences = logs[0].iter().filter(|e| **e == Recorded::Fence).count();
        assert_eq!(fences, 2, "each domain commit fences once");
        let tail = &logs[0][logs[0].len() - 4..];
        assert_eq!(
            tail[0],
            Recorded::Fence,
            "the commits follow the first fence"
        );
    }
}
