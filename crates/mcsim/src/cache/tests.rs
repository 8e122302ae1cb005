//! The tags-only hierarchy against the model it replaced: ways holding (tag, data) pairs in
//! recency order, kept here as the reference. Random loads, stores and flushes by several
//! cores over a few shared lines (so copies of one line are dirty in several cores at once)
//! must give the same service levels, writebacks, flushed data, privacy answers and final
//! dirty lines, access by access.

use super::{Hierarchy, Served};
use crate::config::{CacheLevel, Config};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// One reference cache: per set, `ways` (line + 1, data) pairs, most recent first.
struct RefCache {
    sets: Vec<Vec<(u64, u64)>>,
}

impl RefCache {
    fn new(level: &CacheLevel, scale: u64) -> RefCache {
        let lines = level.bytes * scale / 64;
        let ways = level.ways as usize;
        RefCache {
            sets: vec![vec![(0, 0); ways]; lines as usize / ways],
        }
    }

    fn set(&mut self, line: u64) -> &mut Vec<(u64, u64)> {
        let n = self.sets.len() as u64;
        &mut self.sets[(line % n) as usize]
    }

    fn find(&mut self, line: u64) -> Option<&mut (u64, u64)> {
        let set = self.set(line);
        let at = set.iter().position(|w| w.0 == line + 1)?;
        set[..=at].rotate_right(1);
        Some(&mut set[0])
    }

    fn peek(&self, line: u64) -> Option<&(u64, u64)> {
        let n = self.sets.len() as u64;
        self.sets[(line % n) as usize]
            .iter()
            .find(|w| w.0 == line + 1)
    }

    fn insert(&mut self, line: u64, data: u64) -> Option<(u64, u64)> {
        let set = self.set(line);
        let last = *set.last().unwrap();
        set.rotate_right(1);
        set[0] = (line + 1, data);
        (last.0 != 0 && last.1 != 0).then(|| (last.0 - 1, last.1))
    }

    fn put_dirty(&mut self, line: u64, data: u64) -> Option<(u64, u64)> {
        match self.find(line) {
            Some(w) => {
                w.1 = data;
                None
            }
            None => self.insert(line, data),
        }
    }
}

struct RefHierarchy {
    l1: Vec<RefCache>,
    l2: Vec<RefCache>,
    l3: RefCache,
    writebacks: Vec<(u64, u64)>,
}

impl RefHierarchy {
    fn access(&mut self, c: usize, line: u64, version: u64) -> Served {
        if let Some(w) = self.l1[c].find(line) {
            if version != 0 {
                w.1 = version;
            }
            return Served::L1;
        }
        let (served, data) = if let Some(w) = self.l2[c].find(line) {
            (Served::L2, std::mem::take(&mut w.1))
        } else if let Some(w) = self.l3.find(line) {
            (Served::L3, std::mem::take(&mut w.1))
        } else {
            self.writebacks.extend(self.l3.insert(line, 0));
            if let Some((l, v)) = self.l2[c].insert(line, 0) {
                self.writebacks.extend(self.l3.put_dirty(l, v));
            }
            (Served::Memory, 0)
        };
        let v = if version != 0 { version } else { data };
        if let Some((l, v)) = self.l1[c].insert(line, v) {
            if let Some((l, v)) = self.l2[c].put_dirty(l, v) {
                self.writebacks.extend(self.l3.put_dirty(l, v));
            }
        }
        served
    }

    fn flush(&mut self, c: usize, line: u64) -> Option<u64> {
        let levels = [&mut self.l1[c], &mut self.l2[c], &mut self.l3];
        for cache in levels {
            let n = cache.sets.len() as u64;
            let set = &mut cache.sets[(line % n) as usize];
            if let Some(w) = set.iter_mut().find(|w| w.0 == line + 1 && w.1 != 0) {
                return Some(std::mem::take(&mut w.1));
            }
        }
        None
    }

    fn is_private(&self, c: usize, line: u64) -> bool {
        let n = self.l1[c].sets.len() as u64;
        let last = self.l1[c].sets[(line % n) as usize].last().unwrap();
        self.l1[c].peek(line).is_some()
            || (self.l2[c].peek(line).is_some() && !(last.0 != 0 && last.1 != 0))
    }
}

fn small_machine(cores: u32) -> Config {
    let level = |bytes, ways| CacheLevel {
        bytes,
        ways,
        hit_cycles: 1,
    };
    Config {
        cores,
        l1: level(256, 2),
        l2: level(1024, 4),
        l3_per_core: level(512, 4),
        ..Config::default()
    }
}

#[test]
fn tags_only_hierarchy_matches_the_tag_and_data_model() {
    compare_with_reference(small_machine(4), 4);
}

/// The same at Table II's widths (4, 8 and 16 ways), which are scanned and shifted by code
/// of their own, on two sets a level.
#[test]
fn table_ii_widths_match_the_tag_and_data_model() {
    let cores = 4;
    let level = |bytes, ways| CacheLevel {
        bytes,
        ways,
        hit_cycles: 1,
    };
    let cfg = Config {
        cores,
        l1: level(2 * 4 * 64, 4),
        l2: level(2 * 8 * 64, 8),
        l3_per_core: level(2 * 16 * 64 / u64::from(cores), 16),
        ..Config::default()
    };
    compare_with_reference(cfg, cores);
}

fn compare_with_reference(cfg: Config, cores: u32) {
    cfg.validate().unwrap();
    let mut new = Hierarchy::new(&cfg);
    let mut old = RefHierarchy {
        l1: (0..cores).map(|_| RefCache::new(&cfg.l1, 1)).collect(),
        l2: (0..cores).map(|_| RefCache::new(&cfg.l2, 1)).collect(),
        l3: RefCache::new(&cfg.l3_per_core, u64::from(cores)),
        writebacks: Vec::new(),
    };
    let mut rng = SmallRng::seed_from_u64(24);
    let (mut flushed, mut written) = (0, 0);
    for step in 1..=200_000u64 {
        let c = rng.gen_range(0..cores as usize);
        let line = rng.gen_range(0..96u64);
        assert_eq!(
            new.is_private(c, line),
            old.is_private(c, line),
            "step {step}"
        );
        match rng.gen_range(0..10) {
            0..=1 => {
                let (a, b) = (new.flush(c, line), old.flush(c, line));
                assert_eq!(a, b, "flush at step {step}");
                flushed += u64::from(a.is_some());
            }
            k => {
                let version = if k < 6 { 0 } else { step };
                let served = new.access(c, line, version);
                assert_eq!(served, old.access(c, line, version), "step {step}");
                assert_eq!(new.writebacks, old.writebacks, "writebacks at step {step}");
                written += new.writebacks.len() as u64;
                new.writebacks.clear();
                old.writebacks.clear();
            }
        }
    }
    let mut a = new.dirty_lines();
    let caches = old.l1.iter().chain(&old.l2).chain([&old.l3]);
    let ways = caches.flat_map(|c| c.sets.iter().flatten());
    let mut b: Vec<(u64, u64)> = ways
        .filter(|w| w.0 != 0 && w.1 != 0)
        .map(|w| (w.0 - 1, w.1))
        .collect();
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b, "dirty lines at the end");
    assert!(!a.is_empty());
    // Both paths were exercised: dirty data flushed and written back, from several cores.
    assert!(flushed > 1_000 && written > 1_000, "{flushed} {written}");
}
