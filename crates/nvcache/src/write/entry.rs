//! The write cache's slot entry (docs/format.md 12.5, format version 2): four words, two
//! entries to a cache line. Words 0 to 2 each carry 16 check bits over the slot and their own
//! payload, so a word failing them is damage at rest (an aligned 8-byte store never tears a
//! word); word 2 also holds a CRC-32C over the entry AND its data, so a copy whose stores a
//! crash cut (some words or data lines new, others old) is told apart from a whole one without
//! any commit record: that is what lets a single-block write commit with one fence.

use crate::common::format::{LBA_MAX, SEQ_MAX};

/// Bytes of one entry (two to a 64-byte line).
pub const ENTRY_BYTES: u64 = 32;
/// Word 2's flag bits (above the CRC's 32).
const FLAG_TOMBSTONE: u64 = 1 << 32;
const FLAG_MULTI: u64 = 1 << 33;
const FLAGS: u64 = FLAG_TOMBSTONE | FLAG_MULTI;
const PAYLOAD: u64 = (1 << 48) - 1;
/// Tags keeping the three words' check bits and the entry CRC apart.
const TAG: [u64; 3] = [0xF0, 0xF1, 0xF2];

const TAG_CRC: u64 = 0xF3;

/// A slot's copy of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub lba: u64,
    /// The write's sequence number: of a block's whole copies, the highest is the block.
    pub seq: u64,
    /// A discard: the block reads as zeros; the slot's data is unused (and not checksummed).
    pub tombstone: bool,
    /// Part of a write of several blocks: whole only once the commit words reach `seq`.
    pub multi: bool,
}

/// What a slot's four words say (before its CRC is checked against the data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Word 1 (the sequence word) is zero: no copy (never written, or cleared).
    Empty,
    /// Every word present and passing its check bits: whole iff `crc` matches `crc_of` the
    /// entry and its data.
    Entry { entry: Entry, crc: u32 },
    /// A word still zero beside a written sequence word: a write a crash cut.
    Torn,
    /// A word failing its own check bits (or a reserved word not zero): no store writes such a
    /// word, so it is damage at rest; names the word.
    Damaged(&'static str),
}

/// 16 check bits over the word's tag, the slot and the payload: bit 15 set (a stored word is
/// never zero) and the top 15 bits of x x K mod 2^64, x the 48-bit payload XOR a key mixing
/// the tag and the slot, K odd. Every single flipped bit is caught (the unit test flips each
/// one): flipping payload bit b (b < 48) adds or subtracts K x 2^b, which changes the top 15
/// bits by K's bits 49 - b .. 64 - b plus a carry of 0 or 1, and no 15-bit window of K is all
/// zeros or all ones; a flipped check bit fails the comparison. A multiply instead of a
/// CRC-32C call per word: three calls measured about 60 ns of a 512 B write's 360.
fn word_check(i: usize, slot: u32, payload: u64) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let key = (u64::from(slot) << 2 | TAG[i] & 3).wrapping_mul(0xd6e8_feb8_6659_fd93);
    ((payload ^ key) & PAYLOAD).wrapping_mul(K) >> 49 | 0x8000
}

fn word(i: usize, slot: u32, payload: u64) -> u64 {
    debug_assert_eq!(payload & !PAYLOAD, 0);
    payload | word_check(i, slot, payload) << 48
}

fn flags(e: &Entry) -> u64 {
    (if e.tombstone { FLAG_TOMBSTONE } else { 0 }) | if e.multi { FLAG_MULTI } else { 0 }
}

/// CRC-32C over four little-endian u64 words (tag 0xF3 << 32 | slot, block, sequence, flags),
/// then (unless a tombstone) the data. `data: None` with a data block is seeded bug
/// checksum-skips-data (the header alone). The header is 8-byte aligned: the CRC's hardware
/// path then takes it in four 8-byte steps, not byte by byte.
pub fn crc_of(slot: u32, e: &Entry, data: Option<&[u8]>) -> u32 {
    #[repr(C, align(8))]
    struct Header([u8; 32]);
    let mut h = Header([0u8; 32]);
    let words = [TAG_CRC << 32 | u64::from(slot), e.lba, e.seq, flags(e)];
    for (i, w) in words.iter().enumerate() {
        h.0[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
    }
    // pmem's CRC-32C runs a sector as three interleaved streams (the crate's took a 512 B
    // sector as one chain of dependent instructions).
    let crc = nvstack_pmem::crc::crc32c(&h.0);
    match data {
        Some(d) if !e.tombstone => nvstack_pmem::crc::crc32c_append(crc, d),
        _ => crc,
    }
}

/// The entry's four words as stored (little-endian bytes), with `crc` (crc_of's).
pub fn encode(slot: u32, e: &Entry, crc: u32) -> [u8; ENTRY_BYTES as usize] {
    assert!(e.lba <= LBA_MAX && (1..=SEQ_MAX).contains(&e.seq), "{e:?}");
    let w = [
        word(0, slot, e.lba),
        word(1, slot, e.seq),
        word(2, slot, u64::from(crc) | flags(e)),
        0,
    ];
    let mut b = [0u8; ENTRY_BYTES as usize];
    for (i, x) in w.iter().enumerate() {
        b[8 * i..8 * i + 8].copy_from_slice(&x.to_le_bytes());
    }
    debug_assert_eq!(decode(slot, w), Decoded::Entry { entry: *e, crc });
    b
}

/// Decode a slot's four words (the data is checked by the caller against `crc`).
pub fn decode(slot: u32, w: [u64; 4]) -> Decoded {
    if w[1] == 0 {
        return Decoded::Empty;
    }
    const NAMES: [&str; 3] = ["block word", "sequence word", "checksum word"];
    for i in 0..3 {
        let p = w[i] & PAYLOAD;
        if w[i] != 0 && w[i] >> 48 != word_check(i, slot, p) {
            return Decoded::Damaged(NAMES[i]);
        }
    }
    if w[3] != 0 {
        return Decoded::Damaged("reserved word");
    }
    if w[2] & PAYLOAD & !(FLAGS | 0xffff_ffff) != 0 {
        return Decoded::Damaged("checksum word's flags");
    }
    if w[0] == 0 || w[2] == 0 || w[1] & PAYLOAD == 0 {
        return Decoded::Torn;
    }
    Decoded::Entry {
        entry: Entry {
            lba: w[0] & PAYLOAD,
            seq: w[1] & PAYLOAD,
            tombstone: w[2] & FLAG_TOMBSTONE != 0,
            multi: w[2] & FLAG_MULTI != 0,
        },
        crc: w[2] as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(b: &[u8; 32]) -> [u64; 4] {
        std::array::from_fn(|i| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap()))
    }

    #[test]
    fn entries_round_trip_and_every_flipped_bit_or_tear_is_seen() {
        let e = Entry {
            lba: 77,
            seq: 9,
            tombstone: false,
            multi: true,
        };
        let data = vec![5u8; 512];
        let crc = crc_of(3, &e, Some(&data));
        let w = words(&encode(3, &e, crc));
        assert_eq!(decode(3, w), Decoded::Entry { entry: e, crc });
        assert_ne!(crc, crc_of(3, &e, Some(&[6u8; 512])), "the data is covered");
        // The CRC-32C of the four header words followed by the data, computed in one pass.
        let mut whole = Vec::new();
        for w in [0xF3u64 << 32 | 3, 77, 9, 1 << 33] {
            whole.extend_from_slice(&w.to_le_bytes());
        }
        whole.extend_from_slice(&data);
        assert_eq!(
            crc,
            crc32c::crc32c(&whole),
            "docs/format.md 12.5's definition"
        );
        assert_ne!(crc, crc_of(4, &e, Some(&data)), "the slot is covered");
        assert!(
            matches!(decode(4, w), Decoded::Damaged(_)),
            "another slot's entry"
        );
        for word in 0..4 {
            for bit in 0..64 {
                let mut f = w;
                f[word] ^= 1 << bit;
                match decode(3, f) {
                    Decoded::Damaged(_) | Decoded::Empty => {}
                    other => panic!("word {word} bit {bit}: {other:?}"),
                }
            }
        }
        // A crash that stored the sequence word alone, or left an old word beside it.
        assert_eq!(decode(3, [0, w[1], 0, 0]), Decoded::Torn);
        let old = Entry { lba: 5, ..e };
        let o = words(&encode(3, &old, crc_of(3, &old, Some(&data))));
        match decode(3, [o[0], w[1], w[2], 0]) {
            Decoded::Entry { entry, crc } => assert_ne!(crc, crc_of(3, &entry, Some(&data))),
            other => panic!("{other:?}"),
        }
        assert_eq!(decode(3, [w[0], 0, w[2], 0]), Decoded::Empty, "cleared");
    }
}
