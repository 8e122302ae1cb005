//! The write cache's seeded bugs: deliberate protocol mistakes, switched on at open, that the
//! crash tests must catch (each deviation is marked `// Seeded bug` where it acts). A cache
//! opened without one runs none of them.

/// One deliberate mistake in the write cache's protocol (format version 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Bug {
    /// A write fences its entries (a multi-block write its commit word too) before its data.
    EntryBeforeData,
    /// A write returns before the fence that commits it.
    CommitUnfenced,
    /// A destage frees its slots (entries cleared and fenced) before the backing flush.
    FreedBeforeBackingFlush,
    /// A write that bypasses the cache leaves the block's cached copy in place.
    BypassKeepsCachedCopy,
    /// A destage clears a block's entry while the clears of its replaced copies are not yet
    /// stored and fenced.
    StaleClearUnfenced,
    /// A replaced copy's slot is reused before the write replacing it is fenced: the overwrite
    /// lands in place, over the block's only durable copy.
    ReuseBeforeFence,
    /// Recovery keeps a multi-block write above the commit word (in flight at the crash).
    RecoveryKeepsUncommitted,
    /// Recovery takes a block's oldest copy instead of its newest.
    RecoveryOldestCopy,
    /// An entry's CRC-32C covers its header but not its data.
    ChecksumSkipsData,
    /// Recovery keeps an entry whose CRC-32C fails (a write a crash cut).
    RecoverySkipsChecksum,
    /// Recovery keeps the first copy of a block it finds, not comparing sequence numbers.
    RecoveryFirstCopy,
    /// A discard past the unit returns before the backing device is flushed.
    LongDiscardUnflushed,
    /// A destage clears a block rewritten during its backing I/O: the newer copy is dropped.
    DestageClearsRewritten,
}

impl Bug {
    pub const ALL: [Bug; 13] = [
        Bug::EntryBeforeData,
        Bug::CommitUnfenced,
        Bug::FreedBeforeBackingFlush,
        Bug::BypassKeepsCachedCopy,
        Bug::StaleClearUnfenced,
        Bug::ReuseBeforeFence,
        Bug::RecoveryKeepsUncommitted,
        Bug::RecoveryOldestCopy,
        Bug::ChecksumSkipsData,
        Bug::RecoverySkipsChecksum,
        Bug::RecoveryFirstCopy,
        Bug::LongDiscardUnflushed,
        Bug::DestageClearsRewritten,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Bug::EntryBeforeData => "entry-before-data",
            Bug::CommitUnfenced => "commit-unfenced",
            Bug::FreedBeforeBackingFlush => "freed-before-backing-flush",
            Bug::BypassKeepsCachedCopy => "bypass-keeps-cached-copy",
            Bug::StaleClearUnfenced => "stale-clear-unfenced",
            Bug::ReuseBeforeFence => "reuse-before-fence",
            Bug::RecoveryKeepsUncommitted => "wc-recovery-keeps-uncommitted",
            Bug::RecoveryOldestCopy => "wc-recovery-oldest-copy",
            Bug::ChecksumSkipsData => "checksum-skips-data",
            Bug::RecoverySkipsChecksum => "wc-recovery-skips-checksum",
            Bug::RecoveryFirstCopy => "wc-recovery-first-copy",
            Bug::LongDiscardUnflushed => "long-discard-unflushed",
            Bug::DestageClearsRewritten => "destage-clears-rewritten",
        }
    }

    /// The mistake, in a sentence (the crash checker's catalogue prints it).
    pub fn what(self) -> &'static str {
        match self {
            Bug::EntryBeforeData => {
                "a write fences its entries (a multi-block write its commit word too) before its data"
            }
            Bug::CommitUnfenced => "a write returns before the fence that commits it",
            Bug::FreedBeforeBackingFlush => {
                "a destage frees its slots before the destaged copies are flushed on the backing device"
            }
            Bug::BypassKeepsCachedCopy => {
                "a write that bypasses the cache leaves the block's cached copy in place"
            }
            Bug::StaleClearUnfenced => {
                "a destage clears a block's entry before the clears of its replaced copies are fenced"
            }
            Bug::ReuseBeforeFence => {
                "a replaced copy's slot is reused before the write replacing it is fenced (in place)"
            }
            Bug::RecoveryKeepsUncommitted => {
                "recovery keeps a multi-block write above the commit word (in flight at the crash)"
            }
            Bug::RecoveryOldestCopy => "recovery takes a block's oldest copy instead of its newest",
            Bug::ChecksumSkipsData => "an entry's checksum covers its header but not its data",
            Bug::RecoverySkipsChecksum => {
                "recovery keeps an entry whose checksum fails (a write a crash cut)"
            }
            Bug::RecoveryFirstCopy => {
                "recovery keeps the first copy of a block it finds, not comparing sequence numbers"
            }
            Bug::LongDiscardUnflushed => {
                "a discard past the unit returns before the backing device is flushed"
            }
            Bug::DestageClearsRewritten => {
                "a destage clears a block rewritten during its backing I/O (the newer copy dropped)"
            }
        }
    }

    pub fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The bug acts in recovery (every recovery the checker runs), not only in the workload.
    pub fn in_recovery(self) -> bool {
        matches!(
            self,
            Bug::RecoveryKeepsUncommitted
                | Bug::RecoveryOldestCopy
                | Bug::RecoverySkipsChecksum
                | Bug::RecoveryFirstCopy
        )
    }
}
