//! A write cache served by a long-running process (`nvstack serve`): the device it exports,
//! its live state told to an observer after every request and every timer tick, and the
//! timer that runs dm-writecache's timed triggers (max-age and the cleaner).
//!
//! Built on the write cache's public API only (write/mod.rs, write/destage.rs): every request goes
//! through [`Served`], which forwards it to the cache and then reads the live state under
//! the cache's own lock and tells the observer while still holding it, so that observers see
//! the states in the order the cache went through them. A process killed between a request's
//! return from the cache and that report leaves the observer one request behind (the state
//! before it); the cache itself is durable either way.

use crate::write::format::PATH_OFF;
use crate::write::WriteCache;
use nvstack_core::blockdev::{BlockDevice, Caps};
use nvstack_core::error::{Error, Result, FIELD};
use nvstack_pmem::Region;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The device a serve daemon exports: the write cache, reporting its state after each request.
pub struct Served<R: Region> {
    cache: Arc<WriteCache<R>>,
    observer: OnceLock<Arc<dyn crate::CacheObserver>>,
}

impl<R: Region> Served<R> {
    pub fn new(cache: Arc<WriteCache<R>>) -> Served<R> {
        Served {
            cache,
            observer: OnceLock::new(),
        }
    }

    pub fn cache(&self) -> &Arc<WriteCache<R>> {
        &self.cache
    }

    /// Set the observer (once) and tell it the state now; false if one was already set.
    pub fn observe(&self, o: Arc<dyn crate::CacheObserver>) -> bool {
        let set = self.observer.set(o).is_ok();
        self.report();
        set
    }

    /// Read the live state under the cache's lock and tell the observer, holding the lock.
    pub fn report(&self) {
        let Some(o) = self.observer.get() else { return };
        let st = self.cache.lock();
        let k = st.stats;
        let live = crate::Live {
            dirty_blocks: st.index.len() as u64,
            held_slots: (st.slots.len() - st.free.len()) as u64,
            destaged_room: k.destaged_room,
            destaged_watermark: k.destaged_watermark,
            destaged_max_age: k.destaged_max_age,
            destaged_cleaner: k.destaged_cleaner,
            destaged_writeback: k.destaged_writeback,
            bypassed: k.write_bypass,
            flushes: k.flushes,
            error: st.error.is_some(),
            ..crate::Live::new(crate::CacheKind::Write)
        };
        o.changed(&live);
    }

    fn reported<T>(&self, r: Result<T>) -> Result<T> {
        self.report();
        r
    }
}

impl<R: Region> BlockDevice for Served<R> {
    fn block_bytes(&self) -> u32 {
        self.cache.block_bytes()
    }
    fn blocks(&self) -> u64 {
        self.cache.blocks()
    }
    fn caps(&self) -> Caps {
        self.cache.caps()
    }
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.cache.read_blocks(lba, buf)
    }
    fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
        self.reported(self.cache.write_blocks(lba, data))
    }
    fn discard(&self, lba: u64, count: u64) -> Result<()> {
        self.reported(self.cache.discard_blocks(lba, count))
    }
    fn flush(&self) -> Result<()> {
        self.reported(self.cache.flush_blocks())
    }
}

/// A served write cache's timed triggers (max-age, the cleaner), driven by a
/// [`crate::common::ticker::Ticker`]: the state is reported after each tick.
impl<R: Region + 'static> crate::common::ticker::Tick for Served<R> {
    fn tick(&self, now: Instant) -> Result<()> {
        let r = self.cache.tick(now);
        self.report();
        r
    }
    fn tick_period(&self) -> Option<std::time::Duration> {
        self.cache.tick_period()
    }
}

/// The thread that destages a served cache by its watermarks, as dm-writecache's writeback
/// does: woken when a write takes used slots past the high watermark (and every 100 ms), it
/// destages victims with their neighbours, in runs, until the low watermark, while writes go
/// on (a write waits only when the cache is full: room is being made). Started only when the
/// high watermark is on; stopped and joined when dropped (writes then destage themselves).
pub struct Destager<R: Region + 'static> {
    cache: Arc<WriteCache<R>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How long the destage thread sleeps when nothing wakes it.
const DESTAGER_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);

impl<R: Region + 'static> Destager<R> {
    /// Start the thread, or None when the high watermark is off.
    pub fn start(served: &Arc<Served<R>>) -> Option<Destager<R>> {
        let cache = served.cache.clone();
        if cache.settings().high_watermark_pct == 0 {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (weak, flag, c) = (Arc::downgrade(served), stop.clone(), cache.clone());
        cache.lock().background = true;
        let thread = std::thread::Builder::new()
            .name("wcache-destage".into())
            .spawn(move || {
                let _ended = Ended(&c);
                destage_loop(&c, &flag, || weak.upgrade().map(|s| s.report()))
            })
            .ok();
        if thread.is_none() {
            cache.lock().background = false;
            return None;
        }
        Some(Destager {
            cache,
            stop,
            thread,
        })
    }
}

/// The destage thread's end, however it ends (a panic included): writes stop waiting for it
/// and make room themselves (a poisoned lock is left to fail the next write loudly).
struct Ended<'a, R: Region>(&'a WriteCache<R>);

impl<R: Region> Drop for Ended<'_, R> {
    fn drop(&mut self) {
        if let Ok(mut g) = self.0.state.lock() {
            g.background = false;
        }
        self.0.changed.notify_all();
    }
}

/// Destage to the low watermark whenever used slots are past the high one, tell the observer;
/// parked in between (a write past the high watermark unparks it; every 100 ms regardless).
fn destage_loop<R: Region>(
    cache: &WriteCache<R>,
    stop: &AtomicBool,
    report: impl Fn() -> Option<()>,
) {
    while !stop.load(Ordering::Acquire) {
        let mut g = cache.lock_for_destage();
        if g.error.is_none() && cache.above_high(&g) {
            // An error is the cache's error state, which the live state and status show; the
            // loop then parks (a cache in its error state destages nothing).
            drop(cache.destage_to_low(g));
            if report().is_none() {
                return;
            }
            continue;
        }
        g.destager_parked = Some(std::thread::current());
        drop(g);
        std::thread::park_timeout(DESTAGER_PERIOD);
    }
}

impl<R: Region + 'static> Drop for Destager<R> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.cache.lock().background = false;
        // A write waiting for the thread to make room makes it itself from now on.
        self.cache.changed.notify_all();
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// The backing file a write cache image names (`over` when given), after validating the image
/// with plain reads under a shared lock (`wimage::peek`): for a process that loads both
/// files itself (the serve daemon's power-cut runs).
pub fn backing_of(path: &Path, over: Option<&Path>) -> Result<PathBuf> {
    crate::write::image::peek(path)?;
    if let Some(p) = over {
        return Ok(p.to_path_buf());
    }
    let f = std::fs::File::open(path)
        .map_err(|e| Error::env(format!("{}: cannot open: {e}", path.display())))?;
    let mut block = vec![0u8; 4096];
    f.read_exact_at(&mut block, 0)
        .map_err(|e| Error::env(format!("{}: cannot read: {e}", path.display())))?;
    crate::common::format::decode_path(&block[PATH_OFF as usize..])
        .map(PathBuf::from)
        .map_err(|e| {
            Error::invalid(
                "backing",
                format!(
                    "{}: {e}; name the backing file with {FIELD}",
                    path.display()
                ),
            )
        })
}

/// The write cache as served: the state reported after `writeback`, `detach` and `close`.
impl<R: Region + 'static> crate::Cache for Served<R> {
    fn kind(&self) -> crate::CacheKind {
        crate::CacheKind::Write
    }
    fn observe(&self, o: Arc<dyn crate::CacheObserver>) -> bool {
        Served::observe(self, o)
    }
    fn writeback(&self) -> Result<u64> {
        let n = self.cache.writeback();
        self.reported(n)
    }
    fn detach(&self) -> Result<u64> {
        let n = self.cache.detach();
        self.reported(n)
    }
    fn backing_bytes_written(&self) -> u64 {
        self.cache.stats().backing_bytes_written
    }
    fn save_counters(&self) {
        self.cache.save_counters()
    }
    fn clear_stats(&self) -> Result<()> {
        self.cache.clear_stats();
        self.report();
        Ok(())
    }
    /// The backing device flushed (bypassed writes durable; admitted ones already are, in
    /// NVRAM) and the lifetime counters stored. Nothing is destaged: the cached blocks stay in
    /// NVRAM until a destage trigger, `writeback` or `detach`. Stop the destage thread first.
    fn close(&self) -> Result<crate::Closed> {
        self.cache.flush_blocks()?;
        self.cache.save_counters();
        self.report();
        let (life, _) = self.cache.lifetime();
        Ok(crate::Closed::Write {
            cached_blocks: self.cache.cached_blocks(),
            life,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::backing::FileDevice;
    use crate::write::format::{Admit, Settings};
    use crate::write::image::{create_image, open_image, CreateOptions};
    use crate::{Cache, Closed};
    use std::sync::Mutex;

    /// A scratch directory under /dev/shm, removed when dropped.
    struct Scratch(PathBuf);
    impl Scratch {
        fn new(tag: &str) -> Scratch {
            // tmpfs: the image must be mappable as (emulated) NVRAM.
            let p =
                Path::new("/dev/shm").join(format!("nvcache-wserve-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir(&p).unwrap();
            Scratch(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    struct Seen(Mutex<Vec<crate::Live>>);
    impl crate::CacheObserver for Seen {
        fn changed(&self, live: &crate::Live) {
            self.0.lock().unwrap().push(*live);
        }
    }

    fn made(dir: &Path, settings: Settings) -> Arc<Served<nvstack_pmem::MmapRegion>> {
        let (img, back) = (dir.join("wc.img"), dir.join("back"));
        let o = CreateOptions {
            size: 256 << 10,
            sector_bytes: 512,
            backing: &back,
            backing_size: Some(1 << 20),
            settings,
            admit: Admit::All,
            force: false,
        };
        create_image(&img, &o).unwrap();
        let c = open_image(&img, None, None).unwrap().cache;
        Arc::new(Served::new(c))
    }

    #[test]
    fn reports_the_live_state_after_each_request_and_names_the_backing_file() {
        let dir = Scratch::new("report");
        let s = made(dir.path(), Settings::default());
        let seen = Arc::new(Seen(Mutex::new(Vec::new())));
        assert!(s.observe(seen.clone()));
        s.write(3, &[7u8; 1024]).unwrap();
        s.flush().unwrap();
        let v = seen.0.lock().unwrap().clone();
        assert_eq!(v.len(), 3, "at observe, after the write, after the flush");
        assert_eq!(v[0].dirty_blocks, 0);
        assert_eq!((v[1].dirty_blocks, v[1].held_slots), (2, 2));
        assert_eq!(v[2].flushes, 1);
        let mut back = vec![0u8; 1024];
        s.read(3, &mut back).unwrap();
        assert_eq!(back, vec![7u8; 1024]);
        let named = backing_of(&dir.path().join("wc.img"), None);
        // The image is locked exclusively by the open cache: a shared lock is refused.
        assert!(named.is_err());
        drop(s);
        let named = backing_of(&dir.path().join("wc.img"), None).unwrap();
        assert_eq!(
            named,
            std::fs::canonicalize(dir.path().join("back")).unwrap()
        );
        assert!(FileDevice::open(&named).is_ok());
    }

    #[test]
    fn a_served_cache_destages_in_the_background_and_a_clean_close_leaves_nothing_to_clear() {
        let dir = Scratch::new("close");
        let s = made(dir.path(), Settings::default());
        s.cache().use_served_defaults();
        assert_eq!(s.cache().settings().high_watermark_pct, 50);
        let destager = Destager::start(&s).expect("the served defaults have watermarks");
        // Past the high watermark the writes only wake the thread, which destages to the low
        // one (nothing else destages: the cache never fills).
        let slots = u64::from(s.cache().superblock().slots);
        let mut lba = 1500;
        while s.cache().cached_blocks() * 100 <= slots * 50 {
            s.write(lba, &[1u8; 512]).unwrap();
            lba += 1;
        }
        let t = Instant::now();
        while s.cache().cached_blocks() * 100 > slots * 45 {
            assert!(t.elapsed().as_secs() < 30, "the destage thread never ran");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let k = s.cache().stats();
        assert!(k.destaged_watermark > 0 && k.destaged_room == 0, "{k:?}");
        // Overwrites leave replaced copies' clears pending; 700 blocks pairs overflow the
        // cache's slots, so the destage thread (and, when it lags, the writes) make room.
        let last = |k: u64| if k < 600 { k + 1400 } else { k + 700 };
        for i in 0..2000u64 {
            s.write(i % 700 * 2, &[i as u8; 1024]).unwrap();
        }
        drop(destager);
        let done = Cache::close(&*s).unwrap();
        assert!(
            matches!(done, Closed::Write { life, .. } if life.write_blocks > 2000),
            "{done:?}"
        );
        drop(s);
        let o = open_image(&dir.path().join("wc.img"), None, None).unwrap();
        assert_eq!(o.cache.recovered_entries(), 0, "a clean close leaves none");
        let mut back = vec![0u8; 1024];
        for k in [0, 1, 599, 600, 699] {
            o.cache.read_blocks(k * 2, &mut back).unwrap();
            assert_eq!(back, vec![last(k) as u8; 1024], "block pair {k}");
        }
    }

    #[test]
    fn the_timer_destages_by_max_age_and_reports_it() {
        let dir = Scratch::new("timer");
        let settings = Settings {
            max_age_ms: 20,
            ..Settings::default()
        };
        let s = made(dir.path(), settings);
        let seen = Arc::new(Seen(Mutex::new(Vec::new())));
        s.observe(seen.clone());
        let timer = crate::Ticker::start(&s).expect("max-age needs the ticker");
        s.write(0, &[1u8; 512]).unwrap();
        let t = Instant::now();
        while s.cache().cached_blocks() > 0 {
            assert!(t.elapsed().as_secs() < 30, "max-age never destaged");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        drop(timer);
        let last = *seen.0.lock().unwrap().last().unwrap();
        assert_eq!(last.dirty_blocks, 0);
        assert_eq!(last.destaged_max_age, 1);
        let done = Cache::close(&*s).unwrap();
        assert!(
            matches!(
                done,
                Closed::Write {
                    cached_blocks: 0,
                    ..
                }
            ),
            "{done:?}"
        );
    }
}
