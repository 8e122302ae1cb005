//! The write cache's seeded bugs: deliberate protocol mistakes, switched on at open, that the
//! crash tests must catch (each deviation is marked `// Seeded bug` where it acts). A cache
//! opened without one runs none of them.

/// One deliberate mistake in the write cache's protocol (format version 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum WcBug {
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

impl WcBug {
    pub const ALL: [WcBug; 13] = [
        WcBug::EntryBeforeData,
        WcBug::CommitUnfenced,
        WcBug::FreedBeforeBackingFlush,
        WcBug::BypassKeepsCachedCopy,
        WcBug::StaleClearUnfenced,
        WcBug::ReuseBeforeFence,
        WcBug::RecoveryKeepsUncommitted,
        WcBug::RecoveryOldestCopy,
        WcBug::ChecksumSkipsData,
        WcBug::RecoverySkipsChecksum,
        WcBug::RecoveryFirstCopy,
        WcBug::LongDiscardUnflushed,
        WcBug::DestageClearsRewritten,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WcBug::EntryBeforeData => "entry-before-data",
            WcBug::CommitUnfenced => "commit-unfenced",
            WcBug::FreedBeforeBackingFlush => "freed-before-backing-flush",
            WcBug::BypassKeepsCachedCopy => "bypass-keeps-cached-copy",
            WcBug::StaleClearUnfenced => "stale-clear-unfenced",
            WcBug::ReuseBeforeFence => "reuse-before-fence",
            WcBug::RecoveryKeepsUncommitted => "wc-recovery-keeps-uncommitted",
            WcBug::RecoveryOldestCopy => "wc-recovery-oldest-copy",
            WcBug::ChecksumSkipsData => "checksum-skips-data",
            WcBug::RecoverySkipsChecksum => "wc-recovery-skips-checksum",
            WcBug::RecoveryFirstCopy => "wc-recovery-first-copy",
            WcBug::LongDiscardUnflushed => "long-discard-unflushed",
            WcBug::DestageClearsRewritten => "destage-clears-rewritten",
        }
    }

    /// The mistake, in a sentence (the crash checker's catalogue prints it).
    pub fn what(self) -> &'static str {
        match self {
            WcBug::EntryBeforeData => {
                "a write fences its entries (a multi-block write its commit word too) before its data"
            }
            WcBug::CommitUnfenced => "a write returns before the fence that commits it",
            WcBug::FreedBeforeBackingFlush => {
                "a destage frees its slots before the destaged copies are flushed on the backing device"
            }
            WcBug::BypassKeepsCachedCopy => {
                "a write that bypasses the cache leaves the block's cached copy in place"
            }
            WcBug::StaleClearUnfenced => {
                "a destage clears a block's entry before the clears of its replaced copies are fenced"
            }
            WcBug::ReuseBeforeFence => {
                "a replaced copy's slot is reused before the write replacing it is fenced (in place)"
            }
            WcBug::RecoveryKeepsUncommitted => {
                "recovery keeps a multi-block write above the commit word (in flight at the crash)"
            }
            WcBug::RecoveryOldestCopy => "recovery takes a block's oldest copy instead of its newest",
            WcBug::ChecksumSkipsData => "an entry's checksum covers its header but not its data",
            WcBug::RecoverySkipsChecksum => {
                "recovery keeps an entry whose checksum fails (a write a crash cut)"
            }
            WcBug::RecoveryFirstCopy => {
                "recovery keeps the first copy of a block it finds, not comparing sequence numbers"
            }
            WcBug::LongDiscardUnflushed => {
                "a discard past the unit returns before the backing device is flushed"
            }
            WcBug::DestageClearsRewritten => {
                "a destage clears a block rewritten during its backing I/O (the newer copy dropped)"
            }
        }
    }

    pub fn parse(name: &str) -> Option<WcBug> {
        WcBug::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The bug acts in recovery (every recovery the checker runs), not only in the workload.
    pub fn in_recovery(self) -> bool {
        matches!(
            self,
            WcBug::RecoveryKeepsUncommitted
                | WcBug::RecoveryOldestCopy
                | WcBug::RecoverySkipsChecksum
                | WcBug::RecoveryFirstCopy
        )
    }
}
