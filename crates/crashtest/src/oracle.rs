//! The generic oracle: blocks that name themselves, and what each block may read after a
//! crash. It knows nothing of the protocols: only which operations were in flight or
//! acknowledged at the crash point.

use nvstack_core::blockdev::BlockDevice;
use std::collections::BTreeMap;

/// Contents of block `lba` at `version`: (lba, version, crc32c of the rest), then a pattern
/// derived from both, so that a torn, misplaced or stale block is recognised.
pub fn block(lba: u64, version: u64, bytes: usize) -> Vec<u8> {
    let mut b = vec![0u8; bytes];
    fill_block(lba, version, &mut b);
    b
}

pub fn fill_block(lba: u64, version: u64, b: &mut [u8]) {
    b[0..8].copy_from_slice(&lba.to_le_bytes());
    b[8..16].copy_from_slice(&version.to_le_bytes());
    let mut x =
        lba.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version.wrapping_mul(0xd6e8_feb8_6659_fd93);
    for c in b[20..].chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
    }
    let crc = crc32c::crc32c(&b[20..]);
    b[16..20].copy_from_slice(&crc.to_le_bytes());
}

/// Why a block read back is neither zeros nor a version of its own LBA. The texts are the
/// report's (docs/crashtest.md 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// The block's stamp names another LBA: a misdirected write or a page mapped twice.
    #[error("holds LBA {holds_lba}'s contents")]
    Misplaced { holds_lba: u64 },
    /// The checksum over the pattern fails: the block is torn.
    #[error("torn: its checksum fails")]
    Torn,
}

/// What a block holds: None for zeros, Some(version), or the reason it is neither.
pub fn decode_block(lba: u64, b: &[u8]) -> Result<Option<u64>, BlockError> {
    if b.iter().all(|&x| x == 0) {
        return Ok(None);
    }
    let l = u64::from_le_bytes(b[0..8].try_into().unwrap());
    let v = u64::from_le_bytes(b[8..16].try_into().unwrap());
    let crc = u32::from_le_bytes(b[16..20].try_into().unwrap());
    if l != lba {
        return Err(BlockError::Misplaced { holds_lba: l });
    }
    if crc != crc32c::crc32c(&b[20..]) {
        return Err(BlockError::Torn);
    }
    Ok(Some(v))
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
            let v = decode_block(lba, &buf).map_err(|w| Finding {
                lba: Some(lba),
                what: w.to_string(),
            })?;
            got.insert(lba, v);
        }
        self.judge(&got, crash)
    }

    /// Judge what was read back. The rules: an acknowledged write survives; an operation in
    /// flight at the crash is all old or all new (together, if atomic); nothing else changes.
    pub fn judge(&self, got: &BTreeMap<u64, Option<u64>>, crash: usize) -> Result<(), Finding> {
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
        for (&lba, &g) in got {
            let old = settled.get(&lba).copied().unwrap_or(None);
            let ok = g == old || allowed_new.get(&lba).is_some_and(|&n| n == g);
            if !ok {
                let new = allowed_new.get(&lba);
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
        }
        for op in in_flight.iter().filter(|o| o.atomic && o.blocks.len() > 1) {
            let sides: Vec<bool> = op
                .blocks
                .iter()
                .filter_map(|&(l, n)| {
                    let g = *got.get(&l)?;
                    let old = settled.get(&l).copied().unwrap_or(None);
                    if old == n {
                        None // no change either way: says nothing about the side
                    } else {
                        Some(g == n)
                    }
                })
                .collect();
            if sides.iter().any(|&s| s) && sides.iter().any(|&s| !s) {
                return Err(Finding {
                    lba: op.blocks.first().map(|b| b.0),
                    what: format!(
                        "atomic operation on {} blocks is torn: {} of them new, {} old",
                        op.blocks.len(),
                        sides.iter().filter(|&&s| s).count(),
                        sides.iter().filter(|&&s| !s).count()
                    ),
                });
            }
        }
        Ok(())
    }
}

fn show(v: Option<u64>) -> String {
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
