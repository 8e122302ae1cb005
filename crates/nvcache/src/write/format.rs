//! The on-media format of a write cache (docs/format.md section 12): its superblock, settings,
//! admission record and counters. The commit words are UBJ's encoding (format.rs,
//! docs/format.md 10.4) at the same offsets; the slot entries are the write cache's own
//! (write/entry.rs, 12.5); the slots' data is `sector_bytes` per slot.

/// The commit words' offsets (UBJ's).
pub use crate::common::format::COMMIT_OFF;
use crate::common::format::{SLOTS_MAX, TABLE_OFF};
use crate::write::entry::ENTRY_BYTES;
use nvstack_core::error::{Error, Result, FIELD};
use std::ops::Range;

/// The write cache superblock's magic: "NVSWCACH".
pub const MAGIC: u64 = u64::from_le_bytes(*b"NVSWCACH");
/// The format version this code writes and reads (2: one-fence writes, entries checksumming
/// their data; a version 1 image is refused, naming what to do).
pub const VERSION: u32 = 2;
/// Bytes the superblock is stored as.
pub const SB_BYTES: usize = 128;
/// Offset of the counters record (outside every write: a crash loses counts, never data).
pub const COUNTERS_OFF: u64 = 128;
/// Offset of the admission record (block ranges; written at create).
pub const ADMIT_OFF: u64 = 512;
/// Bytes of the admission record: 16 bytes of header, then 16 per range.
pub const ADMIT_BYTES: usize = 1536;
/// Most block ranges `--admit LBA..LBA` may give.
pub const RANGES_MAX: usize = (ADMIT_BYTES - 16) / 16;
/// Offset of the backing path record (format.rs's encoding) to the end of the first block.
pub const PATH_OFF: u64 = 2048;
/// Most bytes of the path record (header included).
pub const PATH_BYTES: usize = 4096 - PATH_OFF as usize;
const ADMIT_MAGIC: u64 = u64::from_le_bytes(*b"NVSADMIT");
const COUNTERS_MAGIC: u64 = u64::from_le_bytes(*b"NVSWCCNT");

/// Fewest slots a write cache may have: one block and the spare slot its overwrite lands in
/// (copy-on-write, 12.4). Why not UBJ's 16: the seed's sweep starts at 1 KB of NVRAM (two
/// 512-byte sectors, three slots), and nothing in the write cache's protocol needs more
/// (`unit_blocks` is half the slots, at least one).
pub const SLOTS_MIN: u32 = 2;

/// Where everything lives in a region of `slots` slots of `sector_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub slots: u32,
    pub sector_bytes: u32,
    /// Offset of slot 0's data (4 KiB aligned, after the table).
    pub data_off: u64,
    pub region_bytes: u64,
}

impl Layout {
    pub fn new(slots: u32, sector_bytes: u32) -> Layout {
        assert!((SLOTS_MIN..=SLOTS_MAX).contains(&slots), "slots {slots}");
        assert!(valid_sector(sector_bytes), "sector {sector_bytes}");
        let table_end = TABLE_OFF + u64::from(slots) * ENTRY_BYTES;
        let data_off = table_end.div_ceil(4096) * 4096;
        Layout {
            slots,
            sector_bytes,
            data_off,
            region_bytes: data_off + u64::from(slots) * u64::from(sector_bytes),
        }
    }

    /// The most slots a region of `bytes` holds (None when not even SLOTS_MIN fit).
    pub fn fitting(bytes: u64, sector_bytes: u32) -> Option<Layout> {
        let per_slot = ENTRY_BYTES + u64::from(sector_bytes);
        let guess = (bytes.saturating_sub(TABLE_OFF) / per_slot).min(u64::from(SLOTS_MAX));
        let mut slots = u32::try_from(guess).ok()?;
        while slots >= SLOTS_MIN && Layout::new(slots, sector_bytes).region_bytes > bytes {
            slots -= 1;
        }
        (slots >= SLOTS_MIN).then(|| Layout::new(slots, sector_bytes))
    }

    pub fn entry_off(&self, slot: u32) -> u64 {
        debug_assert!(slot < self.slots);
        TABLE_OFF + u64::from(slot) * ENTRY_BYTES
    }

    pub fn data_off(&self, slot: u32) -> u64 {
        debug_assert!(slot < self.slots);
        self.data_off + u64::from(slot) * u64::from(self.sector_bytes)
    }
}

/// 512 bytes (the seed's sector) or 4096 (a backing device's block).
pub fn valid_sector(b: u32) -> bool {
    b == 512 || b == 4096
}

/// The destage order (`--policy`), as stored (one byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DestagePolicy {
    /// Least recently written (the seed's).
    Lrw = 1,
    /// Least recently used (reads and writes).
    Lru = 2,
    Clock = 3,
    Random = 4,
}

impl DestagePolicy {
    pub const ALL: [DestagePolicy; 4] = [
        DestagePolicy::Lrw,
        DestagePolicy::Lru,
        DestagePolicy::Clock,
        DestagePolicy::Random,
    ];
    pub fn parse(s: &str) -> Option<DestagePolicy> {
        DestagePolicy::ALL.into_iter().find(|p| p.name() == s)
    }
    pub fn name(self) -> &'static str {
        match self {
            DestagePolicy::Lrw => "lrw",
            DestagePolicy::Lru => "lru",
            DestagePolicy::Clock => "clock",
            DestagePolicy::Random => "random",
        }
    }
    fn from_byte(b: u8) -> Option<DestagePolicy> {
        DestagePolicy::ALL.into_iter().find(|p| *p as u8 == b)
    }
}

/// Which writes the cache takes (the others go to the backing device).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Admit {
    /// Every write (the default): every write is durable on return.
    All,
    /// Writes inside these block ranges (half-open, sorted, disjoint).
    Ranges(Vec<Range<u64>>),
    /// The metadata of a FAT volume at block 0 (fat.rs), found at open.
    FatMetadata,
}

impl Admit {
    fn code(&self) -> u8 {
        match self {
            Admit::All => 0,
            Admit::Ranges(_) => 1,
            Admit::FatMetadata => 2,
        }
    }

    /// Sort and merge `ranges`, refusing empty ones, ones past `blocks`, and too many.
    pub fn ranges(mut ranges: Vec<Range<u64>>, blocks: u64) -> Result<Admit> {
        for r in &ranges {
            if r.start >= r.end || r.end > blocks {
                return Err(Error::invalid(
                    "admit",
                    format!(
                        "{FIELD} {}..{}: a range must be nonempty (start below end) and inside \
                         the device's {blocks} blocks",
                        r.start, r.end
                    ),
                ));
            }
        }
        ranges.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<u64>> = Vec::new();
        for r in ranges {
            match merged.last_mut() {
                Some(m) if r.start <= m.end => m.end = m.end.max(r.end),
                _ => merged.push(r),
            }
        }
        if merged.is_empty() || merged.len() > RANGES_MAX {
            return Err(Error::invalid(
                "admit",
                format!("{FIELD}: {} ranges; give 1 to {RANGES_MAX}", merged.len()),
            ));
        }
        Ok(Admit::Ranges(merged))
    }

    /// One block range (unchecked: `create` checks it against the device).
    pub fn one_range(r: Range<u64>) -> Admit {
        Admit::Ranges(std::iter::once(r).collect())
    }

    pub fn name(&self) -> String {
        match self {
            Admit::All => "all".into(),
            Admit::FatMetadata => "fat-metadata".into(),
            Admit::Ranges(rs) => rs
                .iter()
                .map(|r| format!("{}..{}", r.start, r.end))
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// The admission record: magic, kind, count, CRC-32C of the rest, the ranges.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; ADMIT_BYTES];
        b[0..8].copy_from_slice(&ADMIT_MAGIC.to_le_bytes());
        b[8] = self.code();
        if let Admit::Ranges(rs) = self {
            b[10..12].copy_from_slice(&(rs.len() as u16).to_le_bytes());
            for (i, r) in rs.iter().enumerate() {
                b[16 + 16 * i..24 + 16 * i].copy_from_slice(&r.start.to_le_bytes());
                b[24 + 16 * i..32 + 16 * i].copy_from_slice(&r.end.to_le_bytes());
            }
        }
        let crc = admit_crc(&b);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(Admit::decode(&b).ok().as_ref(), Some(self));
        b
    }

    pub fn decode(b: &[u8]) -> Result<Admit> {
        let bad = |what: &str| Error::bad(format!("write cache admission record: {what}"));
        if b.len() < ADMIT_BYTES || b[0..8] != ADMIT_MAGIC.to_le_bytes() {
            return Err(bad("absent (no NVSADMIT magic)"));
        }
        if u32::from_le_bytes(b[12..16].try_into().unwrap()) != admit_crc(b) {
            return Err(bad("fails its checksum"));
        }
        let n = u16::from_le_bytes([b[10], b[11]]) as usize;
        let at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        match b[8] {
            0 => Ok(Admit::All),
            2 => Ok(Admit::FatMetadata),
            1 if (1..=RANGES_MAX).contains(&n) => Ok(Admit::Ranges(
                (0..n).map(|i| at(16 + 16 * i)..at(24 + 16 * i)).collect(),
            )),
            k => Err(bad(&format!("kind {k} with {n} ranges"))),
        }
    }
}

fn admit_crc(b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&b[..12]), &b[16..ADMIT_BYTES])
}

/// dm-writecache's destage controls. With `high_watermark_pct` 0 the seed's trigger alone
/// runs: one block is destaged when a new block finds no free slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Settings {
    pub policy: DestagePolicy,
    /// Destage when used slots exceed this percentage (0: off, the seed's trigger only)...
    pub high_watermark_pct: u8,
    /// ...until they are at most this percentage.
    pub low_watermark_pct: u8,
    /// Most blocks written back between two backing flushes (0: unlimited).
    pub writeback_jobs: u32,
    /// Destage blocks written longer ago than this (0: off).
    pub max_age_ms: u32,
    /// Take no new blocks (writes to cached blocks still go to the cache) and destage all.
    pub cleaner: bool,
}

impl Default for Settings {
    /// The seed's: LRW, destage one block when a new one finds no room, nothing else.
    fn default() -> Settings {
        Settings {
            policy: DestagePolicy::Lrw,
            high_watermark_pct: 0,
            low_watermark_pct: 0,
            writeback_jobs: 0,
            max_age_ms: 0,
            cleaner: false,
        }
    }
}

/// A served cache's high watermark when its image leaves it off: dm-writecache's default.
pub const SERVED_HIGH_WATERMARK_PCT: u8 = 50;
/// ...and its low watermark (dm-writecache's).
pub const SERVED_LOW_WATERMARK_PCT: u8 = 45;
/// A served cache's bytes between two backing flushes when its image leaves `writeback_jobs`
/// unlimited: a flush (fdatasync) per 2 MiB costs little beside the writes it covers (over
/// blocks already allocated), and the destage thread writes one group while it copies out
/// the next, so a batch of several groups keeps the backing device busy.
pub const SERVED_WRITEBACK_BYTES: u32 = 2 << 20;

impl Settings {
    /// The settings in a sentence (status lines, create's report).
    pub fn describe(&self) -> String {
        let mut t = format!("policy {}", self.policy.name());
        if self.high_watermark_pct > 0 {
            t += &format!(
                "; destage above {} % used down to {} %",
                self.high_watermark_pct, self.low_watermark_pct
            );
        } else {
            t += "; destage one block when a new block finds no room (the seed's)";
        }
        if self.max_age_ms > 0 {
            t += &format!("; max-age {} ms", self.max_age_ms);
        }
        if self.writeback_jobs > 0 {
            t += &format!("; {} blocks per backing flush", self.writeback_jobs);
        }
        if self.cleaner {
            t += "; cleaner on";
        }
        t
    }

    /// The settings a served cache (`nvstack serve`, `nvstack up`) runs with: these, with
    /// dm-writecache's watermarks (50 %, 45 %) when the high watermark is off and
    /// `SERVED_WRITEBACK_BYTES` of blocks per backing flush when `writeback_jobs` is 0. Why:
    /// the seed's trigger alone destages one block per new block once the cache is full
    /// (about 3.6 MB/s with 512 B sectors); the watermarks destage runs of blocks, ahead of
    /// the writes, at the backing device's speed. `serve --seed-destage` keeps the stored ones.
    pub fn served(self, sector_bytes: u32) -> Settings {
        let mut s = self;
        if s.high_watermark_pct == 0 {
            s.high_watermark_pct = SERVED_HIGH_WATERMARK_PCT;
            s.low_watermark_pct = SERVED_LOW_WATERMARK_PCT;
        }
        if s.writeback_jobs == 0 {
            s.writeback_jobs = SERVED_WRITEBACK_BYTES / sector_bytes;
        }
        debug_assert!(s.validate().is_ok());
        s
    }

    /// Whether any of dm-writecache's triggers is on (then neighbours destage together).
    pub fn dm_triggers(&self) -> bool {
        self.high_watermark_pct > 0 || self.max_age_ms > 0 || self.cleaner
    }

    pub fn validate(&self) -> Result<()> {
        let (h, l) = (self.high_watermark_pct, self.low_watermark_pct);
        if h > 100 {
            return Err(Error::invalid(
                "high_watermark_pct",
                format!("{FIELD} {h} %: must be 1 to 100"),
            ));
        }
        if h == 0 && l > 0 {
            return Err(Error::invalid(
                "low_watermark_pct",
                format!("{FIELD} {l} % without a high watermark"),
            ));
        }
        if h > 0 && l >= h {
            return Err(Error::invalid(
                "low_watermark_pct",
                format!("{FIELD} {l} % must be below the high watermark ({h} %)"),
            ));
        }
        Ok(())
    }
}

/// The superblock: fixed at create except the settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub slots: u32,
    pub sector_bytes: u32,
    /// Sectors the cache exports.
    pub blocks: u64,
    /// The backing device's block size (a multiple of the sector).
    pub backing_block_bytes: u32,
    /// Backing blocks before the label block.
    pub backing_blocks: u64,
    pub identity: u128,
    pub settings: Settings,
}

impl Superblock {
    pub fn encode(&self) -> [u8; SB_BYTES] {
        let mut b = [0u8; SB_BYTES];
        let s = &self.settings;
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.sector_bytes.to_le_bytes());
        b[16..20].copy_from_slice(&self.slots.to_le_bytes());
        b[20..28].copy_from_slice(&self.blocks.to_le_bytes());
        b[28..44].copy_from_slice(&self.identity.to_le_bytes());
        b[44..48].copy_from_slice(&self.backing_block_bytes.to_le_bytes());
        b[48] = s.policy as u8;
        b[49] = s.high_watermark_pct;
        b[50] = s.low_watermark_pct;
        b[51] = u8::from(s.cleaner);
        b[52..56].copy_from_slice(&s.writeback_jobs.to_le_bytes());
        b[56..60].copy_from_slice(&s.max_age_ms.to_le_bytes());
        b[64..72].copy_from_slice(&self.backing_blocks.to_le_bytes());
        let crc = crc32c::crc32c(&b[..72]);
        b[72..76].copy_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(Superblock::decode(&b).ok(), Some(*self));
        b
    }

    /// Decode, naming the first thing wrong.
    pub fn decode(b: &[u8]) -> Result<Superblock> {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        if b.len() < SB_BYTES || u64_at(0) != MAGIC {
            return Err(Error::bad("not a write cache image (no NVSWCACH magic)"));
        }
        if u32_at(8) == 1 {
            return Err(Error::bad(format!(
                "write cache format version 1 (the two-fence protocol of an older nvstack; this \
                 program reads version {VERSION}): run `nvstack cache detach` with the \
                 nvstack that made it, then create a new cache over the backing file"
            )));
        }
        if u32_at(8) != VERSION {
            return Err(Error::bad(format!(
                "write cache format version {} (this program reads {VERSION})",
                u32_at(8)
            )));
        }
        if u32_at(72) != crc32c::crc32c(&b[..72]) {
            return Err(Error::bad("write cache superblock fails its checksum"));
        }
        let policy = DestagePolicy::from_byte(b[48])
            .ok_or_else(|| Error::bad(format!("write cache superblock: policy byte {}", b[48])))?;
        let sb = Superblock {
            sector_bytes: u32_at(12),
            slots: u32_at(16),
            blocks: u64_at(20),
            identity: u128::from_le_bytes(b[28..44].try_into().unwrap()),
            backing_block_bytes: u32_at(44),
            backing_blocks: u64_at(64),
            settings: Settings {
                policy,
                high_watermark_pct: b[49],
                low_watermark_pct: b[50],
                cleaner: b[51] == 1,
                writeback_jobs: u32_at(52),
                max_age_ms: u32_at(56),
            },
        };
        sb.check_geometry(b[51])?;
        sb.settings.validate()?;
        Ok(sb)
    }

    fn check_geometry(&self, cleaner_byte: u8) -> Result<()> {
        let bb = self.backing_block_bytes;
        let ok = valid_sector(self.sector_bytes)
            && (SLOTS_MIN..=SLOTS_MAX).contains(&self.slots)
            && bb == crate::write::BACKING_BLOCK_BYTES
            && bb.is_multiple_of(self.sector_bytes)
            && cleaner_byte <= 1
            && self.blocks == self.backing_blocks * u64::from(bb / self.sector_bytes);
        if !ok {
            return Err(Error::bad(format!(
                "write cache superblock: {} slots of {} B sectors over {} backing blocks of {bb} \
                 B is not a geometry this program writes",
                self.slots, self.sector_bytes, self.backing_blocks
            )));
        }
        Ok(())
    }

    pub fn layout(&self) -> Layout {
        Layout::new(self.slots, self.sector_bytes)
    }

    /// Most blocks of one atomic write: half the slots, at most 64.
    #[inline]
    pub fn unit_blocks(&self) -> u32 {
        64.min(self.slots / 2)
    }
}

/// Counters over the cache's life (saved at every clean close; a crash loses this run's
/// counts, never data): dm-writecache's event counters, then destages by trigger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    pub read_blocks: u64,
    pub read_hits: u64,
    pub write_blocks: u64,
    pub write_hits_uncommitted: u64,
    pub write_hits_committed: u64,
    pub write_bypass: u64,
    pub write_allocated: u64,
    pub writes_blocked_on_freelist: u64,
    pub flushes: u64,
    pub discarded_blocks: u64,
    pub destaged_room: u64,
    pub destaged_watermark: u64,
    pub destaged_max_age: u64,
    pub destaged_cleaner: u64,
    pub destaged_writeback: u64,
    pub backing_bytes_written: u64,
}

/// Counters in the record's order.
const COUNTERS: usize = 16;
/// Bytes of the counters record: magic, the counters, checksum, zeros.
pub const COUNTERS_BYTES: usize = 8 + 8 * COUNTERS + 8;

impl Counters {
    fn words(&self) -> [u64; COUNTERS] {
        [
            self.read_blocks,
            self.read_hits,
            self.write_blocks,
            self.write_hits_uncommitted,
            self.write_hits_committed,
            self.write_bypass,
            self.write_allocated,
            self.writes_blocked_on_freelist,
            self.flushes,
            self.discarded_blocks,
            self.destaged_room,
            self.destaged_watermark,
            self.destaged_max_age,
            self.destaged_cleaner,
            self.destaged_writeback,
            self.backing_bytes_written,
        ]
    }

    fn from_words(w: [u64; COUNTERS]) -> Counters {
        Counters {
            read_blocks: w[0],
            read_hits: w[1],
            write_blocks: w[2],
            write_hits_uncommitted: w[3],
            write_hits_committed: w[4],
            write_bypass: w[5],
            write_allocated: w[6],
            writes_blocked_on_freelist: w[7],
            flushes: w[8],
            discarded_blocks: w[9],
            destaged_room: w[10],
            destaged_watermark: w[11],
            destaged_max_age: w[12],
            destaged_cleaner: w[13],
            destaged_writeback: w[14],
            backing_bytes_written: w[15],
        }
    }

    pub fn encode(&self) -> [u8; COUNTERS_BYTES] {
        let mut b = [0u8; COUNTERS_BYTES];
        b[0..8].copy_from_slice(&COUNTERS_MAGIC.to_le_bytes());
        for (i, w) in self.words().iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        let end = 8 + 8 * COUNTERS;
        let crc = crc32c::crc32c(&b[..end]);
        b[end..end + 4].copy_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(Counters::decode(&b), Some(*self));
        b
    }

    /// None when the record is absent or torn (a crash during a close).
    pub fn decode(b: &[u8]) -> Option<Counters> {
        let end = 8 + 8 * COUNTERS;
        let crc = u32::from_le_bytes(b[end..end + 4].try_into().unwrap());
        if b[0..8] != COUNTERS_MAGIC.to_le_bytes() || crc != crc32c::crc32c(&b[..end]) {
            return None;
        }
        let mut w = [0u64; COUNTERS];
        for (i, x) in w.iter_mut().enumerate() {
            *x = u64::from_le_bytes(b[8 + 8 * i..16 + 8 * i].try_into().unwrap());
        }
        Some(Counters::from_words(w))
    }

    /// These counters plus `o`'s (saturating).
    pub fn plus(&self, o: &Counters) -> Counters {
        let (a, b) = (self.words(), o.words());
        let mut w = [0u64; COUNTERS];
        for i in 0..COUNTERS {
            w[i] = a[i].saturating_add(b[i]);
        }
        Counters::from_words(w)
    }

    /// Blocks destaged, over every trigger.
    pub fn destaged(&self) -> u64 {
        self.destaged_room
            + self.destaged_watermark
            + self.destaged_max_age
            + self.destaged_cleaner
            + self.destaged_writeback
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_admission_and_counters_round_trip_and_refuse_damage() {
        let sb = Superblock {
            slots: 64,
            sector_bytes: 512,
            blocks: 800,
            backing_block_bytes: 4096,
            backing_blocks: 100,
            identity: 77 << 64 | 5,
            settings: Settings {
                high_watermark_pct: 50,
                low_watermark_pct: 45,
                max_age_ms: 10,
                cleaner: true,
                ..Settings::default()
            },
        };
        let mut b = sb.encode();
        assert_eq!(Superblock::decode(&b).unwrap(), sb);
        b[21] ^= 1;
        let e = Superblock::decode(&b).unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
        let a = Admit::ranges(vec![10..20, 0..4, 15..30], 100).unwrap();
        assert_eq!(a, Admit::Ranges(vec![0..4, 10..30]), "sorted and merged");
        let mut b = a.encode();
        assert_eq!(Admit::decode(&b).unwrap(), a);
        b[20] ^= 1;
        assert!(Admit::decode(&b).is_err());
        assert!(Admit::ranges(vec![5..5, 7..8], 100).is_err(), "empty");
        assert!(
            Admit::ranges(vec![1..2, 90..101], 100).is_err(),
            "past the end"
        );
        let c = Counters {
            read_hits: 3,
            destaged_room: u64::MAX,
            ..Default::default()
        };
        let mut b = c.encode();
        assert_eq!(Counters::decode(&b), Some(c));
        assert_eq!(c.plus(&c).destaged_room, u64::MAX);
        b[9] ^= 1;
        assert_eq!(Counters::decode(&b), None);
    }

    #[test]
    fn layouts_fit_and_settings_validate() {
        for sector in [512, 4096] {
            let l = Layout::new(100, sector);
            assert_eq!(l.data_off % 4096, 0);
            assert_eq!(Layout::fitting(l.region_bytes, sector), Some(l));
        }
        let s = |h, l| Settings {
            high_watermark_pct: h,
            low_watermark_pct: l,
            ..Settings::default()
        };
        assert!(s(0, 0).validate().is_ok() && s(50, 45).validate().is_ok());
        assert!(s(0, 10).validate().is_err() && s(50, 50).validate().is_err());
        assert!(s(101, 0).validate().is_err());
    }
}
