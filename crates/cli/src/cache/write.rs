//! `nvstack cache create --cache write`: the write cache (NVFAT, seed 004, with dm-writecache's
//! controls) over a backing file; its own flags. Its other verbs are the stack's, whichever
//! the kind (mod.rs). The library is nvstack_nvcache (write/mod.rs, write/image.rs).

use super::{PolicyArg, SettingsArgs};
use crate::say;
use clap::Args;
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_core::size::format_size;
use nvstack_nvcache::write::format::{Admit, DestagePolicy, Settings};
use nvstack_nvcache::write::image::{self as wimage, CreateOptions};
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

    fn settings(&self, shared: &SettingsArgs) -> Result<Settings> {
        let (policy, high, low) = shared.write_cache_view()?;
        let s = Settings {
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

/// The create options `c` gives (`force` as given).
fn options<'a>(c: &super::Create<'a>) -> Result<CreateOptions<'a>> {
    Ok(CreateOptions {
        size: c.size,
        sector_bytes: c.write.sector.unwrap_or(512),
        backing: c.backing,
        backing_size: c.backing_size,
        settings: c.write.settings(c.settings)?,
        admit: parse_admit(&c.write.admit)?,
        force: c.force,
    })
}

pub(super) fn create(path: &Path, c: &super::Create) -> Result<i32> {
    let o = options(c)?;
    if o.admit == Admit::FatMetadata {
        check_fat_volume(o.backing)?;
    }
    let (sb, abs, created) = wimage::create_image(path, &o)?;
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
        sb.settings.describe(),
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
    let o = options(&super::Create {
        size,
        backing,
        backing_size,
        settings,
        write,
        force: false,
    })?;
    let (sb, abs, created) = wimage::create_image(image, &o)?;
    Ok(format!(
        "created write cache {} ({} slots of {} B; {}; admit {}) over {}{} ({} blocks)",
        image.display(),
        sb.slots,
        sb.sector_bytes,
        sb.settings.describe(),
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
