//! `nvstack cache`: create a cache image (UBJ or the write cache) over a backing file, show its
//! status, write it back, detach it, check it. Here the flags; every verb but create is the
//! stack's (`nvstack_stack::cache`, whichever the kind), printed as the report it answers (a
//! live cache's status first, `live.rs`). Create's flags per cache: `ubj.rs`, `write.rs`.

use crate::size_arg;
use clap::{Args, Subcommand, ValueEnum};
use nvstack_core::error::{Error, Result};
use nvstack_nvcache::ubj::format::{PolicyName, Settings};
use std::path::{Path, PathBuf};

pub mod live;
mod ubj;
pub mod write;

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
        write: write::WriteArgs,
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
    /// Zero a cache's lifetime counters (dm-writecache's clear_stats message).
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
    use nvstack_stack::cache::{self as verbs, Verb};
    let (image, backing) = match &a.cmd {
        CacheCmd::Create {
            image,
            size,
            cache,
            backing,
            backing_size,
            settings,
            write,
            force,
        } => {
            let o = Create {
                size: *size,
                backing,
                backing_size: *backing_size,
                settings,
                write,
                force: *force,
            };
            return match cache {
                CacheMode::Ubj => ubj::create(image, &o),
                CacheMode::Write => write::create(image, &o),
            };
        }
        CacheCmd::Status { image, backing, .. }
        | CacheCmd::Writeback { image, backing }
        | CacheCmd::Detach { image, backing }
        | CacheCmd::ClearStats { image, backing }
        | CacheCmd::Check { image, backing, .. } => (image.as_path(), backing.as_deref()),
    };
    // A cache a live daemon serves: its live figures, whichever the kind.
    if let CacheCmd::Status { json, .. } = &a.cmd {
        if let Some(code) = live::status(image, *json)? {
            return Ok(code);
        }
    }
    nvstack_stack::kind::expect_cache(image, READERS)?;
    let (report, json) = match &a.cmd {
        CacheCmd::Status { json, .. } => (verbs::status(image, backing)?, *json),
        CacheCmd::Check { json, .. } => (verbs::check(image, backing)?, *json),
        CacheCmd::Writeback { .. } => (verbs::act(image, backing, Verb::Writeback)?, false),
        CacheCmd::Detach { .. } => (verbs::act(image, backing, Verb::Detach)?, false),
        CacheCmd::ClearStats { .. } => (verbs::act(image, backing, Verb::ClearStats)?, false),
        CacheCmd::Create { .. } => unreachable!("created above"),
    };
    print_report(&report, json)
}

/// A report as its rows, or as JSON; its exit code (1 for a finding).
pub(crate) fn print_report(r: &nvstack_stack::Report, json: bool) -> Result<i32> {
    if json {
        crate::print_json(&r.json)?;
    } else {
        crate::output::out(r.text().as_bytes())?;
    }
    Ok(r.exit_code())
}

/// `cache create`'s flags, whichever the cache.
pub(crate) struct Create<'a> {
    pub size: u64,
    pub backing: &'a Path,
    pub backing_size: Option<u64>,
    pub settings: &'a SettingsArgs,
    pub write: &'a write::WriteArgs,
    pub force: bool,
}
