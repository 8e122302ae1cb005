//! The write cache's recovery at open (docs/format.md 12.6, format version 2). `C` is the
//! newest valid commit word: the last multi-block write known whole. Each slot:
//!
//! | case | what the slot holds | recovery |
//! |---|---|---|
//! | V0 | sequence word zero | free |
//! | V1 | a word failing its own check bits, or a reserved word not zero | refuse, naming the slot: damage at rest (no store writes such a word) |
//! | V2 | a word still zero beside a sequence word, or the CRC-32C over entry and data fails | a write a crash cut: cleared |
//! | V3 | whole, part of a multi-block write above C | that write was in flight: cleared |
//! | V4 | whole (a single-block write, or a multi-block one at most C) | a copy of its block |
//! | W1 | two or more V4 copies of one block | the highest sequence number is the block; the others (copies a write replaced, whose clears a crash cut off) are cleared |
//! | W2 | two V4 copies of one block with one sequence number | no write stores that: refuse, naming both slots |
//!
//! Then one fence. The next write's sequence number is above every whole entry's and C.
//! Every refusal (V1, W2, no valid commit word) is a finding (`Error::Finding`, exit 1).

use crate::common::format::SEQ_MAX;
use crate::write::bugs::Bug;
use crate::write::entry::{crc_of, decode, Decoded, Entry};
use crate::write::format::{Layout, Settings};
use crate::write::{read_counters, Cached, Index, Order, WState};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::Region;
use std::time::Instant;

/// What one slot holds, decided (V0 to V4).
enum SlotCase {
    Free,
    Cut,
    Copy(Entry, u32),
}

/// Read and decide one slot (V0 to V4); Err for V1.
fn read_slot<R: Region + ?Sized>(
    region: &R,
    layout: &Layout,
    slot: u32,
    commit: u64,
    bug: Option<Bug>,
    buf: &mut [u8],
) -> Result<SlotCase> {
    let off = layout.entry_off(slot);
    let w: [u64; 4] = std::array::from_fn(|i| region.load_u64(off + 8 * i as u64));
    let (e, crc) = match decode(slot, w) {
        Decoded::Empty => return Ok(SlotCase::Free),
        Decoded::Torn => return Ok(SlotCase::Cut),
        Decoded::Damaged(what) => {
            return Err(Error::finding(format!(
                "write cache slot {slot}: the entry's {what} fails its check bits (damaged at \
                 rest)"
            )))
        }
        Decoded::Entry { entry, crc } => (entry, crc),
    };
    let data = (!e.tombstone).then(|| {
        region.read(layout.data_off(slot), buf);
        &buf[..]
    });
    // Seeded bug wc-recovery-skips-checksum: a cut write's entry is kept.
    if crc != crc_of(slot, &e, data) && bug != Some(Bug::RecoverySkipsChecksum) {
        return Ok(SlotCase::Cut);
    }
    // Seeded bug wc-recovery-keeps-uncommitted: a multi-block write in flight is kept.
    if e.multi && e.seq > commit && bug != Some(Bug::RecoveryKeepsUncommitted) {
        return Ok(SlotCase::Cut);
    }
    Ok(SlotCase::Copy(e, crc))
}

/// The table read against recovery's cases, every slot (damage does not stop the walk).
pub(crate) struct Walked {
    /// The newest valid commit word (None: neither is valid, a finding).
    pub commit: Option<u64>,
    /// Per slot: the copy recovery keeps (V4, the newest of its block).
    pub copies: Vec<Option<(Entry, u32)>>,
    /// Slots recovery clears: cut writes (V2, V3) and replaced copies (W1).
    pub clears: Vec<u32>,
    /// Of `clears`, the replaced copies (W1).
    pub replaced: u32,
    /// The highest sequence number seen (or the commit word's).
    pub seq: u64,
    /// Damage, one line per slot (V1) or pair of slots (W2), first the commit words'.
    pub findings: Vec<String>,
}

/// Walk every slot (V0 to V4, W1, W2), collecting each finding.
pub(crate) fn walk<R: Region + ?Sized>(region: &R, layout: &Layout, bug: Option<Bug>) -> Walked {
    let mut w = Walked {
        commit: None,
        copies: vec![None; layout.slots as usize],
        clears: Vec::new(),
        replaced: 0,
        seq: 0,
        findings: Vec::new(),
    };
    match crate::common::format::committed_epoch(region) {
        Ok(c) => w.commit = Some(c),
        Err(e) => w.findings.push(e.to_string()),
    }
    // Without a valid commit word every multi-block copy counts as in flight.
    let commit = w.commit.unwrap_or(0);
    w.seq = commit;
    let mut best = Index::default();
    let mut buf = vec![0u8; layout.sector_bytes as usize];
    for slot in 0..layout.slots {
        match read_slot(region, layout, slot, commit, bug, &mut buf) {
            Err(e) => w.findings.push(e.to_string()),
            Ok(SlotCase::Free) => {}
            Ok(SlotCase::Cut) => w.clears.push(slot),
            Ok(SlotCase::Copy(e, crc)) => keep_newest(&mut w, &mut best, slot, e, crc, bug),
        }
    }
    debug_assert!(w.clears.len() as u64 + best.len() as u64 <= u64::from(layout.slots));
    w
}

/// A whole copy against the block's copy kept so far: the newer stays (W1), one sequence
/// number twice is damage (W2).
fn keep_newest(w: &mut Walked, best: &mut Index, slot: u32, e: Entry, crc: u32, bug: Option<Bug>) {
    w.seq = w.seq.max(e.seq);
    let Some(other) = best.get(&e.lba).copied() else {
        best.insert(e.lba, slot);
        w.copies[slot as usize] = Some((e, crc));
        return;
    };
    let o = w.copies[other as usize].expect("kept").0;
    if o.seq == e.seq {
        w.findings.push(format!(
            "write cache slots {other} and {slot} both hold block {} of write {}",
            e.lba, e.seq
        ));
        return;
    }
    // Seeded bugs: the older copy wins (oldest-copy), or the first found (first-copy).
    let newer = match bug {
        Some(Bug::RecoveryOldestCopy) => e.seq < o.seq,
        Some(Bug::RecoveryFirstCopy) => false,
        _ => e.seq > o.seq,
    };
    let loser = if newer {
        best.insert(e.lba, slot);
        w.copies[slot as usize] = Some((e, crc));
        w.copies[other as usize] = None;
        other
    } else {
        slot
    };
    w.clears.push(loser);
    w.replaced += 1;
}

/// Rebuild the DRAM state (the hash index) from the table, storing recovery's clears; returns
/// it with the number of entries cleared. The first damage refuses the open (a finding).
pub(crate) fn recover<R: Region + ?Sized>(
    region: &R,
    layout: &Layout,
    settings: Settings,
    bug: Option<Bug>,
) -> Result<(WState, usize)> {
    let w = walk(region, layout, bug);
    if let Some(f) = w.findings.first() {
        return Err(Error::finding(f));
    }
    if w.seq >= SEQ_MAX {
        return Err(Error::bad(format!(
            "write cache: sequence number {} leaves no room for another write (2^48 - 1 is \
             the last)",
            w.seq
        )));
    }
    for &slot in &w.clears {
        region.store_u64_nt(layout.entry_off(slot) + 8, 0);
    }
    region.fence();
    Ok((
        state(layout, settings, w.seq, w.copies, region),
        w.clears.len(),
    ))
}

fn state<R: Region + ?Sized>(
    layout: &Layout,
    settings: Settings,
    seq: u64,
    copies: Vec<Option<(Entry, u32)>>,
    region: &R,
) -> WState {
    let now = Instant::now();
    let mut st = WState {
        seq,
        // Sized for a full cache: a write never waits for the table to grow.
        index: Index::with_capacity_and_hasher(layout.slots as usize, Default::default()),
        slots: vec![None; layout.slots as usize],
        free: Vec::new(),
        pending_clears: Vec::new(),
        order: Order::new(settings.policy, seq ^ 0x5eed, layout.slots),
        stats: Default::default(),
        stored: read_counters(region),
        bypass_unflushed: false,
        error: None,
        settings,
        admit: crate::write::admit::Admission::All,
        opened_at: now,
        fat_cross_check: false,
        fat_cross_checks: 0,
        destage_log: None,
        block_buf: Vec::new(),
        destaging: None,
        background: false,
        destager_parked: None,
        run_bufs: Vec::new(),
        pinned: vec![false; layout.slots as usize],
        held: Vec::new(),
    };
    // The destage order starts as the write order (oldest first).
    let mut kept: Vec<(u32, Entry, u32)> = copies
        .iter()
        .enumerate()
        .filter_map(|(s, c)| c.map(|(e, crc)| (s as u32, e, crc)))
        .collect();
    kept.sort_unstable_by_key(|(slot, e, _)| (e.seq, *slot));
    for (slot, e, crc) in kept {
        st.slots[slot as usize] = Some(Cached {
            lba: e.lba,
            tombstone: e.tombstone,
            crc,
            seq: e.seq,
            multi: e.multi,
            written_at: now,
        });
        st.index.insert(e.lba, slot);
        st.order.inserted(slot);
    }
    st.free = (0..layout.slots)
        .rev()
        .filter(|&s| st.slots[s as usize].is_none())
        .collect();
    st
}
