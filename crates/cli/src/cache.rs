//! `nvstack cache`: create a UBJ cache image over a backing file, show its status, write it
//! back, detach it, check it. The library is nvstack_nvcache (image.rs and inspect.rs).

use crate::{print_json, say, size_arg};
use clap::{Args, Subcommand, ValueEnum};
use nvstack_core::error::{Error, Result};
use nvstack_core::size::format_size;
use nvstack_nvcache::ubj::format::{PolicyName, Settings};
use nvstack_nvcache::ubj::image::{self, CreateOptions};
use nvstack_nvcache::ubj::inspect::{inspect, Inspection};
use nvstack_stack::{Access, Image};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    cmd: CacheCmd,
}

/// The cache modes (`--cache`).
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CacheMode {
    /// UBJ: the buffer cache is the journal (seed 001).
    Ubj,
    /// The write cache: NVFAT's NVRAM write cache (seed 004) with dm-writecache's controls.
    Write,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PolicyArg {
    Lru,
    Clock,
    Random,
    /// Least recently written: the write cache's destage order (its default).
    Lrw,
}

/// The stored settings, as flags (create stores them; serving may override them).
#[derive(Args, Clone, Debug, Default)]
pub struct SettingsArgs {
    /// Commit on a timer and on a count of dirty blocks (off: only a flush commits, and a write
    /// that would need a forced commit fails with ENOSPC instead).
    #[arg(long, value_enum)]
    autocommit: Option<OnOff>,
    /// Commit when this many blocks are dirty (default 64, dm-writecache's).
    #[arg(long)]
    autocommit_blocks: Option<u32>,
    /// Commit when the oldest dirty block is this many milliseconds old (default 1000).
    #[arg(long)]
    autocommit_ms: Option<u32>,
    /// Checkpoint when frozen slots exceed this percentage of the cache (default 50)...
    #[arg(long)]
    high_watermark: Option<u8>,
    /// ...until they are at most this percentage (default 45).
    #[arg(long)]
    low_watermark: Option<u8>,
    /// Checkpoint everything frozen this often, in milliseconds (default 0: off).
    #[arg(long)]
    checkpoint_ms: Option<u32>,
    /// Replacement policy of clean blocks (default lru).
    #[arg(long, value_enum)]
    policy: Option<PolicyArg>,
}

impl SettingsArgs {
    /// The flags the write cache shares (policy, watermarks); UBJ's commit and checkpoint
    /// flags are refused, naming the first.
    pub(crate) fn write_cache_view(&self) -> Result<(Option<PolicyArg>, Option<u8>, Option<u8>)> {
        let ubj_only = [
            ("--autocommit", self.autocommit.is_some()),
            ("--autocommit-blocks", self.autocommit_blocks.is_some()),
            ("--autocommit-ms", self.autocommit_ms.is_some()),
            ("--checkpoint-ms", self.checkpoint_ms.is_some()),
        ];
        if let Some((flag, _)) = ubj_only.iter().find(|f| f.1) {
            return Err(Error::bad(format!(
                "{flag} is UBJ's (--cache ubj); the write cache commits every write on return"
            )));
        }
        Ok((self.policy, self.high_watermark, self.low_watermark))
    }

    /// No setting given.
    pub fn is_empty(&self) -> bool {
        self.to_args().is_empty()
    }

    /// The flags again, for a command that passes them on (`up` to `serve`).
    pub fn to_args(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut put = |flag: &str, value: Option<String>| {
            if let Some(x) = value {
                v.push(flag.to_string());
                v.push(x);
            }
        };
        put(
            "--autocommit",
            self.autocommit.map(|a| {
                match a {
                    OnOff::On => "on",
                    OnOff::Off => "off",
                }
                .to_string()
            }),
        );
        put(
            "--autocommit-blocks",
            self.autocommit_blocks.map(|n| n.to_string()),
        );
        put("--autocommit-ms", self.autocommit_ms.map(|n| n.to_string()));
        put(
            "--high-watermark",
            self.high_watermark.map(|n| n.to_string()),
        );
        put("--low-watermark", self.low_watermark.map(|n| n.to_string()));
        put("--checkpoint-ms", self.checkpoint_ms.map(|n| n.to_string()));
        put(
            "--policy",
            self.policy.map(|p| {
                match p {
                    PolicyArg::Lrw => "lrw",
                    PolicyArg::Lru => "lru",
                    PolicyArg::Clock => "clock",
                    PolicyArg::Random => "random",
                }
                .to_string()
            }),
        );
        v
    }

    /// `base` with these flags applied; contradictions are refused, naming both flags.
    pub fn apply(&self, base: Settings) -> Result<Settings> {
        let mut s = base;
        if self.autocommit == Some(OnOff::Off) {
            if self.autocommit_blocks.is_some_and(|n| n > 0)
                || self.autocommit_ms.is_some_and(|n| n > 0)
            {
                return Err(Error::bad(
                    "--autocommit off contradicts a nonzero --autocommit-blocks or \
                     --autocommit-ms",
                ));
            }
            s.autocommit_blocks = 0;
            s.autocommit_ms = 0;
        }
        s.autocommit_blocks = self.autocommit_blocks.unwrap_or(s.autocommit_blocks);
        s.autocommit_ms = self.autocommit_ms.unwrap_or(s.autocommit_ms);
        s.high_watermark_pct = self.high_watermark.unwrap_or(s.high_watermark_pct);
        s.low_watermark_pct = self.low_watermark.unwrap_or(s.low_watermark_pct);
        s.checkpoint_ms = self.checkpoint_ms.unwrap_or(s.checkpoint_ms);
        if let Some(p) = self.policy {
            s.policy = match p {
                PolicyArg::Lru => PolicyName::Lru,
                PolicyArg::Clock => PolicyName::Clock,
                PolicyArg::Random => PolicyName::Random,
                PolicyArg::Lrw => {
                    return Err(Error::bad(
                        "--policy lrw is the write cache's destage order (--cache write); UBJ \
                         replaces clean blocks by lru, clock or random",
                    ))
                }
            };
        }
        s.validate()?;
        Ok(s)
    }
}

#[derive(Subcommand)]
enum CacheCmd {
    /// Create a cache image (NVRAM) over a backing file, which is created when absent.
    Create {
        image: PathBuf,
        /// NVRAM size (the image file's length): bytes, or with a KiB, MiB or GiB suffix.
        #[arg(long, value_parser = size_arg)]
        size: u64,
        #[arg(long, value_enum)]
        cache: CacheMode,
        /// The backing file (a file on a disk; opened with O_DIRECT, flushed with fdatasync).
        #[arg(long)]
        backing: PathBuf,
        /// Create the backing file to export this many bytes (the file gets one more 4 KiB
        /// block: the cache's label). With an existing file: the size it must have.
        #[arg(long, value_parser = size_arg)]
        backing_size: Option<u64>,
        #[command(flatten)]
        settings: SettingsArgs,
        #[command(flatten)]
        write: crate::wcache::WriteArgs,
        /// Replace an existing image; overwrite a backing file's last block that holds data
        /// or a live cache's label.
        #[arg(long)]
        force: bool,
    },
    /// Blocks per state, counters, settings and the backing file (offline; never writes).
    Status {
        image: PathBuf,
        /// The backing file, when it moved since create.
        #[arg(long)]
        backing: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// A full checkpoint: every committed block written to the backing file, which is flushed.
    Writeback {
        image: PathBuf,
        #[arg(long)]
        backing: Option<PathBuf>,
    },
    /// Write everything back and label the backing file detached: it alone is the whole state
    /// from now on (mount it without nvstack), and this cache no longer opens over it.
    Detach {
        image: PathBuf,
        #[arg(long)]
        backing: Option<PathBuf>,
    },
    /// Zero a write cache's counters (dm-writecache's clear_stats message).
    ClearStats {
        image: PathBuf,
        #[arg(long)]
        backing: Option<PathBuf>,
    },
    /// Verify a cache image and its backing label offline (exit 1 on damage; never writes).
    Check {
        image: PathBuf,
        #[arg(long)]
        backing: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

/// What reads an nvramdisk image (named when one is given where a cache is expected).
const READERS: &str = "nvstack info and nvstack check read it";

pub fn run(a: CacheArgs) -> Result<i32> {
    if let Some(code) = crate::wcache::route(&a.cmd_view())? {
        return Ok(code);
    }
    match a.cmd {
        CacheCmd::Create {
            cache: CacheMode::Write,
            ..
        } => unreachable!("the write cache's create is routed above"),
        CacheCmd::ClearStats { image, .. } => {
            nvstack_stack::kind::expect_cache(&image, READERS)?;
            Err(Error::bad(format!(
                "{}: a UBJ cache; clear-stats is the write cache's (--cache write)",
                image.display()
            )))
        }
        CacheCmd::Create {
            image,
            size,
            cache: CacheMode::Ubj,
            backing,
            backing_size,
            settings,
            write,
            force,
        } => {
            write.refuse_for_ubj()?;
            let o = CreateOptions {
                size,
                backing: &backing,
                backing_size,
                settings: settings.apply(Settings::default())?,
                force,
            };
            create(&image, &o)
        }
        CacheCmd::Status {
            image,
            backing,
            json,
        } => status(&image, backing.as_deref(), json),
        CacheCmd::Writeback { image, backing } => writeback(&image, backing.as_deref(), false),
        CacheCmd::Detach { image, backing } => writeback(&image, backing.as_deref(), true),
        CacheCmd::Check {
            image,
            backing,
            json,
        } => check(&image, backing.as_deref(), json),
    }
}

/// What the write cache's routing needs to see of a command.
pub(crate) enum CmdView<'a> {
    Create {
        image: &'a Path,
        size: u64,
        backing: &'a Path,
        backing_size: Option<u64>,
        settings: &'a SettingsArgs,
        write: &'a crate::wcache::WriteArgs,
        force: bool,
    },
    /// status, writeback, detach, clear-stats or check of an image.
    Other {
        verb: &'static str,
        image: &'a Path,
        backing: Option<&'a Path>,
        json: bool,
    },
}

fn other<'a>(
    verb: &'static str,
    image: &'a Path,
    backing: &'a Option<PathBuf>,
    json: bool,
) -> CmdView<'a> {
    CmdView::Other {
        verb,
        image,
        backing: backing.as_deref(),
        json,
    }
}

impl CacheArgs {
    fn cmd_view(&self) -> Option<CmdView<'_>> {
        Some(match &self.cmd {
            CacheCmd::Create {
                image,
                size,
                cache: CacheMode::Write,
                backing,
                backing_size,
                settings,
                write,
                force,
            } => CmdView::Create {
                image,
                size: *size,
                backing,
                backing_size: *backing_size,
                settings,
                write,
                force: *force,
            },
            CacheCmd::Create { .. } => return None,
            CacheCmd::Status {
                image,
                backing,
                json,
            } => other("status", image, backing, *json),
            CacheCmd::Writeback { image, backing } => other("writeback", image, backing, false),
            CacheCmd::Detach { image, backing } => other("detach", image, backing, false),
            CacheCmd::ClearStats { image, backing } => other("clear-stats", image, backing, false),
            CacheCmd::Check {
                image,
                backing,
                json,
            } => other("check", image, backing, *json),
        })
    }
}

fn create(path: &Path, o: &CreateOptions) -> Result<i32> {
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

fn status(path: &Path, backing: Option<&Path>, json: bool) -> Result<i32> {
    if let Some(code) = crate::live::status(path, json)? {
        return Ok(code);
    }
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

fn check(path: &Path, backing: Option<&Path>, json: bool) -> Result<i32> {
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
fn writeback(path: &Path, backing: Option<&Path>, detach: bool) -> Result<i32> {
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
