//! The write cache's seeded bugs: deliberate protocol mistakes, switched on at open, that the
//! crash tests must catch (each deviation is marked `// Seeded bug` where it acts). A cache
//! opened without one runs none of them.

/// One deliberate mistake in the write cache's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum WcBug {
    /// A write persists its index entries and commit word before its data.
    EntryBeforeData,
    /// A write returns before the fence that makes its commit word durable.
    CommitUnfenced,
    /// A destage frees its slots (entries cleared and fenced) before the backing flush.
    FreedBeforeBackingFlush,
    /// A write that bypasses the cache leaves the block's cached copy in place.
    BypassKeepsCachedCopy,
    /// A destage clears a block's entry while the clear of its older copy is not yet fenced.
    StaleClearUnfenced,
    /// A freed slot is reused before the fence that makes its clear durable.
    ReuseBeforeFence,
    /// Recovery keeps the entries of the write in flight at the crash (not committed).
    RecoveryKeepsUncommitted,
    /// Recovery takes a block's oldest copy instead of its newest.
    RecoveryOldestCopy,
}

impl WcBug {
    pub const ALL: [WcBug; 8] = [
        WcBug::EntryBeforeData,
        WcBug::CommitUnfenced,
        WcBug::FreedBeforeBackingFlush,
        WcBug::BypassKeepsCachedCopy,
        WcBug::StaleClearUnfenced,
        WcBug::ReuseBeforeFence,
        WcBug::RecoveryKeepsUncommitted,
        WcBug::RecoveryOldestCopy,
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
        }
    }

    /// The mistake, in a sentence (the crash checker's catalogue prints it).
    pub fn what(self) -> &'static str {
        match self {
            WcBug::EntryBeforeData => {
                "a write persists its index entries and commit word before its data"
            }
            WcBug::CommitUnfenced => "a write returns before its commit word is fenced",
            WcBug::FreedBeforeBackingFlush => {
                "a destage frees its slots before the destaged copies are flushed on the backing device"
            }
            WcBug::BypassKeepsCachedCopy => {
                "a write that bypasses the cache leaves the block's cached copy in place"
            }
            WcBug::StaleClearUnfenced => {
                "a destage clears a block's entry before the clear of its older copy is fenced"
            }
            WcBug::ReuseBeforeFence => "a freed slot is reused before its clear is fenced",
            WcBug::RecoveryKeepsUncommitted => {
                "recovery keeps the entries of the write in flight at the crash"
            }
            WcBug::RecoveryOldestCopy => "recovery takes a block's oldest copy instead of its newest",
        }
    }

    pub fn parse(name: &str) -> Option<WcBug> {
        WcBug::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The bug acts in recovery (every recovery the checker runs), not only in the workload.
    pub fn in_recovery(self) -> bool {
        matches!(
            self,
            WcBug::RecoveryKeepsUncommitted | WcBug::RecoveryOldestCopy
        )
    }
}
