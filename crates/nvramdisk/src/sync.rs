//! The write path's locks, padding and per-thread counters: what keeps writers of unrelated
//! blocks off each other's cache lines.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub(crate) use crossbeam_utils::CachePadded;

/// The write path's locks: taken with a compare-and-swap, released with a plain store.
///
/// Why not `std::sync::Mutex`: its release is a locked instruction (an exchange, to learn
/// whether a waiter needs waking), and a locked instruction right after the protocol's final
/// fence waits for every non-temporal store of the write to drain from the write-combining
/// buffers: measured here, that wait costs as much as the whole commit step. A plain release
/// store does not wait; the fence already orders the write before anything stored later.
/// Every lock is held for one write's worth of work and never across a sleep, so waiting by
/// yielding is enough (FUSE runs more threads than this machine has cores).
///
/// Locks that different cores take are `CachePadded` (128 bytes on x86-64: two lines, as the
/// adjacent-line prefetcher moves lines in pairs). Why: 1 024 one-byte stripe locks packed 64
/// to a line made two writers of unrelated blocks bounce one line between cores on a sixteenth
/// of their writes, and a lane's lock shared a line with the end of the previous lane's state.
pub(crate) type Lock<T> = spin::mutex::SpinMutex<T, spin::relax::Yield>;
pub(crate) type Guard<'a, T> = spin::mutex::SpinMutexGuard<'a, T>;

pub(crate) fn lock<T>(mutex: &Lock<T>) -> Guard<'_, T> {
    mutex.lock()
}

/// Slots of a [`StripedCounter`]: more than the threads that usually read at once.
const COUNTER_SLOTS: usize = 16;

/// A counter readers bump without sharing a cache line: one padded slot per thread hint.
#[derive(Default)]
pub(crate) struct StripedCounter([CachePadded<AtomicU64>; COUNTER_SLOTS]);

impl StripedCounter {
    pub(crate) fn add(&self, count: u64) {
        self.0[lane_hint() % COUNTER_SLOTS].fetch_add(count, Ordering::Relaxed);
    }
    pub(crate) fn sum(&self) -> u64 {
        self.0.iter().map(|slot| slot.load(Ordering::Relaxed)).sum()
    }
}

thread_local! {
    static LANE_HINT: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_LANE_HINT: AtomicUsize = AtomicUsize::new(0);

/// A number fixed per thread, handed out in order of first use: the lane a thread tries first
/// (so threads spread over lanes without coordinating) and its counter slot.
pub(crate) fn lane_hint() -> usize {
    LANE_HINT.with(|hint| {
        if hint.get() == usize::MAX {
            hint.set(NEXT_LANE_HINT.fetch_add(1, Ordering::Relaxed));
        }
        debug_assert_ne!(hint.get(), usize::MAX, "a hint is assigned once");
        hint.get()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Why the padding is there: no two stripe locks (nor counter slots) share a 128-byte
    /// block, the unit the adjacent-line prefetcher moves.
    #[test]
    fn padded_locks_never_share_a_line_pair() {
        let locks: Vec<CachePadded<Lock<()>>> =
            (0..4).map(|_| CachePadded::new(Lock::new(()))).collect();
        for pair in locks.windows(2) {
            let first = &*pair[0] as *const Lock<()> as usize;
            let second = &*pair[1] as *const Lock<()> as usize;
            assert_eq!(first % 128, 0, "lock not aligned to 128 bytes");
            assert!(
                second - first >= 128,
                "locks {first:#x} and {second:#x} share a block"
            );
        }
        let counter = StripedCounter::default();
        counter.add(3);
        counter.add(4);
        assert_eq!(counter.sum(), 7);
    }
}
