//! The independent FAT metadata counter: which sectors of a FAT volume are metadata after each
//! write, found from the FAT layout by code of its own (not nvcache's classifier, `fat.rs`), so
//! that the write cache's `--admit fat-metadata` can be checked against it.
//!
//! Metadata: the reserved sectors (boot sector, FSInfo), every FAT copy, the FAT12/16 root
//! directory, and every cluster of every directory reachable from the root (the FAT32 root is a
//! cluster chain). A write is judged against the volume as it stands *after* the write (the
//! ground truth), where nvcache decides before it from its last walk; the directory set is
//! recomputed after every write that touched a metadata sector.

use crate::field::{Field, Invalid};
use std::collections::HashSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Bits {
    Fat12,
    Fat16,
    Fat32,
}

/// The layout read from the boot sector.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Layout {
    pub bits: Bits,
    pub reserved: u64,
    pub fats: u64,
    pub fat_sectors: u64,
    pub root_sectors: u64,
    pub data_start: u64,
    pub sectors_per_cluster: u64,
    pub clusters: u64,
    pub root_cluster: u64,
}

fn le(b: &[u8], at: usize, n: usize) -> u64 {
    b[at..at + n]
        .iter()
        .rev()
        .fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

impl Layout {
    /// From a 512-byte-sector volume's boot sector.
    pub fn parse(boot: &[u8], sectors: u64) -> Result<Layout, Invalid> {
        let bad = |m: &str| Invalid::new(Field::Image, format!(": not a FAT volume: {m}"));
        if boot.len() < 512 || boot[510] != 0x55 || boot[511] != 0xAA {
            return Err(bad("no 0x55AA signature in sector 0"));
        }
        if le(boot, 11, 2) != 512 {
            return Err(bad("bytes per sector is not 512 (the replay's sector)"));
        }
        let spc = le(boot, 13, 1);
        let reserved = le(boot, 14, 2);
        let fats = le(boot, 16, 1);
        let root_entries = le(boot, 17, 2);
        let total = match le(boot, 19, 2) {
            0 => le(boot, 32, 4),
            t => t,
        };
        let fat_sectors = match le(boot, 22, 2) {
            0 => le(boot, 36, 4),
            f => f,
        };
        if spc == 0 || !spc.is_power_of_two() || reserved == 0 || fats == 0 || fat_sectors == 0 {
            return Err(bad(
                "a zero or invalid sectors-per-cluster, reserved, FAT count or FAT size",
            ));
        }
        let root_sectors = (root_entries * 32).div_ceil(512);
        let data_start = reserved + fats * fat_sectors + root_sectors;
        if total > sectors || data_start >= total {
            return Err(bad("its sizes do not fit the device"));
        }
        let clusters = (total - data_start) / spc;
        let bits = match clusters {
            c if c < 4085 => Bits::Fat12,
            c if c < 65525 => Bits::Fat16,
            _ => Bits::Fat32,
        };
        Ok(Layout {
            bits,
            reserved,
            fats,
            fat_sectors,
            root_sectors,
            data_start,
            sectors_per_cluster: spc,
            clusters,
            root_cluster: if bits == Bits::Fat32 {
                le(boot, 44, 4)
            } else {
                0
            },
        })
    }

    /// Reserved sectors, FATs and the fixed root directory.
    pub fn is_static(&self, lba: u64) -> bool {
        lba < self.data_start
    }

    fn cluster_sectors(&self, c: u64) -> std::ops::Range<u64> {
        let first = self.data_start + (c - 2) * self.sectors_per_cluster;
        first..first + self.sectors_per_cluster
    }

    fn valid(&self, c: u64) -> bool {
        (2..self.clusters + 2).contains(&c)
    }
}

/// What a written sector is, after the write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Boot sector, FSInfo, the other reserved sectors.
    Reserved,
    Fat,
    /// The fixed root directory or a cluster of a directory reachable from the root.
    Directory,
    Data,
}

/// Sector writes by kind, and those among them whose bytes equal the volume's before the write
/// (judged against this counter's own copy of the volume).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KindCounts {
    pub reserved: u64,
    pub fat: u64,
    pub directory: u64,
    pub data: u64,
    pub reserved_unchanged: u64,
    pub fat_unchanged: u64,
    pub directory_unchanged: u64,
    pub data_unchanged: u64,
}

impl KindCounts {
    fn add(&mut self, k: Kind, unchanged: bool) {
        let (all, same) = match k {
            Kind::Reserved => (&mut self.reserved, &mut self.reserved_unchanged),
            Kind::Fat => (&mut self.fat, &mut self.fat_unchanged),
            Kind::Directory => (&mut self.directory, &mut self.directory_unchanged),
            Kind::Data => (&mut self.data, &mut self.data_unchanged),
        };
        *all += 1;
        *same += u64::from(unchanged);
    }

    pub fn written(&self) -> u64 {
        self.reserved + self.fat + self.directory + self.data
    }

    pub fn unchanged(&self) -> u64 {
        self.reserved_unchanged
            + self.fat_unchanged
            + self.directory_unchanged
            + self.data_unchanged
    }

    /// Sector writes that changed the volume's bytes.
    pub fn changed(&self) -> u64 {
        self.written() - self.unchanged()
    }
}

/// The volume's bytes and the set of directory sectors (a bit per sector and their list: the
/// walk runs after every metadata write, 2 million times on the seed-size recording, and a
/// hash set rebuilt each time was most of its cost).
pub struct FatTracker {
    img: Vec<u8>,
    pub layout: Layout,
    dirs: Vec<bool>,
    dir_list: Vec<u64>,
    /// Every sector written so far, by kind, and the unchanged ones.
    pub kinds: KindCounts,
}

impl FatTracker {
    pub fn new(img: Vec<u8>) -> Result<FatTracker, Invalid> {
        let layout = Layout::parse(&img[..512.min(img.len())], img.len() as u64 / 512)?;
        let sectors = img.len() / 512;
        let mut t = FatTracker {
            img,
            layout,
            dirs: vec![false; sectors],
            dir_list: Vec::new(),
            kinds: KindCounts::default(),
        };
        t.walk();
        Ok(t)
    }

    pub fn is_metadata(&self, lba: u64) -> bool {
        self.layout.is_static(lba) || self.dirs.get(lba as usize).copied().unwrap_or(false)
    }

    /// Directory sectors now (the walk's result).
    pub fn directory_sectors(&self) -> usize {
        self.dir_list.len()
    }

    /// What `lba` is now.
    pub fn kind(&self, lba: u64) -> Kind {
        let l = &self.layout;
        if lba < l.reserved {
            Kind::Reserved
        } else if lba < l.reserved + l.fats * l.fat_sectors {
            Kind::Fat
        } else if self.is_metadata(lba) {
            Kind::Directory
        } else {
            Kind::Data
        }
    }

    /// Apply a write of `bytes` at `lba` and say, per sector, whether it is metadata after it;
    /// each sector is counted by its kind after the write, and as unchanged when its bytes
    /// were the volume's already.
    pub fn write(&mut self, lba: u64, bytes: &[u8]) -> Vec<bool> {
        assert!(bytes.len().is_multiple_of(512), "a write of whole sectors");
        let n = bytes.len() as u64 / 512;
        let at = (lba * 512) as usize;
        let unchanged: Vec<bool> = bytes
            .chunks(512)
            .enumerate()
            .map(|(i, b)| self.img[at + i * 512..at + i * 512 + 512] == *b)
            .collect();
        self.img[at..at + bytes.len()].copy_from_slice(bytes);
        let written_before = self.kinds.written();
        if (lba..lba + n).any(|l| self.is_metadata(l)) {
            self.walk();
        }
        for (l, &same) in (lba..lba + n).zip(&unchanged) {
            let k = self.kind(l);
            self.kinds.add(k, same);
        }
        let meta: Vec<bool> = (lba..lba + n).map(|l| self.is_metadata(l)).collect();
        // Every sector written was counted once, and the written bytes are the volume's now.
        assert_eq!(self.kinds.written() - written_before, n);
        debug_assert!(self.img[at..at + bytes.len()] == *bytes);
        meta
    }

    fn fat_entry(&self, c: u64) -> u64 {
        let fat = (self.layout.reserved * 512) as usize;
        match self.layout.bits {
            Bits::Fat12 => {
                let at = fat + (c + c / 2) as usize;
                let v = le(&self.img, at, 2);
                if c.is_multiple_of(2) {
                    v & 0xFFF
                } else {
                    v >> 4
                }
            }
            Bits::Fat16 => le(&self.img, fat + 2 * c as usize, 2),
            Bits::Fat32 => le(&self.img, fat + 4 * c as usize, 4) & 0x0FFF_FFFF,
        }
    }

    /// The clusters of the chain from `first` (ends at an end mark, a free or invalid entry, a
    /// loop, or after as many clusters as the volume has).
    fn chain(&self, first: u64) -> Vec<u64> {
        let mut out = Vec::new();
        let mut c = first;
        while self.layout.valid(c) && (out.len() as u64) < self.layout.clusters {
            if out.contains(&c) {
                break;
            }
            out.push(c);
            c = self.fat_entry(c);
        }
        out
    }

    /// Sub-directories named in the directory held by `sectors`.
    fn children(&self, sectors: &[u64]) -> Vec<u64> {
        let mut out = Vec::new();
        for &s in sectors {
            let b = &self.img[(s * 512) as usize..(s * 512 + 512) as usize];
            for e in b.chunks(32) {
                match e[0] {
                    0x00 => return out,
                    0xE5 | b'.' => continue,
                    _ => {}
                }
                let attr = e[11];
                if attr == 0x0F || attr & 0x08 != 0 || attr & 0x10 == 0 {
                    continue; // A long-name part, the volume label, or a file.
                }
                let hi = if self.layout.bits == Bits::Fat32 {
                    le(e, 20, 2) << 16
                } else {
                    0
                };
                out.push(hi | le(e, 26, 2));
            }
        }
        out
    }

    fn walk(&mut self) {
        let l = self.layout;
        let root: Vec<u64> = if l.bits == Bits::Fat32 {
            self.chain(l.root_cluster)
                .into_iter()
                .flat_map(|c| l.cluster_sectors(c))
                .collect()
        } else {
            (l.data_start - l.root_sectors..l.data_start).collect()
        };
        let mut dirs: Vec<u64> = Vec::new();
        let mut seen: HashSet<u64> = HashSet::new();
        let mut todo = vec![root];
        while let Some(sectors) = todo.pop() {
            for c in self.children(&sectors) {
                if !seen.insert(c) {
                    continue;
                }
                let secs: Vec<u64> = self
                    .chain(c)
                    .into_iter()
                    .flat_map(|c| l.cluster_sectors(c))
                    .collect();
                dirs.extend(secs.iter().copied());
                todo.push(secs);
            }
        }
        if l.bits == Bits::Fat32 {
            dirs.extend(
                self.chain(l.root_cluster)
                    .into_iter()
                    .flat_map(|c| l.cluster_sectors(c)),
            );
        }
        dirs.sort_unstable();
        dirs.dedup();
        dirs.retain(|&d| (d as usize) < self.dirs.len());
        for &d in &self.dir_list {
            self.dirs[d as usize] = false;
        }
        for &d in &dirs {
            self.dirs[d as usize] = true;
        }
        self.dir_list = dirs;
        // The bits and the list say the same (a full count: debug builds only, the walk runs
        // after every metadata write).
        debug_assert_eq!(
            self.dirs.iter().filter(|&&d| d).count(),
            self.dir_list.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FAT16 volume made by hand: 2 reserved, 2 FATs of 4 sectors, 16 root entries (1
    /// sector), 1 sector per cluster.
    fn volume() -> Vec<u8> {
        let mut v = vec![0u8; 8192 * 512];
        let b = &mut v[..512];
        b[11..13].copy_from_slice(&512u16.to_le_bytes());
        b[13] = 1;
        b[14..16].copy_from_slice(&2u16.to_le_bytes());
        b[16] = 2;
        b[17..19].copy_from_slice(&16u16.to_le_bytes());
        b[19..21].copy_from_slice(&8192u16.to_le_bytes());
        b[22..24].copy_from_slice(&32u16.to_le_bytes());
        b[510] = 0x55;
        b[511] = 0xAA;
        v
    }

    #[test]
    fn a_new_directory_becomes_metadata_once_named_and_chained() {
        let mut t = FatTracker::new(volume()).unwrap();
        let l = t.layout;
        assert_eq!((l.bits, l.data_start), (Bits::Fat16, 2 + 64 + 1));
        assert!(t.is_metadata(0) && t.is_metadata(66) && !t.is_metadata(67));
        // Cluster 5 (sector 67 + 3) written before it is named: data.
        assert_eq!(t.write(70, &[0u8; 512]), vec![false]);
        // Its FAT entry (end mark), then a root entry naming it as a directory.
        let mut fat = vec![0u8; 512];
        fat[10..12].copy_from_slice(&0xFFFFu16.to_le_bytes());
        assert_eq!(t.write(2, &fat), vec![true]);
        let mut root = vec![0u8; 512];
        root[..11].copy_from_slice(b"DIR0       ");
        root[11] = 0x10;
        root[26..28].copy_from_slice(&5u16.to_le_bytes());
        t.write(66, &root);
        assert!(t.is_metadata(70) && !t.is_metadata(71));
        assert_eq!(t.directory_sectors(), 1);
        // Deleted: no longer a directory.
        root[0] = 0xE5;
        t.write(66, &root);
        assert!(!t.is_metadata(70));
        // Four sector writes: data, FAT, the root twice.
        let k = t.kinds;
        assert_eq!(
            (k.data, k.fat, k.directory, k.reserved),
            (1, 1, 2, 0),
            "{k:?}"
        );
        assert_eq!(
            k.unchanged(),
            1,
            "{k:?}: the first data write wrote zeros over zeros"
        );
        // The same root sector again, and a FAT copy with the same bytes: unchanged.
        t.write(66, &root);
        t.write(2, &fat);
        t.write(0, &volume()[..512]);
        let k = t.kinds;
        assert_eq!(
            (k.directory_unchanged, k.fat_unchanged, k.reserved_unchanged),
            (1, 1, 1)
        );
        assert_eq!((k.written(), k.changed()), (7, 3), "{k:?}");
        assert_eq!(t.kind(34), Kind::Fat);
        assert_eq!(t.kind(71), Kind::Data);
    }
}
