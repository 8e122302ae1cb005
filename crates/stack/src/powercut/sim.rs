//! The power-cut machinery (feature `powercut`): see the module above.

use super::{PowerCutSpec, POWER_CUT_EXIT, POWER_CUT_IMAGE_BYTES_MAX};
use nvstack_core::error::{Error, Result};
use nvstack_core::lock::{lock_file, open_file};
use nvstack_nvcache::FileDevice;
use nvstack_nvramdisk::image::open_image_file;
use nvstack_pmem::crash::{CrashState, ImageSpace, SimEvent, SimRegion};
use nvstack_pmem::simdisk::{parts, SimDisk, SimNvram};
use nvstack_pmem::LINE_BYTES;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// One file loaded into the simulated region: its words are `[word, word + len / 8)`.
struct Part {
    path: PathBuf,
    file: File,
    word: usize,
    len: u64,
    /// Write back only the 4 KiB pages that differ from the loaded contents (a cache's large
    /// backing file, of which a run changes little); else the whole part.
    changed_pages_only: bool,
}

/// Files loaded into a recording simulated region, with their locks held: an nvramdisk
/// image, or a cache image (the region's head, its NVRAM) and its backing file (the tail, a
/// simulated disk whose sectors written since its last flush are old or new at the cut).
pub struct PowerCut {
    parts: Vec<Part>,
    base: Arc<Vec<u64>>,
    region: Arc<SimRegion>,
    spec: PowerCutSpec,
    /// The backing file's exclusive lock (a cache's run), held until the process ends.
    _backing_lock: Option<FileDevice>,
}

fn read_whole(file: &File, path: &Path) -> Result<Vec<u8>> {
    let len = file
        .metadata()
        .map_err(|e| Error::env(format!("{}: cannot stat: {e}", path.display())))?
        .len();
    if len > POWER_CUT_IMAGE_BYTES_MAX {
        return Err(Error::bad(format!(
            "{}: {len} bytes is too large for a power-cut run (at most {} bytes)",
            path.display(),
            POWER_CUT_IMAGE_BYTES_MAX
        )));
    }
    assert!(len.is_multiple_of(4096), "validated files are whole pages");
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| Error::env(format!("{}: cannot read: {e}", path.display())))?;
    Ok(bytes)
}

fn words_of(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk")))
}

impl PowerCut {
    /// Load the nvramdisk image at `path` (validated and locked like any writer's open).
    pub fn load(path: &Path, spec: PowerCutSpec) -> Result<Arc<PowerCut>> {
        let (file, _sb) = open_image_file(path)?;
        let bytes = read_whole(&file, path)?;
        let part = Part {
            path: path.to_path_buf(),
            file,
            word: 0,
            len: bytes.len() as u64,
            changed_pages_only: false,
        };
        Ok(PowerCut::start(
            vec![part],
            words_of(&bytes).collect(),
            spec,
            None,
        ))
    }

    /// Load a cache image (validated by the caller's `backing_of`, locked exclusively here)
    /// and its backing file at `bpath` (locked exclusively) into one region: the NVRAM the
    /// region's head, the backing file its tail ([`PowerCut::cache_devices`]).
    pub fn load_cache(image: &Path, bpath: &Path, spec: PowerCutSpec) -> Result<Arc<PowerCut>> {
        let bpath = bpath.to_path_buf();
        let file = open_file(image, true, "image")?;
        lock_file(&file, image, "image", true)?;
        let lock = FileDevice::open(&bpath)?;
        let bfile = open_file(&bpath, true, "backing file")?;
        let nvram = read_whole(&file, image)?;
        let disk = read_whole(&bfile, &bpath)?;
        let mut words: Vec<u64> = Vec::with_capacity((nvram.len() + disk.len()) / 8);
        words.extend(words_of(&nvram));
        words.extend(words_of(&disk));
        let parts = vec![
            Part {
                path: image.to_path_buf(),
                file,
                word: 0,
                len: nvram.len() as u64,
                changed_pages_only: false,
            },
            Part {
                path: bpath,
                file: bfile,
                word: nvram.len() / 8,
                len: disk.len() as u64,
                changed_pages_only: true,
            },
        ];
        Ok(PowerCut::start(parts, words, spec, Some(lock)))
    }

    /// [`PowerCut::load_cache`], then the run's NVRAM and backing device, ready for the
    /// cache's own open.
    pub fn load_cache_devices(
        image: &Path,
        bpath: &Path,
        spec: PowerCutSpec,
    ) -> Result<(Arc<PowerCut>, Arc<SimNvram>, Arc<SimDisk>)> {
        let pc = PowerCut::load_cache(image, bpath, spec)?;
        let (nvram, disk) = pc.cache_devices().expect("a cache run has both parts");
        Ok((pc, Arc::new(nvram), Arc::new(disk)))
    }

    fn start(
        parts: Vec<Part>,
        words: Vec<u64>,
        spec: PowerCutSpec,
        backing_lock: Option<FileDevice>,
    ) -> Arc<PowerCut> {
        let base = Arc::new(words);
        let region = Arc::new(SimRegion::from_base(base.clone()));
        region.start_recording();
        Arc::new(PowerCut {
            parts,
            base,
            region,
            spec,
            _backing_lock: backing_lock,
        })
    }

    /// A cache run's NVRAM (the image's words) and backing device (the backing file's words,
    /// written as disk sectors); None for an nvramdisk run.
    pub fn cache_devices(&self) -> Option<(SimNvram, SimDisk)> {
        let disk = self.parts.get(1)?;
        Some(parts(&self.region, disk.word as u64 * 8))
    }

    /// Write `image` (the whole region's words) to the loaded files and sync them.
    fn write_files(&self, image: &[u64]) -> std::io::Result<()> {
        for p in &self.parts {
            let words = &image[p.word..p.word + (p.len / 8) as usize];
            let base = &self.base[p.word..p.word + (p.len / 8) as usize];
            let page_words = 512;
            for (i, page) in words.chunks(page_words).enumerate() {
                let start = i * page_words;
                if p.changed_pages_only && page == &base[start..start + page.len()] {
                    continue;
                }
                let mut bytes = Vec::with_capacity(page.len() * 8);
                for w in page {
                    bytes.extend_from_slice(&w.to_le_bytes());
                }
                p.file.write_all_at(&bytes, start as u64 * 8)?;
            }
            p.file.sync_all()?;
        }
        Ok(())
    }

    /// The region to open the device on.
    pub fn region(&self) -> Arc<SimRegion> {
        self.region.clone()
    }

    pub fn spec(&self) -> PowerCutSpec {
        self.spec
    }

    /// Cut power after the spec's delay, from a thread of its own.
    pub fn arm(self: &Arc<Self>) {
        self.arm_with(|| {})
    }

    /// Cut power after the spec's delay, from a thread of its own; `before_cut` runs first,
    /// on that thread, just before the region is frozen (the serve daemon uses it to pick its
    /// instant and to freeze its counters, so that nothing is acknowledged after the cut).
    pub fn arm_with(self: &Arc<Self>, before_cut: impl FnOnce() + Send + 'static) {
        let me = self.clone();
        let delay = Duration::from_millis(self.spec.delay_ms);
        std::thread::Builder::new()
            .name("power-cut".into())
            .spawn(move || {
                std::thread::sleep(delay);
                before_cut();
                me.cut_now()
            })
            .expect("spawn the power-cut thread");
    }

    /// An orderly shutdown instead of a cut: write what loads see (every store, as if all
    /// caches were written back) to the image file.
    pub fn write_back_all(&self) -> Result<()> {
        let image = self.region.snapshot();
        self.write_files(&image).map_err(|e| {
            Error::env(format!(
                "{}: cannot write: {e}",
                self.parts[0].path.display()
            ))
        })
    }

    /// Cut power now: freeze the region, write one crash image, end the process.
    pub fn cut_now(&self) -> ! {
        self.region.with_frozen_events(|events| {
            // Fold the quiescent prefix with plain stores (cheap), replay only the rest.
            let q = quiescent_prefix(events);
            let folded = fold(&self.base, &events[..q]);
            let mut cs = CrashState::new(Arc::new(folded));
            for ev in &events[q..] {
                cs.apply(ev);
            }
            let space = ImageSpace::new(&cs, self.spec.model, self.spec.seed);
            let choice = space.random_choice(self.spec.seed ^ events.len() as u64);
            let image = space.image(&choice).snapshot();
            let wrote = self.write_files(&image);
            let code = match wrote {
                Ok(()) => {
                    eprintln!(
                        "nvstack: power cut ({}, seed {}) after {} events: crash image written to {}",
                        self.spec.model.name(),
                        self.spec.seed,
                        events.len(),
                        self.parts[0].path.display()
                    );
                    POWER_CUT_EXIT
                }
                Err(e) => {
                    eprintln!(
                        "nvstack: power cut: cannot write {}: {e}",
                        self.parts[0].path.display()
                    );
                    3
                }
            };
            // End at once: `exit` runs no destructor on any stack (a clean close would be a clean
            // shutdown), and the other threads stay blocked on the frozen region meanwhile.
            std::process::exit(code)
        })
    }
}

/// `base` with every store of `events` applied in order, memory and disk alike: the durable
/// image after a quiescent prefix ([`quiescent_prefix`]).
pub fn fold(base: &[u64], events: &[SimEvent]) -> Vec<u64> {
    let mut folded = base.to_vec();
    for ev in events {
        match *ev {
            SimEvent::Store { word, value, .. } | SimEvent::DiskStore { word, value } => {
                folded[word as usize] = value
            }
            _ => {}
        }
    }
    folded
}

/// The length of the longest prefix of `events` that ends at a fence with nothing pending:
/// every non-temporal store before a fence is durable after it, and a cached store is durable
/// once its line was flushed after it and a fence followed (the rules of `CrashState`). At
/// such a point the durable image is simply the base with every store applied in order, so
/// the (costly) replay of `CrashState` is needed only for what follows.
pub fn quiescent_prefix(events: &[SimEvent]) -> usize {
    let words_per_line = LINE_BYTES / 8;
    // Lines with cached stores not yet durable: (flushed since the last store, flush pending
    // a fence).
    let mut dirty: HashMap<u64, bool> = HashMap::new();
    // Disk sectors written and not yet flushed (a simulated backing device).
    let mut disk_dirty = false;
    let mut last = 0;
    for (i, ev) in events.iter().enumerate() {
        match *ev {
            SimEvent::Store {
                word, nt: false, ..
            } => {
                dirty.insert(word / words_per_line, false);
            }
            SimEvent::Store { nt: true, .. } => {}
            SimEvent::Flush { line } => {
                if let Some(f) = dirty.get_mut(&line) {
                    *f = true;
                }
            }
            SimEvent::Fence => {
                dirty.retain(|_, flushed| !*flushed);
                if dirty.is_empty() && !disk_dirty {
                    last = i + 1;
                }
            }
            SimEvent::DiskStore { .. } => disk_dirty = true,
            SimEvent::DiskFlush => {
                disk_dirty = false;
                if dirty.is_empty() {
                    last = i + 1;
                }
            }
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvstack_pmem::{FlushKind, Region};

    /// The fold agrees with a full replay: same durable image at every quiescent point.
    #[test]
    fn quiescent_prefix_matches_the_full_replay() {
        let r = SimRegion::zeroed(8192);
        r.start_recording();
        r.write_nt(0, &[1u8; 64]);
        r.fence();
        r.write(128, &[2u8; 16]); // cached, not flushed: not quiescent after the next fence
        r.write_nt(256, &[3u8; 8]);
        r.fence();
        let mid = r.event_count();
        r.flush(128, 16, FlushKind::Clflushopt);
        r.fence();
        r.disk_write(4096, &[5u8; 1024]); // two disk sectors, durable at the disk flush
        r.disk_flush();
        let end = r.event_count();
        r.write_nt(512, &[4u8; 8]); // pending at the end
        let events = r.take_events();
        assert_eq!(quiescent_prefix(&events[..mid]), 9);
        assert_eq!(quiescent_prefix(&events), end);
        let mut full = CrashState::new(Arc::new(vec![0u64; 1024]));
        for ev in &events[..end] {
            full.apply(ev);
        }
        assert!(full.quiescent());
        assert_eq!(*full.durable_image(), fold(&[0u64; 1024], &events[..end]));
    }
}
