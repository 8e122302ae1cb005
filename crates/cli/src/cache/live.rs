//! `cache status` on a cache a serve daemon holds: the daemon's live figures (it publishes
//! them at `nvstack_export::stats::LIVE_DIR`, with or without `--stats`), and the image's
//! superblock read with plain reads (the daemon holds the image's lock: nothing else is read).

use crate::{print_json, say};
use nvstack_core::error::{Error, Result};
use nvstack_export::stats::{StatsSnapshot, CACHE_KIND_UBJ, CACHE_KIND_WRITE};
use nvstack_nvcache::{ubj, write};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The superblock as the image's first block holds it now.
enum Stored {
    Ubj(ubj::format::Superblock),
    Write(write::format::Superblock),
}

/// Print the live status when a daemon serves `path`; None when none does.
pub fn status(path: &Path, json: bool) -> Result<Option<i32>> {
    let Some(s) = nvstack_export::stats::read_live(path) else {
        return Ok(None);
    };
    let stored = stored(path, &s)?;
    if json {
        let kind = if s.cache.kind == CACHE_KIND_UBJ {
            "ubj"
        } else {
            "write"
        };
        let mut v = serde_json::json!({
            "image": path.display().to_string(),
            "live": true,
            "pid": s.pid,
            "kind": kind,
            "superblock": nvstack_stack::cache::stored_json(path)?,
            "daemon": {
                "writes_acked": s.writes_acked,
                "writes_durable": s.writes_durable,
                "fsyncs": s.fsyncs,
                "fsync_covered": s.fsync_covered,
                "discards": s.discards,
            },
            "cache": s.cache,
        });
        if s.cache.kind == CACHE_KIND_WRITE {
            v["write_cache"] = serde_json::to_value(s.wcache).map_err(Error::env)?;
        }
        print_json(&v)?;
    } else {
        print_text(path, &s, &stored)?;
    }
    Ok(Some(0))
}

/// The image's superblock by plain reads (no lock: the daemon holds it), of the kind the
/// daemon says it serves.
fn stored(path: &Path, s: &StatsSnapshot) -> Result<Stored> {
    let f = std::fs::File::open(path)
        .map_err(|e| Error::env(format!("{}: cannot open: {e}", path.display())))?;
    let mut block = vec![0u8; 4096];
    f.read_exact_at(&mut block, 0)
        .map_err(|e| Error::env(format!("{}: cannot read: {e}", path.display())))?;
    let named = |e: Error| e.context(path.display());
    match s.cache.kind {
        CACHE_KIND_UBJ => Ok(Stored::Ubj(
            ubj::format::Superblock::decode(&block).map_err(named)?,
        )),
        CACHE_KIND_WRITE => Ok(Stored::Write(
            write::format::Superblock::decode(&block).map_err(named)?,
        )),
        k => Err(Error::bad(format!(
            "{}: its daemon (pid {}) publishes no cache state (kind word {k})",
            path.display(),
            s.pid
        ))),
    }
}

fn print_text(path: &Path, s: &StatsSnapshot, stored: &Stored) -> Result<()> {
    say!(
        "image        {} (served: live figures of daemon pid {})",
        path.display(),
        s.pid
    )?;
    let c = &s.cache;
    match stored {
        Stored::Ubj(sb) => {
            say!(
                "cache        UBJ, {} slots of 4096 B, {} blocks",
                sb.slots,
                sb.blocks
            )?;
            say!("settings     {}", sb.settings.describe())?;
            say!(
                "live         {} dirty blocks, {} frozen slots, {} commits, {} checkpoints{}",
                c.dirty_blocks,
                c.frozen_slots,
                c.commits,
                c.checkpoints,
                if c.checkpointing {
                    ", a checkpoint running"
                } else {
                    ""
                }
            )?;
        }
        Stored::Write(sb) => {
            let w = &s.wcache;
            say!(
                "cache        write cache, {} slots of {} B",
                sb.slots,
                sb.sector_bytes
            )?;
            say!("settings     {}", sb.settings.describe())?;
            say!(
                "live         {} blocks cached, {} slots used, destaged {} for room, {} by \
                 watermark, {} by max-age, {} by the cleaner, {} by writeback; {} bypassed, {} \
                 flushes{}",
                c.dirty_blocks,
                c.frozen_slots,
                w.destaged_room,
                w.destaged_watermark,
                w.destaged_max_age,
                w.destaged_cleaner,
                w.destaged_writeback,
                w.bypassed,
                w.flushes,
                if w.error { ", in its error state" } else { "" }
            )?;
        }
    }
    say!(
        "daemon       {} writes acknowledged, {} fsyncs, {} discards",
        s.writes_acked,
        s.fsyncs,
        s.discards
    )
}
