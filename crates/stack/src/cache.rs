//! A cache's verbs, whichever its kind: `status` and `check` (offline; never write) answer the
//! kind's report; `writeback`, `detach` and `clear-stats` run through the library's [`Cache`]
//! contract on the opened image. A front end prints the [`Report`] and exits with its code.
//!
//! [`Cache`]: nvstack_nvcache::Cache

use crate::image::{Access, Image};
use crate::kind::cache_kind;
use crate::kinds::CacheKind;
use crate::report::Report;
use nvstack_core::error::{Error, Result};
use nvstack_core::size::format_size;
use std::path::Path;

/// A verb that acts on a cache (opens it for writing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// Everything the cache holds that its kind writes back (UBJ: the committed blocks; the
    /// write cache: every cached block) written to the backing file, which is flushed.
    Writeback,
    /// `Writeback`, then the backing label says detached: it alone is the whole state.
    Detach,
    /// The lifetime counters restart from zero (dm-writecache's clear_stats message).
    ClearStats,
}

fn ops(image: &Path) -> Result<&'static dyn CacheKind> {
    let kind = cache_kind(image)?;
    Ok(kind.ops().as_cache().expect("cache_kind answers a cache"))
}

/// Blocks per state, counters, settings and the backing file (never a finding).
pub fn status(image: &Path, backing: Option<&Path>) -> Result<Report> {
    let r = ops(image)?.status(image, backing)?;
    assert!(!r.finding, "a status reports; only check finds");
    Ok(r)
}

/// The image and its backing label verified; damage is a finding (exit 1).
pub fn check(image: &Path, backing: Option<&Path>) -> Result<Report> {
    ops(image)?.check(image, backing)
}

/// Run `verb` on the cache image at `image` (over its recorded backing file, or `backing`):
/// what it did, in a sentence or two.
pub fn act(image: &Path, backing: Option<&Path>, verb: Verb) -> Result<Report> {
    cache_kind(image)?;
    let opened = Image::open(image, Access::Write, backing)?;
    let cache = opened.cache().expect("a cache image opens as a cache");
    let bpath = opened.backing().expect("a cache has a backing file");
    let (img, b) = (image.display(), bpath.display());
    let mut out = Report::new(1);
    let written_before = cache.backing_bytes_written();
    let blocks = match verb {
        Verb::ClearStats => {
            cache.clear_stats().map_err(|e| e.context(&img))?;
            out.line(format!("{img}: counters cleared"));
            return Ok(out);
        }
        Verb::Writeback => cache.writeback()?,
        Verb::Detach => cache.detach()?,
    };
    cache.save_counters();
    let written = cache.backing_bytes_written() - written_before;
    out.line(format!(
        "{img}: wrote back {blocks} blocks ({}) to {b} and flushed it",
        format_size(written)
    ));
    if verb == Verb::Detach {
        out.line(format!(
            "detached: {b} alone is the whole state now (mount it without nvstack); this cache \
             no longer opens over it"
        ));
    }
    Ok(out)
}

/// The superblock's fields of a served cache image, as its offline status names them, read
/// with plain reads (the daemon serving it holds its lock; nothing else is read).
pub fn stored_json(image: &Path) -> Result<serde_json::Value> {
    ops(image)?.stored_json(image)
}

/// A served cache's report from its daemon's live figures: what it is, its settings (the
/// superblock read with plain reads: the daemon holds the lock) and the figures; the JSON
/// holds the cache's kind, the stored superblock and the figures.
pub fn live(image: &Path, live: &nvstack_nvcache::Live) -> Result<Report> {
    let c = ops(image)?;
    if c.cache_kind() != live.kind {
        return Err(Error::bad(format!(
            "{}: its daemon publishes the live figures of a {:?} cache, and the image is not one \
             (replaced while served?)",
            image.display(),
            live.kind
        )));
    }
    let mut out = Report::new(13);
    c.live_rows(image, live, &mut out)?;
    out.json = serde_json::json!({
        "kind": live.kind,
        "superblock": c.stored_json(image)?,
        "cache": live,
    });
    Ok(out)
}
