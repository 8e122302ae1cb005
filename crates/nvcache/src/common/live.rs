//! A served cache's live state, whichever its kind, as its one observer is told it (the serve
//! daemon mirrors it into its counters file: crates/export/src/stats.rs). One shape for every
//! kind: the figures a kind has no use for stay zero, so that an observer, the counters file
//! and a live status need no code per kind.

/// Which cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheKind {
    /// UBJ (seed 001): durable at the next commit.
    Ubj,
    /// The write cache (seed 004, dm-writecache's controls): durable when a write returns.
    Write,
}

impl CacheKind {
    pub const ALL: [CacheKind; 2] = [CacheKind::Ubj, CacheKind::Write];

    /// The kind's number in a file that records it (the serve daemon's counters file; 0 there
    /// means no cache). Stable: a kind keeps its number.
    pub const fn code(self) -> u64 {
        match self {
            CacheKind::Ubj => 1,
            CacheKind::Write => 2,
        }
    }

    /// The kind numbered `code`, if any.
    pub fn from_code(code: u64) -> Option<CacheKind> {
        CacheKind::ALL.into_iter().find(|k| k.code() == code)
    }
}

/// The live state (this run's figures, since the cache opened).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Live {
    pub kind: CacheKind,
    /// Blocks newer than the backing device's copy: UBJ, written since the last commit; the
    /// write cache, cached (every cached block is dirty).
    pub dirty_blocks: u64,
    /// Slots held: UBJ's frozen slots (up to date and out of date); the write cache's used
    /// slots (format version 2 frees a replaced copy's slot at once: equals `dirty_blocks`).
    pub held_slots: u64,
    /// Commits and completed checkpoints (UBJ).
    pub commits: u64,
    pub checkpoints: u64,
    /// A write-back is under way: UBJ's checkpoint, from before its first backing write until
    /// after its last slot is unfrozen.
    pub writing_back: bool,
    /// Blocks destaged, by trigger (the write cache).
    pub destaged_room: u64,
    pub destaged_watermark: u64,
    pub destaged_max_age: u64,
    pub destaged_cleaner: u64,
    pub destaged_writeback: u64,
    /// Blocks written to the backing device past the cache (not admitted).
    pub bypassed: u64,
    /// Flushes from above (the write cache counts them).
    pub flushes: u64,
    /// In the error state (a backing device failed; writes refused).
    pub error: bool,
}

impl Live {
    /// Every figure zero.
    pub fn new(kind: CacheKind) -> Live {
        Live {
            kind,
            dirty_blocks: 0,
            held_slots: 0,
            commits: 0,
            checkpoints: 0,
            writing_back: false,
            destaged_room: 0,
            destaged_watermark: 0,
            destaged_max_age: 0,
            destaged_cleaner: 0,
            destaged_writeback: 0,
            bypassed: 0,
            flushes: 0,
            error: false,
        }
    }
}

/// Told a cache's live state after every change, under the cache's lock: it must not call the
/// cache.
pub trait CacheObserver: Send + Sync {
    fn changed(&self, live: &Live);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_keeps_a_distinct_nonzero_code() {
        for k in CacheKind::ALL {
            assert_ne!(k.code(), 0, "0 means no cache");
            assert_eq!(CacheKind::from_code(k.code()), Some(k));
        }
        assert_eq!(CacheKind::from_code(0), None);
    }
}
