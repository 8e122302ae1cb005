//! A UBJ cache image (seed 001): the NVRAM buffer cache that is also the journal, over a
//! backing file; a write is whole in one epoch and durable at the next flush (a commit).

use super::{CacheKind, ImageKind, Opened};
use crate::report::Report;
use crate::spec::{Access, Backend, Kind, Promise, Shape};
use crate::spec::{ServeSpec, Served, ServedCache};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Result;
use nvstack_core::size::format_size;
use nvstack_nvcache::ubj::image as ubj;
use nvstack_nvcache::ubj::inspect::{inspect, Inspection};
use nvstack_nvcache::{Cache, Live, Ticker, Ubj};
use nvstack_pmem::Region;
use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) struct UbjKind;

pub(crate) static UBJ: UbjKind = UbjKind;

/// The column at which a UBJ report's text starts.
const LABEL_WIDTH: usize = 13;

impl ImageKind for UbjKind {
    fn kind(&self) -> Kind {
        Kind::Ubj
    }

    fn name(&self) -> &'static str {
        "a UBJ cache image"
    }

    fn claims(&self, magic: [u8; 8]) -> bool {
        u64::from_le_bytes(magic) == nvstack_nvcache::ubj::format::MAGIC
    }

    fn backend(&self) -> Backend {
        Backend::Cache
    }

    fn peek(&self, path: &Path) -> Result<Shape> {
        let sb = ubj::peek(path)?;
        Ok(Shape {
            kind: Kind::Ubj,
            blocks: sb.blocks,
            block_bytes: nvstack_nvcache::ubj::format::BLOCK_BYTES,
            unit_blocks: sb.unit_blocks().into(),
            promise: Promise::WholeAtFlush,
        })
    }

    fn open(&self, path: &Path, access: Access, backing: Option<&Path>) -> Result<Box<dyn Opened>> {
        Ok(Box::new(match access {
            Access::Write => ubj::open_image(path, backing, None)?,
            Access::ReadOnly => ubj::open_readonly(path, backing)?,
        }))
    }

    fn serve(&self, path: &Path, spec: &ServeSpec) -> Result<Served> {
        let o = ubj::open_image(path, spec.backing, spec.ubj_settings)?;
        let what = format!("{} over {}", opened_what(&o.cache), o.backing.display());
        let (dev, cache) = served(o.cache);
        Ok(Served::cache(dev, cache, what))
    }

    #[cfg(feature = "powercut")]
    fn serve_power_cut(
        &self,
        path: &Path,
        spec: &ServeSpec,
        cut: crate::powercut::PowerCutSpec,
    ) -> Result<Served> {
        let bpath = ubj::backing_of(path, spec.backing)?;
        let (pc, nvram, disk) = crate::powercut::PowerCut::load_cache_devices(path, &bpath, cut)?;
        let u = Ubj::open(nvram, disk, spec.ubj_settings)?;
        let what = format!("{}, ", opened_what(&u));
        let (dev, cache) = served(Arc::new(u));
        Ok(Served::power_cut(dev, pc, Some(cache), what))
    }

    fn as_cache(&self) -> Option<&dyn CacheKind> {
        Some(self)
    }
}

impl CacheKind for UbjKind {
    fn cache_kind(&self) -> nvstack_nvcache::CacheKind {
        nvstack_nvcache::CacheKind::Ubj
    }

    fn backing_of(&self, image: &Path, over: Option<&Path>) -> Result<PathBuf> {
        ubj::backing_of(image, over)
    }

    fn status(&self, image: &Path, backing: Option<&Path>) -> Result<Report> {
        let r = inspect(image, backing)?;
        let mut out = header(&r)?;
        let c = &r.census;
        out.row(
            "slots",
            format!(
                "{} free, {} uncommitted, {} frozen up-to-date, {} frozen out-of-date (clean \
                 blocks are not kept across a close)",
                c.free, c.uncommitted, c.frozen_up_to_date, c.frozen_out_of_date
            ),
        );
        counters(&r, &mut out);
        notes(&r, &mut out);
        Ok(out)
    }

    fn check(&self, image: &Path, backing: Option<&Path>) -> Result<Report> {
        let r = inspect(image, backing)?;
        let mut out = header(&r)?;
        notes(&r, &mut out);
        out.finding = !r.consistent();
        let result = if out.finding { "DAMAGED" } else { "consistent" };
        out.row("result", result);
        Ok(out)
    }

    fn takes_run_settings(&self) -> bool {
        true
    }

    fn stored_json(&self, image: &Path) -> Result<serde_json::Value> {
        let sb = stored(image)?;
        Ok(serde_json::json!({
            "slots": sb.slots,
            "blocks": sb.blocks,
            "identity": format!("{:032x}", sb.identity),
            "settings": super::json(&sb.settings)?,
        }))
    }

    fn live_rows(&self, image: &Path, live: &Live, out: &mut Report) -> Result<()> {
        assert_eq!(live.kind, nvstack_nvcache::CacheKind::Ubj, "UBJ's figures");
        let sb = stored(image)?;
        out.row(
            "cache",
            format!("UBJ, {} slots of 4096 B, {} blocks", sb.slots, sb.blocks),
        );
        out.row("settings", sb.settings.describe());
        out.row(
            "live",
            format!(
                "{} dirty blocks, {} frozen slots, {} commits, {} checkpoints{}",
                live.dirty_blocks,
                live.held_slots,
                live.commits,
                live.checkpoints,
                if live.writing_back {
                    ", a checkpoint running"
                } else {
                    ""
                }
            ),
        );
        Ok(())
    }
}

/// The superblock as the image's first block holds it now (plain reads: a daemon holds the
/// image's lock).
fn stored(image: &Path) -> Result<nvstack_nvcache::ubj::format::Superblock> {
    let block = super::first_block(image)?;
    nvstack_nvcache::ubj::format::Superblock::decode(&block).map_err(|e| e.context(image.display()))
}

/// The image, cache, backing and settings rows, the epoch; the inspection as the JSON.
fn header(r: &Inspection) -> Result<Report> {
    let mut out = Report::new(LABEL_WIDTH);
    out.set_json(r)?;
    out.row(
        "image",
        format!("{} (nvcache format v{}, UBJ)", r.image, r.format_version),
    );
    out.row(
        "cache",
        format!(
            "{} slots of 4096 B ({} of NVRAM), identity {}",
            r.slots,
            format_size(r.cache_bytes),
            r.identity
        ),
    );
    out.row(
        "backing",
        format!(
            "{}: {} blocks ({}) and a label block{}",
            r.backing.as_deref().unwrap_or("(unknown)"),
            r.blocks,
            format_size(r.blocks * 4096),
            if r.backing_direct { ", O_DIRECT" } else { "" }
        ),
    );
    out.row("settings", r.settings.describe());
    out.row(
        "epoch",
        match r.epoch {
            Some(e) => format!("{e} (the last commit)"),
            None => "unknown (the table is damaged)".to_string(),
        },
    );
    Ok(out)
}

fn counters(r: &Inspection, out: &mut Report) {
    let Some(k) = &r.counters else {
        out.row("counters", "unreadable");
        return;
    };
    out.row(
        "reads",
        format!("{} hits, {} misses", k.read_hits, k.read_misses),
    );
    out.row(
        "commits",
        format!(
            "{} ({} forced by a full cache), {} checkpoints, {} fences",
            k.commits, k.commits_forced, k.checkpoints, k.fences
        ),
    );
    out.row(
        "written",
        format!(
            "{} by the user, {} to the backing file (over the cache's life, as of its last \
             clean close)",
            format_size(k.user_bytes_written),
            format_size(k.backing_bytes_written)
        ),
    );
}

fn notes(r: &Inspection, out: &mut Report) {
    if let Some(e) = &r.last_backing_error {
        out.row(
            "error",
            format!(
                "the backing device failed at epoch {} ({} s after the Unix epoch): {}; writes \
                 were refused until the cache was reopened",
                e.epoch, e.unix_secs, e.message
            ),
        );
    }
    for n in &r.notes {
        out.row("note", n.clone());
    }
    for f in &r.findings {
        out.row("DAMAGE", f.clone());
    }
}

/// UBJ served: its ticker (timed commits and checkpoints) started.
fn served<R: Region + 'static>(u: Arc<Ubj<R>>) -> (Arc<dyn BlockDevice>, ServedCache) {
    let threads: Vec<Box<dyn Any + Send>> = Ticker::start(&u)
        .into_iter()
        .map(|t| Box::new(t) as Box<dyn Any + Send>)
        .collect();
    (u.clone(), ServedCache::new(u, threads))
}

fn opened_what<R: Region>(u: &Ubj<R>) -> String {
    match u.dropped_at_open() {
        0 => format!("UBJ cache, epoch {}", u.epoch()),
        n => format!(
            "UBJ cache, epoch {}, recovered: {n} uncommitted entries dropped",
            u.epoch()
        ),
    }
}

impl Opened for ubj::Opened {
    fn device(&self) -> &dyn BlockDevice {
        &*self.cache
    }

    fn backing(&self) -> Option<&Path> {
        Some(&self.backing)
    }

    fn cache(&self) -> Option<Arc<dyn Cache>> {
        Some(self.cache.clone())
    }

    /// A commit (the writes are durable at the next flush), the counters stored.
    fn close_written(&self) -> Result<Option<u64>> {
        self.cache.flush()?;
        self.cache.save_counters();
        Ok(Some(self.cache.epoch()))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
