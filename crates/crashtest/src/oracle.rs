//! The generic oracle: blocks that name themselves, and what each block may read after a
//! crash. It knows nothing of the protocols: only which operations were in flight or
//! acknowledged at the crash point.

use nvstack_core::blockdev::BlockDevice;
use std::collections::BTreeMap;

/// Contents of block `lba` at `version`: a stamp (lba, version, crc32c of both and of the
/// rest), then a pattern derived from both, so that a torn, misplaced or stale block is
/// recognised.
pub fn block(lba: u64, version: u64, bytes: usize) -> Vec<u8> {
    let mut b = vec![0u8; bytes];
    fill_block(lba, version, &mut b);
    b
}

pub fn fill_block(lba: u64, version: u64, b: &mut [u8]) {
    debug_assert!(
        b.len() > STAMP_BYTES,
        "a block holds its stamp and a pattern"
    );
    let mut x =
        lba.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version.wrapping_mul(0xd6e8_feb8_6659_fd93);
    for c in b[STAMP_BYTES..].chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
    }
    let stamp = Stamp {
        lba,
        version,
        crc: block_crc(lba, version, &b[STAMP_BYTES..]),
    };
    b[..STAMP_BYTES].copy_from_slice(&stamp.to_bytes());
    // Pair assertion, write side: what is encoded decodes to the same block and version.
    debug_assert_eq!(Stamp::from_bytes(b), stamp);
    debug_assert_eq!(decode_block(lba, b), Ok(Some(version)));
}

/// Bytes of a block's stamp: LBA, version, then the CRC32C of the three.
const STAMP_BYTES: usize = 20;

/// The CRC32C of a block's LBA, version and pattern. The LBA and version are covered too: a
/// block torn between two versions (one's stamp words, the other's pattern) must not read as
/// either.
fn block_crc(lba: u64, version: u64, pattern: &[u8]) -> u32 {
    let head = crc32c::crc32c(&lba.to_le_bytes());
    let head = crc32c::crc32c_append(head, &version.to_le_bytes());
    crc32c::crc32c_append(head, pattern)
}

/// The head of every block the oracle writes: who wrote it, and the checksum of the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    lba: u64,
    version: u64,
    crc: u32,
}

impl Stamp {
    fn to_bytes(self) -> [u8; STAMP_BYTES] {
        let mut s = [0u8; STAMP_BYTES];
        s[0..8].copy_from_slice(&self.lba.to_le_bytes());
        s[8..16].copy_from_slice(&self.version.to_le_bytes());
        s[16..20].copy_from_slice(&self.crc.to_le_bytes());
        s
    }

    /// The stamp at the head of block `b`.
    fn from_bytes(b: &[u8]) -> Stamp {
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Stamp {
            lba: word(0),
            version: word(8),
            crc: u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")),
        }
    }
}

/// Why a block read back is neither zeros nor a version of its own LBA. The texts are the
/// report's (docs/crashtest.md 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// The block's stamp names another LBA: a misdirected write or a page mapped twice.
    #[error("holds LBA {holds_lba}'s contents")]
    Misplaced { holds_lba: u64 },
    /// The checksum over the stamp and the pattern fails: the block is torn.
    #[error("torn: its checksum fails")]
    Torn,
}

/// What a block holds: None for zeros, Some(version), or the reason it is neither.
pub fn decode_block(lba: u64, b: &[u8]) -> Result<Option<u64>, BlockError> {
    debug_assert!(b.len() > STAMP_BYTES, "a block holds a stamp and a pattern");
    if b.iter().all(|&x| x == 0) {
        return Ok(None);
    }
    let stamp = Stamp::from_bytes(b);
    // Pair assertion, read side: the stamp decoded encodes to the bytes read.
    debug_assert_eq!(stamp.to_bytes(), b[..STAMP_BYTES]);
    if stamp.lba != lba {
        return Err(BlockError::Misplaced {
            holds_lba: stamp.lba,
        });
    }
    if stamp.crc != block_crc(stamp.lba, stamp.version, &b[STAMP_BYTES..]) {
        return Err(BlockError::Torn);
    }
    Ok(Some(stamp.version))
}

/// One operation of a workload as the oracle sees it.
#[derive(Clone, Debug)]
pub struct OpRecord {
    /// Blocks and what the operation makes them (None: discarded, reads zeros).
    pub blocks: Vec<(u64, Option<u64>)>,
    /// All blocks together or none (writes of several blocks; each discard chunk).
    pub atomic: bool,
    /// Event index when it started and when it returned (acknowledged).
    pub start: usize,
    pub ack: usize,
}

/// The expectations of one workload.
#[derive(Clone, Debug, Default)]
pub struct Expect {
    /// What each block held, durably, before the workload.
    pub initial: BTreeMap<u64, Option<u64>>,
    pub ops: Vec<OpRecord>,
    /// A layer durable at flushes only (nvcache UBJ) is judged by its epochs instead of the
    /// per-operation rules; `ops` then only names the blocks touched.
    pub epochs: Option<Epochs>,
    /// A layer whose writes are acknowledged at different times (the write cache: admitted
    /// writes on return, bypassed ones at the next flush) is judged per block in program order
    /// instead (`ordered.rs`): a block reads its last acknowledged value or a later one.
    pub ordered: bool,
}

/// The epoch promise (nvcache UBJ): after a crash the device reads exactly as it stood after
/// some commit j, where j is at least the last commit acknowledged before the crash, and at
/// most the last one begun: never a mix of two epochs, never an acknowledged commit lost.
#[derive(Clone, Debug, Default)]
pub struct Epochs {
    /// What every touched block holds after commit j (j = 0: before the workload); a block
    /// absent from a state reads zeros.
    pub states: Vec<BTreeMap<u64, Option<u64>>>,
    /// Commit j + 1's event indices: from `.0` on it may be durable (the operation that made
    /// it began), from `.1` on it must be (that operation returned).
    pub commits: Vec<(usize, usize)>,
    /// Blocks a long discard discarded on the backing device itself, outside every epoch
    /// (UBJ holds no copy of them): from the discard's start they may read as zeros in any
    /// state, and from its return they must in the states made before it returned.
    pub punched: Vec<Punch>,
}

/// A block discarded on the backing device between event indices `start` and `ack`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Punch {
    pub lba: u64,
    pub start: usize,
    pub ack: usize,
}

impl Epochs {
    /// The commits a crash at event index `crash` may show: (acknowledged, begun).
    pub fn window(&self, crash: usize) -> (usize, usize) {
        let acked = self.commits.iter().filter(|c| c.1 <= crash).count();
        let begun = self.commits.iter().filter(|c| c.0 <= crash).count();
        debug_assert!(acked <= begun, "a commit is acknowledged after it begins");
        (acked, begun)
    }

    /// Whether block `lba` of state j is under a punch at a crash at `crash`: Some(true) if
    /// it must read zeros (the punch returned, after state j was made), Some(false) if it may
    /// (the punch began), None if no punch applies. A state made before a punch returned
    /// (its commit began earlier) still names the block's old data, which the backing device
    /// no longer has; a later state already reads zeros or a later write.
    fn punch_at(&self, j: usize, lba: u64, crash: usize) -> Option<bool> {
        let made = if j == 0 { 0 } else { self.commits[j - 1].0 };
        self.punched
            .iter()
            .filter(|p| p.lba == lba && p.start <= crash && made < p.ack)
            .map(|p| p.ack <= crash)
            .reduce(|a, b| a || b)
    }

    fn judge(&self, got: &BTreeMap<u64, Option<u64>>, crash: usize) -> Result<(), Finding> {
        assert_eq!(
            self.states.len(),
            self.commits.len() + 1,
            "a state per commit"
        );
        let (acked, begun) = self.window(crash);
        let reads = |j: usize, lba: u64| self.states[j].get(&lba).copied().unwrap_or(None);
        let allows = |j: usize, l: u64, g: Option<u64>| match self.punch_at(j, l, crash) {
            Some(true) => g.is_none(),
            Some(false) => g.is_none() || g == reads(j, l),
            None => g == reads(j, l),
        };
        if (acked..=begun).any(|j| got.iter().all(|(&l, &g)| allows(j, l, g))) {
            return Ok(());
        }
        let (&lba, &g) = got
            .iter()
            .find(|(&l, &g)| !allows(acked, l, g))
            .expect("a state no block differs from matches");
        let has = match self.punch_at(acked, lba, crash) {
            Some(true) => "zeros (a long discard on the backing device returned)".to_string(),
            _ => show(reads(acked, lba)),
        };
        Err(Finding {
            lba: Some(lba),
            what: format!(
                "the device is in no committed state between commit {acked} (acknowledged) \
                 and commit {begun} (begun): this block reads {} where commit {acked} has {has}",
                show(g),
            ),
        })
    }
}

/// A violation found by the oracle.
#[derive(Clone, Debug)]
pub struct Finding {
    pub lba: Option<u64>,
    pub what: String,
}

impl Expect {
    /// Every block the workload or its setup touched.
    pub fn touched(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.initial.keys().copied().collect();
        for op in &self.ops {
            v.extend(op.blocks.iter().map(|b| b.0));
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether an operation or a commit starts or ends at event index `k` (where what the
    /// oracle allows changes).
    pub fn boundary_at(&self, k: usize) -> bool {
        self.ops.iter().any(|o| o.start == k || o.ack == k)
            || self
                .epochs
                .as_ref()
                .is_some_and(|e| e.commits.iter().any(|c| c.0 == k || c.1 == k))
    }

    /// Check a recovered device against the crash at event index `crash`.
    pub fn verify<D: BlockDevice>(&self, dev: &D, crash: usize) -> Result<(), Finding> {
        let bs = dev.block_bytes() as usize;
        let mut buf = vec![0u8; bs];
        let mut got: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        for lba in self.touched() {
            dev.read(lba, &mut buf).map_err(|e| Finding {
                lba: Some(lba),
                what: format!("read failed: {e}"),
            })?;
            let v = self.decode_after(lba, &buf, crash).map_err(|w| Finding {
                lba: Some(lba),
                what: w.to_string(),
            })?;
            got.insert(lba, v);
        }
        self.judge(&got, crash)
    }

    /// Block `lba` as read back after a crash at event index `crash`: its version (None:
    /// zeros), or for a block a long discard was punching, the version its old sectors
    /// carry (`partly_punched`); Err says why it is neither.
    pub fn decode_after(
        &self,
        lba: u64,
        buf: &[u8],
        crash: usize,
    ) -> Result<Option<u64>, BlockError> {
        decode_block(lba, buf).or_else(|w| self.partly_punched(lba, buf, crash).ok_or(w))
    }

    /// A block that a crash caught while a long discard punched it on the backing device,
    /// whose 512-byte sectors reach the platter in any subset: each sector zeros or the
    /// sector of one version the block holds in some state. Read as that version (the
    /// oracle then allows it only where the block may still be old); None if it is not such
    /// a mix, or no punch of it was under way.
    fn partly_punched(&self, lba: u64, buf: &[u8], crash: usize) -> Option<Option<u64>> {
        let epochs = self.epochs.as_ref()?;
        let under_way = |p: &Punch| p.lba == lba && p.start <= crash && crash < p.ack;
        if !epochs.punched.iter().any(under_way) {
            return None;
        }
        let sector = nvstack_pmem::crash::SECTOR_BYTES as usize;
        let mut versions: Vec<u64> = epochs
            .states
            .iter()
            .filter_map(|s| s.get(&lba).copied().flatten())
            .collect();
        versions.dedup();
        versions.into_iter().find_map(|v| {
            let want = block(lba, v, buf.len());
            let mix = buf
                .chunks(sector)
                .zip(want.chunks(sector))
                .all(|(got, old)| got == old || got.iter().all(|&b| b == 0));
            mix.then_some(Some(v))
        })
    }

    /// Judge what was read back. The rules: an acknowledged write survives; an operation in
    /// flight at the crash is all old or all new (together, if atomic); nothing else changes.
    pub fn judge(&self, got: &BTreeMap<u64, Option<u64>>, crash: usize) -> Result<(), Finding> {
        debug_assert!(
            self.ops.iter().all(|op| op.start <= op.ack),
            "an operation returns after it starts"
        );
        if let Some(epochs) = &self.epochs {
            return epochs.judge(got, crash);
        }
        if self.ordered {
            return crate::ordered::judge(self, got, crash);
        }
        let at = self.at(crash);
        at.judge_blocks(got)?;
        at.judge_atomic(got)
    }

    /// What the blocks may hold after a crash at event index `crash`.
    fn at(&self, crash: usize) -> AtCrash<'_> {
        // Per block: the value after the last acknowledged op, and the in-flight candidate.
        let mut settled: BTreeMap<u64, Option<u64>> = self.initial.clone();
        let mut in_flight: Vec<&OpRecord> = Vec::new();
        for op in &self.ops {
            if op.ack <= crash {
                for &(l, v) in &op.blocks {
                    settled.insert(l, v);
                }
            } else if op.start <= crash {
                in_flight.push(op);
            }
        }
        let mut allowed_new: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        for op in &in_flight {
            for &(l, v) in &op.blocks {
                allowed_new.insert(l, v);
            }
        }
        debug_assert!(
            in_flight
                .iter()
                .all(|op| op.start <= crash && crash < op.ack),
            "in flight: started, not yet acknowledged"
        );
        AtCrash {
            settled,
            in_flight,
            allowed_new,
        }
    }
}

/// What the blocks may hold after a crash at one event index.
struct AtCrash<'a> {
    /// Each block's value once every operation acknowledged by the crash is applied.
    settled: BTreeMap<u64, Option<u64>>,
    /// The operations started and not yet acknowledged at the crash.
    in_flight: Vec<&'a OpRecord>,
    /// The value an operation in flight writes to each of its blocks.
    allowed_new: BTreeMap<u64, Option<u64>>,
}

impl AtCrash<'_> {
    /// The value each block held before any operation in flight.
    fn old(&self, lba: u64) -> Option<u64> {
        self.settled.get(&lba).copied().unwrap_or(None)
    }

    /// Each block reads its settled (old) value, or the new value of an operation in flight.
    fn judge_blocks(&self, got: &BTreeMap<u64, Option<u64>>) -> Result<(), Finding> {
        for (&lba, &g) in got {
            let old = self.old(lba);
            let new = self.allowed_new.get(&lba);
            if g == old || new.is_some_and(|&n| n == g) {
                continue;
            }
            return Err(Finding {
                lba: Some(lba),
                what: match new {
                    Some(n) => format!(
                        "reads {} but may only read {} (old) or {} (new, in flight)",
                        show(g),
                        show(old),
                        show(*n)
                    ),
                    None => format!(
                        "reads {} but must read {} (acknowledged or untouched)",
                        show(g),
                        show(old)
                    ),
                },
            });
        }
        Ok(())
    }

    /// An atomic operation in flight reads all old or all new, together. Blocks whose new
    /// value equals the old one say nothing about the side and do not count.
    fn judge_atomic(&self, got: &BTreeMap<u64, Option<u64>>) -> Result<(), Finding> {
        for op in self
            .in_flight
            .iter()
            .filter(|o| o.atomic && o.blocks.len() > 1)
        {
            let sides: Vec<bool> = op
                .blocks
                .iter()
                .filter_map(|&(l, n)| {
                    let g = *got.get(&l)?;
                    (self.old(l) != n).then_some(g == n)
                })
                .collect();
            let new = sides.iter().filter(|&&s| s).count();
            let old = sides.len() - new;
            if new > 0 && old > 0 {
                return Err(Finding {
                    lba: op.blocks.first().map(|b| b.0),
                    what: format!(
                        "atomic operation on {} blocks is torn: {new} of them new, {old} old",
                        op.blocks.len(),
                    ),
                });
            }
        }
        Ok(())
    }
}

pub(crate) fn show(v: Option<u64>) -> String {
    match v {
        None => "zeros".into(),
        Some(v) => format!("version {v}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_roundtrip_and_tearing_is_seen() {
        let b = block(7, 3, 512);
        assert_eq!(decode_block(7, &b), Ok(Some(3)));
        let misplaced = decode_block(8, &b);
        assert_eq!(misplaced, Err(BlockError::Misplaced { holds_lba: 7 }));
        // The report's texts (docs/crashtest.md 5).
        assert_eq!(misplaced.unwrap_err().to_string(), "holds LBA 7's contents");
        let mut t = b.clone();
        t[300..].copy_from_slice(&block(7, 4, 512)[300..]);
        assert_eq!(decode_block(7, &t), Err(BlockError::Torn));
        assert_eq!(BlockError::Torn.to_string(), "torn: its checksum fails");
        assert_eq!(decode_block(7, &[0u8; 512]), Ok(None));
        // Torn at the version word: version 4's stamp words over version 3's pattern (and the
        // other way round) is neither version. (The checksum once covered the pattern only,
        // and this read as version 4.)
        let newer = block(7, 4, 512);
        let mut t = b.clone();
        t[..16].copy_from_slice(&newer[..16]);
        assert_eq!(decode_block(7, &t), Err(BlockError::Torn));
        let mut t = newer.clone();
        t[8..16].copy_from_slice(&b[8..16]);
        assert_eq!(decode_block(7, &t), Err(BlockError::Torn));
    }

    #[test]
    fn epochs_allow_one_whole_committed_state() {
        let states = vec![
            BTreeMap::from([(1, None), (2, None)]),
            BTreeMap::from([(1, Some(1)), (2, Some(1))]),
            BTreeMap::from([(1, Some(2)), (2, Some(1))]),
        ];
        let e = Expect {
            epochs: Some(Epochs {
                states,
                commits: vec![(10, 20), (30, 40)],
                punched: Vec::new(),
            }),
            ..Default::default()
        };
        let g = |a: Option<u64>, b: Option<u64>| BTreeMap::from([(1, a), (2, b)]);
        assert!(e.judge(&g(None, None), 15).is_ok(), "commit 1 may be lost");
        assert!(e.judge(&g(Some(1), Some(1)), 15).is_ok());
        assert!(
            e.judge(&g(Some(1), None), 15).is_err(),
            "a mix of two epochs"
        );
        let lost = e.judge(&g(None, None), 20).unwrap_err();
        assert!(
            lost.what.contains("commit 1 (acknowledged)"),
            "{}",
            lost.what
        );
        assert!(e.judge(&g(Some(2), Some(1)), 35).is_ok());
        assert!(
            e.judge(&g(Some(2), Some(1)), 25).is_err(),
            "commit 2 not begun"
        );
        assert!(
            e.judge(&g(Some(1), Some(1)), 40).is_err(),
            "commit 2 acknowledged"
        );
        assert_eq!(e.epochs.as_ref().unwrap().window(35), (1, 2));
    }

    #[test]
    fn a_punch_zeroes_a_block_outside_the_epochs() {
        // Block 1 holds version 1 at commit 0; a long discard punches it on the backing device
        // (events 10 to 20), then commit 1 (30 to 40) makes the state with it zeros.
        let states = vec![BTreeMap::from([(1, Some(1))]), BTreeMap::from([(1, None)])];
        let mut e = Expect {
            epochs: Some(Epochs {
                states,
                commits: vec![(30, 40)],
                punched: vec![Punch {
                    lba: 1,
                    start: 10,
                    ack: 20,
                }],
            }),
            ..Default::default()
        };
        let g = |v: Option<u64>| BTreeMap::from([(1, v)]);
        assert!(
            e.judge(&g(None), 5).is_err(),
            "not before the discard starts"
        );
        assert!(e.judge(&g(Some(1)), 15).is_ok() && e.judge(&g(None), 15).is_ok());
        let kept = e.judge(&g(Some(1)), 25).unwrap_err();
        assert!(kept.what.contains("long discard"), "{}", kept.what);
        assert!(e.judge(&g(None), 35).is_ok(), "commit 1 begun or not");
        // A later write (version 2) committed by a commit 2 that began after the punch.
        let ep = e.epochs.as_mut().unwrap();
        ep.states.push(BTreeMap::from([(1, Some(2))]));
        ep.commits.push((50, 60));
        assert!(
            e.judge(&g(Some(2)), 65).is_ok(),
            "the later state is not punched"
        );
        assert!(e.judge(&g(None), 65).is_err(), "commit 2 acknowledged");
        // A crash mid-punch: some sectors zeros, the others version 1's.
        let mut b = block(1, 1, 4096);
        b[512..1024].fill(0);
        assert_eq!(e.partly_punched(1, &b, 15), Some(Some(1)));
        assert_eq!(e.partly_punched(1, &b, 25), None, "the punch returned");
        b[0] ^= 1;
        assert_eq!(e.partly_punched(1, &b, 15), None, "a sector of no version");
    }

    #[test]
    fn judge_rules() {
        let mut e = Expect::default();
        e.initial.insert(1, Some(1));
        e.initial.insert(2, None);
        e.ops.push(OpRecord {
            blocks: vec![(1, Some(2)), (2, Some(2))],
            atomic: true,
            start: 10,
            ack: 20,
        });
        let g = |a: Option<u64>, b: Option<u64>| BTreeMap::from([(1, a), (2, b)]);
        assert!(e.judge(&g(Some(1), None), 5).is_ok());
        assert!(
            e.judge(&g(Some(2), None), 5).is_err(),
            "nothing in flight before the op starts"
        );
        assert!(e.judge(&g(Some(2), Some(2)), 15).is_ok());
        assert!(e.judge(&g(Some(1), None), 15).is_ok());
        assert!(e.judge(&g(Some(2), None), 15).is_err(), "torn atomic write");
        assert!(
            e.judge(&g(Some(1), None), 20).is_err(),
            "acknowledged write lost"
        );
        assert!(e.judge(&g(Some(2), Some(2)), 25).is_ok());
    }
}
