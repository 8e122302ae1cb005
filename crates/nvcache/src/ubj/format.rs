//! The on-media format of a UBJ cache (docs/format.md, "nvcache"): the region's layout, the
//! superblock, the slot entries and the records in the superblock's block (the commit word,
//! the path record and the label are common::format's).
//!
//! Media assumptions (the same as nvramdisk's): an aligned 8-byte non-temporal store reaches
//! media whole (old or new, never a mix); stores before a fence are durable when it returns, in
//! no particular order among themselves; nothing is durable before a fence. Every encoder has
//! its decoder beside it, and each encode checks in debug builds that its output decodes to its
//! input (the pair assertion at the write; the decoders' checks are the one at the read).

use crate::common::format::{check16, LBA_MAX, SEQ_MAX};
use nvstack_core::error::{Error, Result, FIELD};

/// The superblock's magic: "NVSCACHE".
pub const MAGIC: u64 = u64::from_le_bytes(*b"NVSCACHE");
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;
/// The one block size (bytes) of the cache, the backing device and the device it exports.
pub const BLOCK_BYTES: u32 = 4096;
// UBJ's blocks are the backing device's: a checkpoint writes a slot to one backing block.
const _: () = assert!(BLOCK_BYTES == crate::common::format::BACKING_BLOCK_BYTES);
/// Offset of the superblock (one 4 KiB block, written at create and when settings change).
pub const SUPERBLOCK_OFF: u64 = 0;
pub use crate::common::format::{SLOTS_MAX, TABLE_OFF};
/// Bytes of one slot entry: two 8-byte words.
pub const ENTRY_BYTES: u64 = 16;
/// Fewest and most slots a cache may have.
pub const SLOTS_MIN: u32 = 16;
/// An entry's word 0 has this bit set for a discard (a tombstone: the block reads as zeros and
/// its backing hole is punched at checkpoint). Its slot's data is unused.
const TOMBSTONE_BIT: u64 = 1 << 62;

/// Where everything lives in a region of `slots` slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub slots: u32,
    /// Offset of slot 0's data (4 KiB aligned, after the table).
    pub data_off: u64,
    /// Bytes the region needs.
    pub region_bytes: u64,
}

impl Layout {
    pub fn new(slots: u32) -> Layout {
        assert!((SLOTS_MIN..=SLOTS_MAX).contains(&slots), "slots {slots}");
        let table_end = TABLE_OFF + u64::from(slots) * ENTRY_BYTES;
        let data_off = table_end.div_ceil(u64::from(BLOCK_BYTES)) * u64::from(BLOCK_BYTES);
        let region_bytes = data_off + u64::from(slots) * u64::from(BLOCK_BYTES);
        Layout {
            slots,
            data_off,
            region_bytes,
        }
    }

    /// The most slots a region of `bytes` holds (None when not even SLOTS_MIN fit).
    pub fn fitting(bytes: u64) -> Option<Layout> {
        let per_slot = ENTRY_BYTES + u64::from(BLOCK_BYTES);
        let guess = (bytes.saturating_sub(TABLE_OFF) / per_slot).min(u64::from(SLOTS_MAX));
        let mut slots = u32::try_from(guess).ok()?;
        while slots >= SLOTS_MIN && Layout::new(slots).region_bytes > bytes {
            slots -= 1;
        }
        (slots >= SLOTS_MIN).then(|| Layout::new(slots))
    }

    pub fn entry_off(&self, slot: u32) -> u64 {
        debug_assert!(slot < self.slots);
        TABLE_OFF + u64::from(slot) * ENTRY_BYTES
    }

    pub fn data_off(&self, slot: u32) -> u64 {
        debug_assert!(slot < self.slots);
        self.data_off + u64::from(slot) * u64::from(BLOCK_BYTES)
    }
}

/// A slot entry as stored: which block, which epoch wrote it, a discard or data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub lba: u64,
    /// The epoch this copy belongs to: committed when at most the commit word's epoch.
    pub seq: u64,
    pub tombstone: bool,
}

/// What a slot's two words say. Word 1 (the epoch and its own check bits) decides: zero means
/// no copy (freeing a slot stores only that word, which an aligned 8-byte store makes atomic).
/// Each word is written by one 8-byte store, so no crash tears a word: a word failing its own
/// check bits is damage at rest. Word 0 (block, tombstone, check bits over the slot, itself
/// and the epoch) may be stale beside a new word 1: a crash between the two stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Word 1 is zero: the slot holds no copy recovery must keep (free or clean).
    Empty,
    Entry(Entry),
    /// Word 1 is valid (epoch `seq`) but word 0 does not belong to it: written after the last
    /// commit and cut (seq = k + 1), or damaged (recovery's table, recover.rs).
    Torn {
        seq: u64,
    },
    /// Word 1 fails its own check bits: no store writes such a word.
    Damaged,
}

/// Check bits of word 1: over the slot and the epoch; never zero, so that a word 1 has at
/// least two bits set and no single flipped bit turns it into an empty slot's zero.
fn word1_check(slot: u32, seq: u64) -> u64 {
    check16(&[0xE1, u64::from(slot), seq]).max(1)
}

/// Check bits of word 0 (14 of them): over the slot, the block and tombstone, and the epoch.
fn word0_check(slot: u32, body: u64, seq: u64) -> u64 {
    check16(&[0xE0, u64::from(slot), body, seq]) & WORD0_CHECK_MASK
}

/// Bits 48..62 of word 0 hold its check bits.
const WORD0_CHECK_SHIFT: u32 = 48;
const WORD0_CHECK_MASK: u64 = (1 << 14) - 1;

/// Encode `e` for `slot` (the check bits are keyed by the slot, so an entry written into the
/// wrong slot fails them).
pub fn encode_entry(slot: u32, e: Entry) -> [u64; 2] {
    assert!(e.lba <= LBA_MAX && e.seq >= 1 && e.seq <= SEQ_MAX, "{e:?}");
    let body = e.lba | if e.tombstone { TOMBSTONE_BIT } else { 0 };
    let w0 = body | word0_check(slot, body, e.seq) << WORD0_CHECK_SHIFT;
    let w1 = e.seq | word1_check(slot, e.seq) << 48;
    debug_assert_ne!(w1, 0);
    debug_assert_eq!(decode_entry(slot, [w0, w1]), Decoded::Entry(e));
    [w0, w1]
}

pub fn decode_entry(slot: u32, raw: [u64; 2]) -> Decoded {
    let [w0, w1] = raw;
    if w1 == 0 {
        return Decoded::Empty;
    }
    let seq = w1 & SEQ_MAX;
    if seq == 0 || w1 >> 48 != word1_check(slot, seq) {
        return Decoded::Damaged;
    }
    let body = w0 & (LBA_MAX | TOMBSTONE_BIT);
    let known = LBA_MAX | TOMBSTONE_BIT | WORD0_CHECK_MASK << WORD0_CHECK_SHIFT;
    if w0 & !known != 0
        || (w0 >> WORD0_CHECK_SHIFT) & WORD0_CHECK_MASK != word0_check(slot, body, seq)
    {
        return Decoded::Torn { seq };
    }
    Decoded::Entry(Entry {
        lba: w0 & LBA_MAX,
        seq,
        tombstone: w0 & TOMBSTONE_BIT != 0,
    })
}

/// Settings stored at create; `serve` may override them for one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Settings {
    /// Commit when this many blocks are dirty (0: off).
    pub autocommit_blocks: u32,
    /// Commit when the oldest dirty block is this old (0: off).
    pub autocommit_ms: u32,
    /// Checkpoint when frozen slots exceed this percentage of the slots...
    pub high_watermark_pct: u8,
    /// ...until they are at most this percentage.
    pub low_watermark_pct: u8,
    /// Checkpoint everything frozen this often (0: off).
    pub checkpoint_ms: u32,
    /// The replacement policy of clean slots (LRU, CLOCK or random).
    pub policy: PolicyName,
}

/// The replacement policies of clean slots, as stored (one byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyName {
    Lru = 1,
    Random = 2,
    Clock = 3,
}

impl PolicyName {
    pub fn parse(s: &str) -> Option<PolicyName> {
        match s {
            "lru" => Some(PolicyName::Lru),
            "random" => Some(PolicyName::Random),
            "clock" => Some(PolicyName::Clock),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            PolicyName::Lru => "lru",
            PolicyName::Random => "random",
            PolicyName::Clock => "clock",
        }
    }
    fn from_byte(b: u8) -> Option<PolicyName> {
        [PolicyName::Lru, PolicyName::Random, PolicyName::Clock]
            .into_iter()
            .find(|p| *p as u8 == b)
    }
}

impl Default for Settings {
    /// dm-writecache's defaults: 64 blocks or 1000 ms to a commit, 50 % and 45 % watermarks.
    fn default() -> Settings {
        Settings {
            autocommit_blocks: 64,
            autocommit_ms: 1000,
            high_watermark_pct: 50,
            low_watermark_pct: 45,
            checkpoint_ms: 0,
            policy: PolicyName::Lru,
        }
    }
}

impl Settings {
    /// The settings in a sentence (status lines, create's report).
    pub fn describe(&self) -> String {
        let autocommit = match (self.autocommit_blocks, self.autocommit_ms) {
            (0, 0) => "autocommit off (only a flush commits)".to_string(),
            (n, 0) => format!("autocommit at {n} dirty blocks"),
            (0, t) => format!("autocommit after {t} ms"),
            (n, t) => format!("autocommit at {n} dirty blocks or after {t} ms"),
        };
        let timer = match self.checkpoint_ms {
            0 => String::new(),
            t => format!(" and every {t} ms"),
        };
        format!(
            "{autocommit}; checkpoint above {} % frozen down to {} %{timer}; policy {}",
            self.high_watermark_pct,
            self.low_watermark_pct,
            self.policy.name()
        )
    }

    /// Refuse settings that cannot work, naming the field.
    pub fn validate(&self) -> Result<()> {
        if self.high_watermark_pct == 0 || self.high_watermark_pct > 100 {
            return Err(Error::invalid(
                "high_watermark_pct",
                format!("{FIELD} {} %: must be 1 to 100", self.high_watermark_pct),
            ));
        }
        if self.low_watermark_pct >= self.high_watermark_pct {
            return Err(Error::invalid(
                "low_watermark_pct",
                format!(
                    "{FIELD} {} % must be below the high watermark ({} %)",
                    self.low_watermark_pct, self.high_watermark_pct
                ),
            ));
        }
        Ok(())
    }
}

/// The superblock: fixed at create except the settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub slots: u32,
    /// Blocks the cache exports (the backing device has one more: its label).
    pub blocks: u64,
    /// The identity the backing label must carry.
    pub identity: u128,
    pub settings: Settings,
}

/// Bytes of the superblock before its checksum.
const SB_BODY_BYTES: usize = 64;
/// Bytes the superblock is stored as (the body, the checksum, zeros): whole 8-byte words.
pub const SB_BYTES: usize = 128;

impl Superblock {
    /// Most blocks of one write: it lands whole in one epoch, so it must fit the cache after a
    /// full checkpoint (half the slots), and at most nvramdisk's unit (64).
    pub fn unit_blocks(&self) -> u32 {
        crate::ubj::WRITE_BLOCKS_MAX.min(self.slots / 2)
    }

    pub fn encode(&self) -> [u8; SB_BYTES] {
        let mut b = [0u8; SB_BYTES];
        let s = &self.settings;
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&BLOCK_BYTES.to_le_bytes());
        b[16..20].copy_from_slice(&self.slots.to_le_bytes());
        b[20..28].copy_from_slice(&self.blocks.to_le_bytes());
        b[28..44].copy_from_slice(&self.identity.to_le_bytes());
        b[44..48].copy_from_slice(&s.autocommit_blocks.to_le_bytes());
        b[48..52].copy_from_slice(&s.autocommit_ms.to_le_bytes());
        b[52..56].copy_from_slice(&s.checkpoint_ms.to_le_bytes());
        b[56] = s.high_watermark_pct;
        b[57] = s.low_watermark_pct;
        b[58] = s.policy as u8;
        let crc = crc32c::crc32c(&b[..SB_BODY_BYTES]);
        b[SB_BODY_BYTES..SB_BODY_BYTES + 4].copy_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(Superblock::decode(&b).ok(), Some(*self));
        b
    }

    /// Decode, naming the first thing wrong.
    pub fn decode(b: &[u8]) -> Result<Superblock> {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        if b.len() < SB_BODY_BYTES + 4 || u64_at(0) != MAGIC {
            return Err(Error::bad("not an nvcache image (no NVSCACHE magic)"));
        }
        if u32_at(8) != VERSION {
            return Err(Error::bad(format!(
                "nvcache format version {} (this program reads {VERSION})",
                u32_at(8)
            )));
        }
        if u32_at(SB_BODY_BYTES) != crc32c::crc32c(&b[..SB_BODY_BYTES]) {
            return Err(Error::bad("nvcache superblock fails its checksum"));
        }
        let policy = PolicyName::from_byte(b[58])
            .ok_or_else(|| Error::bad(format!("nvcache superblock: policy byte {}", b[58])))?;
        let sb = Superblock {
            slots: u32_at(16),
            blocks: u64_at(20),
            identity: u128::from_le_bytes(b[28..44].try_into().unwrap()),
            settings: Settings {
                autocommit_blocks: u32_at(44),
                autocommit_ms: u32_at(48),
                checkpoint_ms: u32_at(52),
                high_watermark_pct: b[56],
                low_watermark_pct: b[57],
                policy,
            },
        };
        if u32_at(12) != BLOCK_BYTES || !(SLOTS_MIN..=SLOTS_MAX).contains(&sb.slots) {
            return Err(Error::bad(format!(
                "nvcache superblock: block size {} and {} slots are not a geometry this \
                 program writes",
                u32_at(12),
                sb.slots
            )));
        }
        sb.settings.validate()?;
        Ok(sb)
    }
}

/// Offset of the counters record (in the superblock's block, after the superblock).
pub const COUNTERS_OFF: u64 = 128;
/// Offset of the backing path record (in the superblock's block, to its end).
pub const PATH_OFF: u64 = 512;
// The path record runs from here to the end of the superblock's block.
const _: () = assert!(crate::common::format::PATH_BYTES_MAX == 4096 - PATH_OFF as usize - 8);
/// Offset of the backing-error record (in the superblock's block, before the path record).
pub const ERROR_OFF: u64 = 256;
/// Bytes of the backing-error record: magic, epoch, time, length, checksum, message.
pub const ERROR_BYTES: usize = 256;
/// Most bytes of its message (a longer one is cut at a character boundary, marked by "...").
const ERROR_TEXT_MAX: usize = ERROR_BYTES - 32;
/// The backing-error record's magic: "NVSERROR".
const ERROR_MAGIC: u64 = u64::from_le_bytes(*b"NVSERROR");
/// The counters record's magic: "NVSCOUNT".
const COUNTERS_MAGIC: u64 = u64::from_le_bytes(*b"NVSCOUNT");
/// Bytes of the counters record: magic, eight counters, checksum, zeros.
pub const COUNTERS_BYTES: usize = 80;

/// The last backing-device error: stored when the cache enters its error state (writes and
/// detach refused, data kept), so that `status` shows it after the process is gone.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BackingError {
    /// The committed epoch when it happened.
    pub epoch: u64,
    /// Seconds since the Unix epoch.
    pub unix_secs: u64,
    pub message: String,
}

impl BackingError {
    pub fn encode(&self) -> [u8; ERROR_BYTES] {
        let mut text = self.message.as_str();
        let cut = text.len() > ERROR_TEXT_MAX;
        if cut {
            let mut end = ERROR_TEXT_MAX - 3;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text = &text[..end];
        }
        let mut b = [0u8; ERROR_BYTES];
        b[0..8].copy_from_slice(&ERROR_MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&self.epoch.to_le_bytes());
        b[16..24].copy_from_slice(&self.unix_secs.to_le_bytes());
        let mut body = text.as_bytes().to_vec();
        if cut {
            body.extend_from_slice(b"...");
        }
        b[24..28].copy_from_slice(&(body.len() as u32).to_le_bytes());
        b[32..32 + body.len()].copy_from_slice(&body);
        let crc = crc32c::crc32c(&[&b[..28], &b[32..]].concat());
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        debug_assert!(BackingError::decode(&b).is_some());
        b
    }

    /// None when there is no record (or a torn one: a crash while it was stored).
    pub fn decode(b: &[u8]) -> Option<BackingError> {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let len = u32::from_le_bytes(b[24..28].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(b[28..32].try_into().unwrap());
        if u64_at(0) != ERROR_MAGIC || len > ERROR_TEXT_MAX {
            return None;
        }
        if crc != crc32c::crc32c(&[&b[..28], &b[32..ERROR_BYTES]].concat()) {
            return None;
        }
        Some(BackingError {
            epoch: u64_at(8),
            unix_secs: u64_at(16),
            message: String::from_utf8_lossy(&b[32..32 + len]).into_owned(),
        })
    }
}

/// Counters over the cache's life, folded in at every clean close (`Ubj::save_counters`): a
/// run that ends in a crash loses its counts, never the cache's data. Not part of any commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    pub read_hits: u64,
    pub read_misses: u64,
    pub commits: u64,
    pub commits_forced: u64,
    pub checkpoints: u64,
    pub fences: u64,
    pub user_bytes_written: u64,
    pub backing_bytes_written: u64,
}

impl Counters {
    fn words(&self) -> [u64; 8] {
        [
            self.read_hits,
            self.read_misses,
            self.commits,
            self.commits_forced,
            self.checkpoints,
            self.fences,
            self.user_bytes_written,
            self.backing_bytes_written,
        ]
    }

    pub fn encode(&self) -> [u8; COUNTERS_BYTES] {
        let mut b = [0u8; COUNTERS_BYTES];
        b[0..8].copy_from_slice(&COUNTERS_MAGIC.to_le_bytes());
        for (i, w) in self.words().iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..72]);
        b[72..76].copy_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(Counters::decode(&b), Some(*self));
        b
    }

    /// None when the record is absent or torn (a crash during a close).
    pub fn decode(b: &[u8]) -> Option<Counters> {
        let w = |i: usize| u64::from_le_bytes(b[8 + 8 * i..16 + 8 * i].try_into().unwrap());
        let crc = u32::from_le_bytes(b[72..76].try_into().unwrap());
        if b[0..8] != COUNTERS_MAGIC.to_le_bytes() || crc != crc32c::crc32c(&b[..72]) {
            return None;
        }
        Some(Counters {
            read_hits: w(0),
            read_misses: w(1),
            commits: w(2),
            commits_forced: w(3),
            checkpoints: w(4),
            fences: w(5),
            user_bytes_written: w(6),
            backing_bytes_written: w(7),
        })
    }

    /// These counters plus `o`'s (saturating: a counter stops rather than wraps).
    pub fn plus(&self, o: &Counters) -> Counters {
        let (a, b) = (self.words(), o.words());
        let s = |i: usize| a[i].saturating_add(b[i]);
        Counters {
            read_hits: s(0),
            read_misses: s(1),
            commits: s(2),
            commits_forced: s(3),
            checkpoints: s(4),
            fences: s(5),
            user_bytes_written: s(6),
            backing_bytes_written: s(7),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::format::{
        decode_commit, decode_path, encode_commit, encode_path, Label, PATH_BYTES_MAX,
    };

    #[test]
    fn entries_round_trip_and_catch_a_wrong_slot_or_a_flipped_bit() {
        let e = Entry {
            lba: 12345,
            seq: 7,
            tombstone: false,
        };
        let raw = encode_entry(3, e);
        assert_eq!(decode_entry(3, raw), Decoded::Entry(e));
        assert_eq!(decode_entry(4, raw), Decoded::Damaged, "misdirected");
        for bit in 0..64 {
            let mut r = raw;
            r[0] ^= 1 << bit;
            assert_eq!(
                decode_entry(3, r),
                Decoded::Torn { seq: 7 },
                "word 0 bit {bit}"
            );
            let mut r = raw;
            r[1] ^= 1 << bit;
            assert_eq!(decode_entry(3, r), Decoded::Damaged, "word 1 bit {bit}");
        }
        let stale_word0 = encode_entry(3, Entry { lba: 9, ..e })[0];
        assert_eq!(
            decode_entry(3, [stale_word0, encode_entry(3, Entry { seq: 8, ..e })[1]]),
            Decoded::Torn { seq: 8 },
            "a new word 1 beside an old word 0"
        );
        assert_eq!(decode_entry(3, [0, 0]), Decoded::Empty);
        assert_eq!(
            decode_entry(3, [raw[0], 0]),
            Decoded::Empty,
            "word 1 alone frees"
        );
        let t = Entry {
            tombstone: true,
            ..e
        };
        assert_eq!(decode_entry(9, encode_entry(9, t)), Decoded::Entry(t));
    }

    #[test]
    fn commit_words_round_trip_and_zero_is_none() {
        for epoch in [0, 1, 2, 1 << 40, SEQ_MAX] {
            assert_eq!(decode_commit(encode_commit(epoch)), Some(epoch));
            for bit in 0..64 {
                assert_eq!(
                    decode_commit(encode_commit(epoch) ^ 1 << bit),
                    None,
                    "bit {bit}"
                );
            }
        }
        assert_eq!(decode_commit(0), None, "a zeroed region has no commit word");
    }

    #[test]
    fn superblock_and_label_round_trip_and_refuse_damage() {
        let sb = Superblock {
            slots: 100,
            blocks: 1 << 20,
            identity: 0xdead_beef_u128 << 64 | 42,
            settings: Settings::default(),
        };
        let mut b = sb.encode();
        assert_eq!(Superblock::decode(&b).unwrap(), sb);
        b[20] ^= 1;
        assert!(Superblock::decode(&b)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
        let l = Label {
            identity: 5,
            blocks: 77,
            detached: true,
        };
        let mut b = l.encode();
        assert_eq!(Label::decode(&b).unwrap(), l);
        b[30] ^= 4;
        assert!(Label::decode(&b).is_err());
    }

    #[test]
    fn path_and_counters_round_trip_and_refuse_damage() {
        let mut b = encode_path("/var/tmp/backing.img").unwrap();
        b.resize(4096 - PATH_OFF as usize, 0);
        assert_eq!(decode_path(&b).unwrap(), "/var/tmp/backing.img");
        b[12] ^= 1;
        assert!(decode_path(&b)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
        assert!(decode_path(&[0u8; 64]).is_err(), "an absent record");
        assert!(encode_path("").is_err());
        assert!(encode_path(&"x".repeat(PATH_BYTES_MAX + 1)).is_err());
        assert!(COUNTERS_OFF as usize + COUNTERS_BYTES <= ERROR_OFF as usize);
        assert!(ERROR_OFF as usize + ERROR_BYTES <= PATH_OFF as usize);
        let e = BackingError {
            epoch: 9,
            unix_secs: 1_700_000_000,
            message: "backing.img: write: Input/output error".into(),
        };
        let mut b = e.encode();
        assert_eq!(BackingError::decode(&b), Some(e));
        b[40] ^= 1;
        assert_eq!(BackingError::decode(&b), None, "torn");
        assert_eq!(BackingError::decode(&[0u8; ERROR_BYTES]), None, "absent");
        let long = BackingError {
            epoch: 1,
            unix_secs: 2,
            message: "é".repeat(300),
        };
        let back = BackingError::decode(&long.encode()).unwrap().message;
        assert!(
            back.ends_with("...") && back.len() <= ERROR_BYTES - 32,
            "{back}"
        );
        let c = Counters {
            read_hits: 1,
            commits: 3,
            backing_bytes_written: u64::MAX,
            ..Default::default()
        };
        let mut b = c.encode();
        assert_eq!(Counters::decode(&b), Some(c));
        assert_eq!(c.plus(&c).backing_bytes_written, u64::MAX, "saturates");
        assert_eq!(c.plus(&c).commits, 6);
        b[30] ^= 2;
        assert_eq!(Counters::decode(&b), None);
        assert_eq!(Counters::decode(&[0u8; COUNTERS_BYTES]), None);
    }

    #[test]
    fn layouts_fit_their_region() {
        for slots in [SLOTS_MIN, 100, 4096, 1 << 20] {
            let l = Layout::new(slots);
            assert_eq!(l.data_off % u64::from(BLOCK_BYTES), 0);
            assert!(l.data_off >= l.entry_off(slots - 1) + ENTRY_BYTES);
            assert_eq!(Layout::fitting(l.region_bytes), Some(l));
        }
        assert_eq!(Layout::fitting(4096), None);
    }
}
