//! A UBJ cache's verbs: create, status, check, writeback and detach (the write cache's are in
//! write.rs; a served cache's live status in live.rs, which the parent asks first).

use super::READERS;
use crate::{print_json, say};
use nvstack_core::error::Result;
use nvstack_core::size::format_size;
use nvstack_nvcache::ubj::format::Settings;
use nvstack_nvcache::ubj::image::{self, CreateOptions};
use nvstack_nvcache::ubj::inspect::{inspect, Inspection};
use nvstack_stack::{Access, Image};
use std::path::Path;

pub(super) fn create(path: &Path, o: &CreateOptions) -> Result<i32> {
    let c = image::create_image(path, o)?;
    let sb = c.superblock;
    say!(
        "created {}: UBJ cache of {} slots ({} of NVRAM) over {}{}, {} blocks ({})",
        path.display(),
        sb.slots,
        format_size(o.size),
        c.backing.display(),
        if c.backing_created { " (created)" } else { "" },
        sb.blocks,
        format_size(sb.blocks * 4096)
    )?;
    say!("settings {}", settings_line(&sb.settings))?;
    Ok(0)
}

pub(crate) fn settings_line(s: &Settings) -> String {
    let autocommit = match (s.autocommit_blocks, s.autocommit_ms) {
        (0, 0) => "autocommit off (only a flush commits)".to_string(),
        (n, 0) => format!("autocommit at {n} dirty blocks"),
        (0, t) => format!("autocommit after {t} ms"),
        (n, t) => format!("autocommit at {n} dirty blocks or after {t} ms"),
    };
    let timer = match s.checkpoint_ms {
        0 => String::new(),
        t => format!(" and every {t} ms"),
    };
    format!(
        "{autocommit}; checkpoint above {} % frozen down to {} %{timer}; policy {}",
        s.high_watermark_pct,
        s.low_watermark_pct,
        s.policy.name()
    )
}

pub(super) fn status(path: &Path, backing: Option<&Path>, json: bool) -> Result<i32> {
    nvstack_stack::kind::expect_cache(path, READERS)?;
    let r = inspect(path, backing)?;
    if json {
        print_json(&r)?;
        return Ok(0);
    }
    print_header(&r)?;
    let c = &r.census;
    say!(
        "slots        {} free, {} uncommitted, {} frozen up-to-date, {} frozen out-of-date \
         (clean blocks are not kept across a close)",
        c.free,
        c.uncommitted,
        c.frozen_up_to_date,
        c.frozen_out_of_date
    )?;
    match &r.counters {
        Some(k) => {
            say!(
                "reads        {} hits, {} misses",
                k.read_hits,
                k.read_misses
            )?;
            say!(
                "commits      {} ({} forced by a full cache), {} checkpoints, {} fences",
                k.commits,
                k.commits_forced,
                k.checkpoints,
                k.fences
            )?;
            say!(
                "written      {} by the user, {} to the backing file (over the cache's life, \
                 as of its last clean close)",
                format_size(k.user_bytes_written),
                format_size(k.backing_bytes_written)
            )?;
        }
        None => say!("counters     unreadable")?,
    }
    print_notes(&r)?;
    Ok(0)
}

fn print_header(r: &Inspection) -> Result<()> {
    say!(
        "image        {} (nvcache format v{}, UBJ)",
        r.image,
        r.format_version
    )?;
    say!(
        "cache        {} slots of 4096 B ({} of NVRAM), identity {}",
        r.slots,
        format_size(r.cache_bytes),
        r.identity
    )?;
    say!(
        "backing      {}: {} blocks ({}) and a label block{}",
        r.backing.as_deref().unwrap_or("(unknown)"),
        r.blocks,
        format_size(r.blocks * 4096),
        if r.backing_direct { ", O_DIRECT" } else { "" }
    )?;
    say!("settings     {}", settings_line(&r.settings))?;
    match r.epoch {
        Some(e) => say!("epoch        {e} (the last commit)"),
        None => say!("epoch        unknown (the table is damaged)"),
    }
}

fn print_notes(r: &Inspection) -> Result<()> {
    if let Some(e) = &r.last_backing_error {
        say!(
            "error        the backing device failed at epoch {} ({} s after the Unix epoch): {}; \
             writes were refused until the cache was reopened",
            e.epoch,
            e.unix_secs,
            e.message
        )?;
    }
    for n in &r.notes {
        say!("note         {n}")?;
    }
    for f in &r.findings {
        say!("DAMAGE       {f}")?;
    }
    Ok(())
}

pub(super) fn check(path: &Path, backing: Option<&Path>, json: bool) -> Result<i32> {
    nvstack_stack::kind::expect_cache(path, READERS)?;
    let r = inspect(path, backing)?;
    if json {
        print_json(&r)?;
    } else {
        print_header(&r)?;
        print_notes(&r)?;
        say!(
            "result       {}",
            if r.consistent() {
                "consistent"
            } else {
                "DAMAGED"
            }
        )?;
    }
    Ok(if r.consistent() { 0 } else { 1 })
}

/// `writeback` (a full checkpoint) or `detach` (that, then the label says detached).
pub(super) fn writeback(path: &Path, backing: Option<&Path>, detach: bool) -> Result<i32> {
    nvstack_stack::kind::expect_cache(path, READERS)?;
    let opened = Image::open(path, Access::Write, backing)?;
    let cache = opened
        .ubj()
        .expect("a write cache's writeback is routed to wcache.rs");
    let backing = opened.backing().expect("a cache has a backing file");
    let before = cache.census();
    let written_before = cache.stats().backing_bytes_written;
    if detach {
        cache.detach()?;
    } else {
        cache.checkpoint()?;
    }
    cache.save_counters();
    let written = cache.stats().backing_bytes_written - written_before;
    say!(
        "{}: wrote back {} frozen blocks ({}) to {} and flushed it; freed {} out-of-date copies",
        path.display(),
        before.frozen_up_to_date,
        format_size(written),
        backing.display(),
        before.frozen_out_of_date
    )?;
    if detach {
        say!(
            "detached: {} alone is the whole state now (mount it directly); this cache no \
             longer opens over it",
            backing.display()
        )?;
    }
    Ok(0)
}
