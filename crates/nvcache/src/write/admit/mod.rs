//! Admission: which writes the write cache takes. Everything (the default), block ranges, or
//! the metadata of a FAT volume (fat.rs: reserved sectors, every FAT copy, the FAT12/16 root
//! directory and the clusters of every directory, rebuilt at open and kept current as the FAT
//! and the directories change). A wrong classification costs speed, never correctness: a
//! write to a cached block always goes to the cache (write/mod.rs).

pub mod fat;

use crate::write::format::Admit;
use std::ops::Range;

/// The admission in force.
#[derive(Clone, Debug)]
pub enum Admission {
    All,
    /// Sorted, disjoint block ranges.
    Ranges(Vec<Range<u64>>),
    /// A FAT volume's metadata blocks as last classified (boxed: the map keeps the walk's
    /// bytes).
    Fat(Box<crate::write::admit::fat::FatMap>),
}

impl Admission {
    pub fn from_ranges(a: &Admit) -> Option<Admission> {
        match a {
            Admit::All => Some(Admission::All),
            Admit::Ranges(rs) => Some(Admission::Ranges(rs.clone())),
            Admit::FatMetadata => None,
        }
    }

    pub fn is_all(&self) -> bool {
        matches!(self, Admission::All)
    }

    /// Whether a write to `lba` is admitted.
    #[inline]
    pub fn admits(&self, lba: u64) -> bool {
        match self {
            Admission::All => true,
            Admission::Ranges(rs) => in_ranges(rs, lba),
            Admission::Fat(m) => m.admits(lba),
        }
    }

    /// The admitted ranges (`status` shows them).
    pub fn ranges(&self) -> Vec<Range<u64>> {
        match self {
            Admission::All => std::iter::once(0..u64::MAX).collect(),
            Admission::Ranges(rs) => rs.clone(),
            Admission::Fat(m) => m.ranges(),
        }
    }
}

/// Whether `lba` lies in one of `rs` (sorted, disjoint).
pub fn in_ranges(rs: &[Range<u64>], lba: u64) -> bool {
    let i = rs.partition_point(|r| r.end <= lba);
    rs.get(i).is_some_and(|r| r.start <= lba)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_admit_exactly_their_blocks() {
        let rs = vec![0..4, 10..12, 20..21];
        for lba in 0..30 {
            let want = lba < 4 || (10..12).contains(&lba) || lba == 20;
            assert_eq!(in_ranges(&rs, lba), want, "{lba}");
        }
    }
}
