//! `nvstack cache ... --cache write`: the write cache (NVFAT, seed 004, with dm-writecache's
//! controls). `create` makes an image over a backing file; `status` prints dm-writecache's 14
//! status fields (named and ordered as in its documentation) and the destages by trigger;
//! `writeback`, `detach`, `clear-stats` and `check` act on an image. The library is
//! nvstack_nvcache (write/mod.rs, write/image.rs).

use super::{CmdView, PolicyArg, SettingsArgs};
use crate::{print_json, say};
use clap::Args;
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_core::size::format_size;
use nvstack_nvcache::write::format::{Admit, DestagePolicy, WcSettings};
use nvstack_nvcache::write::image::{self as wimage, WcCreateOptions};
use nvstack_nvcache::write::inspect::{status_of, WcStatus};
use nvstack_stack::{identify, Access, Image, Kind};
use std::path::Path;

/// The write cache's own flags of `cache create` (refused with `--cache ubj`).
#[derive(Args, Debug, Default)]
pub struct WriteArgs {
    /// The write cache's sector: 512 (the seed's, default) or 4096 (the backing block).
    #[arg(long)]
    sector: Option<u32>,
    /// Destage blocks written longer ago than this many milliseconds (default 0: off).
    #[arg(long)]
    max_age: Option<u32>,
    /// Most blocks written back between two backing flushes (default 0: unlimited; served by
    /// `serve`/`up`, 2 MiB of blocks, and without --high-watermark dm-writecache's 50 %/45 %
    /// watermarks: `serve --seed-destage` keeps the seed's one-block destage).
    #[arg(long)]
    writeback_jobs: Option<u32>,
    /// Take no new blocks and destage everything (dm-writecache's cleaner).
    #[arg(long)]
    cleaner: bool,
    /// Which writes the cache takes: all (default), fat-metadata, or LBA..LBA (half-open,
    /// repeatable).
    #[arg(long)]
    admit: Vec<String>,
}

impl WriteArgs {
    /// `--admit fat-metadata` given.
    pub fn admits_fat(&self) -> bool {
        self.admit.iter().any(|v| v == "fat-metadata")
    }

    pub fn refuse_for_ubj(&self) -> Result<()> {
        let set = [
            ("--sector", self.sector.is_some()),
            ("--max-age", self.max_age.is_some()),
            ("--writeback-jobs", self.writeback_jobs.is_some()),
            ("--cleaner", self.cleaner),
            ("--admit", !self.admit.is_empty()),
        ];
        match set.iter().find(|f| f.1) {
            Some((flag, _)) => Err(Error::bad(format!(
                "{flag} is the write cache's (--cache write), not UBJ's"
            ))),
            None => Ok(()),
        }
    }

    fn settings(&self, shared: &SettingsArgs) -> Result<WcSettings> {
        let (policy, high, low) = shared.write_cache_view()?;
        let s = WcSettings {
            policy: match policy {
                None | Some(PolicyArg::Lrw) => DestagePolicy::Lrw,
                Some(PolicyArg::Lru) => DestagePolicy::Lru,
                Some(PolicyArg::Clock) => DestagePolicy::Clock,
                Some(PolicyArg::Random) => DestagePolicy::Random,
            },
            high_watermark_pct: high.unwrap_or(0),
            low_watermark_pct: low.unwrap_or(0),
            writeback_jobs: self.writeback_jobs.unwrap_or(0),
            max_age_ms: self.max_age.unwrap_or(0),
            cleaner: self.cleaner,
        };
        s.validate()?;
        Ok(s)
    }
}

/// `--admit` values as an admission (ranges checked against the device at create).
fn parse_admit(values: &[String]) -> Result<Admit> {
    match values {
        [] => return Ok(Admit::All),
        [one] if one == "all" => return Ok(Admit::All),
        [one] if one == "fat-metadata" => return Ok(Admit::FatMetadata),
        _ => {}
    }
    let mut ranges = Vec::new();
    for v in values {
        let parsed = v.split_once("..").and_then(|(a, b)| {
            let (a, b) = (a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?);
            Some(a..b)
        });
        match parsed {
            Some(r) => ranges.push(r),
            None => {
                return Err(Error::bad(format!(
                    "--admit {v:?}: expected all, fat-metadata (each alone), or a block range \
                     LBA..LBA (half-open: 0..64 is blocks 0 to 63)"
                )))
            }
        }
    }
    Ok(Admit::Ranges(ranges))
}

/// Run a write cache command: Some(exit code), or None when the command is UBJ's.
pub(crate) fn route(view: &Option<CmdView<'_>>) -> Result<Option<i32>> {
    match view {
        None => Ok(None),
        Some(CmdView::Create {
            image,
            size,
            backing,
            backing_size,
            settings,
            write,
            force,
        }) => {
            let o = WcCreateOptions {
                size: *size,
                sector_bytes: write.sector.unwrap_or(512),
                backing,
                backing_size: *backing_size,
                settings: write.settings(settings)?,
                admit: parse_admit(&write.admit)?,
                force: *force,
            };
            create(image, &o).map(Some)
        }
        Some(CmdView::Other {
            verb,
            image,
            backing,
            json,
        }) => {
            if identify(image)? != Some(Kind::WriteCache) {
                return Ok(None);
            }
            match *verb {
                "status" => status(image, *backing, *json),
                "check" => check(image, *backing, *json),
                verb => act(verb, image, *backing),
            }
            .map(Some)
        }
    }
}

fn create(path: &Path, o: &WcCreateOptions) -> Result<i32> {
    if o.admit == Admit::FatMetadata {
        check_fat_volume(o.backing)?;
    }
    let (sb, abs, created) = wimage::create_wc_image(path, o)?;
    say!(
        "created {}: write cache of {} slots of {} B ({} of NVRAM) over {}{}, {} blocks ({})",
        path.display(),
        sb.slots,
        sb.sector_bytes,
        format_size(o.size),
        abs.display(),
        if created { " (created)" } else { "" },
        sb.blocks,
        format_size(sb.blocks * u64::from(sb.sector_bytes))
    )?;
    say!(
        "settings {}; admit {}",
        settings_line(&sb.settings),
        o.admit.name()
    )?;
    Ok(0)
}

/// `nvstack up --cache write`: a new write cache image over `backing` (created when absent),
/// as `cache create` makes it; what it did.
pub(crate) fn create_for_up(
    image: &Path,
    size: u64,
    backing: &Path,
    backing_size: Option<u64>,
    settings: &SettingsArgs,
    write: &WriteArgs,
) -> Result<String> {
    let o = WcCreateOptions {
        size,
        sector_bytes: write.sector.unwrap_or(512),
        backing,
        backing_size,
        settings: write.settings(settings)?,
        admit: parse_admit(&write.admit)?,
        force: false,
    };
    let (sb, abs, created) = wimage::create_wc_image(image, &o)?;
    Ok(format!(
        "created write cache {} ({} slots of {} B; {}; admit {}) over {}{} ({} blocks)",
        image.display(),
        sb.slots,
        sb.sector_bytes,
        settings_line(&sb.settings),
        o.admit.name(),
        abs.display(),
        if created { ", created" } else { "" },
        sb.blocks
    ))
}

/// `--admit fat-metadata` needs the FAT volume on the backing file already (block 0).
fn check_fat_volume(backing: &Path) -> Result<()> {
    if !backing.exists() {
        return Err(Error::bad(format!(
            "{}: --admit fat-metadata needs an existing backing file holding the FAT volume \
             (make it with mkfs.fat, then add a 4096-byte block for the label)",
            backing.display()
        )));
    }
    let dev = nvstack_nvcache::FileDevice::open_readonly(backing)?;
    let bb = u64::from(dev.block_bytes());
    let mut read = |off: u64, buf: &mut [u8]| -> Result<()> {
        let first = off / bb;
        let last = (off + buf.len() as u64).div_ceil(bb);
        let mut tmp = vec![0u8; ((last - first) * bb) as usize];
        dev.read(first, &mut tmp)?;
        let at = (off - first * bb) as usize;
        buf.copy_from_slice(&tmp[at..at + buf.len()]);
        Ok(())
    };
    let blocks = dev.blocks() - 1;
    nvstack_nvcache::write::admit::fat::FatMap::build(&mut read, bb, blocks).map(|_| ())
}

pub(crate) fn settings_line(s: &WcSettings) -> String {
    let mut t = format!("policy {}", s.policy.name());
    if s.high_watermark_pct > 0 {
        t += &format!(
            "; destage above {} % used down to {} %",
            s.high_watermark_pct, s.low_watermark_pct
        );
    } else {
        t += "; destage one block when a new block finds no room (the seed's)";
    }
    if s.max_age_ms > 0 {
        t += &format!("; max-age {} ms", s.max_age_ms);
    }
    if s.writeback_jobs > 0 {
        t += &format!("; {} blocks per backing flush", s.writeback_jobs);
    }
    if s.cleaner {
        t += "; cleaner on";
    }
    t
}

fn status(path: &Path, backing: Option<&Path>, json: bool) -> Result<i32> {
    let o = Image::open(path, Access::ReadOnly, backing)?;
    let c = o.write_cache().expect("routed here as a write cache");
    let o_backing = o.backing().expect("a cache has a backing file");
    let s = status_of(c, path, o_backing)?;
    if json {
        print_json(&s)?;
    } else {
        print_status(&s)?;
    }
    Ok(0)
}

fn print_status(s: &WcStatus) -> Result<()> {
    say!(
        "image                       {} (write cache, format v{})",
        s.image,
        nvstack_nvcache::write::format::WC_VERSION
    )?;
    say!("backing                     {}", s.backing)?;
    say!("sector                      {} B", s.sector_bytes)?;
    say!("settings                    {}", settings_line(&s.settings))?;
    say!("admit                       {}", s.admit)?;
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
        say!("{:>2}. {name:<27}{v}", i + 1)?;
    }
    let d = &s.destaged;
    say!(
        "destaged                    {} for room, {} by watermark, {} by max-age, {} by the \
         cleaner, {} by writeback",
        d.room,
        d.watermark,
        d.max_age,
        d.cleaner,
        d.writeback
    )?;
    say!(
        "backing written             {}",
        format_size(s.backing_bytes_written)
    )?;
    if !s.counters_readable {
        say!("note                        the counters record was unreadable (a crash during a close): counting restarted")?;
    }
    Ok(())
}

/// `check`: the library's inspection (every slot against recovery's table, in a private copy;
/// each damaged slot a finding), printed as UBJ's check prints its own.
fn check(path: &Path, backing: Option<&Path>, json: bool) -> Result<i32> {
    let r = nvstack_nvcache::write::inspect::inspect_wc(path, backing)?;
    if json {
        print_json(&r)?;
        return Ok(if r.consistent() { 0 } else { 1 });
    }
    say!(
        "image        {} (write cache, format v{})",
        r.image,
        r.format_version
    )?;
    say!(
        "cache        {} slots of {} B, identity {}",
        r.slots,
        r.sector_bytes,
        r.identity
    )?;
    say!(
        "backing      {}{}",
        r.backing.as_deref().unwrap_or("(unknown)"),
        if r.backing_direct { ", O_DIRECT" } else { "" }
    )?;
    say!("settings     {}", settings_line(&r.settings))?;
    say!(
        "admit        {}",
        r.admit.as_deref().unwrap_or("(unreadable)")
    )?;
    let c = &r.census;
    say!(
        "table        {} blocks cached, {} entries recovery would clear ({} cut writes, {} \
         replaced copies), {} free, {} damaged",
        c.cached,
        c.cut + c.replaced,
        c.cut,
        c.replaced,
        c.free,
        c.damaged
    )?;
    for n in &r.notes {
        say!("note         {n}")?;
    }
    for f in &r.findings {
        say!("DAMAGE       {f}")?;
    }
    let result = if r.consistent() {
        "consistent"
    } else {
        "DAMAGED"
    };
    say!("result       {result}")?;
    Ok(if r.consistent() { 0 } else { 1 })
}

/// `writeback`, `detach`, `clear-stats`.
fn act(verb: &str, path: &Path, backing: Option<&Path>) -> Result<i32> {
    let o = Image::open(path, Access::Write, backing)?;
    let c = o.write_cache().expect("routed here as a write cache");
    let o_backing = o.backing().expect("a cache has a backing file");
    let before = c.stats().backing_bytes_written;
    match verb {
        "clear-stats" => {
            c.clear_stats();
            say!("{}: counters cleared", path.display())?;
            return Ok(0);
        }
        "writeback" => {
            let n = c.writeback()?;
            c.save_counters();
            say!(
                "{}: wrote back {n} blocks ({}) to {} and flushed it",
                path.display(),
                format_size(c.stats().backing_bytes_written - before),
                o_backing.display()
            )?;
        }
        _ => {
            let n = c.detach()?;
            c.save_counters();
            say!(
                "{}: wrote back {n} blocks and detached: {} alone is the whole state now; this \
                 cache no longer opens over it",
                path.display(),
                o_backing.display()
            )?;
        }
    }
    Ok(0)
}
