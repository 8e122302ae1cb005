//! Seeded bugs: deliberate protocol mistakes, switched on at open, that the crash tests must
//! catch (each deviation is marked `// Seeded bug` where it acts). They exist to show that the
//! checks can fail; a cache opened without one runs none of them.

/// One deliberate mistake in UBJ's protocol (serialized as its name's variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Bug {
    /// Commit stores the commit words without the fence that makes the blocks durable first.
    CommitBeforeDataFence,
    /// Commit returns before the fence that makes the commit words durable.
    CommitWordUnfenced,
    /// Commit frees the older frozen copy of a block before the newer copy is committed.
    StaleFreedBeforeCommit,
    /// A write to a frozen block overwrites it in place (no copy-on-write).
    WriteFrozenInPlace,
    /// Checkpoint marks blocks clean before the backing device's flush.
    CleanBeforeBackingFlush,
    /// Checkpoint frees out-of-date copies with no fence before the newer copies' entries go.
    StaleClearUnfenced,
    /// Checkpoint skips a discard: the backing block keeps its old data.
    DiscardNotPunched,
    /// A checkpoint reuses out-of-date slots without clearing their entries.
    StaleReusedUncleared,
    /// Recovery keeps the blocks written since the last commit.
    RecoveryKeepsUncommitted,
    /// Recovery takes the oldest committed copy of a block instead of the newest.
    RecoveryOldestCopy,
    /// Eviction takes dirty blocks as well as clean ones, dropping their data.
    EvictDirty,
    /// A long discard returns before the backing device's flush of the blocks it discarded
    /// there.
    LongDiscardUnflushed,
}

impl Bug {
    pub const ALL: [Bug; 12] = [
        Bug::CommitBeforeDataFence,
        Bug::CommitWordUnfenced,
        Bug::StaleFreedBeforeCommit,
        Bug::WriteFrozenInPlace,
        Bug::CleanBeforeBackingFlush,
        Bug::StaleClearUnfenced,
        Bug::DiscardNotPunched,
        Bug::StaleReusedUncleared,
        Bug::RecoveryKeepsUncommitted,
        Bug::RecoveryOldestCopy,
        Bug::EvictDirty,
        Bug::LongDiscardUnflushed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Bug::CommitBeforeDataFence => "commit-before-data-fence",
            Bug::CommitWordUnfenced => "commit-word-unfenced",
            Bug::StaleFreedBeforeCommit => "stale-freed-before-commit",
            Bug::WriteFrozenInPlace => "write-frozen-in-place",
            Bug::CleanBeforeBackingFlush => "clean-before-backing-flush",
            Bug::StaleClearUnfenced => "stale-clear-unfenced",
            Bug::DiscardNotPunched => "discard-not-punched",
            Bug::StaleReusedUncleared => "stale-reused-uncleared",
            Bug::RecoveryKeepsUncommitted => "recovery-keeps-uncommitted",
            Bug::RecoveryOldestCopy => "recovery-oldest-copy",
            Bug::EvictDirty => "evict-dirty",
            Bug::LongDiscardUnflushed => "long-discard-unflushed",
        }
    }

    /// The mistake, in a sentence (the crash checker's catalogue prints it).
    pub fn what(self) -> &'static str {
        match self {
            Bug::CommitBeforeDataFence => {
                "commit stores the commit words without first fencing the blocks' data and entries"
            }
            Bug::CommitWordUnfenced => "commit returns before the fence that makes the commit words durable",
            Bug::StaleFreedBeforeCommit => {
                "commit frees a block's older frozen copy before the newer copy is committed"
            }
            Bug::WriteFrozenInPlace => "a write to a frozen block overwrites it in place (no copy-on-write)",
            Bug::CleanBeforeBackingFlush => "checkpoint marks blocks clean before flushing the backing device",
            Bug::StaleClearUnfenced => {
                "checkpoint frees out-of-date copies with no fence before the newer copies' entries go"
            }
            Bug::DiscardNotPunched => "checkpoint skips a discard: the backing block keeps its old data",
            Bug::StaleReusedUncleared => "checkpoint reuses out-of-date slots without clearing their entries",
            Bug::RecoveryKeepsUncommitted => "recovery keeps the blocks written after the last commit",
            Bug::RecoveryOldestCopy => "recovery takes a block's oldest committed copy instead of its newest",
            Bug::EvictDirty => "eviction takes dirty blocks as well as clean ones, dropping their data",
            Bug::LongDiscardUnflushed => {
                "a long discard returns before flushing the backing device it discarded blocks on"
            }
        }
    }

    pub fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name)
    }
}
