//! The journal slot: its layout and codecs (docs/format.md section 5), encode beside decode.
//!
//! One 4 096-byte slot per lane holds one of two layouts, fixed by the protocol at format:
//!
//! ```text
//! paper   0 VPN | 8 L1 | 16 L2 | (line 0 ends) | 64 intent commit word | 128 intent:
//!         count u32, crc u32, (lba u64, new u64) x count
//! fast    0 record copy 1: seq u64, count u32, crc u32, (lba, old, new) x count
//!      2048 record copy 2 (the same bytes)
//! ```
//!
//! Every offset below is derived from the one before it, so that the layout's rules (the
//! replicas share the slot's first line, the commit word is alone in its line, the intent
//! starts on the line after it, the two record copies never overlap) are compile-time facts.
//! Each codec checks itself in debug builds: what is encoded decodes to the same value (at the
//! write) and what decodes re-encodes to the same bytes (at the read).

use super::layout::{ATOMIC_BLOCKS_MAX, SLOT_BYTES};
use nvstack_pmem::{CommitDomain, Method, Region};

/// The cache line: the unit a flush writes back, and so the unit write disturbance (seed 6.2)
/// can corrupt as a whole.
const LINE_BYTES: u64 = 64;
const WORD_BYTES: u64 = 8;

/// NULL in the paper protocol's LBA replicas (LBA 0 is a valid block).
pub const LBA_NULL: u64 = u64::MAX;

/// Paper slot: the VPN field (the new map entry word), then the two LBA replicas, all three in
/// the slot's first line.
pub const PAPER_VPN: u64 = 0;
pub const PAPER_L1: u64 = PAPER_VPN + WORD_BYTES;
pub const PAPER_L2: u64 = PAPER_L1 + WORD_BYTES;
/// The intent's commit word, alone in the second line: a write-back of the replicas' line (or
/// of the intent's) can never disturb it.
pub const PAPER_INTENT_COMMIT: u64 = LINE_BYTES;
/// The intent (count, CRC, entries) from the third line on.
pub const PAPER_INTENT: u64 = PAPER_INTENT_COMMIT + LINE_BYTES;
const PAPER_INTENT_HEADER: usize = 8;
const PAPER_INTENT_ENTRY: usize = 16;
pub(crate) const PAPER_INTENT_MAX: usize =
    PAPER_INTENT_HEADER + PAPER_INTENT_ENTRY * ATOMIC_BLOCKS_MAX;

/// Fast record: seq u64, count u32, crc u32, then (lba, old, new) per block.
pub const FAST_RECORD_HEADER: usize = 16;
pub const FAST_RECORD_ENTRY: usize = 24;
pub(crate) const FAST_RECORD_MAX: usize =
    FAST_RECORD_HEADER + FAST_RECORD_ENTRY * ATOMIC_BLOCKS_MAX;
/// The record is written twice, at the slot's start and at this offset (the slot's second
/// half), before one fence: a crash tears both copies alike (neither validates, nothing was
/// applied), while a media fault in one copy leaves the other to repair from.
pub const FAST_RECORD_REPLICA: u64 = SLOT_BYTES / 2;
/// A retired record has its first 16 bytes (seq, count and crc) zeroed.
const RECORD_RETIRED: [u8; FAST_RECORD_HEADER] = [0; FAST_RECORD_HEADER];

const _: () = assert!(PAPER_L2 + WORD_BYTES <= LINE_BYTES, "replicas share line 0");
const _: () = assert!(PAPER_INTENT as usize + PAPER_INTENT_MAX <= SLOT_BYTES as usize);
const _: () = assert!(
    FAST_RECORD_MAX as u64 <= FAST_RECORD_REPLICA,
    "copies overlap"
);
const _: () = assert!(FAST_RECORD_REPLICA as usize + FAST_RECORD_MAX <= SLOT_BYTES as usize);

/// A fast record's entries: (lba, old entry, new entry).
pub type RecordEntries = Vec<(u64, u64, u64)>;

fn get_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}
fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Encode a fast record into `out`; returns its length. Writes every byte of `out[..len]`, so
/// a reused buffer needs no clearing.
pub(crate) fn encode_fast_record(
    seq: u64,
    lbas: &[u64],
    olds: &[u64],
    news: &[u64],
    out: &mut [u8; FAST_RECORD_MAX],
) -> usize {
    let count = lbas.len();
    debug_assert!(seq != 0, "seq 0 means no record");
    debug_assert!((1..=ATOMIC_BLOCKS_MAX).contains(&count), "{count} entries");
    debug_assert!(olds.len() == count && news.len() == count);
    let len = FAST_RECORD_HEADER + count * FAST_RECORD_ENTRY;
    out[0..8].copy_from_slice(&seq.to_le_bytes());
    out[8..12].copy_from_slice(&(count as u32).to_le_bytes());
    for i in 0..count {
        let at = FAST_RECORD_HEADER + i * FAST_RECORD_ENTRY;
        out[at..at + 8].copy_from_slice(&lbas[i].to_le_bytes());
        out[at + 8..at + 16].copy_from_slice(&olds[i].to_le_bytes());
        out[at + 16..at + 24].copy_from_slice(&news[i].to_le_bytes());
    }
    let crc = fast_record_crc(&out[..len]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    // Pair assertion (the write): the bytes decode to the record encoded.
    #[cfg(debug_assertions)]
    {
        let (seq_back, entries) = decode_fast_record(&out[..len], true).expect("decodes");
        debug_assert_eq!(seq_back, seq);
        debug_assert!(entries
            .iter()
            .enumerate()
            .all(|(i, &entry)| entry == (lbas[i], olds[i], news[i])));
    }
    len
}

/// crc32c over the record with its crc field taken as zero.
fn fast_record_crc(record: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&record[..12]);
    let crc = crc32c::crc32c_append(crc, &[0u8; 4]);
    crc32c::crc32c_append(crc, &record[16..])
}

/// Decode the record in `bytes` (its header, and at least as many bytes as its count names):
/// None when seq is 0, the count is out of range, or (when `check_crc`) the CRC fails.
fn decode_fast_record(bytes: &[u8], check_crc: bool) -> Option<(u64, RecordEntries)> {
    let seq = get_u64(bytes, 0);
    let count = get_u32(bytes, 8) as usize;
    if seq == 0 || count == 0 || count > ATOMIC_BLOCKS_MAX {
        return None;
    }
    let len = FAST_RECORD_HEADER + count * FAST_RECORD_ENTRY;
    let record = &bytes[..len];
    if check_crc && get_u32(record, 12) != fast_record_crc(record) {
        return None;
    }
    let entries: RecordEntries = (0..count)
        .map(|i| {
            let at = FAST_RECORD_HEADER + i * FAST_RECORD_ENTRY;
            (
                get_u64(record, at),
                get_u64(record, at + 8),
                get_u64(record, at + 16),
            )
        })
        .collect();
    debug_assert_eq!(entries.len(), count);
    Some((seq, entries))
}

/// A decoded fast-protocol record (seq, entries), if either copy in the slot is complete.
pub fn read_fast_record<R: Region + ?Sized>(region: &R, slot: u64) -> Option<(u64, RecordEntries)> {
    read_fast_record_with(region, slot, true)
}

/// [`read_fast_record`], copy 1 first. Without `check_crc` (seeded bug
/// fast-record-crc-unchecked only) a copy is taken when its seq is non-zero and its count in
/// range.
pub(crate) fn read_fast_record_with<R: Region + ?Sized>(
    region: &R,
    slot: u64,
    check_crc: bool,
) -> Option<(u64, RecordEntries)> {
    read_fast_record_copy(region, slot, check_crc)
        .or_else(|| read_fast_record_copy(region, slot + FAST_RECORD_REPLICA, check_crc))
}

/// One copy of a slot's record.
fn read_fast_record_copy<R: Region + ?Sized>(
    region: &R,
    at: u64,
    check_crc: bool,
) -> Option<(u64, RecordEntries)> {
    let mut header = [0u8; FAST_RECORD_HEADER];
    region.read(at, &mut header);
    let count = get_u32(&header, 8) as usize;
    if get_u64(&header, 0) == 0 || count == 0 || count > ATOMIC_BLOCKS_MAX {
        return None;
    }
    let mut bytes = vec![0u8; FAST_RECORD_HEADER + count * FAST_RECORD_ENTRY];
    region.read(at, &mut bytes);
    let (seq, entries) = decode_fast_record(&bytes, check_crc)?;
    // Pair assertion (the read): a valid record re-encodes to the bytes read.
    #[cfg(debug_assertions)]
    if check_crc {
        let (lbas, olds, news) = split_entries(&entries);
        let mut again = [0u8; FAST_RECORD_MAX];
        let len = encode_fast_record(seq, &lbas, &olds, &news, &mut again);
        debug_assert!(
            again[..len] == bytes[..],
            "fast record re-encodes differently"
        );
    }
    Some((seq, entries))
}

#[cfg(debug_assertions)]
fn split_entries(entries: &[(u64, u64, u64)]) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    let lbas = entries.iter().map(|entry| entry.0).collect();
    let olds = entries.iter().map(|entry| entry.1).collect();
    let news = entries.iter().map(|entry| entry.2).collect();
    (lbas, olds, news)
}

/// Store the retirement of both copies of a slot's fast record (zeroed seq, count and CRC);
/// durable at the caller's next commit.
pub(crate) fn retire_record<R: Region + ?Sized>(
    domain: &mut CommitDomain,
    region: &R,
    method: Method,
    slot: u64,
) {
    domain.store(region, method, slot, &RECORD_RETIRED);
    domain.store(region, method, slot + FAST_RECORD_REPLICA, &RECORD_RETIRED);
}

/// True when either copy of the slot's record has a non-zero sequence word.
pub fn fast_slot_busy<R: Region + ?Sized>(region: &R, slot: u64) -> bool {
    region.load_u64(slot) != 0 || region.load_u64(slot + FAST_RECORD_REPLICA) != 0
}

/// The paper intent's commit word for sequence number `seq` and the intent's CRC32C `crc`:
/// the sequence number's low 32 bits (1 if they are 0, so the word is never 0) in the high
/// half, the CRC in the low half. The CRC binds the word to the one intent it commits.
pub fn paper_commit_word(seq: u64, crc: u32) -> u64 {
    let word = (u64::from((seq as u32).max(1)) << 32) | u64::from(crc);
    debug_assert!(word != 0 && word as u32 == crc);
    word
}

/// CRC32C of an intent: over its count, then its entries (its CRC field skipped).
fn paper_intent_crc(intent: &[u8]) -> u32 {
    crc32c::crc32c_append(
        crc32c::crc32c(&intent[0..4]),
        &intent[PAPER_INTENT_HEADER..],
    )
}

/// Encode an intent of (lba, new) pairs into `out`; returns (length, CRC).
pub(crate) fn encode_paper_intent(
    lbas: &[u64],
    news: &[u64],
    out: &mut [u8; PAPER_INTENT_MAX],
) -> (usize, u32) {
    let count = lbas.len();
    debug_assert!((2..=ATOMIC_BLOCKS_MAX).contains(&count), "{count} entries");
    debug_assert_eq!(news.len(), count);
    out[0..4].copy_from_slice(&(count as u32).to_le_bytes());
    for i in 0..count {
        let at = PAPER_INTENT_HEADER + i * PAPER_INTENT_ENTRY;
        out[at..at + 8].copy_from_slice(&lbas[i].to_le_bytes());
        out[at + 8..at + 16].copy_from_slice(&news[i].to_le_bytes());
    }
    let len = PAPER_INTENT_HEADER + count * PAPER_INTENT_ENTRY;
    let crc = paper_intent_crc(&out[..len]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    // Pair assertion (the write): the bytes decode to the intent encoded.
    #[cfg(debug_assertions)]
    {
        let (crc_back, entries) = decode_paper_intent(&out[..len]).expect("decodes");
        debug_assert_eq!(crc_back, crc);
        debug_assert!(entries
            .iter()
            .enumerate()
            .all(|(i, &e)| e == (lbas[i], news[i])));
    }
    (len, crc)
}

/// Decode an intent from its bytes (at least as many as its count names): (CRC, entries) if
/// its count is 1 to 64 and its CRC holds.
fn decode_paper_intent(bytes: &[u8]) -> Option<(u32, Vec<(u64, u64)>)> {
    let count = get_u32(bytes, 0) as usize;
    if count == 0 || count > ATOMIC_BLOCKS_MAX {
        return None;
    }
    let len = PAPER_INTENT_HEADER + count * PAPER_INTENT_ENTRY;
    let crc = get_u32(bytes, 4);
    if paper_intent_crc(&bytes[..len]) != crc {
        return None;
    }
    let entries: Vec<(u64, u64)> = bytes[PAPER_INTENT_HEADER..len]
        .chunks_exact(PAPER_INTENT_ENTRY)
        .map(|entry| (get_u64(entry, 0), get_u64(entry, 8)))
        .collect();
    debug_assert_eq!(entries.len(), count);
    Some((crc, entries))
}

/// The intent area of a paper slot, whatever the commit word says: (CRC, entries) if its
/// count is 1 to 64 and its CRC32C holds.
pub fn read_paper_intent_body<R: Region + ?Sized>(
    region: &R,
    slot: u64,
) -> Option<(u32, Vec<(u64, u64)>)> {
    let mut header = [0u8; PAPER_INTENT_HEADER];
    region.read(slot + PAPER_INTENT, &mut header);
    let count = get_u32(&header, 0) as usize;
    if count == 0 || count > ATOMIC_BLOCKS_MAX {
        return None;
    }
    let mut bytes = vec![0u8; PAPER_INTENT_HEADER + count * PAPER_INTENT_ENTRY];
    region.read(slot + PAPER_INTENT, &mut bytes);
    let (crc, entries) = decode_paper_intent(&bytes)?;
    // Pair assertion (the read): a valid intent re-encodes to the bytes read. (Only intents
    // of 2 or more entries are ever written; a valid 1-entry intent is not re-encoded.)
    #[cfg(debug_assertions)]
    if entries.len() >= 2 {
        let lbas: Vec<u64> = entries.iter().map(|entry| entry.0).collect();
        let news: Vec<u64> = entries.iter().map(|entry| entry.1).collect();
        let mut again = [0u8; PAPER_INTENT_MAX];
        let (len, _) = encode_paper_intent(&lbas, &news, &mut again);
        debug_assert!(again[..len] == bytes[..], "intent re-encodes differently");
    }
    Some((crc, entries))
}

/// A committed paper intent (commit word, entries): the commit word is non-zero, the intent
/// is valid (count 1 to 64, CRC holds) and the commit word's low half equals the intent's
/// CRC. Anything else commits nothing: in particular a stale intent left behind by an earlier
/// update never matches a commit word that was not written for it.
pub fn read_paper_intent<R: Region + ?Sized>(
    region: &R,
    slot: u64,
) -> Option<(u64, Vec<(u64, u64)>)> {
    let commit = region.load_u64(slot + PAPER_INTENT_COMMIT);
    if commit == 0 {
        return None;
    }
    let (crc, entries) = read_paper_intent_body(region, slot)?;
    (commit as u32 == crc).then_some((commit, entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_record_round_trips_and_rejects_damage() {
        let mut out = [0u8; FAST_RECORD_MAX];
        let len = encode_fast_record(7, &[1, 2], &[10, 20], &[11, 21], &mut out);
        assert_eq!(len, FAST_RECORD_HEADER + 2 * FAST_RECORD_ENTRY);
        let (seq, entries) = decode_fast_record(&out[..len], true).expect("valid");
        assert_eq!((seq, entries), (7, vec![(1, 10, 11), (2, 20, 21)]));
        let mut flipped = out;
        flipped[FAST_RECORD_HEADER + 9] ^= 1;
        assert!(
            decode_fast_record(&flipped[..len], true).is_none(),
            "crc caught"
        );
        assert!(
            decode_fast_record(&flipped[..len], false).is_some(),
            "crc unchecked"
        );
        let mut retired = out;
        retired[..FAST_RECORD_HEADER].copy_from_slice(&RECORD_RETIRED);
        assert!(
            decode_fast_record(&retired[..len], false).is_none(),
            "retired"
        );
    }

    #[test]
    fn paper_intent_round_trips_and_binds_its_commit_word() {
        let mut out = [0u8; PAPER_INTENT_MAX];
        let (len, crc) = encode_paper_intent(&[4, 9, 5], &[40, 90, 50], &mut out);
        assert_eq!(len, PAPER_INTENT_HEADER + 3 * PAPER_INTENT_ENTRY);
        let (crc_back, entries) = decode_paper_intent(&out[..len]).expect("valid");
        assert_eq!((crc_back, entries), (crc, vec![(4, 40), (9, 90), (5, 50)]));
        let word = paper_commit_word(1 << 32, crc);
        assert_eq!(word >> 32, 1, "a zero low half of seq becomes 1");
        assert_eq!(word as u32, crc);
        let mut flipped = out;
        flipped[PAPER_INTENT_HEADER + 3] ^= 0x10;
        assert!(decode_paper_intent(&flipped[..len]).is_none());
    }
}
