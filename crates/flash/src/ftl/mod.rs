//! The FTLs behind one type, [`Ftl`], and what they count beyond the chip's operations.
//!
//! - [`logblock`]: the log-block FTL of Kim et al. (switch, partial and full merges);
//! - [`page`]: a page-mapped FTL with greedy garbage collection.
//!
//! Both take their merge vocabulary ([`MergeKind`], [`MergeStep`], [`Merges`]) from here.

pub mod logblock;
pub mod page;

use crate::geometry::{Field, Geometry, Invalid, SPARE_BLOCKS_BEYOND_LOGS};
use crate::nand::{Counters, Media, Nand};
use logblock::LogBlockFtl;
use nvstack_core::error::Result;
use page::PageFtl;

/// Which FTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FtlKind {
    /// Kim et al.'s log-block FTL (seed 004).
    LogBlock,
    /// A page-mapped FTL with greedy garbage collection.
    Page,
}

impl FtlKind {
    pub const ALL: [FtlKind; 2] = [FtlKind::LogBlock, FtlKind::Page];

    pub fn name(self) -> &'static str {
        match self {
            FtlKind::LogBlock => "log-block",
            FtlKind::Page => "page",
        }
    }

    pub fn parse(s: &str) -> Option<FtlKind> {
        FtlKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// An FTL's settings beside the geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FtlConfig {
    pub kind: FtlKind,
    /// Log blocks of the log-block FTL (ignored by the page-mapped one).
    pub log_blocks: u32,
}

impl FtlConfig {
    /// The geometry's and these settings' checks together.
    pub fn validate(&self, geo: &Geometry) -> std::result::Result<(), Invalid> {
        geo.validate()?;
        let need = match self.kind {
            FtlKind::LogBlock => {
                if self.log_blocks == 0 {
                    return Err(Invalid {
                        field: Field::LogBlocks,
                        text: "0: the log-block FTL needs at least one log block".into(),
                    });
                }
                self.log_blocks + SPARE_BLOCKS_BEYOND_LOGS
            }
            // Greedy GC needs room to copy a victim's valid pages while two blocks are open.
            FtlKind::Page => PAGE_FTL_SPARE_BLOCKS_MIN,
        };
        if geo.spare_blocks < need {
            return Err(Invalid {
                field: Field::SpareBlocks,
                text: format!(
                    "{}: the {} FTL needs at least {need}{}",
                    geo.spare_blocks,
                    self.kind.name(),
                    match self.kind {
                        FtlKind::LogBlock => " (the log blocks and two merge targets)",
                        FtlKind::Page => "",
                    }
                ),
            });
        }
        Ok(())
    }
}

/// The page-mapped FTL's minimum over-provisioning, in blocks.
pub const PAGE_FTL_SPARE_BLOCKS_MIN: u32 = 4;

/// The kinds of merge of the log-block FTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeKind {
    Switch,
    Partial,
    Full,
}

/// A point inside a merge (or a garbage collection), where tests may stop a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeStep {
    /// One page copied.
    Copied(MergeKind),
    /// Every copy done, nothing erased yet.
    BeforeErase(MergeKind),
    /// The first of two blocks erased (full merge).
    Erased(MergeKind),
}

/// Merges by kind and the pages they copied (page FTL: garbage collections in `full`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Merges {
    pub switch: u64,
    pub partial: u64,
    pub full: u64,
    /// Merges that finished one cut short by a crash (at open).
    pub recovery: u64,
    /// Pages copied by merges or garbage collection.
    pub copies: u64,
}

/// One of the FTLs over a chip.
pub enum Ftl<M> {
    LogBlock(LogBlockFtl<M>),
    Page(PageFtl<M>),
}

impl<M: Media> Ftl<M> {
    /// A fresh FTL on an erased chip. `cfg` must have passed [`FtlConfig::validate`].
    pub fn new(nand: Nand<M>, cfg: FtlConfig) -> Ftl<M> {
        match cfg.kind {
            FtlKind::LogBlock => Ftl::LogBlock(LogBlockFtl::new(nand, cfg.log_blocks)),
            FtlKind::Page => Ftl::Page(PageFtl::new(nand)),
        }
    }

    /// The FTL of a chip that holds data, its mapping rebuilt from the spare areas.
    pub fn rebuild(nand: Nand<M>, cfg: FtlConfig, merges: Merges) -> Result<Ftl<M>> {
        Ok(match cfg.kind {
            FtlKind::LogBlock => Ftl::LogBlock(LogBlockFtl::rebuild(nand, cfg.log_blocks, merges)?),
            FtlKind::Page => Ftl::Page(PageFtl::rebuild(nand, merges)?),
        })
    }

    #[inline]
    pub fn write(&mut self, lpn: u32, data: &[u8]) -> Result<()> {
        match self {
            Ftl::LogBlock(f) => f.write(lpn, data),
            Ftl::Page(f) => f.write(lpn, data),
        }
    }

    #[inline]
    pub fn read(&mut self, lpn: u32, buf: &mut [u8]) -> Result<bool> {
        match self {
            Ftl::LogBlock(f) => f.read(lpn, buf),
            Ftl::Page(f) => f.read(lpn, buf),
        }
    }

    pub fn nand(&self) -> &Nand<M> {
        match self {
            Ftl::LogBlock(f) => &f.nand,
            Ftl::Page(f) => &f.nand,
        }
    }

    pub fn nand_mut(&mut self) -> &mut Nand<M> {
        match self {
            Ftl::LogBlock(f) => &mut f.nand,
            Ftl::Page(f) => &mut f.nand,
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.nand().counters
    }

    pub fn merges(&self) -> Merges {
        match self {
            Ftl::LogBlock(f) => f.merges,
            Ftl::Page(f) => f.merges,
        }
    }

    /// Stop-point hook at each merge step (tests).
    pub fn set_hook(&mut self, hook: Box<dyn FnMut(MergeStep) + Send>) {
        match self {
            Ftl::LogBlock(f) => f.hook = Some(hook),
            Ftl::Page(f) => f.hook = Some(hook),
        }
    }
}
