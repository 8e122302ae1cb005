//! A write cache image (seed 004's NVRAM write cache with dm-writecache's controls) over a
//! backing file: an admitted write is durable and atomic in NVRAM when it returns; the others
//! at the next flush.

use super::{CacheKind, ImageKind, Opened};
use crate::report::Report;
use crate::spec::{Access, Backend, Kind, Promise, Shape};
use crate::spec::{ServeSpec, Served, ServedCache};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Result;
use nvstack_core::size::format_size;
use nvstack_nvcache::write::format::{Settings, MAGIC, VERSION};
use nvstack_nvcache::write::image as wc;
use nvstack_nvcache::write::inspect::{inspect, status_of, Status};
use nvstack_nvcache::write::serve::{self as wserve, Destager};
use nvstack_nvcache::{Cache, Live, Ticker, WriteCache};
use nvstack_pmem::Region;
use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) struct WriteCacheKind;

pub(crate) static WRITE_CACHE: WriteCacheKind = WriteCacheKind;

/// The column at which a status row's text starts (dm-writecache's longest field name,
/// numbered, fits).
const STATUS_LABEL_WIDTH: usize = 32;
/// The column at which a check row's text starts.
const CHECK_LABEL_WIDTH: usize = 13;

impl ImageKind for WriteCacheKind {
    fn kind(&self) -> Kind {
        Kind::WriteCache
    }

    fn name(&self) -> &'static str {
        "a write cache image"
    }

    fn claims(&self, magic: [u8; 8]) -> bool {
        u64::from_le_bytes(magic) == MAGIC
    }

    fn backend(&self) -> Backend {
        Backend::Cache
    }

    fn peek(&self, path: &Path) -> Result<Shape> {
        let sb = wc::peek(path)?;
        Ok(Shape {
            kind: Kind::WriteCache,
            blocks: sb.blocks,
            block_bytes: sb.sector_bytes,
            unit_blocks: sb.unit_blocks().into(),
            promise: Promise::AdmittedOnReturn,
        })
    }

    fn open(&self, path: &Path, access: Access, backing: Option<&Path>) -> Result<Box<dyn Opened>> {
        Ok(Box::new(match access {
            Access::Write => wc::open_image(path, backing, None)?,
            Access::ReadOnly => wc::open_readonly(path, backing)?,
        }))
    }

    fn serve(&self, path: &Path, spec: &ServeSpec) -> Result<Served> {
        let o = wc::open_image(path, spec.backing, None)?;
        let (what, dev, cache) = served(o.cache, spec.seed_destage);
        let what = format!("{what} over {}", o.backing.display());
        Ok(Served::cache(dev, cache, what))
    }

    #[cfg(feature = "powercut")]
    fn serve_power_cut(
        &self,
        path: &Path,
        spec: &ServeSpec,
        cut: crate::powercut::PowerCutSpec,
    ) -> Result<Served> {
        let bpath = nvstack_nvcache::write::serve::backing_of(path, spec.backing)?;
        let (pc, nvram, disk) = crate::powercut::PowerCut::load_cache_devices(path, &bpath, cut)?;
        let w = WriteCache::open(nvram, disk, None)?;
        let (what, dev, cache) = served(Arc::new(w), spec.seed_destage);
        Ok(Served::power_cut(dev, pc, Some(cache), format!("{what}, ")))
    }

    fn as_cache(&self) -> Option<&dyn CacheKind> {
        Some(self)
    }
}

impl CacheKind for WriteCacheKind {
    fn cache_kind(&self) -> nvstack_nvcache::CacheKind {
        nvstack_nvcache::CacheKind::Write
    }

    fn backing_of(&self, image: &Path, over: Option<&Path>) -> Result<PathBuf> {
        nvstack_nvcache::write::serve::backing_of(image, over)
    }

    fn status(&self, image: &Path, backing: Option<&Path>) -> Result<Report> {
        let o = wc::open_readonly(image, backing)?;
        let s = status_of(&o.cache, image, &o.backing)?;
        let mut out = Report::new(STATUS_LABEL_WIDTH);
        out.set_json(&s)?;
        status_rows(&s, &mut out);
        Ok(out)
    }

    fn check(&self, image: &Path, backing: Option<&Path>) -> Result<Report> {
        let r = inspect(image, backing)?;
        let mut out = Report::new(CHECK_LABEL_WIDTH);
        out.set_json(&r)?;
        out.row(
            "image",
            format!("{} (write cache, format v{})", r.image, r.format_version),
        );
        out.row(
            "cache",
            format!(
                "{} slots of {} B, identity {}",
                r.slots, r.sector_bytes, r.identity
            ),
        );
        out.row(
            "backing",
            format!(
                "{}{}",
                r.backing.as_deref().unwrap_or("(unknown)"),
                if r.backing_direct { ", O_DIRECT" } else { "" }
            ),
        );
        out.row("settings", r.settings.describe());
        out.row("admit", r.admit.as_deref().unwrap_or("(unreadable)"));
        let c = &r.census;
        out.row(
            "table",
            format!(
                "{} blocks cached, {} entries recovery would clear ({} cut writes, {} replaced \
                 copies), {} free, {} damaged",
                c.cached,
                c.cut + c.replaced,
                c.cut,
                c.replaced,
                c.free,
                c.damaged
            ),
        );
        for n in &r.notes {
            out.row("note", n.clone());
        }
        for f in &r.findings {
            out.row("DAMAGE", f.clone());
        }
        out.finding = !r.consistent();
        out.row("result", if out.finding { "DAMAGED" } else { "consistent" });
        Ok(out)
    }

    fn takes_run_settings(&self) -> bool {
        false
    }

    fn stored_json(&self, image: &Path) -> Result<serde_json::Value> {
        let sb = stored(image)?;
        Ok(serde_json::json!({
            "slots": sb.slots,
            "sector_bytes": sb.sector_bytes,
            "blocks": sb.blocks,
            "identity": format!("{:032x}", sb.identity),
            "settings": super::json(&sb.settings)?,
        }))
    }

    fn live_rows(&self, image: &Path, live: &Live, out: &mut Report) -> Result<()> {
        live_rows(image, live, out)
    }
}

/// The superblock as the image's first block holds it now (plain reads: a daemon holds the
/// image's lock).
fn stored(image: &Path) -> Result<nvstack_nvcache::write::format::Superblock> {
    let block = super::first_block(image)?;
    nvstack_nvcache::write::format::Superblock::decode(&block)
        .map_err(|e| e.context(image.display()))
}

/// A served write cache's rows.
fn live_rows(image: &Path, live: &Live, out: &mut Report) -> Result<()> {
    assert_eq!(
        live.kind,
        nvstack_nvcache::CacheKind::Write,
        "the write cache's figures"
    );
    let sb = stored(image)?;
    out.row(
        "cache",
        format!("write cache, {} slots of {} B", sb.slots, sb.sector_bytes),
    );
    out.row("settings", sb.settings.describe());
    out.row(
        "live",
        format!(
            "{} blocks cached, {} slots used, destaged {} for room, {} by watermark, {} by \
             max-age, {} by the cleaner, {} by writeback; {} bypassed, {} flushes{}",
            live.dirty_blocks,
            live.held_slots,
            live.destaged_room,
            live.destaged_watermark,
            live.destaged_max_age,
            live.destaged_cleaner,
            live.destaged_writeback,
            live.bypassed,
            live.flushes,
            if live.error {
                ", in its error state"
            } else {
                ""
            }
        ),
    );
    Ok(())
}

/// dm-writecache's 14 status fields, named and ordered as in its documentation, between the
/// image's facts and the destages by trigger.
fn status_rows(s: &Status, out: &mut Report) {
    out.row(
        "image",
        format!("{} (write cache, format v{VERSION})", s.image),
    );
    out.row("backing", s.backing.clone());
    out.row("sector", format!("{} B", s.sector_bytes));
    out.row("settings", s.settings.describe());
    out.row("admit", s.admit.clone());
    let fields: [(&str, u64); 14] = [
        ("error", s.error),
        ("blocks", s.blocks),
        ("free_blocks", s.free_blocks),
        ("writeback_blocks", s.writeback_blocks),
        ("read_blocks", s.read_blocks),
        ("read_hits", s.read_hits),
        ("write_blocks", s.write_blocks),
        ("write_hits_uncommitted", s.write_hits_uncommitted),
        ("write_hits_committed", s.write_hits_committed),
        ("write_bypass", s.write_bypass),
        ("write_allocated", s.write_allocated),
        ("writes_blocked_on_freelist", s.writes_blocked_on_freelist),
        ("flushes", s.flushes),
        ("discarded_blocks", s.discarded_blocks),
    ];
    for (i, (name, v)) in fields.iter().enumerate() {
        out.row(&format!("{:>2}. {name}", i + 1), v.to_string());
    }
    let d = &s.destaged;
    out.row(
        "destaged",
        format!(
            "{} for room, {} by watermark, {} by max-age, {} by the cleaner, {} by writeback",
            d.room, d.watermark, d.max_age, d.cleaner, d.writeback
        ),
    );
    out.row("backing written", format_size(s.backing_bytes_written));
    if !s.counters_readable {
        out.row(
            "note",
            "the counters record was unreadable (a crash during a close): counting restarted",
        );
    }
}

/// A write cache served: dm-writecache's destage defaults unless `seed_destage`, its ticker
/// and destage thread started. Returns what it is (a phrase), the device and the served half.
fn served<R: Region + 'static>(
    cache: Arc<WriteCache<R>>,
    seed_destage: bool,
) -> (String, Arc<dyn BlockDevice>, ServedCache) {
    if !seed_destage {
        cache.use_served_defaults();
    }
    let what = opened_what(&cache);
    let served = Arc::new(wserve::Served::new(cache));
    // Stopped in this order at the close: the ticker, then the destage thread.
    let mut threads: Vec<Box<dyn Any + Send>> = Vec::new();
    if let Some(t) = Ticker::start(&served) {
        threads.push(Box::new(t));
    }
    if let Some(d) = Destager::start(&served) {
        threads.push(Box::new(d));
    }
    (what, served.clone(), ServedCache::new(served, threads))
}

fn opened_what<R: Region>(cache: &WriteCache<R>) -> String {
    let sb = *cache.superblock();
    let admit = cache
        .admit_record()
        .map_or_else(|e| format!("unreadable ({e})"), |a| a.name());
    let what = format!(
        "write cache, {} B sectors, admit {admit}{}, {} blocks cached{}{}",
        sb.sector_bytes,
        if admit == "all" {
            ""
        } else {
            " (admitted blocks durable when written, the others at the next fsync)"
        },
        cache.cached_blocks(),
        match cache.recovered_entries() {
            0 => String::new(),
            n => format!(", recovered: {n} entries cleared"),
        },
        match cache.tick_period() {
            Some(p) => format!(", timer every {} ms", p.as_millis()),
            None => String::new(),
        }
    );
    format!("{what}, destage: {}", destage_what(&cache.settings()))
}

/// How a served write cache destages.
fn destage_what(s: &Settings) -> String {
    match s.high_watermark_pct {
        0 => "the seed's one-block destage (a new block that finds no room destages one)".into(),
        h => format!(
            "watermarks {h} % / {} % by a destage thread, runs of up to 1 MiB, {} blocks per \
             backing flush",
            s.low_watermark_pct, s.writeback_jobs
        ),
    }
}

impl Opened for wc::Opened {
    fn device(&self) -> &dyn BlockDevice {
        &*self.cache
    }

    fn backing(&self) -> Option<&Path> {
        Some(&self.backing)
    }

    /// The contract is the served cache's: wrapped, with no threads started.
    fn cache(&self) -> Option<Arc<dyn Cache>> {
        Some(Arc::new(wserve::Served::new(self.cache.clone())))
    }

    /// The bypassed writes flushed (admitted ones were durable on return), counters stored.
    fn close_written(&self) -> Result<Option<u64>> {
        self.cache.flush()?;
        self.cache.save_counters();
        Ok(None)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
