//! The write cache's recovery at open: recover.rs's table (docs/format.md 10.8) read against
//! the commit word, then one rule of its own (section 12): of a block's committed copies the
//! newest is kept and the others are cleared; they are copies a write replaced, whose clears a
//! crash cut off before a fence made them durable.

use crate::format::Entry;
use crate::recover;
use crate::wbugs::WcBug;
use crate::wformat::{WcLayout, WcSettings};
use crate::writecache::{read_wc_counters, Cached, Order, WState};
use nvstack_core::error::Result;
use nvstack_pmem::Region;
use std::collections::HashMap;
use std::time::Instant;

/// Rebuild the DRAM state (the hash index) from the table, storing recovery's clears; returns
/// it with the number of entries cleared.
pub(crate) fn recover<R: Region + ?Sized>(
    region: &R,
    layout: &WcLayout,
    settings: WcSettings,
    bug: Option<WcBug>,
) -> Result<(WState, usize)> {
    let keep = bug == Some(WcBug::RecoveryKeepsUncommitted);
    let found = recover::scan(region, &layout.table(), keep)?;
    let mut clears = found.dropped.clone();
    // Per block: the slot of the copy kept.
    let mut best: HashMap<u64, (u32, Entry)> = HashMap::new();
    for (slot, kept) in found.kept.iter().enumerate() {
        let Some(e) = *kept else { continue };
        let slot = slot as u32;
        match best.get(&e.lba).copied() {
            None => {
                best.insert(e.lba, (slot, e));
            }
            Some((other, o)) => {
                // Seeded bug wc-recovery-oldest-copy: the older copy wins.
                let newer = (e.seq > o.seq) != (bug == Some(WcBug::RecoveryOldestCopy));
                if newer {
                    clears.push(other);
                    best.insert(e.lba, (slot, e));
                } else {
                    clears.push(slot);
                }
            }
        }
    }
    for &slot in &clears {
        region.store_u64_nt(layout.entry_off(slot) + 8, 0);
    }
    region.fence();
    Ok((
        state(layout, settings, found.epoch, best, region),
        clears.len(),
    ))
}

fn state<R: Region + ?Sized>(
    layout: &WcLayout,
    settings: WcSettings,
    seq: u64,
    best: HashMap<u64, (u32, Entry)>,
    region: &R,
) -> WState {
    let now = Instant::now();
    let mut st = WState {
        seq,
        index: HashMap::with_capacity(best.len()),
        slots: vec![None; layout.slots as usize],
        free: Vec::new(),
        cleared: Vec::new(),
        order: Order::new(settings.policy, seq ^ 0x5eed),
        stats: Default::default(),
        stored: read_wc_counters(region),
        bypass_unflushed: false,
        error: None,
        settings,
        admit: crate::admit::Admission::All,
    };
    // The destage order starts as the write order (oldest first).
    let mut kept: Vec<(u32, Entry)> = best.into_values().collect();
    kept.sort_unstable_by_key(|(slot, e)| (e.seq, *slot));
    for (slot, e) in kept {
        st.slots[slot as usize] = Some(Cached {
            lba: e.lba,
            tombstone: e.tombstone,
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
