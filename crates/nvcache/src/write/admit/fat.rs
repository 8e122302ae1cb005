//! FAT-aware admission (`--admit fat-metadata`): the metadata of a FAT12/16/32 volume that
//! starts at block 0, found from its boot sector (reserved sectors, every FAT copy, the
//! FAT12/16 root directory) plus the clusters of every directory, found by walking the tree
//! from the root. NVFAT (seed 004) caches exactly these: "the FAT and the MSDOS DIR ENTRY".
//!
//! The walk reads through a closure (the write cache passes its own read path, so cached
//! sectors count), and is redone whenever a write touches the metadata, so that a directory
//! made since the last walk is admitted from then on. A misclassified block costs speed only:
//! writes to cached blocks always go to the cache.

use nvstack_core::error::{Error, Result, FIELD};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

/// Reads `buf.len()` bytes of the volume at byte offset `off`.
pub type ReadAt<'a> = dyn FnMut(u64, &mut [u8]) -> Result<()> + 'a;

/// The FAT type, by cluster count (Microsoft's rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum FatType {
    Fat12,
    Fat16,
    Fat32,
}

/// The boot sector's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bpb {
    pub bytes_per_sector: u64,
    pub sectors_per_cluster: u64,
    pub reserved: u64,
    pub fats: u64,
    pub fat_sectors: u64,
    pub root_dir_sectors: u64,
    pub total_sectors: u64,
    pub root_cluster: u64,
    pub kind: FatType,
    pub clusters: u64,
}

impl Bpb {
    /// Parse the first 512 bytes of block 0, refusing a partition table and anything that is
    /// not a FAT boot sector, naming why.
    pub fn parse(b: &[u8]) -> Result<Bpb> {
        let u16_at = |o: usize| u64::from(u16::from_le_bytes([b[o], b[o + 1]]));
        let u32_at = |o: usize| u64::from(u32::from_le_bytes(b[o..o + 4].try_into().unwrap()));
        let signed = b[510] == 0x55 && b[511] == 0xAA;
        let jump = b[0] == 0xEB || b[0] == 0xE9;
        let bps = u16_at(11);
        let spc = u64::from(b[13]);
        let bpb_ok = jump
            && [512, 1024, 2048, 4096].contains(&bps)
            && spc.is_power_of_two()
            && u16_at(14) >= 1
            && b[16] >= 1;
        if !bpb_ok {
            let partitioned = signed && (0..4).any(|i| b[446 + 16 * i + 4] != 0);
            return Err(Error::invalid(
                "admit",
                if partitioned {
                    "{field} fat-metadata: block 0 holds a partition table, not a FAT boot \
                     sector; the volume must start at block 0 (make it with mkfs.fat on the \
                     whole device), or give {field} LBA..LBA ranges"
                } else {
                    "{field} fat-metadata: block 0 is not a FAT boot sector (no jump, or a \
                     BIOS parameter block out of range)"
                },
            ));
        }
        let fat_sectors = if u16_at(22) != 0 {
            u16_at(22)
        } else {
            u32_at(36)
        };
        let total = if u16_at(19) != 0 {
            u16_at(19)
        } else {
            u32_at(32)
        };
        let root_dir_sectors = (u16_at(17) * 32).div_ceil(bps);
        let data_start = u16_at(14) + u64::from(b[16]) * fat_sectors + root_dir_sectors;
        if fat_sectors == 0 || total <= data_start {
            return Err(Error::invalid(
                "admit",
                format!(
                    "{FIELD} fat-metadata: a FAT of {fat_sectors} sectors and {total} sectors \
                     in all leave no data region"
                ),
            ));
        }
        let clusters = (total - data_start) / spc;
        let kind = match clusters {
            0..4085 => FatType::Fat12,
            4085..65525 => FatType::Fat16,
            _ => FatType::Fat32,
        };
        Ok(Bpb {
            bytes_per_sector: bps,
            sectors_per_cluster: spc,
            reserved: u16_at(14),
            fats: u64::from(b[16]),
            fat_sectors,
            root_dir_sectors,
            total_sectors: total,
            root_cluster: if kind == FatType::Fat32 {
                u32_at(44)
            } else {
                0
            },
            kind,
            clusters,
        })
    }

    fn data_start(&self) -> u64 {
        self.reserved + self.fats * self.fat_sectors + self.root_dir_sectors
    }

    /// Byte range of cluster `c` (2 and up).
    fn cluster_bytes(&self, c: u64) -> Range<u64> {
        let bps = self.bytes_per_sector;
        let start = (self.data_start() + (c - 2) * self.sectors_per_cluster) * bps;
        start..start + self.sectors_per_cluster * bps
    }

    /// The FAT entry of cluster `c` in the FAT's bytes.
    fn entry(&self, fat: &[u8], c: u64) -> u64 {
        let c = c as usize;
        match self.kind {
            FatType::Fat12 => {
                let o = c + c / 2;
                let v = u64::from(u16::from_le_bytes([fat[o], fat[o + 1]]));
                if c.is_multiple_of(2) {
                    v & 0xFFF
                } else {
                    v >> 4
                }
            }
            FatType::Fat16 => u64::from(u16::from_le_bytes([fat[2 * c], fat[2 * c + 1]])),
            FatType::Fat32 => {
                u64::from(u32::from_le_bytes(
                    fat[4 * c..4 * c + 4].try_into().unwrap(),
                )) & 0x0FFF_FFFF
            }
        }
    }

    /// The clusters of the chain from `first` (stops at its end, a free or out-of-range entry,
    /// or a loop).
    fn chain(&self, fat: &[u8], first: u64) -> Vec<u64> {
        let mut out = Vec::new();
        let mut c = first;
        while (2..self.clusters + 2).contains(&c) && out.len() as u64 <= self.clusters {
            out.push(c);
            c = self.entry(fat, c);
        }
        out
    }
}

/// The blocks a FAT volume's metadata occupies, as last walked, and what the walk read, kept
/// current by [`FatMap::note_write`] so that [`FatMap::refresh`] walks again only when
/// something the walk depends on changed, from memory (reading only directory clusters it has
/// not seen). Why: fusefat writes a FAT or directory sector for nearly every operation, and a
/// full walk after each one was over half of a replay's time. It gives exactly what
/// [`FatMap::build`] gives (`same_as` compares them; the write cache's cross-check calls it).
#[derive(Clone, Debug)]
pub struct FatMap {
    pub bpb: Bpb,
    /// Sorted, disjoint block ranges (in the cache's blocks).
    ranges: Vec<Range<u64>>,
    /// Directories found by the last walk (the root counts).
    pub directories: u64,
    block_bytes: u64,
    blocks: u64,
    /// The first 512 bytes of the volume (the boot sector the geometry came from).
    boot: Vec<u8>,
    /// The first FAT's bytes (the walk follows chains in it).
    fat: Vec<u8>,
    /// Every directory part the walk read (the FAT12/16 root, each directory cluster): byte
    /// offset -> its bytes and the subdirectories they list.
    parts: BTreeMap<u64, Part>,
    /// Clusters whose FAT entries the walk followed: a change to any other entry cannot change
    /// what it finds.
    consulted: BTreeSet<u64>,
    stale: Stale,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Part {
    bytes: Vec<u8>,
    subdirs: Vec<u64>,
}

/// What a refresh must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stale {
    Current,
    /// A followed FAT entry or a directory's list of subdirectories changed: walk again.
    Walk,
    /// The boot sector changed: parse it and walk from scratch.
    Build,
}

impl FatMap {
    /// Walk the volume through `read` and map its metadata to blocks of `block_bytes`.
    pub fn build(read: &mut ReadAt<'_>, block_bytes: u64, blocks: u64) -> Result<FatMap> {
        let mut boot = vec![0u8; 512];
        read(0, &mut boot)?;
        let bpb = Bpb::parse(&boot)?;
        let bps = bpb.bytes_per_sector;
        if bpb.total_sectors * bps > blocks * block_bytes {
            return Err(Error::invalid(
                "admit",
                format!(
                    "{FIELD} fat-metadata: the volume's {} sectors of {bps} B are longer than \
                     the device",
                    bpb.total_sectors
                ),
            ));
        }
        let mut fat = vec![0u8; (bpb.fat_sectors * bps) as usize];
        read(bpb.reserved * bps, &mut fat)?;
        let mut m = FatMap {
            bpb,
            ranges: Vec::new(),
            directories: 0,
            block_bytes,
            blocks,
            boot,
            fat,
            parts: BTreeMap::new(),
            consulted: BTreeSet::new(),
            stale: Stale::Walk,
        };
        m.rewalk(read)?;
        Ok(m)
    }

    /// Walk again from the FAT and directory bytes held (reading only parts not held).
    fn rewalk(&mut self, read: &mut ReadAt<'_>) -> Result<()> {
        let bps = self.bpb.bytes_per_sector;
        // The reserved sectors, the FATs and the FAT12/16 root: fixed by the boot sector.
        let fixed = 0..self.bpb.data_start() * bps;
        let mut bytes = Vec::from([fixed]);
        let mut w = Walker {
            bpb: &self.bpb,
            fat: &self.fat,
            old: &self.parts,
            read,
            parts: BTreeMap::new(),
            seen: BTreeSet::new(),
        };
        let directories = w.walk(&mut bytes)?;
        let (parts, seen) = (w.parts, w.seen);
        self.parts = parts;
        self.consulted = seen;
        self.directories = directories;
        self.ranges = to_blocks(&bytes, self.block_bytes);
        self.stale = Stale::Current;
        Ok(())
    }

    pub fn admits(&self, lba: u64) -> bool {
        crate::write::admit::in_ranges(&self.ranges, lba)
    }

    pub fn ranges(&self) -> Vec<Range<u64>> {
        self.ranges.clone()
    }

    /// Block `lba` now holds `data` (`None`: zeros): keep the bytes the walk read current and
    /// note whether what it found may have changed. Every write of a block the map admits
    /// must be noted (the others touch nothing it holds).
    pub fn note_write(&mut self, lba: u64, data: Option<&[u8]>) {
        let bb = self.block_bytes;
        let at = lba * bb;
        let span = at..at + bb;
        // The block's bytes in `r` (a range inside the block), zeros for a discard.
        let zeros = [0u8; 4096];
        let bytes = |r: Range<u64>| -> &[u8] {
            let (i, j) = ((r.start - at) as usize, (r.end - at) as usize);
            match data {
                Some(d) => &d[i..j],
                None => &zeros[..j - i],
            }
        };
        // The boot sector: any change re-parses the geometry.
        if span.start < 512 {
            let r = span.start..span.end.min(512);
            if self.boot[r.start as usize..r.end as usize] != *bytes(r) {
                self.stale = Stale::Build;
                return;
            }
        }
        // The first FAT: only entries of clusters the walk followed matter.
        let fat_at = self.bpb.reserved * self.bpb.bytes_per_sector;
        let r = span.start.max(fat_at)..span.end.min(fat_at + self.fat.len() as u64);
        if r.start < r.end {
            let new = bytes(r.clone());
            let old = &mut self.fat[(r.start - fat_at) as usize..(r.end - fat_at) as usize];
            if *old != *new {
                let first = (r.start - fat_at) as usize;
                let changed: Vec<u64> = (0..new.len())
                    .filter(|&k| old[k] != new[k])
                    .map(|k| (first + k) as u64)
                    .collect();
                old.copy_from_slice(new);
                if changed.iter().any(|&i| self.entry_followed(i)) {
                    self.stale = self.stale.max(Stale::Walk);
                }
            }
        }
        // Directory parts (disjoint, sorted: those overlapping the block end after its
        // start): only a change to the subdirectories they list matters.
        let mut below = span.end;
        while let Some((&k, part)) = self.parts.range_mut(..below).next_back() {
            let end = k + part.bytes.len() as u64;
            if end <= span.start {
                break;
            }
            below = k;
            let r = span.start.max(k)..span.end.min(end);
            let new = bytes(r.clone());
            let old = &mut part.bytes[(r.start - k) as usize..(r.end - k) as usize];
            if *old == *new {
                continue;
            }
            old.copy_from_slice(new);
            let mut now = Vec::new();
            subdirectories(&part.bytes, &mut now);
            if now != part.subdirs {
                part.subdirs = now;
                self.stale = self.stale.max(Stale::Walk);
            }
        }
    }

    /// Whether FAT byte `i` is part of the entry of a cluster the walk followed.
    fn entry_followed(&self, i: u64) -> bool {
        let (lo, hi) = match self.bpb.kind {
            // Cluster c's 12-bit entry is bytes c + c/2 and the next.
            FatType::Fat12 => ((2 * i / 3).saturating_sub(1), 2 * i / 3 + 1),
            FatType::Fat16 => (i / 2, i / 2),
            FatType::Fat32 => (i / 4, i / 4),
        };
        self.consulted.range(lo..=hi).next().is_some()
    }

    /// Bring the map up to date after the writes noted: nothing to do, a walk from memory, or
    /// (the boot sector changed) a build from scratch. On an error the map keeps its last
    /// classification and stays stale, so the next refresh tries again.
    pub fn refresh(&mut self, read: &mut ReadAt<'_>) -> Result<()> {
        match self.stale {
            Stale::Current => Ok(()),
            Stale::Walk => self.rewalk(read),
            Stale::Build => {
                *self = FatMap::build(read, self.block_bytes, self.blocks)?;
                Ok(())
            }
        }
    }

    /// Whether a refresh has work to do.
    pub fn is_stale(&self) -> bool {
        self.stale != Stale::Current
    }

    /// `None` when this map classifies as `full` (a fresh build) does, else what differs.
    pub fn differs_from(&self, full: &FatMap) -> Option<String> {
        if self.bpb != full.bpb {
            return Some(format!("geometry {:?} against {:?}", self.bpb, full.bpb));
        }
        if self.directories != full.directories {
            return Some(format!(
                "{} directories against {}",
                self.directories, full.directories
            ));
        }
        if self.ranges != full.ranges {
            return Some(format!(
                "blocks {:?} against {:?}",
                self.ranges, full.ranges
            ));
        }
        if let Some(i) = (0..self.fat.len()).find(|&i| self.fat[i] != full.fat[i]) {
            return Some(format!("FAT byte {i} held differs from the volume's"));
        }
        if self.parts != full.parts {
            let mine: Vec<u64> = self.parts.keys().copied().collect();
            let theirs: Vec<u64> = full.parts.keys().copied().collect();
            let changed = mine.iter().find(|k| full.parts.get(k) != self.parts.get(k));
            return Some(format!(
                "directory parts held at {mine:?} against {theirs:?} (first differing: {changed:?})"
            ));
        }
        None
    }
}

/// One walk: the FAT held, directory parts from `old` when held there, else read.
struct Walker<'a, 'r> {
    bpb: &'a Bpb,
    fat: &'a [u8],
    old: &'a BTreeMap<u64, Part>,
    read: &'a mut ReadAt<'r>,
    parts: BTreeMap<u64, Part>,
    seen: BTreeSet<u64>,
}

impl Walker<'_, '_> {
    /// The subdirectories part `r` lists, kept in `parts`.
    fn part(&mut self, r: Range<u64>) -> Result<Vec<u64>> {
        let len = (r.end - r.start) as usize;
        let part = match self.old.get(&r.start) {
            Some(p) if p.bytes.len() == len => p.clone(),
            _ => {
                let mut bytes = vec![0u8; len];
                (self.read)(r.start, &mut bytes)?;
                let mut subdirs = Vec::new();
                subdirectories(&bytes, &mut subdirs);
                Part { bytes, subdirs }
            }
        };
        let subdirs = part.subdirs.clone();
        self.parts.insert(r.start, part);
        Ok(subdirs)
    }

    /// Walk every directory from the root, adding each directory cluster's bytes to `out`;
    /// returns the number of directories.
    fn walk(&mut self, out: &mut Vec<Range<u64>>) -> Result<u64> {
        let bpb = self.bpb;
        let bps = bpb.bytes_per_sector;
        let mut dirs = 1;
        let root: Vec<Range<u64>> = if bpb.kind == FatType::Fat32 {
            let chain = bpb.chain(self.fat, bpb.root_cluster);
            self.seen.extend(&chain);
            chain.iter().map(|&c| bpb.cluster_bytes(c)).collect()
        } else {
            let start = (bpb.reserved + bpb.fats * bpb.fat_sectors) * bps;
            std::iter::once(start..start + bpb.root_dir_sectors * bps).collect()
        };
        out.extend(root.iter().cloned());
        let mut pending = vec![root];
        let mut todo: Vec<u64> = Vec::new();
        while let Some(parts) = pending.pop() {
            for r in parts {
                todo.extend(self.part(r)?);
            }
            for first in todo.drain(..) {
                if !self.seen.insert(first) {
                    continue;
                }
                let chain = bpb.chain(self.fat, first);
                self.seen.extend(&chain);
                dirs += 1;
                let parts: Vec<Range<u64>> = chain.iter().map(|&c| bpb.cluster_bytes(c)).collect();
                out.extend(parts.iter().cloned());
                pending.push(parts);
            }
        }
        Ok(dirs)
    }
}

/// The first clusters of the subdirectories a directory's bytes list (not "." or "..").
fn subdirectories(buf: &[u8], out: &mut Vec<u64>) {
    for e in buf.chunks_exact(32) {
        match e[0] {
            0x00 => return, // the end of the directory
            0xE5 | b'.' => continue,
            _ => {}
        }
        let attr = e[11];
        if attr == 0x0F || attr & 0x08 != 0 || attr & 0x10 == 0 {
            continue; // a long-name part, a volume label, or a file
        }
        let hi = u64::from(u16::from_le_bytes([e[20], e[21]]));
        let lo = u64::from(u16::from_le_bytes([e[26], e[27]]));
        out.push(hi << 16 | lo);
    }
}

/// Byte ranges to sorted, merged block ranges of `block_bytes`.
fn to_blocks(bytes: &[Range<u64>], block_bytes: u64) -> Vec<Range<u64>> {
    let mut rs: Vec<Range<u64>> = bytes
        .iter()
        .filter(|r| r.start < r.end)
        .map(|r| r.start / block_bytes..r.end.div_ceil(block_bytes))
        .collect();
    rs.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::new();
    for r in rs {
        match merged.last_mut() {
            Some(m) if r.start <= m.end => m.end = m.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_table_is_refused_with_a_message() {
        let mut b = vec![0u8; 512];
        b[510] = 0x55;
        b[511] = 0xAA;
        b[446 + 4] = 0x0C; // a FAT32 LBA partition entry
        let e = Bpb::parse(&b).unwrap_err().to_string();
        assert!(e.contains("partition table"), "{e}");
        b[446 + 4] = 0;
        let e = Bpb::parse(&b).unwrap_err().to_string();
        assert!(e.contains("not a FAT boot sector"), "{e}");
    }

    #[test]
    fn byte_ranges_become_merged_block_ranges() {
        let r = to_blocks(&[0..1024, 1000..1500, 4096..4097], 512);
        assert_eq!(r, vec![0..3, 8..9]);
    }

    /// A FAT12/16 volume in memory whose every sector write goes through `note_write` and
    /// `refresh`, each checked against a fresh `build`.
    struct Vol {
        img: Vec<u8>,
        map: FatMap,
        bpb: Bpb,
        rng: u64,
        dir_clusters: Vec<u64>,
        checks: u64,
        /// The most directories a walk found (the tree grows and is cut down again).
        dirs_max: u64,
    }

    fn read_from(img: &[u8]) -> impl FnMut(u64, &mut [u8]) -> Result<()> + '_ {
        move |off, buf| {
            buf.copy_from_slice(&img[off as usize..off as usize + buf.len()]);
            Ok(())
        }
    }

    impl Vol {
        fn new(total: u64, fat_sectors: u64, spc: u8, seed: u64) -> Vol {
            let mut img = vec![0u8; (total * 512) as usize];
            img[0] = 0xEB;
            img[11..13].copy_from_slice(&512u16.to_le_bytes());
            img[13] = spc;
            img[14..16].copy_from_slice(&1u16.to_le_bytes());
            img[16] = 2;
            img[17..19].copy_from_slice(&32u16.to_le_bytes());
            img[19..21].copy_from_slice(&(total as u16).to_le_bytes());
            img[22..24].copy_from_slice(&(fat_sectors as u16).to_le_bytes());
            img[510] = 0x55;
            img[511] = 0xAA;
            let bpb = Bpb::parse(&img).unwrap();
            let map = FatMap::build(&mut read_from(&img), 512, total).unwrap();
            Vol {
                img,
                map,
                bpb,
                rng: seed,
                dir_clusters: Vec::new(),
                checks: 0,
                dirs_max: 0,
            }
        }

        fn rand(&mut self, n: u64) -> u64 {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            self.rng % n
        }

        /// Write bytes at `off` sector by sector, each followed by a refresh and the check.
        fn put(&mut self, off: u64, bytes: &[u8]) {
            let end = off + bytes.len() as u64;
            for l in off / 512..end.div_ceil(512) {
                // This sector's part of the write lands, then the next sector's.
                let (from, to) = (off.max(l * 512), end.min((l + 1) * 512));
                let src = &bytes[(from - off) as usize..(to - off) as usize];
                self.img[from as usize..to as usize].copy_from_slice(src);
                let at = (l * 512) as usize;
                self.map.note_write(l, Some(&self.img[at..at + 512]));
                self.map.refresh(&mut read_from(&self.img)).unwrap();
                let total = self.bpb.total_sectors;
                let full = FatMap::build(&mut read_from(&self.img), 512, total).unwrap();
                assert_eq!(self.map.differs_from(&full), None, "after sector {l}");
                self.checks += 1;
                self.dirs_max = self.dirs_max.max(self.map.directories);
            }
        }

        fn fat_entry(&self, c: u64) -> u64 {
            let at = (self.bpb.reserved * 512) as usize;
            self.bpb.entry(&self.img[at..], c)
        }

        fn set_fat(&mut self, c: u64, v: u64) {
            for copy in 0..2 {
                let base = (self.bpb.reserved + copy * self.bpb.fat_sectors) * 512;
                if self.bpb.kind == FatType::Fat16 {
                    self.put(base + 2 * c, &(v as u16).to_le_bytes());
                    continue;
                }
                let o = base + c + c / 2;
                let old = u16::from_le_bytes([self.img[o as usize], self.img[o as usize + 1]]);
                let new = if c.is_multiple_of(2) {
                    (old & 0xF000) | (v as u16 & 0xFFF)
                } else {
                    (old & 0x000F) | ((v as u16) << 4)
                };
                self.put(o, &new.to_le_bytes());
            }
        }

        fn free_cluster(&mut self) -> u64 {
            let n = self.bpb.clusters;
            let start = self.rand(n);
            // A full volume reuses a cluster (cross-linking chains: the walks must agree then
            // too).
            (0..n)
                .map(|i| 2 + (start + i) % n)
                .find(|&c| self.fat_entry(c) == 0)
                .unwrap_or(2 + start)
        }

        /// A new cluster, zeroed and ended in the FAT (the order varies).
        fn new_cluster(&mut self) -> u64 {
            let c = self.free_cluster();
            let r = self.bpb.cluster_bytes(c);
            let zeros = vec![0u8; (r.end - r.start) as usize];
            let eoc = if self.bpb.kind == FatType::Fat16 {
                0xFFFF
            } else {
                0xFFF
            };
            if self.rand(2) == 0 {
                self.set_fat(c, eoc);
                self.put(r.start, &zeros);
            } else {
                self.put(r.start, &zeros);
                self.set_fat(c, eoc);
            }
            c
        }

        /// A random directory entry's byte offset, in the root or a directory cluster.
        fn slot(&mut self) -> u64 {
            let k = self.rand(self.dir_clusters.len() as u64 + 1) as usize;
            let (start, entries) = match self.dir_clusters.get(k) {
                Some(&c) => {
                    let r = self.bpb.cluster_bytes(c);
                    (r.start, (r.end - r.start) / 32)
                }
                None => ((1 + 2 * self.bpb.fat_sectors) * 512, 32),
            };
            start + 32 * self.rand(entries)
        }

        /// The first free entry (unused or deleted) of the directory part `slot` picks, as a
        /// file system fills a directory; a random one when it is full.
        fn free_slot(&mut self) -> u64 {
            let any = self.slot();
            let (start, len) = match self
                .dir_clusters
                .iter()
                .find(|&&c| self.bpb.cluster_bytes(c).contains(&any))
            {
                Some(&c) => {
                    let r = self.bpb.cluster_bytes(c);
                    (r.start, r.end - r.start)
                }
                None => ((1 + 2 * self.bpb.fat_sectors) * 512, 32 * 32),
            };
            (start..start + len)
                .step_by(32)
                .find(|&o| matches!(self.img[o as usize], 0x00 | 0xE5))
                .unwrap_or(any)
        }

        fn entry(&mut self, attr: u8, first: u64) {
            let mut e = [b'X'; 32];
            e[11] = attr;
            e[20..22].copy_from_slice(&0u16.to_le_bytes());
            e[26..28].copy_from_slice(&(first as u16).to_le_bytes());
            let at = self.free_slot();
            self.put(at, &e);
        }

        fn step(&mut self) {
            match self.rand(8) {
                0 | 1 => {
                    let c = self.new_cluster();
                    self.dir_clusters.push(c);
                    self.entry(0x10, c);
                }
                2 => {
                    let first = 2 + self.rand(self.bpb.clusters);
                    self.entry(0x20, first);
                }
                3 => {
                    let at = self.slot();
                    let mark = if self.rand(2) == 0 { 0xE5 } else { 0 };
                    self.put(at, &[mark]);
                }
                4 if !self.dir_clusters.is_empty() => {
                    let k = self.rand(self.dir_clusters.len() as u64) as usize;
                    let last = self.dir_clusters[k];
                    let c = self.new_cluster();
                    self.set_fat(last, c);
                    self.dir_clusters.push(c);
                }
                5 => {
                    let c = 2 + self.rand(self.bpb.clusters);
                    let v = [0, 0xFFF, 2 + self.rand(self.bpb.clusters)][self.rand(3) as usize];
                    self.set_fat(c, v);
                }
                6 => {
                    let l = self.bpb.data_start() + self.rand(self.bpb.clusters);
                    let bytes: Vec<u8> = (0..512).map(|_| self.rand(256) as u8).collect();
                    self.put(l * 512, &bytes);
                }
                _ => {
                    let boot = self.img[..512].to_vec();
                    self.put(0, &boot); // rewritten unchanged: nothing to walk
                }
            }
        }
    }

    #[test]
    fn the_incremental_classification_is_what_a_full_walk_gives() {
        for (total, fat_sectors, spc, seed) in [(400, 2, 1, 7), (400, 2, 2, 11), (4400, 18, 1, 3)] {
            let mut v = Vol::new(total, fat_sectors, spc, seed);
            for _ in 0..600 {
                v.step();
            }
            assert!(v.checks > 1000, "{}", v.checks);
            assert!(v.dirs_max > 5, "{}", v.dirs_max);
        }
    }

    #[test]
    fn a_changed_boot_sector_rebuilds_and_zeros_are_noted() {
        let mut v = Vol::new(400, 2, 1, 5);
        let c = v.new_cluster();
        v.entry(0x10, c);
        // Discarded sectors read as zeros: a directory's entries vanish with them.
        let root = (1 + 2 * 2) * 512;
        for l in root / 512..root / 512 + 2 {
            v.img[(l * 512) as usize..((l + 1) * 512) as usize].fill(0);
            v.map.note_write(l, None);
        }
        v.map.refresh(&mut read_from(&v.img)).unwrap();
        assert_eq!(v.map.directories, 1);
        // Another geometry in the boot sector: rebuilt from it.
        v.img[13] = 2;
        v.map.note_write(0, Some(&v.img[..512]));
        v.map.refresh(&mut read_from(&v.img)).unwrap();
        assert_eq!(v.map.bpb.sectors_per_cluster, 2);
    }
}
