//! A brute-force reference for the cache models (tests only): every memory is a plain vector
//! of entries, every choice a linear scan, every cleaner tick simulated one by one, and the
//! next write of an access found by scanning ahead. It shares no code with `cache.rs` but the
//! definition of the random policy (a vector in insertion order, swap-remove, `gen_range` on a
//! `SmallRng` seeded the same way), which is that policy's specification.

use crate::cache::{CacheConfig, CacheStats, Model, CLEANER_PERIOD_NS};
use crate::trace::{BlockAccess, Op};
use nvstack_policy::{PolicyKind, NEVER};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mem {
    Volatile,
    Nvram,
}

#[derive(Clone, Debug)]
struct Entry {
    key: u64,
    mem: Mem,
    dirty: bool,
    dirty_since: u64,
    /// Last access (LRU order of the volatile cache, and of the unified NVRAM).
    seq: u64,
    /// Write-aside: the entry has an NVRAM copy; its policy's last touch and next write.
    in_nv: bool,
    nv_seq: u64,
    next_write: u64,
}

struct Ref {
    cfg: CacheConfig,
    e: Vec<Entry>,
    /// Random policy: NVRAM-resident keys in insertion order.
    members: Vec<u64>,
    rng: SmallRng,
    s: CacheStats,
    origin: Option<u64>,
    last_tick: u64,
}

impl Ref {
    fn find(&self, key: u64) -> Option<usize> {
        self.e.iter().position(|x| x.key == key)
    }

    fn count(&self, m: Mem) -> u64 {
        self.e.iter().filter(|x| x.mem == m).count() as u64
    }

    fn oldest(&self, m: Mem) -> Option<usize> {
        (0..self.e.len())
            .filter(|&i| self.e[i].mem == m)
            .min_by_key(|&i| self.e[i].seq)
    }

    fn members_remove(&mut self, key: u64) {
        if self.cfg.policy == PolicyKind::Random {
            let p = self.members.iter().position(|&k| k == key).unwrap();
            self.members.swap_remove(p);
        }
    }

    /// The NVRAM victim among entries for which `nv(entry)` holds; `seq_of` is the recency the
    /// policy sees.
    fn victim(&mut self, nv: impl Fn(&Entry) -> bool, seq_of: impl Fn(&Entry) -> u64) -> usize {
        let cand: Vec<usize> = (0..self.e.len()).filter(|&i| nv(&self.e[i])).collect();
        assert!(!cand.is_empty());
        match self.cfg.policy {
            PolicyKind::Lru => *cand.iter().min_by_key(|&&i| seq_of(&self.e[i])).unwrap(),
            PolicyKind::Omniscient => *cand
                .iter()
                .max_by_key(|&&i| (self.e[i].next_write, u64::MAX - seq_of(&self.e[i])))
                .unwrap(),
            PolicyKind::Random => {
                let k = self.members[self.rng.gen_range(0..self.members.len())];
                self.find(k).unwrap()
            }
            PolicyKind::Clock => unreachable!("CacheConfig::validate refuses clock"),
        }
    }

    fn wb(&mut self, which: &str) {
        self.s.writebacks += 1;
        self.s.bus_blocks += 1;
        match which {
            "eviction" => self.s.writebacks_eviction += 1,
            "replacement" => self.s.writebacks_replacement += 1,
            "cleaner" => self.s.writebacks_cleaner += 1,
            "sync" => self.s.writebacks_sync += 1,
            "through" => self.s.writebacks_through += 1,
            _ => unreachable!(),
        }
    }

    fn new_entry(key: u64, mem: Mem, seq: u64) -> Entry {
        Entry {
            key,
            mem,
            dirty: false,
            dirty_since: 0,
            seq,
            in_nv: false,
            nv_seq: 0,
            next_write: NEVER,
        }
    }

    // ---- volatile ----
    fn cleaner(&mut self, t: u64) {
        let Some(delay) = self.cfg.delayed_writeback_ns else {
            return;
        };
        let origin = *self.origin.get_or_insert(t);
        if self.last_tick < origin {
            self.last_tick = origin;
        }
        while self.last_tick + CLEANER_PERIOD_NS <= t {
            self.last_tick += CLEANER_PERIOD_NS;
            let tick = self.last_tick;
            for i in 0..self.e.len() {
                if self.e[i].dirty && tick - self.e[i].dirty_since > delay {
                    self.e[i].dirty = false;
                    self.wb("cleaner");
                }
            }
        }
    }

    fn volatile(&mut self, a: &BlockAccess, seq: u64) {
        self.cleaner(a.time_ns);
        let write = a.op == Op::Write;
        self.s.bus_blocks += 1;
        let i = match self.find(a.key) {
            Some(i) => {
                self.s.hits_volatile += 1;
                self.e[i].seq = seq;
                i
            }
            None => {
                if write {
                    self.s.write_misses += 1;
                } else {
                    self.s.read_misses += 1;
                    self.s.bus_blocks += 1;
                }
                if self.cfg.volatile_blocks == 0 {
                    if write {
                        self.wb("through");
                    }
                    return;
                }
                if self.e.len() as u64 == self.cfg.volatile_blocks {
                    let v = self.oldest(Mem::Volatile).unwrap();
                    if self.e[v].dirty {
                        self.wb("eviction");
                    }
                    self.e.remove(v);
                }
                self.e.push(Self::new_entry(a.key, Mem::Volatile, seq));
                self.e.len() - 1
            }
        };
        if !write {
            return;
        }
        if self.e[i].dirty {
            self.s.overwrites_absorbed += 1;
        } else {
            self.e[i].dirty = true;
            self.e[i].dirty_since = a.time_ns;
        }
        if a.sync {
            self.e[i].dirty = false;
            self.wb("sync");
        }
    }

    // ---- write-aside ----
    fn write_aside(&mut self, a: &BlockAccess, seq: u64, nw: u64) {
        let write = a.op == Op::Write;
        self.s.bus_blocks += 1;
        let i = match self.find(a.key) {
            Some(i) => {
                self.s.hits_volatile += 1;
                self.e[i].seq = seq;
                Some(i)
            }
            None => {
                if write {
                    self.s.write_misses += 1;
                } else {
                    self.s.read_misses += 1;
                    self.s.bus_blocks += 1;
                }
                if self.cfg.volatile_blocks == 0 {
                    None
                } else {
                    if self.e.len() as u64 == self.cfg.volatile_blocks {
                        let v = self.oldest(Mem::Volatile).unwrap();
                        if self.e[v].in_nv {
                            let k = self.e[v].key;
                            self.members_remove(k);
                            self.wb("eviction");
                        }
                        self.e.remove(v);
                    }
                    self.e.push(Self::new_entry(a.key, Mem::Volatile, seq));
                    Some(self.e.len() - 1)
                }
            }
        };
        if !write {
            return;
        }
        let Some(i) = i else {
            self.wb("through");
            return;
        };
        self.write_aside_nvram(i, seq, nw);
    }

    /// A write-aside write to volatile entry `i`: its NVRAM copy overwritten, or one made
    /// (the policy's victim written back when the NVRAM is full), or written through.
    fn write_aside_nvram(&mut self, i: usize, seq: u64, nw: u64) {
        if self.e[i].in_nv {
            self.s.overwrites_absorbed += 1;
            self.s.nvram_writes += 1;
            self.s.bus_blocks += 1;
            self.e[i].nv_seq = seq;
            self.e[i].next_write = nw;
            return;
        }
        if self.cfg.nvram_blocks == 0 {
            self.wb("through");
            return;
        }
        let in_nv = self.e.iter().filter(|x| x.in_nv).count() as u64;
        if in_nv == self.cfg.nvram_blocks {
            let v = self.victim(|x| x.in_nv, |x| x.nv_seq);
            self.e[v].in_nv = false;
            let k = self.e[v].key;
            self.members_remove(k);
            self.wb("replacement");
        }
        let key = self.e[i].key;
        let x = &mut self.e[i];
        x.in_nv = true;
        x.nv_seq = seq;
        x.next_write = nw;
        if self.cfg.policy == PolicyKind::Random {
            self.members.push(key);
        }
        self.s.nvram_writes += 1;
        self.s.bus_blocks += 1;
    }

    // ---- unified ----
    fn place_clean_volatile(&mut self, key: u64, seq: u64) {
        if self.cfg.volatile_blocks == 0 {
            return;
        }
        if self.count(Mem::Volatile) == self.cfg.volatile_blocks {
            let v = self.oldest(Mem::Volatile).unwrap();
            self.e.remove(v);
        }
        self.e.push(Self::new_entry(key, Mem::Volatile, seq));
    }

    fn nvram_insert(&mut self, key: u64, seq: u64, nw: u64, dirty: bool) {
        let mut x = Self::new_entry(key, Mem::Nvram, seq);
        x.dirty = dirty;
        x.next_write = nw;
        self.e.push(x);
        if self.cfg.policy == PolicyKind::Random {
            self.members.push(key);
        }
        self.s.nvram_writes += 1;
    }

    fn nvram_evict(&mut self) {
        let v = self.victim(|x| x.mem == Mem::Nvram, |x| x.seq);
        let x = self.e.remove(v);
        self.members_remove(x.key);
        if x.dirty {
            self.wb("replacement");
        }
        let move_down = if self.cfg.volatile_blocks == 0 {
            false
        } else if self.count(Mem::Volatile) < self.cfg.volatile_blocks {
            true
        } else {
            let l = self.oldest(Mem::Volatile).unwrap();
            if self.e[l].seq < x.seq {
                self.e.remove(l);
                true
            } else {
                false
            }
        };
        if x.dirty || move_down {
            self.s.nvram_reads += 1;
        }
        if move_down {
            self.e.push(Self::new_entry(x.key, Mem::Volatile, x.seq));
            self.s.moves_to_volatile += 1;
            self.s.bus_blocks += 1;
        }
    }

    fn write_to_nvram(&mut self, key: u64, seq: u64, nw: u64) {
        if self.cfg.nvram_blocks == 0 {
            self.wb("through");
            self.place_clean_volatile(key, seq);
            return;
        }
        if self.count(Mem::Nvram) == self.cfg.nvram_blocks {
            self.nvram_evict();
        }
        self.nvram_insert(key, seq, nw, true);
    }

    fn unified(&mut self, a: &BlockAccess, seq: u64, nw: u64) {
        let write = a.op == Op::Write;
        self.s.bus_blocks += 1;
        match self.find(a.key) {
            Some(i) if self.e[i].mem == Mem::Nvram => {
                self.s.hits_nvram += 1;
                self.e[i].seq = seq;
                self.e[i].next_write = nw;
                if write {
                    self.s.nvram_writes += 1;
                    if self.e[i].dirty {
                        self.s.overwrites_absorbed += 1;
                    }
                    self.e[i].dirty = true;
                } else {
                    self.s.nvram_reads += 1;
                }
            }
            Some(i) => {
                self.s.hits_volatile += 1;
                if write {
                    self.e.remove(i);
                    self.write_to_nvram(a.key, seq, nw);
                } else {
                    self.e[i].seq = seq;
                }
            }
            None if write => {
                self.s.write_misses += 1;
                self.write_to_nvram(a.key, seq, nw);
            }
            None => {
                self.s.read_misses += 1;
                self.s.bus_blocks += 1;
                let (v, n) = (self.cfg.volatile_blocks, self.cfg.nvram_blocks);
                if v > 0 && self.count(Mem::Volatile) < v {
                    self.e.push(Self::new_entry(a.key, Mem::Volatile, seq));
                } else if n == 0 {
                    self.place_clean_volatile(a.key, seq);
                } else if self.count(Mem::Nvram) < n {
                    self.nvram_insert(a.key, seq, nw, false);
                } else {
                    let on = self.e[self.oldest(Mem::Nvram).unwrap()].seq;
                    let nvram_holds_lru = match self.oldest(Mem::Volatile) {
                        None => true,
                        Some(l) => on < self.e[l].seq,
                    };
                    if nvram_holds_lru {
                        self.nvram_evict();
                        self.nvram_insert(a.key, seq, nw, false);
                    } else {
                        self.place_clean_volatile(a.key, seq);
                    }
                }
            }
        }
    }
}

/// Run the reference over `trace`.
pub fn run(cfg: &CacheConfig, trace: &[BlockAccess]) -> CacheStats {
    let mut r = Ref {
        cfg: cfg.clone(),
        e: Vec::new(),
        members: Vec::new(),
        rng: SmallRng::seed_from_u64(cfg.seed),
        s: CacheStats::default(),
        origin: None,
        last_tick: 0,
    };
    for (i, a) in trace.iter().enumerate() {
        let nw = (i + 1..trace.len())
            .find(|&j| trace[j].key == a.key && trace[j].op == Op::Write)
            .map_or(NEVER, |j| j as u64);
        let seq = i as u64 + 1;
        r.s.block_accesses += 1;
        match a.op {
            Op::Read => r.s.reads += 1,
            Op::Write => r.s.writes += 1,
        }
        match cfg.model {
            Model::Volatile => r.volatile(a, seq),
            Model::WriteAside => r.write_aside(a, seq, nw),
            Model::Unified => r.unified(a, seq, nw),
        }
    }
    r.s.dirty_at_end = match cfg.model {
        Model::Volatile | Model::Unified => r.e.iter().filter(|x| x.dirty).count() as u64,
        Model::WriteAside => r.e.iter().filter(|x| x.in_nv).count() as u64,
    };
    r.s.finish();
    r.s
}
