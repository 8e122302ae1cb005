//! Commit domains: fine-grained data committing (seed 003) done in software.
//!
//! A domain is registered over a few address ranges. Stores go through the domain, which
//! remembers which lines it dirtied with cached stores; `commit` flushes only those lines and
//! issues one fence, instead of a global drain of everything dirty. Each nvramdisk lane commits
//! through its own domain. `commit_global` is the PCOMMIT-style alternative: every domain's
//! dirty lines, one fence.

use super::latency::LatencyInjection;
use super::{lines_spanned, FlushKind, Method, Region};

/// At most this many ranges per domain (a lane needs three: its journal slot, the map, data).
pub const DOMAIN_RANGES_MAX: usize = 4;
/// Dirty extents remembered before the oldest are flushed early (flushing early is always safe:
/// it only makes data durable sooner; ordering still comes from the fence).
pub const DIRTY_EXTENTS_MAX: usize = 96;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DomainStats {
    /// Store operations issued through the domain.
    pub stores: u64,
    /// Lines written with non-temporal stores.
    pub nt_lines: u64,
    /// Lines written back with a flush instruction.
    pub lines_flushed: u64,
    /// Fences issued by this domain's own commits.
    pub fences: u64,
    /// Global commits this domain took part in.
    pub global_commits: u64,
    /// Nanoseconds of NVRAM latency injected by this domain's commits.
    pub injected_ns: u64,
}

#[derive(Clone, Copy, Debug)]
struct Extent {
    off: u64,
    len: u64,
    kind: FlushKind,
}

pub struct CommitDomain {
    id: u32,
    ranges: [(u64, u64); DOMAIN_RANGES_MAX],
    ranges_count: usize,
    dirty: [Extent; DIRTY_EXTENTS_MAX],
    dirty_count: usize,
    /// Per range, the span [first byte, end) stored into since the last commit: what the
    /// next commit makes durable there, reported to the region's `committed` hook.
    spans: [Option<(u64, u64)>; DOMAIN_RANGES_MAX],
    /// Lines made durable by the next commit (for latency injection).
    pending_lines: u64,
    latency: LatencyInjection,
    stats: DomainStats,
}

impl CommitDomain {
    /// Register a domain over `ranges` (start, length in bytes).
    pub fn new(id: u32, ranges: &[(u64, u64)], latency: LatencyInjection) -> CommitDomain {
        assert!(
            !ranges.is_empty() && ranges.len() <= DOMAIN_RANGES_MAX,
            "1 to 4 ranges"
        );
        // assert_inside adds start and length: neither may wrap.
        assert!(
            ranges
                .iter()
                .all(|&(start, len)| start.checked_add(len).is_some()),
            "domain {id}: a range past the address space"
        );
        let mut r = [(0, 0); DOMAIN_RANGES_MAX];
        r[..ranges.len()].copy_from_slice(ranges);
        CommitDomain {
            id,
            ranges: r,
            ranges_count: ranges.len(),
            dirty: [Extent {
                off: 0,
                len: 0,
                kind: FlushKind::Clflush,
            }; DIRTY_EXTENTS_MAX],
            dirty_count: 0,
            spans: [None; DOMAIN_RANGES_MAX],
            pending_lines: 0,
            latency,
            stats: DomainStats::default(),
        }
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn stats(&self) -> DomainStats {
        self.stats
    }

    pub fn set_latency(&mut self, l: LatencyInjection) {
        self.latency = l;
    }

    /// Lines dirtied by cached stores and not yet flushed.
    pub fn dirty_lines(&self) -> u64 {
        self.dirty[..self.dirty_count]
            .iter()
            .map(|e| lines_spanned(e.off, e.len))
            .sum()
    }

    /// Panics unless [off, off+len) lies in one of the domain's ranges; widens that range's
    /// span of stores to commit.
    fn assert_inside(&mut self, off: u64, len: u64) {
        let inside = self.ranges[..self.ranges_count]
            .iter()
            .position(|&(start, rlen)| off >= start && off + len <= start + rlen);
        let Some(i) = inside else {
            panic!(
                "domain {} store [{off}, +{len}) outside its ranges",
                self.id
            );
        };
        let end = off + len;
        self.spans[i] = Some(match self.spans[i] {
            Some((lo, hi)) => (lo.min(off), hi.max(end)),
            None => (off, end),
        });
    }

    /// Tell the region which spans this commit made durable (one per range stored into).
    fn report_spans<R: Region + ?Sized>(&mut self, r: &R) {
        for span in &mut self.spans[..self.ranges_count] {
            if let Some((lo, hi)) = span.take() {
                debug_assert!(lo < hi, "a span covers a byte");
                r.committed(lo, hi - lo);
            }
        }
    }

    fn note_dirty<R: Region + ?Sized>(&mut self, r: &R, off: u64, len: u64, kind: FlushKind) {
        debug_assert!(self.dirty_count <= DIRTY_EXTENTS_MAX);
        if self.dirty_count == DIRTY_EXTENTS_MAX {
            // Full: write back the oldest half now (safe; see DIRTY_EXTENTS_MAX).
            let half = DIRTY_EXTENTS_MAX / 2;
            for e in &self.dirty[..half] {
                r.flush(e.off, e.len, e.kind);
                self.stats.lines_flushed += lines_spanned(e.off, e.len);
            }
            self.dirty.copy_within(half.., 0);
            self.dirty_count -= half;
        }
        debug_assert!(self.dirty_count < DIRTY_EXTENTS_MAX, "room for the extent");
        self.dirty[self.dirty_count] = Extent { off, len, kind };
        self.dirty_count += 1;
    }

    /// Store `data` at `off` with `method`; durable after the next `commit`.
    pub fn store<R: Region + ?Sized>(&mut self, r: &R, method: Method, off: u64, data: &[u8]) {
        let len = data.len() as u64;
        self.assert_inside(off, len);
        // Region::write_nt's precondition, checked here where the caller is known.
        debug_assert!(
            method != Method::Nt || (off.is_multiple_of(8) && len.is_multiple_of(8)),
            "domain {}: non-temporal store [{off}, +{len}) not in whole words",
            self.id
        );
        self.stats.stores += 1;
        let lines = lines_spanned(off, len);
        self.pending_lines += lines;
        match method {
            Method::Nt => {
                r.write_nt(off, data);
                self.stats.nt_lines += lines;
            }
            Method::Flush(kind) => {
                r.write(off, data);
                self.note_dirty(r, off, len, kind);
            }
        }
    }

    /// Store one aligned 8-byte word with `method`; durable after the next `commit`.
    pub fn store_u64<R: Region + ?Sized>(&mut self, r: &R, method: Method, off: u64, v: u64) {
        self.assert_inside(off, 8);
        debug_assert!(off.is_multiple_of(8), "an 8-byte store at unaligned {off}");
        self.stats.stores += 1;
        self.pending_lines += 1;
        match method {
            Method::Nt => {
                r.store_u64_nt(off, v);
                self.stats.nt_lines += 1;
            }
            Method::Flush(kind) => {
                r.store_u64(off, v);
                self.note_dirty(r, off, 8, kind);
            }
        }
    }

    /// Store consecutive aligned 8-byte words from `off` with `method`, each a single-word
    /// store (word atomicity is kept: no wider copy), with one bounds check and one dirty
    /// extent; durable after the next `commit`.
    pub fn store_words<R: Region + ?Sized>(
        &mut self,
        r: &R,
        method: Method,
        off: u64,
        words: &[u64],
    ) {
        let len = words.len() as u64 * 8;
        self.assert_inside(off, len);
        debug_assert!(off.is_multiple_of(8), "8-byte stores from unaligned {off}");
        self.stats.stores += words.len() as u64;
        let lines = lines_spanned(off, len);
        self.pending_lines += lines;
        match method {
            Method::Nt => {
                for (i, &w) in words.iter().enumerate() {
                    r.store_u64_nt(off + i as u64 * 8, w);
                }
                self.stats.nt_lines += lines;
            }
            Method::Flush(kind) => {
                for (i, &w) in words.iter().enumerate() {
                    r.store_u64(off + i as u64 * 8, w);
                }
                self.note_dirty(r, off, len, kind);
            }
        }
    }

    fn flush_dirty<R: Region + ?Sized>(&mut self, r: &R) {
        for e in &self.dirty[..self.dirty_count] {
            r.flush(e.off, e.len, e.kind);
            self.stats.lines_flushed += lines_spanned(e.off, e.len);
        }
        self.dirty_count = 0;
    }

    /// Make everything stored through this domain durable: flush its own dirty lines (and no
    /// other domain's), then one fence.
    pub fn commit<R: Region + ?Sized>(&mut self, r: &R) {
        self.flush_dirty(r);
        r.fence();
        self.report_spans(r);
        self.stats.fences += 1;
        self.stats.injected_ns += self.latency.delay(self.pending_lines);
        self.pending_lines = 0;
    }

    /// Global commit: every domain's dirty lines, then a single fence (a drain of everything).
    pub fn commit_global<R: Region + ?Sized>(domains: &mut [&mut CommitDomain], r: &R) {
        let mut lines = 0;
        for d in domains.iter_mut() {
            d.flush_dirty(r);
            d.stats.global_commits += 1;
            lines += d.pending_lines;
            d.pending_lines = 0;
        }
        r.fence();
        for d in domains.iter_mut() {
            d.report_spans(r);
        }
        if let Some(d) = domains.first_mut() {
            d.stats.injected_ns += d.latency.delay(lines);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MmapRegion, LINE_BYTES};
    use std::sync::Mutex;

    /// A region wrapper that records every flushed line, to prove a commit touches only its own.
    struct Recording {
        inner: MmapRegion,
        flushed: Mutex<Vec<u64>>,
        fences: Mutex<u64>,
    }

    impl Region for Recording {
        fn len(&self) -> u64 {
            self.inner.len()
        }
        fn read(&self, off: u64, dst: &mut [u8]) {
            self.inner.read(off, dst)
        }
        fn load_u64(&self, off: u64) -> u64 {
            self.inner.load_u64(off)
        }
        fn write(&self, off: u64, src: &[u8]) {
            self.inner.write(off, src)
        }
        fn store_u64(&self, off: u64, v: u64) {
            self.inner.store_u64(off, v)
        }
        fn write_nt(&self, off: u64, src: &[u8]) {
            self.inner.write_nt(off, src)
        }
        fn store_u64_nt(&self, off: u64, v: u64) {
            self.inner.store_u64_nt(off, v)
        }
        fn flush(&self, off: u64, len: u64, kind: FlushKind) {
            let first = off / LINE_BYTES;
            let n = lines_spanned(off, len);
            self.flushed.lock().unwrap().extend(first..first + n);
            self.inner.flush(off, len, kind)
        }
        fn fence(&self) {
            *self.fences.lock().unwrap() += 1;
            self.inner.fence()
        }
    }

    #[test]
    fn commit_flushes_only_its_own_lines() {
        let r = Recording {
            inner: MmapRegion::anonymous(1 << 20).unwrap(),
            flushed: Mutex::new(vec![]),
            fences: Mutex::new(0),
        };
        let m = Method::Flush(crate::cpu::best_flush());
        let mut a = CommitDomain::new(1, &[(0, 4096)], LatencyInjection::default());
        let mut b = CommitDomain::new(2, &[(4096, 4096)], LatencyInjection::default());
        a.store(&r, m, 0, &[1u8; 200]); // lines 0..=3
        a.store_u64(&r, m, 1024, 5); // line 16
        b.store(&r, m, 4096, &[2u8; 128]); // lines 64, 65
        assert_eq!(a.dirty_lines(), 5);
        assert_eq!(b.dirty_lines(), 2);
        a.commit(&r);
        assert_eq!(*r.flushed.lock().unwrap(), vec![0, 1, 2, 3, 16]);
        assert_eq!(*r.fences.lock().unwrap(), 1);
        assert_eq!(a.stats().lines_flushed, 5);
        assert_eq!(a.stats().fences, 1);
        assert_eq!(b.stats().lines_flushed, 0);
        assert_eq!(b.dirty_lines(), 2, "b's lines must still be pending");
        // A global commit drains b (and a, now clean) with a single fence.
        r.flushed.lock().unwrap().clear();
        CommitDomain::commit_global(&mut [&mut a, &mut b], &r);
        assert_eq!(*r.flushed.lock().unwrap(), vec![64, 65]);
        assert_eq!(*r.fences.lock().unwrap(), 2);
        // Non-temporal stores need no flush at all.
        r.flushed.lock().unwrap().clear();
        a.store(&r, Method::Nt, 64, &[3u8; 64]);
        a.commit(&r);
        assert!(r.flushed.lock().unwrap().is_empty());
        assert_eq!(a.stats().nt_lines, 1);
    }

    #[test]
    #[should_panic(expected = "outside its ranges")]
    fn store_outside_ranges_panics() {
        let r = MmapRegion::anonymous(8192).unwrap();
        let mut a = CommitDomain::new(1, &[(0, 4096)], LatencyInjection::default());
        a.store(&r, Method::Nt, 4096, &[0u8; 8]);
    }
}
