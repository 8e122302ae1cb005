//! The epoch promise ([`Promise::Epochs`](super::Promise), nvcache UBJ): a layer durable at
//! flushes only reads, after a crash, exactly as it stood after some commit. The operations
//! of the workload then only name the blocks touched; the commits' states are the judge.

use super::block::block;
use super::{show, Finding};
use std::collections::BTreeMap;

/// The epoch promise: after a crash the device reads exactly as it stood after some commit j,
/// where j is at least the last commit acknowledged before the crash, and at most the last one
/// begun: never a mix of two epochs, never an acknowledged commit lost.
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
    /// The promise at the start of a workload: the device reads `initial` (commit 0).
    pub fn starting_at(initial: BTreeMap<u64, Option<u64>>) -> Epochs {
        Epochs {
            states: vec![initial],
            commits: Vec::new(),
            punched: Vec::new(),
        }
    }

    /// The commits a crash at event index `crash` may show: (acknowledged, begun).
    pub fn window(&self, crash: usize) -> (usize, usize) {
        let acked = self.commits.iter().filter(|c| c.1 <= crash).count();
        let begun = self.commits.iter().filter(|c| c.0 <= crash).count();
        debug_assert!(acked <= begun, "a commit is acknowledged after it begins");
        (acked, begun)
    }

    /// Whether a commit starts or ends at event index `k` (where what the oracle allows
    /// changes).
    pub fn boundary_at(&self, k: usize) -> bool {
        self.commits.iter().any(|c| c.0 == k || c.1 == k)
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

    /// Judge what was read back after a crash at event index `crash`: some state between
    /// the last acknowledged commit and the last begun allows every block.
    pub(super) fn judge(
        &self,
        got: &BTreeMap<u64, Option<u64>>,
        crash: usize,
    ) -> Result<(), Finding> {
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

    /// A block that a crash caught while a long discard punched it on the backing device,
    /// whose 512-byte sectors reach the platter in any subset: each sector zeros or the
    /// sector of one version the block holds in some state. Read as that version (the
    /// oracle then allows it only where the block may still be old); None if it is not such
    /// a mix, or no punch of it was under way.
    pub(super) fn partly_punched(&self, lba: u64, buf: &[u8], crash: usize) -> Option<Option<u64>> {
        let under_way = |p: &Punch| p.lba == lba && p.start <= crash && crash < p.ack;
        if !self.punched.iter().any(under_way) {
            return None;
        }
        let sector = nvstack_pmem::crash::SECTOR_BYTES as usize;
        let mut versions: Vec<u64> = self
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_allow_one_whole_committed_state() {
        let states = vec![
            BTreeMap::from([(1, None), (2, None)]),
            BTreeMap::from([(1, Some(1)), (2, Some(1))]),
            BTreeMap::from([(1, Some(2)), (2, Some(1))]),
        ];
        let e = Epochs {
            states,
            commits: vec![(10, 20), (30, 40)],
            punched: Vec::new(),
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
        assert_eq!(e.window(35), (1, 2));
        assert!(e.boundary_at(30) && e.boundary_at(40) && !e.boundary_at(35));
    }

    #[test]
    fn a_punch_zeroes_a_block_outside_the_epochs() {
        // Block 1 holds version 1 at commit 0; a long discard punches it on the backing device
        // (events 10 to 20), then commit 1 (30 to 40) makes the state with it zeros.
        let states = vec![BTreeMap::from([(1, Some(1))]), BTreeMap::from([(1, None)])];
        let mut e = Epochs {
            states,
            commits: vec![(30, 40)],
            punched: vec![Punch {
                lba: 1,
                start: 10,
                ack: 20,
            }],
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
        e.states.push(BTreeMap::from([(1, Some(2))]));
        e.commits.push((50, 60));
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
}
