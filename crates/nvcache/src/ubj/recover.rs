//! Recovery at open: the slot table read against the commit word, one rule per case.
//!
//! `k` is the newest epoch a valid commit word holds. Each slot's entry is one of:
//!
//! Each word of an entry is written by one 8-byte store, so a crash never tears a word; it may
//! leave a new word 1 beside an old word 0 (they are two stores before one fence).
//!
//! | case | word 1 | epoch | word 0 | meaning | recovery |
//! |---|---|---|---|---|---|
//! | E0 | zero | - | - | free or clean | free |
//! | E1 | valid | k + 1 | any | written since the last commit (dirty at the crash; whole or cut between its words) | zero word 1: dropped |
//! | E2 | valid | at most k | valid | a committed (frozen) copy | keep: the newest epoch of its block is up to date, the others out of date |
//! | E3 | valid | at most k | fails its check bits | a committed copy damaged at rest | refuse to open, naming the slot |
//! | E4 | valid | above k + 1 | any | no protocol step writes this | refuse to open, naming the slot |
//! | E5 | two E2 entries of one block in one epoch | | | no protocol step writes this | refuse to open, naming both slots |
//! | E6 | fails its check bits | | | no store writes such a word: damage at rest | refuse to open, naming the slot |
//!
//! Commit words: both copies are written with the same value before one fence, so at a crash
//! each is old or new; the newest valid one is the state (the commit it names had its data
//! fenced before it). None valid: refuse to open.
//!
//! Every refusal is a finding (`Error::Finding`, exit 1), as nvramdisk's recovery's is: the
//! image is damaged, not the argument bad.

use crate::common::format::committed_epoch;
use crate::ubj::format::{decode_entry, Decoded, Entry, Layout};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::Region;
use std::collections::HashMap;

/// What the slot table holds after recovery's decisions (nothing is stored yet).
pub(crate) struct Found {
    /// The committed epoch.
    pub epoch: u64,
    /// Per slot: the committed entry it keeps, if any.
    pub kept: Vec<Option<Entry>>,
    /// Slots whose word 1 recovery zeroes (case E1).
    pub dropped: Vec<u32>,
}

/// Read every entry and decide its case (the table above); Err names the first damage.
/// `keep_uncommitted` is seeded bug recovery-keeps-uncommitted (E1 entries kept as frozen).
pub(crate) fn scan<R: Region + ?Sized>(
    region: &R,
    layout: &Layout,
    keep_uncommitted: bool,
) -> Result<Found> {
    let epoch = committed_epoch(region)?;
    let mut found = Found {
        epoch,
        kept: vec![None; layout.slots as usize],
        dropped: Vec::new(),
    };
    // (block, epoch) -> slot: two committed copies of one block in one epoch are case E5.
    let mut seen: HashMap<(u64, u64), u32> = HashMap::new();
    for slot in 0..layout.slots {
        let off = layout.entry_off(slot);
        let raw = [region.load_u64(off), region.load_u64(off + 8)];
        match decode_entry(slot, raw) {
            Decoded::Empty => {}
            Decoded::Entry(e) if e.seq == epoch + 1 && keep_uncommitted => {
                found.kept[slot as usize] = Some(e); // Seeded bug: an uncommitted copy kept
            }
            Decoded::Entry(e) if e.seq == epoch + 1 => found.dropped.push(slot),
            Decoded::Torn { seq } if seq == epoch + 1 => found.dropped.push(slot),
            Decoded::Entry(e) if e.seq <= epoch => {
                if let Some(other) = seen.insert((e.lba, e.seq), slot) {
                    return Err(Error::finding(format!(
                        "nvcache slots {other} and {slot} both hold block {} of epoch {}",
                        e.lba, e.seq
                    )));
                }
                found.kept[slot as usize] = Some(e);
            }
            Decoded::Torn { seq } if seq <= epoch => {
                return Err(Error::finding(format!(
                    "nvcache slot {slot}: the entry of a committed copy (epoch {seq}) fails \
                     its check bits"
                )))
            }
            Decoded::Damaged => {
                return Err(Error::finding(format!(
                    "nvcache slot {slot}: the entry's epoch word fails its check bits \
                     (damaged at rest)"
                )))
            }
            Decoded::Entry(Entry { seq, .. }) | Decoded::Torn { seq } => {
                return Err(Error::finding(format!(
                    "nvcache slot {slot}: an entry of epoch {seq}, but the last commit is \
                     epoch {epoch}"
                )))
            }
        }
    }
    debug_assert!(found
        .dropped
        .iter()
        .all(|&s| found.kept[s as usize].is_none()));
    Ok(found)
}
