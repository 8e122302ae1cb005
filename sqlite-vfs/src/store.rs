//! A tiny persistent store of named journal files on an nvramdisk: the WAL and the rollback
//! journal (and, rarely, the super-journal) of one SQLite database. The `nvstack` SQLite VFS
//! (`sqlite-vfs/`) keeps these files here instead of on the file system, so a commit's journal
//! writes are nvramdisk's atomic, durable writes and need no fsync.
//!
//! The store asks only the `BlockDevice` trait: it needs a device with a scattered atomic write
//! of at least [`ATOMIC_BLOCKS_MIN`] blocks that is durable on return ([`Caps`]), and refuses
//! any other at open. Its pieces are the device's atomic unit less [`PIECE_SPARE_BLOCKS`]
//! ([`Store::piece_blocks_max`]: 61 on nvramdisk).
//!
//! Layout (docs/format.md, "SQLite journal store"): device block 0 is a versioned, checksummed
//! directory of at most [`FILES_MAX`] files (kind, layout, name hash, byte size, chunk list);
//! the rest of the device is cut into equal chunks of whole blocks. A file's *virtual blocks*
//! live in the chunks its entry lists, in order; its [`Layout`] maps its bytes to virtual
//! blocks: `linear` (byte `o` at block `o / B`), or `wal-framed`, which puts each page of a
//! SQLite WAL in a block of its own and packs the frame headers into a header block per group
//! of frames, so that a frame costs two single-block writes and no read-back.
//!
//! Crash rule: every operation is one atomic device write. A write at any offset and length
//! writes the blocks it touches (a partial block is read, patched and written back whole) and,
//! when the file's size changes, the directory block, all in one scattered atomic write: after
//! a crash the size and the content agree, old or new together. Truncate, create and delete
//! are one atomic directory write. Bytes a file grows over without writing them (a hole) read
//! as zeros: blocks holding none of the file's bytes below the old size are discarded before
//! the write that makes them part of the file (they lie beyond the durable size until then),
//! and blocks holding some are zeroed past the old end inside the atomic write. A write that
//! touches more than [`Store::piece_blocks_max`] blocks (SQLite never issues one: its largest write
//! is a 64 KiB page) is split into atomic pieces in ascending order, so a crash leaves a
//! prefix of it and a size that matches. The pieces are bounded by the write's length
//! ([`StoreError::PiecesExceeded`] past the bound, never a spin).
//!
//! Every on-media record (the directory block, its header and entry records, and the
//! WAL-framed placement of file bytes) has a pair assertion in debug builds: what is encoded
//! decodes to the same value, and what is decoded re-encodes to the bytes read.
//!
//! The directory is cached in memory; the media copy is read and validated once, at open. A
//! device write that fails leaves the cached directory as it was.

use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result};
use std::sync::{Arc, Mutex, MutexGuard};

/// Directory magic ("NVstack SQLite JourNaLs").
pub const STORE_MAGIC: [u8; 8] = *b"NVSQLJNL";
pub const STORE_VERSION: u32 = 1;
/// The directory lives in device block 0.
pub const DIR_LBA: u64 = 0;
/// Bytes of block 0 the directory uses (the rest of the block must be zero): small enough for
/// the smallest nvramdisk block.
pub const DIR_BYTES: usize = 512;
/// Files the store holds at once: a WAL or a rollback journal, a super-journal, and room for a
/// leftover of the other journal mode.
pub const FILES_MAX: usize = 4;
/// Chunks one file may own (the directory has room for this many chunk numbers per entry).
/// The device has at most this many chunks, so one file can own all of them.
pub const CHUNKS_PER_FILE_MAX: usize = 40;
/// The smallest chunk. Chunks grow with the device (a fortieth of it).
pub const CHUNK_BYTES_MIN: u64 = 64 << 10;
/// The longest file name accepted (names are hashed, not stored).
pub const NAME_BYTES_MAX: usize = 4096;
/// Device blocks the store accepts: the directory must fit one block.
pub const BLOCK_BYTES_MIN: u64 = DIR_BYTES as u64;
pub const BLOCK_BYTES_MAX: u64 = 65536;
const _: () = assert!(CHUNK_BYTES_MIN.is_multiple_of(BLOCK_BYTES_MAX));
/// Blocks of an atomic write that are not the file's data: the directory block and the (at
/// most two) blocks a hole zeroes past the old end. A piece of a write touches at most the
/// device's atomic unit less these ([`Store::piece_blocks_max`]).
pub const PIECE_SPARE_BLOCKS: usize = 3;
/// The smallest atomic unit the store accepts: room for a piece of at least one block.
pub const ATOMIC_BLOCKS_MIN: u32 = PIECE_SPARE_BLOCKS as u32 + 1;
/// SQLite's WAL: a 32-byte header, then frames of a 24-byte header and a page.
pub const WAL_HEADER_BYTES: u64 = 32;
pub const WAL_FRAME_HEADER_BYTES: u64 = 24;

const HEADER_BYTES: usize = 64;
const ENTRY_HEADER_BYTES: usize = 24;
const ENTRY_BYTES: usize = ENTRY_HEADER_BYTES + 2 * CHUNKS_PER_FILE_MAX;
const ENTRIES_OFF: usize = HEADER_BYTES;
const CRC_OFF: usize = DIR_BYTES - 4;
const _: () = assert!(ENTRIES_OFF + FILES_MAX * ENTRY_BYTES <= CRC_OFF);

/// What a stored file is (SQLite's open flags say which).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    Wal,
    MainJournal,
    SuperJournal,
}

impl FileKind {
    pub fn id(self) -> u8 {
        match self {
            FileKind::Wal => 1,
            FileKind::MainJournal => 2,
            FileKind::SuperJournal => 3,
        }
    }
    pub fn from_id(id: u8) -> Option<FileKind> {
        match id {
            1 => Some(FileKind::Wal),
            2 => Some(FileKind::MainJournal),
            3 => Some(FileKind::SuperJournal),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            FileKind::Wal => "wal",
            FileKind::MainJournal => "journal",
            FileKind::SuperJournal => "super-journal",
        }
    }
}

/// How a file's bytes map to its virtual blocks. Either is a bijection onto part of the
/// virtual blocks, so any read or write at any offset works under either; the layout only
/// decides how many blocks a write touches.
///
/// The layout is chosen by the first write to an empty file: a 32-byte write at offset 0 that
/// is a SQLite WAL header whose page size equals the block size selects `WalFramed`; any other
/// first write selects `Linear`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Byte `o` is at offset `o % B` of virtual block `o / B`.
    Linear,
    /// SQLite WAL frames with pages of exactly one block: `G = (B - 32) / 24` frames form a
    /// group of `G + 1` virtual blocks, a header block (the WAL header in group 0's first 32
    /// bytes, then the G frame headers, 24 bytes each) followed by one block per page.
    WalFramed,
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Layout {
    pub fn id(self) -> u8 {
        match self {
            Layout::Linear => 0,
            Layout::WalFramed => 1,
        }
    }
    pub fn from_id(id: u8) -> Option<Layout> {
        match id {
            0 => Some(Layout::Linear),
            1 => Some(Layout::WalFramed),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Layout::Linear => "linear",
            Layout::WalFramed => "wal-framed",
        }
    }

    /// The layout the first write `data` at `offset` to an empty file selects.
    pub fn choose(offset: u64, data: &[u8], block_bytes: u64) -> Layout {
        debug_assert!(block_bytes.is_power_of_two(), "a device's block size");
        if offset != 0 || data.len() as u64 != WAL_HEADER_BYTES {
            return Layout::Linear;
        }
        let magic = u32::from_be_bytes(data[0..4].try_into().expect("4 bytes"));
        let page = match u32::from_be_bytes(data[8..12].try_into().expect("4 bytes")) {
            1 => 65536,
            p => p as u64,
        };
        if (magic == 0x377f_0682 || magic == 0x377f_0683) && page == block_bytes {
            Layout::WalFramed
        } else {
            Layout::Linear
        }
    }
}

/// A layout at a block size: the arithmetic of the mapping.
#[derive(Clone, Copy, Debug)]
struct Map {
    layout: Layout,
    block_bytes: u64,
    /// Frames per group (WalFramed).
    group_frames: u64,
}

impl Map {
    fn new(layout: Layout, block_bytes: u64) -> Map {
        debug_assert!(
            block_bytes.is_power_of_two()
                && (BLOCK_BYTES_MIN..=BLOCK_BYTES_MAX).contains(&block_bytes)
        );
        let group_frames = (block_bytes - WAL_HEADER_BYTES) / WAL_FRAME_HEADER_BYTES;
        debug_assert!(group_frames >= 1);
        Map {
            layout,
            block_bytes,
            group_frames,
        }
    }

    fn frame_bytes(&self) -> u64 {
        WAL_FRAME_HEADER_BYTES + self.block_bytes
    }

    /// Start of frame `frame` in the file.
    fn frame_start(&self, frame: u64) -> u64 {
        WAL_HEADER_BYTES + frame * self.frame_bytes()
    }

    /// Where file byte `offset` lives: (virtual block, offset in it, bytes from `offset` that
    /// follow it contiguously in the same block). Every write and read is placed by it.
    fn seg(&self, offset: u64) -> (u64, u64, u64) {
        let (vblock, in_block, run) = self.place(offset);
        // Pair assertion of the framing: the run's first and last bytes map back, through the
        // inverse, to the file bytes they were placed for.
        debug_assert!(run >= 1 && in_block + run <= self.block_bytes);
        debug_assert_eq!(
            self.file_offset(vblock, in_block),
            Some(offset),
            "{self:?}: file byte {offset}"
        );
        debug_assert_eq!(
            self.file_offset(vblock, in_block + run - 1),
            Some(offset + run - 1),
            "{self:?}: the run of {run} bytes from file byte {offset}"
        );
        (vblock, in_block, run)
    }

    /// The arithmetic of [`Map::seg`].
    fn place(&self, offset: u64) -> (u64, u64, u64) {
        match self.layout {
            Layout::Linear => {
                let in_block = offset % self.block_bytes;
                (
                    offset / self.block_bytes,
                    in_block,
                    self.block_bytes - in_block,
                )
            }
            Layout::WalFramed => {
                if offset < WAL_HEADER_BYTES {
                    return (0, offset, WAL_HEADER_BYTES - offset);
                }
                let frame_bytes = self.frame_bytes();
                let frame = (offset - WAL_HEADER_BYTES) / frame_bytes;
                let in_frame = (offset - WAL_HEADER_BYTES) % frame_bytes;
                let (group, in_group) = (frame / self.group_frames, frame % self.group_frames);
                let header_block = group * (self.group_frames + 1);
                if in_frame < WAL_FRAME_HEADER_BYTES {
                    (
                        header_block,
                        WAL_HEADER_BYTES + WAL_FRAME_HEADER_BYTES * in_group + in_frame,
                        WAL_FRAME_HEADER_BYTES - in_frame,
                    )
                } else {
                    (
                        header_block + 1 + in_group,
                        in_frame - WAL_FRAME_HEADER_BYTES,
                        frame_bytes - in_frame,
                    )
                }
            }
        }
    }

    /// The inverse of [`Map::seg`]: the file byte at offset `in_block` of virtual block
    /// `vblock`, or None for a byte that holds none (a header block's tail past its frame
    /// headers, and its first 32 bytes outside group 0).
    fn file_offset(&self, vblock: u64, in_block: u64) -> Option<u64> {
        debug_assert!(in_block < self.block_bytes);
        match self.layout {
            Layout::Linear => Some(vblock * self.block_bytes + in_block),
            Layout::WalFramed => {
                let group = vblock / (self.group_frames + 1);
                let in_group = vblock % (self.group_frames + 1);
                if in_group > 0 {
                    let frame = group * self.group_frames + in_group - 1;
                    return Some(self.frame_start(frame) + WAL_FRAME_HEADER_BYTES + in_block);
                }
                if in_block < WAL_HEADER_BYTES {
                    return (group == 0).then_some(in_block);
                }
                let header = (in_block - WAL_HEADER_BYTES) / WAL_FRAME_HEADER_BYTES;
                if header >= self.group_frames {
                    return None;
                }
                let in_header = (in_block - WAL_HEADER_BYTES) % WAL_FRAME_HEADER_BYTES;
                Some(self.frame_start(group * self.group_frames + header) + in_header)
            }
        }
    }

    /// For virtual block `vblock` and a file of `size` bytes: whether the block holds any
    /// file byte below `size`, and the offset from which every byte of the block is a file
    /// byte at or past `size` or no file byte at all (within a block, file bytes ascend with
    /// the offset).
    fn split(&self, vblock: u64, size: u64) -> (bool, u64) {
        let (live, zero_from) = match self.layout {
            Layout::Linear => {
                let start = vblock * self.block_bytes;
                (
                    start < size,
                    size.saturating_sub(start).min(self.block_bytes),
                )
            }
            Layout::WalFramed => self.split_framed(vblock, size),
        };
        // Against the inverse map: the byte before `zero_from` is a file byte below `size`,
        // the byte at it is not (so the block is live exactly when `zero_from` > 0).
        debug_assert_eq!(live, zero_from > 0, "{self:?}: block {vblock}, size {size}");
        debug_assert!(
            zero_from == 0
                || self
                    .file_offset(vblock, zero_from - 1)
                    .is_some_and(|byte| byte < size),
            "{self:?}: block {vblock}, size {size}: a live byte before {zero_from}"
        );
        debug_assert!(
            zero_from == self.block_bytes
                || self
                    .file_offset(vblock, zero_from)
                    .is_none_or(|byte| byte >= size),
            "{self:?}: block {vblock}, size {size}: no live byte from {zero_from}"
        );
        (live, zero_from)
    }

    /// [`Map::split`] under the WAL-framed layout.
    fn split_framed(&self, vblock: u64, size: u64) -> (bool, u64) {
        debug_assert_eq!(self.layout, Layout::WalFramed);
        let frames = self.group_frames;
        let (group, in_group) = (vblock / (frames + 1), vblock % (frames + 1));
        if in_group > 0 {
            // A page block: its bytes are one page, contiguous in the file.
            let page_start =
                self.frame_start(group * frames + in_group - 1) + WAL_FRAME_HEADER_BYTES;
            let below = size.saturating_sub(page_start).min(self.block_bytes);
            return (page_start < size, below);
        }
        // A header block: the WAL header (group 0 only), then the group's frame headers.
        let group_start = self.frame_start(group * frames);
        let live = if group == 0 {
            size > 0
        } else {
            group_start < size
        };
        if group == 0 && size < WAL_HEADER_BYTES {
            return (live, size);
        }
        if group > 0 && size <= group_start {
            // Only frame headers at or past `size` (the first 32 bytes are unused).
            return (false, 0);
        }
        // Frame headers of this group wholly below `size`, then a part of the next one.
        let whole_headers = if size >= group_start + WAL_FRAME_HEADER_BYTES {
            ((size - group_start - WAL_FRAME_HEADER_BYTES) / self.frame_bytes() + 1).min(frames)
        } else {
            0
        };
        let mut zero_from = WAL_HEADER_BYTES + WAL_FRAME_HEADER_BYTES * whole_headers;
        if whole_headers < frames {
            let next_header = self.frame_start(group * frames + whole_headers);
            zero_from += size.saturating_sub(next_header).min(WAL_FRAME_HEADER_BYTES);
        }
        // Past the group's frame headers a header block holds no file byte.
        debug_assert!(zero_from <= WAL_HEADER_BYTES + WAL_FRAME_HEADER_BYTES * frames);
        (live, zero_from)
    }

    /// Virtual blocks a file of `size` bytes spans (one past the highest holding a byte
    /// below `size`).
    fn vblocks_for(&self, size: u64) -> u64 {
        if size == 0 {
            return 0;
        }
        let (last_vblock, _, _) = self.seg(size - 1);
        debug_assert!(
            self.layout != Layout::Linear || last_vblock + 1 == size.div_ceil(self.block_bytes)
        );
        if self.layout == Layout::WalFramed && size > WAL_HEADER_BYTES {
            // Ending in a frame header: the previous frame's page block may lie higher.
            let frame_bytes = self.frame_bytes();
            let frame = (size - 1 - WAL_HEADER_BYTES) / frame_bytes;
            let in_frame = (size - 1 - WAL_HEADER_BYTES) % frame_bytes;
            if in_frame < WAL_FRAME_HEADER_BYTES && frame > 0 {
                let page_start = self.frame_start(frame - 1) + WAL_FRAME_HEADER_BYTES;
                let (page_vblock, _, _) = self.seg(page_start);
                return last_vblock.max(page_vblock) + 1;
            }
        }
        last_vblock + 1
    }

    /// The largest file that fits in `vblocks` virtual blocks.
    fn size_max(&self, vblocks: u64) -> u64 {
        // A binary search: at most 64 halvings of the range.
        let (mut low, mut high) = (0u64, vblocks.saturating_mul(2 * self.block_bytes));
        while low < high {
            let middle = low + (high - low).div_ceil(2);
            if self.vblocks_for(middle) <= vblocks {
                low = middle;
            } else {
                high = middle - 1;
            }
        }
        debug_assert!(self.vblocks_for(low) <= vblocks);
        low
    }
}

/// A store operation's error: capacity exhausted (SQLITE_FULL) or anything else.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No room: no free chunk, no free directory entry, or a file past its largest size.
    #[error("{0}")]
    Full(String),
    /// A write that took as many atomic pieces as its length allows and was not done: the
    /// bound that keeps a planning step that stops making progress from spinning. The pieces
    /// written are a prefix of the write, and the file's size matches them.
    #[error(
        "write of {bytes} bytes at offset {offset} unfinished after {pieces} atomic pieces, the \
         most its length allows: its first {written} bytes are written"
    )]
    PiecesExceeded {
        offset: u64,
        bytes: u64,
        pieces: u64,
        written: u64,
    },
    #[error(transparent)]
    Other(#[from] Error),
}

pub type StoreResult<T> = std::result::Result<T, StoreError>;

/// The store's geometry, a pure function of the device's block size and block count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreGeometry {
    pub block_bytes: u64,
    pub device_blocks: u64,
    pub chunk_blocks: u64,
    pub chunks: u64,
    /// The largest file of each layout (by [`Layout::id`]).
    file_max: [u64; 2],
}

impl StoreGeometry {
    pub fn compute(block_bytes: u64, device_blocks: u64) -> Result<StoreGeometry> {
        if !block_bytes.is_power_of_two()
            || !(BLOCK_BYTES_MIN..=BLOCK_BYTES_MAX).contains(&block_bytes)
        {
            return Err(Error::bad(format!(
                "the SQLite journal store needs device blocks of {BLOCK_BYTES_MIN} to \
                 {BLOCK_BYTES_MAX} bytes (a power of two), not {block_bytes}"
            )));
        }
        let data_blocks = device_blocks.saturating_sub(1);
        let chunk_blocks_min = CHUNK_BYTES_MIN / block_bytes;
        if data_blocks < chunk_blocks_min {
            return Err(Error::bad(format!(
                "a device of {device_blocks} blocks of {block_bytes} B is too small for the \
                 SQLite journal store (at least {} blocks)",
                chunk_blocks_min + 1
            )));
        }
        let chunk_blocks = data_blocks
            .div_ceil(CHUNKS_PER_FILE_MAX as u64)
            .max(chunk_blocks_min);
        let chunks = data_blocks / chunk_blocks;
        assert!(chunks >= 1 && chunks <= CHUNKS_PER_FILE_MAX as u64);
        assert!(chunks * chunk_blocks < device_blocks);
        let max = |layout| Map::new(layout, block_bytes).size_max(chunks * chunk_blocks);
        Ok(StoreGeometry {
            block_bytes,
            device_blocks,
            chunk_blocks,
            chunks,
            file_max: [max(Layout::Linear), max(Layout::WalFramed)],
        })
    }

    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_blocks * self.block_bytes
    }

    /// The largest file of `layout`: every chunk (there are never more than one file may own).
    pub fn file_bytes_max(&self, layout: Layout) -> u64 {
        self.file_max[layout.id() as usize]
    }

    /// Chunks a file of `layout` and `size_bytes` owns.
    pub fn chunks_for(&self, layout: Layout, size_bytes: u64) -> u64 {
        self.map(layout)
            .vblocks_for(size_bytes)
            .div_ceil(self.chunk_blocks)
    }

    fn map(&self, layout: Layout) -> Map {
        Map::new(layout, self.block_bytes)
    }

    fn chunk_lba(&self, chunk: u16, block_in_chunk: u64) -> u64 {
        debug_assert!((chunk as u64) < self.chunks && block_in_chunk < self.chunk_blocks);
        1 + chunk as u64 * self.chunk_blocks + block_in_chunk
    }
}

/// FNV-1a, 64 bits: the directory keeps names as hashes.
pub fn name_hash(name: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in name.as_bytes() {
        hash ^= byte as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Why a directory block is not a valid directory. At open the store refuses the device with
/// it (and writes nothing); before every directory write the store asserts that none applies.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DirectoryError {
    #[error("directory block of {found} bytes (the device's blocks are {block_bytes} bytes)")]
    BlockBytes { found: usize, block_bytes: u64 },
    #[error(
        "block 0 holds no nvstack SQLite journal store (bad magic): the region is used for \
         something else"
    )]
    BadMagic,
    #[error("store format version {found}; this build reads version {STORE_VERSION}")]
    Version { found: u32 },
    #[error(
        "directory checksum mismatch (damaged store directory): stored {stored:#010x}, \
         computed {computed:#010x}"
    )]
    Checksum { stored: u32, computed: u32 },
    #[error(
        "directory geometry (block bytes, device blocks, chunk blocks, chunks) = {stored:?} \
         does not match the device's {device:?}"
    )]
    Geometry {
        stored: (u64, u64, u64, u64),
        device: (u64, u64, u64, u64),
    },
    #[error("reserved directory bytes are not zero")]
    ReservedBytes,
    #[error("free entry {slot} is not zero")]
    FreeEntryNotZero { slot: usize },
    #[error("entry {slot}: unknown kind {id}")]
    UnknownKind { slot: usize, id: u8 },
    #[error("entry {slot}: unknown layout {id}")]
    UnknownLayout { slot: usize, id: u8 },
    #[error("entry {slot}: reserved bytes are not zero")]
    ReservedEntryBytes { slot: usize },
    #[error("entry {slot}: {chunk_count} chunks (at most {CHUNKS_PER_FILE_MAX})")]
    TooManyChunks { slot: usize, chunk_count: u32 },
    #[error(
        "entry {slot}: size {size_bytes} bytes exceeds the largest {layout} file ({max} bytes)"
    )]
    SizeOverMax {
        slot: usize,
        layout: Layout,
        size_bytes: u64,
        max: u64,
    },
    #[error("entry {slot}: {chunk_count} chunks listed for {size_bytes} bytes ({needed} needed)")]
    ChunkCountMismatch {
        slot: usize,
        chunk_count: u32,
        size_bytes: u64,
        needed: u64,
    },
    #[error("entry {slot}: unused chunk slot {index} is not zero")]
    UnusedChunkNotZero { slot: usize, index: usize },
    #[error("entry {slot}: chunk {chunk} out of range (the store has {chunks})")]
    ChunkOutOfRange {
        slot: usize,
        chunk: u16,
        chunks: u64,
    },
    #[error("chunk {chunk} is owned by entries {first} and {second}")]
    ChunkOwnedTwice {
        chunk: u16,
        first: usize,
        second: usize,
    },
    #[error("entries {first} and {second} have the same name hash")]
    SameNameHash { first: usize, second: usize },
}

type DirectoryResult<T> = std::result::Result<T, DirectoryError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DirEntry {
    kind: FileKind,
    layout: Layout,
    name_hash: u64,
    size_bytes: u64,
    chunk_count: u32,
    chunks: [u16; CHUNKS_PER_FILE_MAX],
}

impl DirEntry {
    fn new(kind: FileKind, name_hash: u64) -> DirEntry {
        DirEntry {
            kind,
            layout: Layout::Linear,
            name_hash,
            size_bytes: 0,
            chunk_count: 0,
            chunks: [0; CHUNKS_PER_FILE_MAX],
        }
    }

    /// The device block of the file's virtual block `vblock`.
    fn lba(&self, geo: &StoreGeometry, vblock: u64) -> u64 {
        let index = (vblock / geo.chunk_blocks) as usize;
        assert!(
            index < self.chunk_count as usize,
            "virtual block {vblock} beyond the file's chunks"
        );
        geo.chunk_lba(self.chunks[index], vblock % geo.chunk_blocks)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Directory {
    generation: u64,
    entries: [Option<DirEntry>; FILES_MAX],
}

fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}
fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}
fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Pair assertion at an encoder, in debug builds: the bytes just encoded from `value` decode
/// back to `value`, so an encoder and a decoder that disagree are caught where the bytes are
/// made, not by a later open that misreads them. Nothing runs in release builds.
#[track_caller]
fn debug_assert_decodes<T, E>(
    record: &str,
    value: &T,
    encoded: &[u8],
    decode: impl FnOnce(&[u8]) -> std::result::Result<T, E>,
) where
    T: PartialEq + std::fmt::Debug,
    E: std::fmt::Debug,
{
    if cfg!(debug_assertions) {
        let decoded = decode(encoded);
        assert!(
            matches!(&decoded, Ok(back) if back == value),
            "{record} pair assertion: {value:?} was encoded to bytes that decode to {decoded:?}"
        );
    }
}

/// Pair assertion at a decoder, in debug builds: the value just decoded from `bytes` (a
/// checksum-valid block) encodes back to exactly `bytes`, so no byte the decoder skipped or
/// misread goes unnoticed. Nothing runs in release builds.
#[track_caller]
fn debug_assert_encodes<T: std::fmt::Debug>(
    record: &str,
    value: &T,
    bytes: &[u8],
    encode: impl FnOnce(&T, &mut [u8]),
) {
    if cfg!(debug_assertions) {
        let mut again = vec![0u8; bytes.len()];
        encode(value, &mut again);
        let differs = bytes
            .iter()
            .zip(&again)
            .position(|(read, made)| read != made);
        assert!(
            differs.is_none(),
            "{record} pair assertion: {value:?} was decoded from bytes it re-encodes differently \
             (first at byte {differs:?})"
        );
    }
}

/// The header record (directory bytes `0..HEADER_BYTES`): magic, format version, the geometry
/// the store was formatted for, the generation, then reserved zeros.
fn header_to_bytes(geo: &StoreGeometry, generation: u64, out: &mut [u8]) {
    debug_assert_eq!(out.len(), HEADER_BYTES);
    debug_assert!(generation >= 1, "generations start at 1");
    debug_assert!(
        geo.block_bytes <= u32::MAX as u64,
        "block bytes take 4 bytes"
    );
    out.fill(0);
    out[0..8].copy_from_slice(&STORE_MAGIC);
    put_u32(out, 8, STORE_VERSION);
    put_u32(out, 12, geo.block_bytes as u32);
    put_u64(out, 16, geo.device_blocks);
    put_u64(out, 24, geo.chunk_blocks);
    put_u64(out, 32, geo.chunks);
    put_u64(out, 40, generation);
}

/// Magic and version: does the header belong to a store this build reads?
fn check_format(header: &[u8]) -> DirectoryResult<()> {
    debug_assert_eq!(header.len(), HEADER_BYTES);
    if header[0..8] != STORE_MAGIC {
        return Err(DirectoryError::BadMagic);
    }
    let version = get_u32(header, 8);
    if version != STORE_VERSION {
        return Err(DirectoryError::Version { found: version });
    }
    Ok(())
}

/// The generation a header record holds, once its format is known, its geometry is the
/// device's and its reserved bytes are zero.
fn header_from_bytes(geo: &StoreGeometry, header: &[u8]) -> DirectoryResult<u64> {
    check_format(header)?;
    let stored = (
        get_u32(header, 12) as u64,
        get_u64(header, 16),
        get_u64(header, 24),
        get_u64(header, 32),
    );
    let device = (
        geo.block_bytes,
        geo.device_blocks,
        geo.chunk_blocks,
        geo.chunks,
    );
    if stored != device {
        return Err(DirectoryError::Geometry { stored, device });
    }
    if header[48..].iter().any(|&byte| byte != 0) {
        return Err(DirectoryError::ReservedBytes);
    }
    Ok(get_u64(header, 40))
}

fn encode_header(geo: &StoreGeometry, generation: u64, out: &mut [u8]) {
    header_to_bytes(geo, generation, out);
    debug_assert_decodes("directory header", &generation, out, |bytes| {
        header_from_bytes(geo, bytes)
    });
}

fn decode_header(geo: &StoreGeometry, header: &[u8]) -> DirectoryResult<u64> {
    let generation = header_from_bytes(geo, header)?;
    debug_assert_encodes(
        "directory header",
        &generation,
        header,
        |&generation, out| header_to_bytes(geo, generation, out),
    );
    Ok(generation)
}

/// An entry record (`ENTRY_BYTES`): all zero when free; else kind, layout, two reserved zero
/// bytes, chunk count, name hash, size, then the chunk list (every slot, the unused ones zero).
fn entry_to_bytes(entry: &Option<DirEntry>, out: &mut [u8]) {
    debug_assert_eq!(out.len(), ENTRY_BYTES);
    out.fill(0);
    let Some(entry) = entry else { return };
    debug_assert!(entry.chunk_count as usize <= CHUNKS_PER_FILE_MAX);
    out[0] = entry.kind.id();
    out[1] = entry.layout.id();
    put_u32(out, 4, entry.chunk_count);
    put_u64(out, 8, entry.name_hash);
    put_u64(out, 16, entry.size_bytes);
    for (index, &chunk) in entry.chunks.iter().enumerate() {
        let at = ENTRY_HEADER_BYTES + 2 * index;
        out[at..at + 2].copy_from_slice(&chunk.to_le_bytes());
    }
}

/// The entry record of directory slot `slot` (`None`: a free entry).
fn entry_from_bytes(slot: usize, bytes: &[u8]) -> DirectoryResult<Option<DirEntry>> {
    debug_assert_eq!(bytes.len(), ENTRY_BYTES);
    debug_assert!(slot < FILES_MAX);
    if bytes[0] == 0 {
        if bytes.iter().any(|&byte| byte != 0) {
            return Err(DirectoryError::FreeEntryNotZero { slot });
        }
        return Ok(None);
    }
    let kind =
        FileKind::from_id(bytes[0]).ok_or(DirectoryError::UnknownKind { slot, id: bytes[0] })?;
    let layout =
        Layout::from_id(bytes[1]).ok_or(DirectoryError::UnknownLayout { slot, id: bytes[1] })?;
    if bytes[2..4].iter().any(|&byte| byte != 0) {
        return Err(DirectoryError::ReservedEntryBytes { slot });
    }
    let chunk_count = get_u32(bytes, 4);
    if chunk_count as usize > CHUNKS_PER_FILE_MAX {
        return Err(DirectoryError::TooManyChunks { slot, chunk_count });
    }
    let mut chunks = [0u16; CHUNKS_PER_FILE_MAX];
    for (index, chunk) in chunks.iter_mut().enumerate() {
        let at = ENTRY_HEADER_BYTES + 2 * index;
        *chunk = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    }
    Ok(Some(DirEntry {
        kind,
        layout,
        name_hash: get_u64(bytes, 8),
        size_bytes: get_u64(bytes, 16),
        chunk_count,
        chunks,
    }))
}

fn encode_entry(slot: usize, entry: &Option<DirEntry>, out: &mut [u8]) {
    entry_to_bytes(entry, out);
    debug_assert_decodes("directory entry", entry, out, |bytes| {
        entry_from_bytes(slot, bytes)
    });
}

fn decode_entry(slot: usize, bytes: &[u8]) -> DirectoryResult<Option<DirEntry>> {
    let entry = entry_from_bytes(slot, bytes)?;
    debug_assert_encodes("directory entry", &entry, bytes, entry_to_bytes);
    Ok(entry)
}

/// The directory's checksum (CRC32C of the bytes before it) matches.
fn check_checksum(block: &[u8]) -> DirectoryResult<()> {
    debug_assert!(block.len() >= DIR_BYTES);
    let stored = get_u32(block, CRC_OFF);
    let computed = crc32c::crc32c(&block[..CRC_OFF]);
    if stored != computed {
        return Err(DirectoryError::Checksum { stored, computed });
    }
    Ok(())
}

impl Directory {
    fn empty() -> Directory {
        Directory {
            generation: 1,
            entries: [None; FILES_MAX],
        }
    }

    /// The structural rules a directory obeys (checked after every read and before every
    /// write): sizes within the geometry, exactly the chunks a size needs, chunk numbers in
    /// range and owned once, names unique.
    fn validate(&self, geo: &StoreGeometry) -> DirectoryResult<()> {
        debug_assert!(geo.chunks >= 1 && geo.chunks <= CHUNKS_PER_FILE_MAX as u64);
        // The slot owning each chunk (u8::MAX: none yet).
        let mut owner = [u8::MAX; CHUNKS_PER_FILE_MAX];
        for (slot, entry) in self.entries.iter().enumerate() {
            let Some(entry) = entry else { continue };
            Self::validate_entry(geo, slot, entry)?;
            for &chunk in &entry.chunks[..entry.chunk_count as usize] {
                let first = owner[chunk as usize];
                if first != u8::MAX {
                    return Err(DirectoryError::ChunkOwnedTwice {
                        chunk,
                        first: first as usize,
                        second: slot,
                    });
                }
                owner[chunk as usize] = slot as u8;
            }
            for (first, other) in self.entries[..slot].iter().enumerate() {
                if other.is_some_and(|other| other.name_hash == entry.name_hash) {
                    return Err(DirectoryError::SameNameHash {
                        first,
                        second: slot,
                    });
                }
            }
        }
        Ok(())
    }

    /// The rules of one entry alone: its size fits its layout, it lists exactly the chunks
    /// that size needs, each in range, and its unused chunk slots are zero.
    fn validate_entry(geo: &StoreGeometry, slot: usize, entry: &DirEntry) -> DirectoryResult<()> {
        debug_assert!(slot < FILES_MAX);
        let max = geo.file_bytes_max(entry.layout);
        if entry.size_bytes > max {
            return Err(DirectoryError::SizeOverMax {
                slot,
                layout: entry.layout,
                size_bytes: entry.size_bytes,
                max,
            });
        }
        let needed = geo.chunks_for(entry.layout, entry.size_bytes);
        if entry.chunk_count as u64 != needed {
            return Err(DirectoryError::ChunkCountMismatch {
                slot,
                chunk_count: entry.chunk_count,
                size_bytes: entry.size_bytes,
                needed,
            });
        }
        for (index, &chunk) in entry.chunks.iter().enumerate() {
            if index >= entry.chunk_count as usize {
                if chunk != 0 {
                    return Err(DirectoryError::UnusedChunkNotZero { slot, index });
                }
            } else if chunk as u64 >= geo.chunks {
                return Err(DirectoryError::ChunkOutOfRange {
                    slot,
                    chunk,
                    chunks: geo.chunks,
                });
            }
        }
        Ok(())
    }

    fn free_chunks(&self, geo: &StoreGeometry) -> u64 {
        let used: u64 = self
            .entries
            .iter()
            .flatten()
            .map(|entry| entry.chunk_count as u64)
            .sum();
        debug_assert!(used <= geo.chunks, "{used} chunks owned of {}", geo.chunks);
        geo.chunks - used
    }

    /// Give entry `slot` the chunks for `size_bytes` under its layout (allocating the lowest
    /// free chunks, or dropping the last ones) and set its size. The caller checked capacity.
    fn resize(&mut self, geo: &StoreGeometry, slot: usize, size_bytes: u64) {
        let layout = self.entries[slot].expect("resize of a live entry").layout;
        let want = geo.chunks_for(layout, size_bytes) as usize;
        assert!(want <= CHUNKS_PER_FILE_MAX);
        let mut used = [false; CHUNKS_PER_FILE_MAX];
        for entry in self.entries.iter().flatten() {
            for &chunk in &entry.chunks[..entry.chunk_count as usize] {
                used[chunk as usize] = true;
            }
        }
        let free = self.free_chunks(geo) as usize;
        let entry = self.entries[slot].as_mut().expect("resize of a live entry");
        let have = entry.chunk_count as usize;
        debug_assert!(
            want <= have || want - have <= free,
            "resize of entry {slot} to {want} chunks: {have} owned, {free} free"
        );
        for index in have..want {
            // Bounded by the store's chunks; the caller checked that enough are free.
            let chunk = (0..geo.chunks as usize)
                .find(|&chunk| !used[chunk])
                .expect("resize beyond capacity");
            entry.chunks[index] = chunk as u16;
            used[chunk] = true;
        }
        for chunk in &mut entry.chunks[want..have.max(want)] {
            *chunk = 0;
        }
        entry.chunk_count = want as u32;
        entry.size_bytes = size_bytes;
    }

    /// The directory block's bytes (one whole device block): the header, every entry (free
    /// ones zero), reserved zeros, the checksum.
    fn block_to_bytes(&self, geo: &StoreGeometry, out: &mut [u8]) {
        assert_eq!(out.len() as u64, geo.block_bytes);
        out.fill(0);
        encode_header(geo, self.generation, &mut out[..HEADER_BYTES]);
        for (slot, entry) in self.entries.iter().enumerate() {
            let at = ENTRIES_OFF + slot * ENTRY_BYTES;
            encode_entry(slot, entry, &mut out[at..at + ENTRY_BYTES]);
        }
        let crc = crc32c::crc32c(&out[..CRC_OFF]);
        put_u32(out, CRC_OFF, crc);
    }

    /// The directory a block holds, validated (`Ok(None)`: an all-zero, never formatted block).
    fn block_from_bytes(geo: &StoreGeometry, block: &[u8]) -> DirectoryResult<Option<Directory>> {
        debug_assert!(
            geo.block_bytes >= DIR_BYTES as u64,
            "the directory fits a block"
        );
        if block.iter().all(|&byte| byte == 0) {
            return Ok(None);
        }
        if block.len() as u64 != geo.block_bytes {
            return Err(DirectoryError::BlockBytes {
                found: block.len(),
                block_bytes: geo.block_bytes,
            });
        }
        // Format before checksum: foreign data is named as such, not as damage.
        check_format(&block[..HEADER_BYTES])?;
        check_checksum(block)?;
        let generation = decode_header(geo, &block[..HEADER_BYTES])?;
        if block[ENTRIES_OFF + FILES_MAX * ENTRY_BYTES..CRC_OFF]
            .iter()
            .chain(&block[DIR_BYTES..])
            .any(|&byte| byte != 0)
        {
            return Err(DirectoryError::ReservedBytes);
        }
        let mut entries = [None; FILES_MAX];
        for (slot, entry) in entries.iter_mut().enumerate() {
            let at = ENTRIES_OFF + slot * ENTRY_BYTES;
            *entry = decode_entry(slot, &block[at..at + ENTRY_BYTES])?;
        }
        let directory = Directory {
            generation,
            entries,
        };
        directory.validate(geo)?;
        Ok(Some(directory))
    }

    /// Encode into `out` (one whole device block).
    fn encode(&self, geo: &StoreGeometry, out: &mut [u8]) {
        self.block_to_bytes(geo, out);
        debug_assert_decodes("directory block", &Some(*self), out, |block| {
            Directory::block_from_bytes(geo, block)
        });
    }

    /// Decode and validate one directory block (`Ok(None)`: an all-zero, never formatted block).
    fn decode(geo: &StoreGeometry, block: &[u8]) -> DirectoryResult<Option<Directory>> {
        let found = Directory::block_from_bytes(geo, block)?;
        if let Some(directory) = &found {
            debug_assert_encodes("directory block", directory, block, |directory, out| {
                directory.block_to_bytes(geo, out)
            });
        }
        Ok(found)
    }
}

/// A file in the store, as [`Store::open_file`] found or made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    slot: usize,
    name_hash: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileInfo {
    pub kind: FileKind,
    pub layout: Layout,
    pub name_hash: u64,
    pub size_bytes: u64,
    pub chunks: u32,
}

impl From<&DirEntry> for FileInfo {
    fn from(e: &DirEntry) -> FileInfo {
        FileInfo {
            kind: e.kind,
            layout: e.layout,
            name_hash: e.name_hash,
            size_bytes: e.size_bytes,
            chunks: e.chunk_count,
        }
    }
}

/// Counters (for the benchmark's explanation and the tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreStats {
    pub writes: u64,
    /// Atomic device writes issued (a write of more than [`Store::piece_blocks_max`] blocks takes
    /// several; create, delete and truncate take one each).
    pub device_writes: u64,
    /// Device writes that carried the directory block.
    pub dir_writes: u64,
    /// Blocks written (directory included).
    pub blocks_written: u64,
    /// Blocks read back to patch a partial block.
    pub rmw_blocks: u64,
    /// Of those, the blocks found in the store's cache of blocks it wrote last.
    pub cached_blocks: u64,
    /// Blocks discarded to make a hole read as zeros.
    pub hole_blocks: u64,
    pub reads: u64,
}

/// Blocks the store remembers having written last (see [`BlockCache`]).
pub const CACHE_BLOCKS: usize = 4;

/// The last few blocks written, so that patching a partial block (a WAL frame header: its
/// header block was written for the previous frame) copies from DRAM instead of reading back
/// a block the device just wrote with non-temporal stores (out of every CPU cache). Sound
/// because the store is its device's only writer (the region's lock is exclusive): a cached
/// block equals what the device holds until the store itself writes or discards it, which
/// updates or drops the copy; a failed write drops the copies of every block it named.
struct BlockCache {
    lbas: [Option<u64>; CACHE_BLOCKS],
    /// Last use of each entry (least recently used goes first).
    used: [u64; CACHE_BLOCKS],
    clock: u64,
    data: Vec<u8>,
    block_bytes: usize,
}

impl BlockCache {
    fn new(block_bytes: usize) -> BlockCache {
        debug_assert!(block_bytes.is_power_of_two() && block_bytes as u64 >= BLOCK_BYTES_MIN);
        BlockCache {
            lbas: [None; CACHE_BLOCKS],
            used: [0; CACHE_BLOCKS],
            clock: 0,
            data: vec![0u8; CACHE_BLOCKS * block_bytes],
            block_bytes,
        }
    }

    /// Fill `dst` with block `lba`: from the cache (true), or from the device.
    fn read(&mut self, dev: &dyn BlockDevice, lba: u64, dst: &mut [u8]) -> Result<bool> {
        let block_bytes = self.block_bytes;
        debug_assert_eq!(dst.len(), block_bytes);
        debug_assert_ne!(lba, DIR_LBA, "the directory is read at open only");
        if let Some(i) = self.lbas.iter().position(|&cached| cached == Some(lba)) {
            dst.copy_from_slice(&self.data[i * block_bytes..(i + 1) * block_bytes]);
            self.clock += 1;
            self.used[i] = self.clock;
            return Ok(true);
        }
        dev.read(lba, dst)?;
        Ok(false)
    }

    /// Remember that block `lba` now holds `src` on the device.
    fn put(&mut self, lba: u64, src: &[u8]) {
        let block_bytes = self.block_bytes;
        debug_assert_eq!(src.len(), block_bytes);
        debug_assert_ne!(lba, DIR_LBA, "the directory is never cached");
        let i = match self.lbas.iter().position(|&cached| cached == Some(lba)) {
            Some(i) => i,
            None => (0..CACHE_BLOCKS)
                .min_by_key(|&i| (self.lbas[i].is_some(), self.used[i]))
                .expect("a cache entry"),
        };
        self.clock += 1;
        self.used[i] = self.clock;
        self.lbas[i] = Some(lba);
        self.data[i * block_bytes..(i + 1) * block_bytes].copy_from_slice(src);
    }

    fn forget(&mut self, lba: u64) {
        for cached in self.lbas.iter_mut() {
            if *cached == Some(lba) {
                *cached = None;
            }
        }
    }
}

/// One piece of a write: a run of the data inside one virtual block.
#[derive(Clone, Copy, Debug)]
struct Seg {
    /// Index into `State::blocks`.
    block: usize,
    /// Where the run starts in its block.
    in_block: usize,
    /// Where the run starts in the piece's data.
    data_off: usize,
    len: usize,
}

/// A block one atomic write touches: its virtual block and how many of its bytes the write
/// covers (a block covered whole needs no read).
#[derive(Clone, Copy, Debug)]
struct Touched {
    vblock: u64,
    covered: u64,
}

/// The blocks of a hole that hold some of the file's bytes below its old size: zeroed past the
/// old end inside the write instead of discarded. At most two: the block holding the old end
/// and, under wal-framed, its group's header block.
#[derive(Clone, Copy, Debug, Default)]
struct PartlyLive {
    vblocks: [u64; 2],
    count: usize,
}

impl PartlyLive {
    fn as_slice(&self) -> &[u64] {
        &self.vblocks[..self.count]
    }

    fn push(&mut self, vblock: u64) {
        assert!(
            self.count < self.vblocks.len(),
            "more than two partly live blocks in a hole"
        );
        debug_assert!(!self.as_slice().contains(&vblock));
        self.vblocks[self.count] = vblock;
        self.count += 1;
    }
}

struct State {
    dir: Directory,
    cache: BlockCache,
    /// Scratch for one atomic write: at most the device's atomic unit of blocks and their
    /// LBAs.
    buf: Vec<u8>,
    lbas: Vec<u64>,
    /// Per entry of `lbas`: a block only partly written by this write (worth caching: the
    /// next write is likely to patch it again).
    partial: Vec<bool>,
    blocks: Vec<Touched>,
    segs: Vec<Seg>,
    stats: StoreStats,
}

/// The store. Every method takes one mutex: SQLite's journal traffic is one writer at a time.
pub struct Store {
    dev: Arc<dyn BlockDevice>,
    geo: StoreGeometry,
    /// The device's atomic unit: the most blocks one scattered write takes.
    atomic_blocks: usize,
    st: Mutex<State>,
}

/// Add the blocks and segments of file range `[offset, offset + len)` to `blocks` and `segs`,
/// stopping before the write would touch more than `max_blocks` blocks. Returns the bytes
/// taken.
fn plan(
    map: &Map,
    offset: u64,
    len: u64,
    max_blocks: usize,
    blocks: &mut Vec<Touched>,
    segs: &mut Vec<Seg>,
) -> u64 {
    debug_assert!(len > 0 && max_blocks >= 1);
    debug_assert!(
        blocks.is_empty() && segs.is_empty(),
        "a piece is planned afresh"
    );
    let mut done = 0u64;
    while done < len {
        let (vblock, in_block, run) = map.seg(offset + done);
        let taken = run.min(len - done);
        let block = match blocks.iter().rposition(|touched| touched.vblock == vblock) {
            Some(i) => i,
            None => {
                if blocks.len() == max_blocks {
                    break;
                }
                blocks.push(Touched { vblock, covered: 0 });
                blocks.len() - 1
            }
        };
        blocks[block].covered += taken;
        segs.push(Seg {
            block,
            in_block: in_block as usize,
            data_off: done as usize,
            len: taken as usize,
        });
        done += taken;
    }
    done
}

/// Atomic pieces a write of `len` bytes takes at most. A piece ends only before a run of
/// [`Map::seg`] that would need one block too many, so every piece but the first and the last
/// takes at least one whole run, and the shortest run is a frame header (runs are blocks,
/// pages, the 32-byte WAL header and the 24-byte frame headers).
fn pieces_max(len: u64) -> u64 {
    2 + len / WAL_FRAME_HEADER_BYTES
}

impl Store {
    /// Open the store on `dev`, formatting it when block 0 is all zeros (a fresh device). A
    /// block 0 that is neither zero nor a valid directory is refused and left untouched, as is
    /// a device whose caps lack what the store needs ([`Store::check_caps`]).
    pub fn open(dev: Arc<dyn BlockDevice>) -> Result<Store> {
        let atomic_blocks = Self::check_caps(dev.caps())?;
        let geo = StoreGeometry::compute(dev.block_bytes() as u64, dev.blocks())?;
        let block_bytes = geo.block_bytes as usize;
        let mut block = vec![0u8; block_bytes];
        dev.read(DIR_LBA, &mut block)?;
        // After the read: the directory is decoded and validated in full (and, in debug
        // builds, `decode` checks that it re-encodes to the bytes read).
        let found = Directory::decode(&geo, &block)
            .map_err(|why| Error::bad(format!("SQLite journal store: {why}")))?;
        let state = State {
            dir: found.unwrap_or_else(Directory::empty),
            cache: BlockCache::new(block_bytes),
            buf: vec![0u8; atomic_blocks * block_bytes],
            lbas: Vec::with_capacity(atomic_blocks),
            partial: Vec::with_capacity(atomic_blocks),
            blocks: Vec::with_capacity(atomic_blocks),
            segs: Vec::new(),
            stats: StoreStats::default(),
        };
        let store = Store {
            dev,
            geo,
            atomic_blocks,
            st: Mutex::new(state),
        };
        debug_assert!(store.piece_blocks_max() >= 1);
        if found.is_none() {
            let mut st = store.lock();
            let dir = st.dir;
            st.lbas.clear();
            store.commit(&mut st, dir, 0)?;
        }
        Ok(store)
    }

    /// The device's atomic unit in blocks, when its caps give the store what it needs: a
    /// scattered atomic write of at least [`ATOMIC_BLOCKS_MIN`] blocks (the directory and a
    /// file's blocks change together), durable on return (the VFS answers SQLite's syncs
    /// without flushing). Otherwise an invalid-input error naming what is missing.
    pub fn check_caps(caps: Caps) -> Result<usize> {
        if !caps.scattered || caps.atomic_blocks < ATOMIC_BLOCKS_MIN {
            return Err(Error::bad(format!(
                "SQLite journal store: the device has no scattered atomic write of at least \
                 {ATOMIC_BLOCKS_MIN} blocks (its unit: {} blocks, scattered: {})",
                caps.atomic_blocks, caps.scattered
            )));
        }
        if caps.durability != Durability::OnReturn {
            return Err(Error::bad(
                "SQLite journal store: the device's writes are not durable when they return",
            ));
        }
        Ok(caps.atomic_blocks as usize)
    }

    /// Blocks of the file one atomic piece of a write touches at most: the device's atomic
    /// unit less [`PIECE_SPARE_BLOCKS`] (61 on nvramdisk).
    pub fn piece_blocks_max(&self) -> usize {
        self.atomic_blocks - PIECE_SPARE_BLOCKS
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        let guard = self.st.lock().unwrap_or_else(|e| e.into_inner());
        // Every operation starts from a valid cached directory: it is replaced only by one
        // that was validated and written.
        debug_assert_eq!(guard.dir.validate(&self.geo), Ok(()));
        debug_assert_eq!(
            guard.buf.len(),
            self.atomic_blocks * self.geo.block_bytes as usize
        );
        guard
    }

    pub fn geometry(&self) -> StoreGeometry {
        self.geo
    }

    pub fn stats(&self) -> StoreStats {
        self.lock().stats
    }

    /// Every file, in directory order.
    pub fn files(&self) -> Vec<FileInfo> {
        self.lock()
            .dir
            .entries
            .iter()
            .flatten()
            .map(FileInfo::from)
            .collect()
    }

    /// Bytes not owned by any file.
    pub fn free_bytes(&self) -> u64 {
        self.lock().dir.free_chunks(&self.geo) * self.geo.chunk_bytes()
    }

    fn check_name(name: &str) -> Result<u64> {
        if name.is_empty() || name.len() > NAME_BYTES_MAX {
            return Err(Error::bad(format!(
                "file name of {} bytes (1 to {NAME_BYTES_MAX} accepted)",
                name.len()
            )));
        }
        Ok(name_hash(name))
    }

    fn find(dir: &Directory, hash: u64) -> Option<usize> {
        dir.entries
            .iter()
            .position(|entry| entry.is_some_and(|entry| entry.name_hash == hash))
    }

    /// The file called `name`, if the store holds it.
    pub fn lookup(&self, name: &str) -> Result<Option<(FileId, FileInfo)>> {
        let hash = Self::check_name(name)?;
        let st = self.lock();
        Ok(Self::find(&st.dir, hash).map(|slot| {
            let entry = st.dir.entries[slot].expect("found");
            (
                FileId {
                    slot,
                    name_hash: hash,
                },
                FileInfo::from(&entry),
            )
        }))
    }

    /// Open `name`, creating it empty (one directory write) when `create` and it is missing.
    /// `Ok(None)`: missing and not created.
    pub fn open_file(
        &self,
        name: &str,
        kind: FileKind,
        create: bool,
    ) -> StoreResult<Option<FileId>> {
        let hash = Self::check_name(name)?;
        let mut st = self.lock();
        if let Some(slot) = Self::find(&st.dir, hash) {
            return Ok(Some(FileId {
                slot,
                name_hash: hash,
            }));
        }
        if !create {
            return Ok(None);
        }
        let Some(slot) = st.dir.entries.iter().position(|entry| entry.is_none()) else {
            return Err(StoreError::Full(format!(
                "journal store full: it holds {FILES_MAX} files already, no room for {name}"
            )));
        };
        let mut dir = st.dir;
        dir.entries[slot] = Some(DirEntry::new(kind, hash));
        dir.generation += 1;
        st.lbas.clear();
        self.commit(&mut st, dir, 0)?;
        debug_assert_eq!(Self::find(&st.dir, hash), Some(slot));
        Ok(Some(FileId {
            slot,
            name_hash: hash,
        }))
    }

    /// Remove `name`. Returns whether it existed.
    pub fn delete(&self, name: &str) -> Result<bool> {
        let hash = Self::check_name(name)?;
        let mut st = self.lock();
        let Some(slot) = Self::find(&st.dir, hash) else {
            return Ok(false);
        };
        let mut dir = st.dir;
        dir.entries[slot] = None;
        dir.generation += 1;
        st.lbas.clear();
        self.commit(&mut st, dir, 0)?;
        debug_assert_eq!(Self::find(&st.dir, hash), None);
        Ok(true)
    }

    fn entry(st: &State, id: FileId) -> Result<DirEntry> {
        match st.dir.entries.get(id.slot).copied().flatten() {
            Some(entry) if entry.name_hash == id.name_hash => Ok(entry),
            _ => Err(Error::bad(
                "journal store file was deleted while open (another connection removed it)",
            )),
        }
    }

    pub fn size_bytes(&self, id: FileId) -> Result<u64> {
        Ok(Self::entry(&self.lock(), id)?.size_bytes)
    }

    /// Read at `offset` into `buf`; returns the bytes read (short at the end of the file).
    pub fn read(&self, id: FileId, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let entry = Self::entry(st, id)?;
        st.stats.reads += 1;
        if offset >= entry.size_bytes || buf.is_empty() {
            return Ok(0);
        }
        let count = (buf.len() as u64).min(entry.size_bytes - offset) as usize;
        debug_assert!(count >= 1 && count <= buf.len());
        let map = self.geo.map(entry.layout);
        let block_bytes = self.geo.block_bytes as usize;
        let mut done = 0usize;
        while done < count {
            let (vblock, in_block, run) = map.seg(offset + done as u64);
            let in_block = in_block as usize;
            let len = (run as usize).min(count - done);
            let lba = entry.lba(&self.geo, vblock);
            if in_block == 0 && len == block_bytes {
                // A whole block (a WAL page): straight into the caller's buffer.
                st.cache
                    .read(&*self.dev, lba, &mut buf[done..done + block_bytes])?;
            } else {
                let scratch = &mut st.buf[..block_bytes];
                st.cache.read(&*self.dev, lba, scratch)?;
                buf[done..done + len].copy_from_slice(&scratch[in_block..in_block + len]);
            }
            done += len;
        }
        debug_assert_eq!(done, count);
        Ok(count)
    }

    /// Check that growing entry `entry` (with layout `layout`) to `size_bytes` fits.
    fn check_room(
        &self,
        st: &State,
        entry: &DirEntry,
        layout: Layout,
        size_bytes: u64,
    ) -> StoreResult<()> {
        debug_assert!(
            layout == entry.layout || entry.size_bytes == 0,
            "a file's layout changes only while it is empty"
        );
        let max = self.geo.file_bytes_max(layout);
        if size_bytes > max {
            return Err(StoreError::Full(format!(
                "journal store full: a {} file would grow to {size_bytes} bytes; the store \
                 holds at most {max} bytes per file",
                entry.kind.name()
            )));
        }
        let need = self.geo.chunks_for(layout, size_bytes);
        let have = entry.chunk_count as u64;
        let free = st.dir.free_chunks(&self.geo);
        if need > have && need - have > free {
            return Err(StoreError::Full(format!(
                "journal store full: growing a {} file to {size_bytes} bytes needs {} more \
                 chunks of {} bytes, {free} free",
                entry.kind.name(),
                need - have,
                self.geo.chunk_bytes()
            )));
        }
        Ok(())
    }

    /// Write `data` at `offset`: one atomic device write when it touches at most
    /// [`Store::piece_blocks_max`] blocks, durable on return.
    pub fn write(&self, id: FileId, offset: u64, data: &[u8]) -> StoreResult<()> {
        let end = offset.checked_add(data.len() as u64).ok_or_else(|| {
            Error::bad(format!(
                "write of {} bytes at offset {offset} overflows",
                data.len()
            ))
        })?;
        let mut guard = self.lock();
        let st = &mut *guard;
        let entry = Self::entry(st, id)?;
        st.stats.writes += 1;
        if data.is_empty() {
            return Ok(());
        }
        let layout = if entry.size_bytes == 0 {
            Layout::choose(offset, data, self.geo.block_bytes)
        } else {
            entry.layout
        };
        self.check_room(st, &entry, layout, end.max(entry.size_bytes))?;
        let pieces = pieces_max(data.len() as u64);
        self.write_pieces(st, id, layout, offset, data, pieces)?;
        debug_assert!(Self::entry(st, id).is_ok_and(|entry| entry.size_bytes >= end));
        Ok(())
    }

    /// Write `data` at `offset` in atomic pieces of at most [`Store::piece_blocks_max`]
    /// blocks each, in ascending order (a crash leaves a prefix and a size that matches), and
    /// at most `pieces_max` of them: past that, an error.
    fn write_pieces(
        &self,
        st: &mut State,
        id: FileId,
        layout: Layout,
        offset: u64,
        data: &[u8],
        pieces_max: u64,
    ) -> StoreResult<()> {
        debug_assert!(!data.is_empty());
        debug_assert!(pieces_max >= 1);
        let end = offset + data.len() as u64;
        let map = self.geo.map(layout);
        let mut at = offset;
        for _ in 0..pieces_max {
            if at == end {
                break;
            }
            // The next piece: as much as fits in piece_blocks_max blocks.
            st.blocks.clear();
            st.segs.clear();
            let taken = plan(
                &map,
                at,
                end - at,
                self.piece_blocks_max(),
                &mut st.blocks,
                &mut st.segs,
            );
            debug_assert!(taken > 0, "a piece takes at least one segment");
            let from = (at - offset) as usize;
            let piece = &data[from..from + taken as usize];
            self.write_piece(st, id, layout, at, piece, at + taken)?;
            at += taken;
        }
        if at < end {
            return Err(StoreError::PiecesExceeded {
                offset,
                bytes: data.len() as u64,
                pieces: pieces_max,
                written: at - offset,
            });
        }
        Ok(())
    }

    /// Set the file's size. Shrinking frees whole chunks; growing reads as zeros.
    pub fn truncate(&self, id: FileId, size_bytes: u64) -> StoreResult<()> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let entry = Self::entry(st, id)?;
        if size_bytes == entry.size_bytes {
            return Ok(());
        }
        self.check_room(st, &entry, entry.layout, size_bytes)?;
        st.blocks.clear();
        st.segs.clear();
        self.write_piece(st, id, entry.layout, size_bytes, &[], size_bytes)?;
        debug_assert!(Self::entry(st, id).is_ok_and(|entry| entry.size_bytes == size_bytes));
        Ok(())
    }

    /// One atomic write: `data` at `offset` (its blocks and segments planned in `st.blocks`
    /// and `st.segs`), the file's size becoming `max(size, new_end)` (or exactly `new_end`
    /// for a truncate, `data` empty), with the directory when the size changes.
    fn write_piece(
        &self,
        st: &mut State,
        id: FileId,
        layout: Layout,
        offset: u64,
        data: &[u8],
        new_end: u64,
    ) -> Result<()> {
        debug_assert_eq!(
            offset + data.len() as u64,
            new_end,
            "the piece ends its data"
        );
        debug_assert!(
            st.blocks.len() <= self.piece_blocks_max() && st.segs.len() >= st.blocks.len()
        );
        let old_size = Self::entry(st, id)?.size_bytes;
        let new_size = if data.is_empty() {
            new_end
        } else {
            new_end.max(old_size)
        };
        let (dir, resized) = self.directory_after(st, id, layout, new_size);
        let entry = dir.entries[id.slot].expect("live");
        let map = self.geo.map(layout);
        let partly_live = self.clear_hole(st, &map, &entry, old_size, offset.min(new_size))?;
        if !resized && partly_live.count == 0 && self.is_one_whole_block(st) {
            return self.write_whole_block(st, &entry, data);
        }
        st.lbas.clear();
        st.partial.clear();
        // Buffer slot 0 holds the directory when the size changes.
        let hole_slot = usize::from(resized);
        let data_slot = self.stage_hole_blocks(
            st,
            &map,
            &entry,
            old_size,
            partly_live.as_slice(),
            hole_slot,
        )?;
        self.stage_data_blocks(st, &map, &entry, old_size, data_slot)?;
        Self::copy_segments(st, data_slot, data);
        if resized {
            let staged = st.lbas.len();
            self.commit(st, dir, staged)
        } else {
            self.write_staged(st)
        }
    }

    /// The directory once a piece is written: file `id` at `new_size` bytes under `layout`,
    /// owning the chunks that size needs; and whether its size changes (the piece then writes
    /// the directory too).
    fn directory_after(
        &self,
        st: &State,
        id: FileId,
        layout: Layout,
        new_size: u64,
    ) -> (Directory, bool) {
        let mut dir = st.dir;
        let old = dir.entries[id.slot].expect("live");
        debug_assert_eq!(old.name_hash, id.name_hash);
        debug_assert!(
            layout == old.layout || old.size_bytes == 0,
            "a file's layout changes only while it is empty"
        );
        let resized = new_size != old.size_bytes;
        if resized {
            dir.entries[id.slot].as_mut().expect("live").layout = layout;
            dir.resize(&self.geo, id.slot, new_size);
            dir.generation += 1;
        }
        (dir, resized)
    }

    /// The blocks holding bytes of the hole `[old_size, hole_end)` that the piece does not
    /// touch: those holding no file byte below `old_size` are discarded (they lie beyond the
    /// durable size until the write), the others returned, to be zeroed past the old end
    /// inside the write.
    fn clear_hole(
        &self,
        st: &mut State,
        map: &Map,
        entry: &DirEntry,
        old_size: u64,
        hole_end: u64,
    ) -> Result<PartlyLive> {
        let mut partly_live = PartlyLive::default();
        if hole_end <= old_size {
            return Ok(partly_live);
        }
        debug_assert!(
            hole_end <= entry.size_bytes,
            "the hole lies inside the new size"
        );
        let mut at = old_size;
        let mut dead_run: Option<(u64, u64)> = None;
        while at < hole_end {
            let (vblock, _, run) = map.seg(at);
            at += run.min(hole_end - at);
            let touched = st.blocks.iter().any(|touched| touched.vblock == vblock);
            if touched || partly_live.as_slice().contains(&vblock) {
                continue;
            }
            let (live, _) = map.split(vblock, old_size);
            if live {
                partly_live.push(vblock);
                continue;
            }
            let lba = entry.lba(&self.geo, vblock);
            dead_run = Some(self.extend_dead_run(st, dead_run, lba)?);
        }
        if let Some(run) = dead_run {
            self.discard(st, run)?;
        }
        Ok(partly_live)
    }

    /// Add device block `lba` to the run of blocks to discard, `(first, count)`: the run grows
    /// when `lba` follows it (or is in it already); otherwise the run is discarded now and a
    /// new one starts at `lba`.
    fn extend_dead_run(
        &self,
        st: &mut State,
        run: Option<(u64, u64)>,
        lba: u64,
    ) -> Result<(u64, u64)> {
        debug_assert_ne!(lba, DIR_LBA);
        debug_assert!(run.is_none_or(|(_, count)| count >= 1));
        Ok(match run {
            Some((first, count)) if first + count == lba => (first, count + 1),
            Some((first, count)) if (first..first + count).contains(&lba) => (first, count),
            Some(run) => {
                self.discard(st, run)?;
                (lba, 1)
            }
            None => (lba, 1),
        })
    }

    /// Is the planned piece one whole block in one segment (a WAL page)?
    fn is_one_whole_block(&self, st: &State) -> bool {
        st.blocks.len() == 1 && st.blocks[0].covered == self.geo.block_bytes && st.segs.len() == 1
    }

    /// One whole block, the size unchanged (a WAL page): written straight from the caller's
    /// buffer, one single-block write with no read.
    fn write_whole_block(&self, st: &mut State, entry: &DirEntry, data: &[u8]) -> Result<()> {
        debug_assert_eq!(data.len() as u64, self.geo.block_bytes);
        debug_assert!(st.segs[0].in_block == 0 && st.segs[0].data_off == 0);
        let lba = entry.lba(&self.geo, st.blocks[0].vblock);
        st.cache.forget(lba);
        self.dev.write_scattered(&[lba], data)?;
        st.stats.device_writes += 1;
        st.stats.blocks_written += 1;
        Ok(())
    }

    /// Read device block `lba` into buffer slot `slot` to patch it: from the cache of blocks
    /// written last, or from the device.
    fn read_back(&self, st: &mut State, lba: u64, slot: usize) -> Result<()> {
        debug_assert!(slot < self.atomic_blocks);
        debug_assert_ne!(lba, DIR_LBA);
        let block_bytes = self.geo.block_bytes as usize;
        let block = &mut st.buf[slot * block_bytes..(slot + 1) * block_bytes];
        if st.cache.read(&*self.dev, lba, block)? {
            st.stats.cached_blocks += 1;
        }
        st.stats.rmw_blocks += 1;
        Ok(())
    }

    /// Stage the partly live hole blocks at buffer slots from `first_slot` on, each read back
    /// and zeroed past the old end. Returns the slot after them.
    fn stage_hole_blocks(
        &self,
        st: &mut State,
        map: &Map,
        entry: &DirEntry,
        old_size: u64,
        partly_live: &[u64],
        first_slot: usize,
    ) -> Result<usize> {
        debug_assert!(first_slot <= 1 && partly_live.len() <= 2);
        debug_assert!(st.lbas.is_empty() && st.partial.is_empty());
        let block_bytes = self.geo.block_bytes as usize;
        let mut slot = first_slot;
        for &vblock in partly_live {
            let lba = entry.lba(&self.geo, vblock);
            self.read_back(st, lba, slot)?;
            let (_, zero_from) = map.split(vblock, old_size);
            st.buf[slot * block_bytes + zero_from as usize..(slot + 1) * block_bytes].fill(0);
            st.lbas.push(lba);
            st.partial.push(true);
            slot += 1;
        }
        Ok(slot)
    }

    /// Stage the blocks the piece touches at buffer slots from `first_slot` on. A block the
    /// piece covers whole is left to the copy; one it covers partly is read back when it holds
    /// file bytes below the old size, and zeroed past them.
    fn stage_data_blocks(
        &self,
        st: &mut State,
        map: &Map,
        entry: &DirEntry,
        old_size: u64,
        first_slot: usize,
    ) -> Result<()> {
        debug_assert!(first_slot + st.blocks.len() <= self.atomic_blocks);
        debug_assert_eq!(st.lbas.len(), st.partial.len());
        let block_bytes = self.geo.block_bytes;
        let slot_bytes = block_bytes as usize;
        for index in 0..st.blocks.len() {
            let touched = st.blocks[index];
            let slot = first_slot + index;
            let lba = entry.lba(&self.geo, touched.vblock);
            let partial = touched.covered < block_bytes;
            if partial {
                // Not live: zero_from is 0, and the whole block starts as zeros.
                let (live, zero_from) = map.split(touched.vblock, old_size);
                if live {
                    self.read_back(st, lba, slot)?;
                }
                st.buf[slot * slot_bytes + zero_from as usize..(slot + 1) * slot_bytes].fill(0);
            }
            st.lbas.push(lba);
            st.partial.push(partial);
        }
        Ok(())
    }

    /// Copy the piece's data into its staged blocks (from buffer slot `first_slot`), segment
    /// by segment.
    fn copy_segments(st: &mut State, first_slot: usize, data: &[u8]) {
        debug_assert_eq!(
            st.segs.iter().map(|segment| segment.len).sum::<usize>(),
            data.len()
        );
        let block_bytes = st.cache.block_bytes;
        for segment in &st.segs {
            let at = (first_slot + segment.block) * block_bytes + segment.in_block;
            let from = segment.data_off;
            st.buf[at..at + segment.len].copy_from_slice(&data[from..from + segment.len]);
        }
    }

    /// Write the staged blocks (`st.lbas`, from buffer slot 0; no directory) in one atomic
    /// device write.
    fn write_staged(&self, st: &mut State) -> Result<()> {
        let staged = st.lbas.len();
        debug_assert!(staged >= 1 && staged <= self.atomic_blocks);
        debug_assert_eq!(st.partial.len(), staged);
        self.write_lbas(st, 0)
    }

    /// One atomic device write of every block staged in `st.lbas` from `st.buf` (data blocks
    /// from position `first` on: 1 after a directory), then the cache told what was written
    /// and the counters bumped; `st.lbas` is empty afterwards, written or not.
    fn write_lbas(&self, st: &mut State, first: usize) -> Result<()> {
        let count = st.lbas.len();
        debug_assert!(count >= 1 && count <= self.atomic_blocks);
        let block_bytes = self.geo.block_bytes as usize;
        let result = self
            .dev
            .write_scattered(&st.lbas, &st.buf[..count * block_bytes]);
        Self::remember(st, first, result.is_ok());
        st.lbas.clear();
        result?;
        st.stats.device_writes += 1;
        st.stats.blocks_written += count as u64;
        Ok(())
    }

    /// Discard a run of device blocks (beyond the durable size: no crash can expose them).
    fn discard(&self, st: &mut State, (lba, count): (u64, u64)) -> Result<()> {
        debug_assert!(lba > DIR_LBA && count >= 1);
        debug_assert!(lba + count <= self.geo.device_blocks);
        for block in lba..lba + count {
            st.cache.forget(block);
        }
        self.dev.discard(lba, count)?;
        st.stats.hole_blocks += count;
        Ok(())
    }

    /// After a device write of `st.lbas` from `st.buf` (the data blocks from position
    /// `first` on; the directory is never cached): cache the blocks written partly, forget the
    /// others, and forget them all if the write failed.
    fn remember(st: &mut State, first: usize, ok: bool) {
        debug_assert!(first <= 1 && first <= st.lbas.len());
        debug_assert!(st.partial.len() + first >= st.lbas.len());
        let block_bytes = st.cache.block_bytes;
        for (i, &lba) in st.lbas.iter().enumerate().skip(first) {
            if ok && st.partial[i - first] {
                st.cache
                    .put(lba, &st.buf[i * block_bytes..(i + 1) * block_bytes]);
            } else {
                st.cache.forget(lba);
            }
        }
    }

    /// Write directory `dir` (into buffer slot 0) together with the `extra` data blocks staged
    /// at slots 1.. (their LBAs in `st.lbas`), atomically; adopt `dir` once it is durable.
    fn commit(&self, st: &mut State, dir: Directory, extra: usize) -> Result<()> {
        let block_bytes = self.geo.block_bytes as usize;
        assert_eq!(st.lbas.len(), extra);
        assert!(extra < self.atomic_blocks);
        // Every directory write advances the generation by one (the format writes the first).
        debug_assert!(dir.generation == st.dir.generation + 1 || dir == st.dir);
        // Before the write: the directory obeys its rules (and, in debug builds, `encode`
        // checks that its bytes read back as itself).
        assert_eq!(
            dir.validate(&self.geo),
            Ok(()),
            "directory about to be written"
        );
        dir.encode(&self.geo, &mut st.buf[..block_bytes]);
        st.lbas.insert(0, DIR_LBA);
        self.write_lbas(st, 1)?;
        st.stats.dir_writes += 1;
        st.dir = dir;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvstack_nvramdisk::hooks::{Action, Event};
    use nvstack_nvramdisk::ATOMIC_BLOCKS_MAX;
    use nvstack_nvramdisk::{format_region, FormatOptions, NvramDisk, OpenOptions};
    use nvstack_pmem::{MmapRegion, Region};
    use nvstack_test_support::device::TestDevice;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    fn region(bytes: u64) -> Arc<MmapRegion> {
        region_with(bytes, 4096)
    }

    fn region_with(bytes: u64, block_bytes: u32) -> Arc<MmapRegion> {
        let r = MmapRegion::anonymous(bytes).unwrap();
        let fo = FormatOptions {
            lanes: 2,
            block_bytes,
            ..FormatOptions::default()
        };
        format_region(&r, &fo).unwrap();
        Arc::new(r)
    }

    fn disk(r: &Arc<MmapRegion>, oo: OpenOptions) -> Arc<NvramDisk<MmapRegion>> {
        Arc::new(NvramDisk::open(r.clone(), oo).unwrap())
    }

    fn store(r: &Arc<MmapRegion>) -> Store {
        Store::open(disk(r, OpenOptions::default())).unwrap()
    }

    fn read_all(s: &Store, id: FileId) -> Vec<u8> {
        let n = s.size_bytes(id).unwrap() as usize;
        let mut v = vec![0xEEu8; n + 100];
        let got = s.read(id, 0, &mut v).unwrap();
        assert_eq!(got, n);
        v.truncate(n);
        v
    }

    #[test]
    fn geometry_limits() {
        assert!(StoreGeometry::compute(256, 1000).is_err());
        assert!(StoreGeometry::compute(3000, 1000).is_err());
        let g = StoreGeometry::compute(512, 1000).unwrap();
        assert_eq!((g.chunk_blocks, g.chunks), (128, 7));
        assert!(StoreGeometry::compute(4096, 16).is_err());
        let g = StoreGeometry::compute(4096, 17).unwrap();
        assert_eq!((g.chunk_blocks, g.chunks), (16, 1));
        let g = StoreGeometry::compute(4096, 1 << 20).unwrap();
        assert!(g.chunks <= CHUNKS_PER_FILE_MAX as u64);
        assert!(g.chunks * g.chunk_blocks < 1 << 20);
        assert_eq!(
            g.file_bytes_max(Layout::Linear),
            g.chunks * g.chunk_blocks * 4096
        );
        assert!(g.file_bytes_max(Layout::WalFramed) > g.file_bytes_max(Layout::Linear) * 99 / 100);
    }

    #[test]
    fn write_read_partial_blocks_and_holes() {
        for bb in [512, 1024, 4096] {
            write_read_partial_blocks_and_holes_with(bb);
        }
    }

    fn write_read_partial_blocks_and_holes_with(block_bytes: u32) {
        let r = region_with(4 << 20, block_bytes);
        let s = store(&r);
        let id = s
            .open_file("/db-wal", FileKind::Wal, true)
            .unwrap()
            .unwrap();
        s.write(id, 0, b"hello").unwrap();
        assert_eq!(read_all(&s, id), b"hello");
        // Unaligned, crossing a block boundary.
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        s.write(id, 4000, &data).unwrap();
        let all = read_all(&s, id);
        assert_eq!(all.len(), 9000);
        assert_eq!(&all[..5], b"hello");
        assert!(all[5..4000].iter().all(|&b| b == 0), "gap reads as zeros");
        assert_eq!(&all[4000..], &data[..]);
        // Overwrite inside, size unchanged: no directory write.
        let before = s.stats().dir_writes;
        s.write(id, 10, b"XY").unwrap();
        assert_eq!(s.stats().dir_writes, before);
        assert_eq!(&read_all(&s, id)[10..12], b"XY");
        // A hole far past the end reads as zeros, even over stale blocks of a deleted file.
        let junk = vec![0xABu8; 300_000];
        let j = s
            .open_file("/db-journal", FileKind::MainJournal, true)
            .unwrap()
            .unwrap();
        s.write(j, 0, &junk).unwrap();
        assert!(s.delete("/db-journal").unwrap());
        let j = s
            .open_file("/db-journal", FileKind::MainJournal, true)
            .unwrap()
            .unwrap();
        s.write(j, 5, b"a").unwrap();
        s.write(j, 200_001, b"z").unwrap();
        let all = read_all(&s, j);
        assert_eq!(all.len(), 200_002);
        assert_eq!(all[5], b'a');
        assert_eq!(all[200_001], b'z');
        assert!(all
            .iter()
            .enumerate()
            .all(|(i, &b)| i == 5 || i == 200_001 || b == 0));
        // Truncate down then up: the cut bytes come back as zeros.
        s.truncate(id, 4002).unwrap();
        s.truncate(id, 9000).unwrap();
        let all = read_all(&s, id);
        assert_eq!(&all[4000..4002], &data[..2]);
        assert!(all[4002..].iter().all(|&b| b == 0));
        // Reads past the end are short; at the end, empty.
        let mut b = [0u8; 10];
        assert_eq!(s.read(id, 8995, &mut b).unwrap(), 5);
        assert_eq!(s.read(id, 9000, &mut b).unwrap(), 0);
    }

    #[test]
    fn survives_reopen_and_refuses_foreign_blocks() {
        let r = region(4 << 20);
        {
            let s = store(&r);
            let id = s.open_file("/x-wal", FileKind::Wal, true).unwrap().unwrap();
            s.write(id, 0, &vec![7u8; 70_000]).unwrap();
        }
        let s = store(&r);
        let (id, info) = s.lookup("/x-wal").unwrap().unwrap();
        assert_eq!(info.size_bytes, 70_000);
        assert_eq!(info.kind, FileKind::Wal);
        assert!(read_all(&s, id).iter().all(|&b| b == 7));
        assert!(s.lookup("/y-wal").unwrap().is_none());
        drop(s);
        // Damage: a flipped byte fails the checksum; foreign data fails the magic.
        let d = disk(&r, OpenOptions::default());
        let mut blk = vec![0u8; 4096];
        d.read(0, &mut blk).unwrap();
        blk[100] ^= 1;
        d.write(0, &blk).unwrap();
        let e = Store::open(d.clone()).err().unwrap().to_string();
        assert!(e.contains("checksum"), "{e}");
        d.write(0, &[0x55u8; 4096]).unwrap();
        let e = Store::open(d.clone()).err().unwrap().to_string();
        assert!(e.contains("bad magic"), "{e}");
        let mut again = vec![0u8; 4096];
        d.read(0, &mut again).unwrap();
        assert_eq!(again, vec![0x55u8; 4096], "a refused store is not written");
    }

    #[test]
    fn full_is_distinct_and_changes_nothing() {
        let r = region(2 << 20);
        let s = store(&r);
        let cap = s.geometry().file_bytes_max(Layout::Linear);
        let id = s.open_file("/w", FileKind::Wal, true).unwrap().unwrap();
        s.write(id, 0, &[1u8; 100]).unwrap();
        let before = s.stats();
        match s.write(id, cap - 10, &[2u8; 11]) {
            Err(StoreError::Full(m)) => assert!(m.contains("at most"), "{m}"),
            other => panic!("expected Full, got {other:?}"),
        }
        assert_eq!(s.stats().device_writes, before.device_writes);
        assert_eq!(s.size_bytes(id).unwrap(), 100);
        // Exactly the capacity fits; then a second file has no chunk left.
        s.write(id, cap - 1, &[3u8]).unwrap();
        let j = s
            .open_file("/j", FileKind::MainJournal, true)
            .unwrap()
            .unwrap();
        assert!(matches!(s.write(j, 0, b"x"), Err(StoreError::Full(_))));
        assert_eq!(s.free_bytes(), 0);
        // Entries run out too.
        for n in ["/a", "/b"] {
            s.open_file(n, FileKind::SuperJournal, true)
                .unwrap()
                .unwrap();
        }
        assert!(matches!(
            s.open_file("/c", FileKind::SuperJournal, true),
            Err(StoreError::Full(_))
        ));
        assert!(s
            .open_file("/c", FileKind::SuperJournal, false)
            .unwrap()
            .is_none());
        // Shrinking frees chunks.
        s.truncate(id, 0).unwrap();
        s.write(j, 0, b"x").unwrap();
    }

    #[test]
    fn bad_input_is_an_error() {
        let r = region(2 << 20);
        let s = store(&r);
        assert!(s.open_file("", FileKind::Wal, true).is_err());
        assert!(s.lookup(&"n".repeat(NAME_BYTES_MAX + 1)).is_err());
        let id = s.open_file("/w", FileKind::Wal, true).unwrap().unwrap();
        assert!(s.write(id, u64::MAX, b"xy").is_err());
        s.delete("/w").unwrap();
        assert!(s.write(id, 0, b"x").is_err(), "write to a deleted file");
        assert!(s.size_bytes(id).is_err());
        assert!(!s.delete("/w").unwrap());
    }

    #[test]
    fn large_writes_are_split_into_atomic_pieces() {
        let r = region(4 << 20);
        let s = store(&r);
        let id = s.open_file("/w", FileKind::Wal, true).unwrap().unwrap();
        assert_eq!(s.piece_blocks_max(), ATOMIC_BLOCKS_MAX - 3);
        let data: Vec<u8> = (0..(s.piece_blocks_max() * 4096 * 2 + 123))
            .map(|i| (i * 7 % 256) as u8)
            .collect();
        s.write(id, 77, &data).unwrap();
        assert_eq!(&read_all(&s, id)[77..], &data[..]);
        assert!(s.stats().device_writes >= 3);
    }

    /// A write that needs more atomic pieces than it is allowed stops with an error naming the
    /// bound, having written a prefix of itself and a size that matches (as a crash between its
    /// pieces would leave it).
    #[test]
    fn a_write_past_its_piece_bound_stops_with_an_error() {
        let r = region(4 << 20);
        let s = store(&r);
        let id = s.open_file("/w", FileKind::Wal, true).unwrap().unwrap();
        let piece_bytes = s.piece_blocks_max() * 4096;
        let data: Vec<u8> = (0..3 * piece_bytes).map(|i| (i % 253) as u8).collect();
        let error = {
            let mut guard = s.lock();
            s.write_pieces(&mut guard, id, Layout::Linear, 0, &data, 2)
                .unwrap_err()
        };
        match &error {
            StoreError::PiecesExceeded {
                offset: 0,
                bytes,
                pieces: 2,
                written,
            } => {
                assert_eq!(*bytes, data.len() as u64);
                assert_eq!(*written, 2 * piece_bytes as u64);
            }
            other => panic!("expected PiecesExceeded, got {other:?}"),
        }
        assert!(
            error
                .to_string()
                .contains("unfinished after 2 atomic pieces"),
            "{error}"
        );
        assert_eq!(s.size_bytes(id).unwrap(), 2 * piece_bytes as u64);
        assert_eq!(read_all(&s, id), &data[..2 * piece_bytes]);
        // The bound a write gets is its length's: the same write then finishes.
        s.write(id, 0, &data).unwrap();
        assert_eq!(read_all(&s, id), data);
    }

    /// The piece bound holds for the smallest pieces (one block each, the smallest atomic unit
    /// the store accepts) at any start, under both layouts.
    #[test]
    fn the_piece_bound_holds_for_one_block_pieces() {
        for block_bytes in [512u64, 4096] {
            for layout in [Layout::Linear, Layout::WalFramed] {
                let map = Map::new(layout, block_bytes);
                let frame = map.frame_bytes();
                for offset in [0, 1, 31, 32, 33, 55, 56, 57, block_bytes, frame + 40] {
                    for len in [1, 23, 24, 25, 56, 1000, 3 * frame + 7, 50 * frame] {
                        let (mut blocks, mut segs) = (Vec::new(), Vec::new());
                        let (mut at, mut pieces) = (offset, 0);
                        while at < offset + len {
                            blocks.clear();
                            segs.clear();
                            at += plan(&map, at, offset + len - at, 1, &mut blocks, &mut segs);
                            pieces += 1;
                        }
                        assert!(
                            pieces <= pieces_max(len),
                            "{layout:?} {block_bytes}: {pieces} pieces for {len} bytes at {offset}"
                        );
                    }
                }
            }
        }
    }

    /// The most device events one operation of the crash tests may take before it finishes
    /// (far more than any takes): a bound on the sweep over its stop points.
    const STOP_POINTS_MAX: u64 = 100_000;

    /// Stop the device at every store and persist of one store operation (as a power failure
    /// would), recover, and check the file reads wholly old or wholly new, size included.
    fn crash_every_step(setup: &dyn Fn(&Store), op: &dyn Fn(&Store) -> StoreResult<()>) {
        for bb in [512, 4096] {
            crash_every_step_with(bb, setup, op);
        }
    }

    fn crash_every_step_with(
        block_bytes: u32,
        setup: &dyn Fn(&Store),
        op: &dyn Fn(&Store) -> StoreResult<()>,
    ) {
        let r = region_with(2 << 20, block_bytes);
        setup(&store(&r));
        let snap = {
            let mut v = vec![0u8; r.len() as usize];
            r.read(0, &mut v);
            v
        };
        let files = |s: &Store| -> HashMap<u64, Vec<u8>> {
            let mut m = HashMap::new();
            for name in ["/w", "/j"] {
                if let Some((id, info)) = s.lookup(name).unwrap() {
                    m.insert(info.name_hash, read_all(s, id));
                }
            }
            m
        };
        let restore = || {
            r.write(0, &snap);
        };
        let old = files(&store(&r));
        op(&store(&r)).unwrap();
        let new = files(&store(&r));
        assert_ne!(old, new, "the operation changes something");
        let (mut saw_old, mut saw_new) = (0, 0);
        let mut finished = false;
        for stop_at in 0..STOP_POINTS_MAX {
            restore();
            let count = Arc::new(AtomicU64::new(0));
            let stopped = Arc::new(AtomicBool::new(false));
            let armed = Arc::new(AtomicBool::new(false));
            let (c, st, arm) = (count.clone(), stopped.clone(), armed.clone());
            let oo = OpenOptions {
                hook: Some(Arc::new(move |_ev: &Event| {
                    // Events of the open (recovery, the directory read) do not count.
                    if !arm.load(Ordering::Relaxed) {
                        return Action::Continue;
                    }
                    if c.fetch_add(1, Ordering::Relaxed) == stop_at {
                        st.store(true, Ordering::Relaxed);
                        Action::Stop
                    } else {
                        Action::Continue
                    }
                })),
                ..OpenOptions::default()
            };
            let s = Store::open(disk(&r, oo)).unwrap();
            armed.store(true, Ordering::Relaxed);
            let res = op(&s);
            drop(s);
            if !stopped.load(Ordering::Relaxed) {
                res.unwrap();
                finished = true;
                break;
            }
            assert!(res.is_err(), "a stopped write reports failure");
            let got = files(&store(&r));
            if got == old {
                saw_old += 1;
            } else if got == new {
                saw_new += 1;
            } else {
                panic!("stop at event {stop_at}: neither old nor new state");
            }
        }
        assert!(
            finished,
            "the operation did not finish within {STOP_POINTS_MAX} stop points"
        );
        assert!(saw_old > 0 && saw_new > 0, "old {saw_old} new {saw_new}");
    }

    #[test]
    fn crash_at_every_step_of_a_growing_write() {
        crash_every_step(
            &|s| {
                let id = s.open_file("/w", FileKind::Wal, true).unwrap().unwrap();
                s.write(id, 0, &[1u8; 5000]).unwrap();
            },
            &|s| {
                let id = s.open_file("/w", FileKind::Wal, true)?.unwrap();
                s.write(id, 4990, &[2u8; 4200])
            },
        );
    }

    #[test]
    fn crash_at_every_step_of_wal_framed_writes() {
        // Setup per block size: a WAL header for that size, then 30 frames.
        let setup = |s: &Store| {
            let b = s.geometry().block_bytes;
            let id = s.open_file("/w", FileKind::Wal, true).unwrap().unwrap();
            s.write(id, 0, &super::tests::wal_header(b)).unwrap();
            for i in 0..30u64 {
                let o = 32 + i * (24 + b);
                s.write(id, o, &[i as u8; 24]).unwrap();
                s.write(id, o + 24, &vec![i as u8 ^ 0xFF; b as usize])
                    .unwrap();
            }
            assert_eq!(s.files()[0].layout, Layout::WalFramed);
        };
        let frame = |i: u64, part: u8| {
            move |s: &Store| -> StoreResult<()> {
                let b = s.geometry().block_bytes;
                let id = s.open_file("/w", FileKind::Wal, true)?.unwrap();
                let o = 32 + i * (24 + b);
                match part {
                    0 => s.write(id, o, &[0x77; 24]),
                    1 => s.write(id, o + 24, &vec![0x66; b as usize]),
                    _ => s.write(id, o + 10, &vec![0x55; 3 * b as usize]),
                }
            }
        };
        crash_every_step(&setup, &frame(30, 0)); // a new frame header: grows
        crash_every_step(&setup, &frame(29, 1)); // a page overwritten in place
        crash_every_step(&setup, &frame(5, 2)); // across frames, unaligned
        crash_every_step(&setup, &frame(80, 0)); // past a hole of 50 frames
    }

    #[test]
    fn crash_at_every_step_of_a_hole_write_and_a_truncate() {
        let setup = |s: &Store| {
            let id = s.open_file("/w", FileKind::Wal, true).unwrap().unwrap();
            s.write(id, 0, &[1u8; 300_000]).unwrap();
            s.truncate(id, 1001).unwrap();
            let j = s
                .open_file("/j", FileKind::MainJournal, true)
                .unwrap()
                .unwrap();
            s.write(j, 0, &[3u8; 10]).unwrap();
        };
        crash_every_step(&setup, &|s| {
            let id = s.open_file("/w", FileKind::Wal, true)?.unwrap();
            s.write(id, 150_000, &[2u8; 100])
        });
        crash_every_step(&setup, &|s| {
            let id = s.open_file("/w", FileKind::Wal, true)?.unwrap();
            s.truncate(id, 100_000)
        });
        crash_every_step(&setup, &|s| {
            s.delete("/j")?;
            Ok(())
        });
    }

    #[test]
    fn failed_device_writes_change_nothing() {
        let r = region(2 << 20);
        // Every third device write fails before touching anything.
        let flaky = Arc::new(TestDevice::failing_every(
            disk(&r, OpenOptions::default()),
            3,
        ));
        let s = Store::open(flaky.clone()).unwrap();
        let id = s.open_file("/w", FileKind::Wal, true).unwrap().unwrap();
        let mut model: Vec<u8> = Vec::new();
        let mut failed = 0;
        for i in 0..60u64 {
            let off = (i * 1237) % 20_000;
            let data = vec![i as u8 + 1; (i as usize * 311) % 6000 + 1];
            match s.write(id, off, &data) {
                Ok(()) => {
                    let end = off as usize + data.len();
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[off as usize..end].copy_from_slice(&data);
                }
                Err(StoreError::Other(e)) => {
                    assert!(e.to_string().contains("injected"));
                    failed += 1;
                }
                Err(e) => panic!("{e}"),
            }
            assert_eq!(read_all(&s, id), model);
        }
        assert!(failed > 0, "no device write failed");
        assert!(flaky.writes().is_empty(), "the store writes only scattered");
        assert!(!flaky.scattered_writes().is_empty());
        drop(s);
        let s = store(&r);
        let (id, _) = s.lookup("/w").unwrap().unwrap();
        assert_eq!(
            read_all(&s, id),
            model,
            "media agrees with the model after reopen"
        );
    }

    /// The store asks the device's caps: nvramdisk's (scattered, atomic up to 64 blocks,
    /// durable on return) give pieces of 61 blocks; a device without a scattered atomic write
    /// (the raw backend), with too small a unit, or durable only on flush is refused at open,
    /// with nothing written.
    #[test]
    fn open_takes_its_limits_from_the_device_caps() {
        let r = region(2 << 20);
        let d = disk(&r, OpenOptions::default());
        assert_eq!(
            Store::check_caps(d.caps()).unwrap(),
            ATOMIC_BLOCKS_MAX,
            "nvramdisk"
        );
        let raw_region = Arc::new(MmapRegion::anonymous(2 << 20).unwrap());
        let raw = Arc::new(nvstack_stack::raw::RawDevice::new(raw_region.clone()).unwrap());
        let e = Store::open(raw).err().expect("raw refused");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("no scattered atomic write"), "{e}");
        let mut block = vec![1u8; 4096];
        raw_region.read(0, &mut block);
        assert!(
            block.iter().all(|&b| b == 0),
            "a refused open wrote the directory"
        );
        let caps = d.caps();
        let small = Caps {
            atomic_blocks: ATOMIC_BLOCKS_MIN - 1,
            ..caps
        };
        assert!(Store::check_caps(small).is_err());
        let smallest = Caps {
            atomic_blocks: ATOMIC_BLOCKS_MIN,
            ..caps
        };
        assert_eq!(Store::check_caps(smallest).unwrap(), 4);
        let on_flush = Caps {
            durability: Durability::OnFlush,
            ..caps
        };
        let e = Store::check_caps(on_flush).unwrap_err();
        assert!(e.to_string().contains("not durable"), "{e}");
    }

    /// A SQLite WAL header for pages of `page` bytes.
    fn wal_header(page: u64) -> Vec<u8> {
        let mut h = vec![0u8; 32];
        h[0..4].copy_from_slice(&0x377f_0682u32.to_be_bytes());
        h[4..8].copy_from_slice(&3_007_000u32.to_be_bytes());
        h[8..12].copy_from_slice(&(page as u32).to_be_bytes());
        h[16..32].fill(0xA5);
        h
    }

    /// The framed layout's arithmetic against brute force: a bijection, `split` and
    /// `vblocks_for` agree with the byte-by-byte inverse.
    #[test]
    fn framed_map_is_a_bijection_and_split_agrees() {
        for b in [512u64, 1024] {
            for layout in [Layout::Linear, Layout::WalFramed] {
                let m = Map::new(layout, b);
                let limit = 40 * b + 3000;
                let mut inv: HashMap<(u64, u64), u64> = HashMap::new();
                let mut o = 0;
                while o < limit {
                    let (v, bo, run) = m.seg(o);
                    assert!(run >= 1 && bo + run <= b);
                    for k in 0..run {
                        assert!(
                            inv.insert((v, bo + k), o + k).is_none(),
                            "two bytes at {v}/{}",
                            bo + k
                        );
                    }
                    o += run;
                }
                let vmax = inv.keys().map(|k| k.0).max().unwrap();
                let blocks: Vec<Vec<Option<u64>>> = (0..vmax)
                    .map(|v| (0..b).map(|x| inv.get(&(v, x)).copied()).collect())
                    .collect();
                for s in
                    (0..limit)
                        .step_by(97)
                        .chain([0, 1, 31, 32, 33, 55, 56, 57, b, b + 56, b + 57])
                {
                    let mut want_vb = 0;
                    for (v, bytes) in blocks.iter().enumerate() {
                        let v = v as u64;
                        if bytes.iter().all(|x| x.is_none_or(|f| f >= limit)) {
                            continue; // past the enumerated range: no verdict
                        }
                        let live = bytes.iter().any(|x| x.is_some_and(|f| f < s));
                        let z = (0..=b)
                            .find(|&z| bytes[z as usize..].iter().all(|x| x.is_none_or(|f| f >= s)))
                            .unwrap();
                        let (l2, z2) = m.split(v, s);
                        assert_eq!((l2, z2), (live, z), "{layout:?} b {b} v {v} s {s}");
                        if live {
                            want_vb = want_vb.max(v + 1);
                        }
                    }
                    if s < limit - 2 * b {
                        assert_eq!(m.vblocks_for(s), want_vb, "{layout:?} b {b} s {s}");
                    }
                }
                assert!(
                    m.vblocks_for(m.size_max(13)) <= 13 && m.vblocks_for(m.size_max(13) + 1) > 13
                );
            }
        }
    }

    /// The framing's inverse (the pair of `seg`) against brute force: every byte of the first
    /// virtual blocks maps back to the file byte `seg` placed there, or to None when `seg`
    /// placed none.
    #[test]
    fn file_offset_inverts_seg() {
        for block_bytes in [512u64, 1024, 4096] {
            for layout in [Layout::Linear, Layout::WalFramed] {
                let map = Map::new(layout, block_bytes);
                let vblocks = 2 * (map.group_frames + 1) + 3;
                // The file byte placed at each byte of the first `vblocks` blocks.
                let mut placed = vec![None; (vblocks * block_bytes) as usize];
                // Every frame of the first three groups: past every byte of those blocks.
                let limit = map.frame_start(3 * map.group_frames);
                let mut offset = 0;
                while offset < limit {
                    let (vblock, in_block, run) = map.seg(offset);
                    for k in 0..run {
                        if vblock < vblocks {
                            placed[(vblock * block_bytes + in_block + k) as usize] =
                                Some(offset + k);
                        }
                    }
                    offset += run;
                }
                for vblock in 0..vblocks {
                    for in_block in 0..block_bytes {
                        assert_eq!(
                            map.file_offset(vblock, in_block),
                            placed[(vblock * block_bytes + in_block) as usize],
                            "{layout:?} block bytes {block_bytes}: block {vblock} byte {in_block}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn wal_frames_take_two_single_block_writes_and_no_read_back() {
        for bb in [512u32, 4096] {
            let r = region_with(4 << 20, bb);
            let s = store(&r);
            let b = bb as u64;
            let id = s.open_file("/w-wal", FileKind::Wal, true).unwrap().unwrap();
            s.write(id, 0, &wal_header(b)).unwrap();
            assert_eq!(
                s.lookup("/w-wal").unwrap().unwrap().1.layout,
                Layout::WalFramed
            );
            let mut model = wal_header(b);
            let f = 24 + b;
            let groups = 300 / ((b - 32) / 24) + 1;
            for round in 0..3u64 {
                let mut uncached = 0;
                for i in 0..300u64 {
                    let o = 32 + i * f;
                    let hdr = [(i + round) as u8; 24];
                    let page = vec![(i * 7 + round) as u8; b as usize];
                    let before = s.stats();
                    s.write(id, o, &hdr).unwrap();
                    s.write(id, o + 24, &page).unwrap();
                    let after = s.stats();
                    let grew = round == 0;
                    assert_eq!(after.device_writes - before.device_writes, 2);
                    assert_eq!(
                        after.blocks_written - before.blocks_written,
                        if grew { 4 } else { 2 },
                        "frame {i} round {round}: one block per write (plus the directory)"
                    );
                    // Only the first frame of a group reads its header block back.
                    uncached += (after.rmw_blocks - after.cached_blocks)
                        - (before.rmw_blocks - before.cached_blocks);
                    if model.len() < (o + f) as usize {
                        model.resize((o + f) as usize, 0);
                    }
                    model[o as usize..o as usize + 24].copy_from_slice(&hdr);
                    model[(o + 24) as usize..(o + f) as usize].copy_from_slice(&page);
                }
                assert!(
                    uncached <= groups,
                    "{uncached} blocks read back for 300 frames"
                );
                // Rewind as SQLite does after a checkpoint: a new header at offset 0.
                let mut h = wal_header(b);
                h[12] = round as u8 + 1;
                s.write(id, 0, &h).unwrap();
                model[..32].copy_from_slice(&h);
                assert_eq!(read_all(&s, id), model);
            }
            // Unaligned reads and writes across frames still work.
            s.write(id, 1000, &[0xEEu8; 3 * 4120]).unwrap();
            model[1000..1000 + 3 * 4120].fill(0xEE);
            assert_eq!(read_all(&s, id), model);
            drop(s);
            let s = store(&r);
            let (id, _) = s.lookup("/w-wal").unwrap().unwrap();
            assert_eq!(read_all(&s, id), model, "after reopen");
        }
    }

    /// A directory of two files (a WAL of 100 000 bytes, a journal of 10) on a 1000-block
    /// device of 4 KiB blocks, and its encoded block.
    fn sample_directory() -> (StoreGeometry, Directory, Vec<u8>) {
        let geo = StoreGeometry::compute(4096, 1000).unwrap();
        let mut dir = Directory::empty();
        dir.entries[0] = Some(DirEntry::new(FileKind::Wal, 11));
        dir.resize(&geo, 0, 100_000);
        dir.entries[1] = Some(DirEntry::new(FileKind::MainJournal, 22));
        dir.resize(&geo, 1, 10);
        let mut block = vec![0u8; 4096];
        dir.encode(&geo, &mut block);
        (geo, dir, block)
    }

    /// Recompute the checksum of a directory block changed on purpose.
    fn reseal(block: &mut [u8]) {
        let crc = crc32c::crc32c(&block[..CRC_OFF]);
        put_u32(block, CRC_OFF, crc);
    }

    /// Every rule a directory block can break is refused with an error naming it.
    #[test]
    fn damaged_directories_name_what_is_wrong() {
        let (geo, dir, block) = sample_directory();
        assert_eq!(Directory::decode(&geo, &block), Ok(Some(dir)));
        assert_eq!(Directory::decode(&geo, &vec![0u8; 4096]), Ok(None));
        let entry = |slot: usize| ENTRIES_OFF + slot * ENTRY_BYTES;
        let chunk_at =
            move |slot: usize, index: usize| entry(slot) + ENTRY_HEADER_BYTES + 2 * index;
        let first_chunk = dir.entries[0].unwrap().chunks[0];
        type Damage = Box<dyn Fn(&mut Vec<u8>)>;
        let cases: Vec<(Damage, DirectoryError)> = vec![
            (
                Box::new(|b| b.truncate(512)),
                DirectoryError::BlockBytes {
                    found: 512,
                    block_bytes: 4096,
                },
            ),
            (Box::new(|b| b[0] = b'X'), DirectoryError::BadMagic),
            (
                Box::new(|b| put_u32(b, 8, 2)),
                DirectoryError::Version { found: 2 },
            ),
            (
                Box::new(|b| put_u64(b, 16, 999)),
                DirectoryError::Geometry {
                    stored: (4096, 999, geo.chunk_blocks, geo.chunks),
                    device: (4096, 1000, geo.chunk_blocks, geo.chunks),
                },
            ),
            (Box::new(|b| b[50] = 1), DirectoryError::ReservedBytes),
            (
                Box::new(|b| b[CRC_OFF - 1] = 1),
                DirectoryError::ReservedBytes,
            ),
            (
                Box::new(|b| b[DIR_BYTES + 7] = 1),
                DirectoryError::ReservedBytes,
            ),
            (
                Box::new(move |b| b[entry(3) + 9] = 1),
                DirectoryError::FreeEntryNotZero { slot: 3 },
            ),
            (
                Box::new(move |b| b[entry(1)] = 9),
                DirectoryError::UnknownKind { slot: 1, id: 9 },
            ),
            (
                Box::new(move |b| b[entry(0) + 1] = 7),
                DirectoryError::UnknownLayout { slot: 0, id: 7 },
            ),
            (
                Box::new(move |b| b[entry(0) + 3] = 1),
                DirectoryError::ReservedEntryBytes { slot: 0 },
            ),
            (
                Box::new(move |b| put_u32(b, entry(1) + 4, 41)),
                DirectoryError::TooManyChunks {
                    slot: 1,
                    chunk_count: 41,
                },
            ),
            (
                Box::new(move |b| put_u64(b, entry(1) + 16, 1 << 40)),
                DirectoryError::SizeOverMax {
                    slot: 1,
                    layout: Layout::Linear,
                    size_bytes: 1 << 40,
                    max: geo.file_bytes_max(Layout::Linear),
                },
            ),
            (
                Box::new(move |b| put_u64(b, entry(1) + 16, 0)),
                DirectoryError::ChunkCountMismatch {
                    slot: 1,
                    chunk_count: 1,
                    size_bytes: 0,
                    needed: 0,
                },
            ),
            (
                Box::new(move |b| b[chunk_at(1, 5)] = 1),
                DirectoryError::UnusedChunkNotZero { slot: 1, index: 5 },
            ),
            (
                Box::new(move |b| b[chunk_at(1, 0)] = 200),
                DirectoryError::ChunkOutOfRange {
                    slot: 1,
                    chunk: 200,
                    chunks: geo.chunks,
                },
            ),
            (
                Box::new(move |b| b[chunk_at(1, 0)] = first_chunk as u8),
                DirectoryError::ChunkOwnedTwice {
                    chunk: first_chunk,
                    first: 0,
                    second: 1,
                },
            ),
            (
                Box::new(move |b| put_u64(b, entry(1) + 8, 11)),
                DirectoryError::SameNameHash {
                    first: 0,
                    second: 1,
                },
            ),
        ];
        for (damage, want) in cases {
            let mut damaged = block.clone();
            damage(&mut damaged);
            reseal(&mut damaged);
            assert_eq!(
                Directory::decode(&geo, &damaged),
                Err(want.clone()),
                "{want}"
            );
        }
        // Unsealed damage is a checksum mismatch, reported with both sums.
        let mut damaged = block.clone();
        damaged[entry(0) + 20] ^= 1;
        let error = Directory::decode(&geo, &damaged).unwrap_err();
        assert!(
            matches!(error, DirectoryError::Checksum { stored, computed } if stored != computed)
        );
        assert!(error.to_string().contains("checksum mismatch"), "{error}");
    }

    /// The pair assertion at an encoder catches bytes its decoder reads as another value (here
    /// an encoder that wrote the size one too large).
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "directory entry pair assertion")]
    fn pair_assertion_catches_an_encoder_its_decoder_disagrees_with() {
        let (_, dir, _) = sample_directory();
        let entry = dir.entries[0];
        let mut bytes = [0u8; ENTRY_BYTES];
        entry_to_bytes(&entry, &mut bytes);
        put_u64(&mut bytes, 16, entry.unwrap().size_bytes + 1);
        debug_assert_decodes("directory entry", &entry, &bytes, |bytes| {
            entry_from_bytes(0, bytes)
        });
    }

    /// The pair assertion at a decoder catches a value that does not re-encode to the bytes it
    /// was read from (here an encoder that writes the next generation).
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "directory header pair assertion")]
    fn pair_assertion_catches_a_decode_that_does_not_re_encode() {
        let (geo, _, block) = sample_directory();
        let header = &block[..HEADER_BYTES];
        let generation = header_from_bytes(&geo, header).unwrap();
        debug_assert_encodes(
            "directory header",
            &generation,
            header,
            |&generation, out| header_to_bytes(&geo, generation + 1, out),
        );
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            Open(usize),
            Write {
                f: usize,
                off: u64,
                len: usize,
                byte: u8,
            },
            WalHeader(usize),
            Frame {
                f: usize,
                i: u64,
                byte: u8,
            },
            Truncate {
                f: usize,
                size: u64,
            },
            Delete(usize),
            Reopen,
        }

        const NAMES: [&str; 5] = ["/d-wal", "/d-journal", "/d-mj01", "/e-wal", "/e-journal"];

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                2 => (0..NAMES.len()).prop_map(Op::Open),
                5 => (0..NAMES.len(), 0u64..700_000, 0usize..20_000, any::<u8>())
                    .prop_map(|(f, off, len, byte)| Op::Write { f, off, len, byte }),
                1 => (0..NAMES.len()).prop_map(Op::WalHeader),
                4 => (0..NAMES.len(), 0u64..200, any::<u8>())
                    .prop_map(|(f, i, byte)| Op::Frame { f, i, byte }),
                1 => (0..NAMES.len(), 0u64..700_000).prop_map(|(f, size)| Op::Truncate { f, size }),
                1 => (0..NAMES.len()).prop_map(Op::Delete),
                1 => Just(Op::Reopen),
            ]
        }

        struct Model {
            files: HashMap<&'static str, (Vec<u8>, Layout)>,
        }

        impl Model {
            fn chunks_used(&self, geo: &StoreGeometry) -> u64 {
                self.files
                    .values()
                    .map(|(v, l)| geo.chunks_for(*l, v.len() as u64))
                    .sum()
            }
        }

        /// Apply one write to the model, or tell that it must fail with Full.
        fn model_write(
            m: &mut Model,
            geo: &StoreGeometry,
            name: &'static str,
            off: u64,
            data: &[u8],
        ) -> bool {
            let (cur, layout) = m.files.get(name).cloned().expect("open file");
            if data.is_empty() {
                return true;
            }
            let layout = if cur.is_empty() {
                Layout::choose(off, data, geo.block_bytes)
            } else {
                layout
            };
            let end = off + data.len() as u64;
            let new_len = (cur.len() as u64).max(end);
            let fits = new_len <= geo.file_bytes_max(layout)
                && m.chunks_used(geo) - geo.chunks_for(layout, cur.len() as u64)
                    + geo.chunks_for(layout, new_len)
                    <= geo.chunks;
            if fits {
                let (v, l) = m.files.get_mut(name).unwrap();
                *l = layout;
                if v.len() < end as usize {
                    v.resize(end as usize, 0);
                }
                v[off as usize..end as usize].copy_from_slice(data);
            }
            fits
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
            #[test]
            fn store_matches_model(
                bb in prop_oneof![Just(512u32), Just(4096u32)],
                ops in proptest::collection::vec(op(), 1..60),
            ) {
                let r = region_with(2 << 20, bb);
                let mut s = store(&r);
                let geo = s.geometry();
                let b = bb as u64;
                let mut m = Model { files: HashMap::new() };
                for o in ops {
                    let write = |s: &Store, m: &mut Model, f: usize, off: u64, data: &[u8]| -> std::result::Result<(), TestCaseError> {
                        let Some((id, _)) = s.lookup(NAMES[f]).unwrap() else {
                            prop_assert!(!m.files.contains_key(NAMES[f]));
                            return Ok(());
                        };
                        let fits = model_write(m, &geo, NAMES[f], off, data);
                        let res = s.write(id, off, data);
                        if fits {
                            prop_assert!(res.is_ok(), "{:?}", res);
                        } else {
                            prop_assert!(matches!(res, Err(StoreError::Full(_))), "{:?}", res);
                        }
                        Ok(())
                    };
                    match o {
                        Op::Open(f) => {
                            let res = s.open_file(NAMES[f], FileKind::Wal, true);
                            if m.files.contains_key(NAMES[f]) || m.files.len() < FILES_MAX {
                                prop_assert!(res.unwrap().is_some());
                                m.files.entry(NAMES[f]).or_insert((Vec::new(), Layout::Linear));
                            } else {
                                prop_assert!(matches!(res, Err(StoreError::Full(_))));
                            }
                        }
                        Op::Write { f, off, len, byte } => write(&s, &mut m, f, off, &vec![byte; len])?,
                        Op::WalHeader(f) => write(&s, &mut m, f, 0, &wal_header(b))?,
                        Op::Frame { f, i, byte } => {
                            let o = 32 + i * (24 + b);
                            write(&s, &mut m, f, o, &[byte; 24])?;
                            write(&s, &mut m, f, o + 24, &vec![byte ^ 0x5A; b as usize])?;
                        }
                        Op::Truncate { f, size } => {
                            let Some((cur, layout)) = m.files.get(NAMES[f]).cloned() else { continue };
                            let (id, _) = s.lookup(NAMES[f]).unwrap().unwrap();
                            let fits = size <= geo.file_bytes_max(layout)
                                && m.chunks_used(&geo) - geo.chunks_for(layout, cur.len() as u64)
                                    + geo.chunks_for(layout, size) <= geo.chunks;
                            let res = s.truncate(id, size);
                            if fits {
                                prop_assert!(res.is_ok(), "{:?}", res);
                                m.files.get_mut(NAMES[f]).unwrap().0.resize(size as usize, 0);
                            } else {
                                prop_assert!(matches!(res, Err(StoreError::Full(_))));
                            }
                        }
                        Op::Delete(f) => {
                            prop_assert_eq!(s.delete(NAMES[f]).unwrap(), m.files.remove(NAMES[f]).is_some());
                        }
                        Op::Reopen => {
                            drop(s);
                            s = store(&r);
                        }
                    }
                    for (name, (want, layout)) in &m.files {
                        let (id, info) = s.lookup(name).unwrap().unwrap();
                        prop_assert_eq!(info.size_bytes, want.len() as u64);
                        if !want.is_empty() {
                            prop_assert_eq!(info.layout, *layout);
                        }
                        prop_assert!(read_all(&s, id) == *want, "{} differs", name);
                    }
                    prop_assert_eq!(s.files().len(), m.files.len());
                    prop_assert_eq!(s.free_bytes(), (geo.chunks - m.chunks_used(&geo)) * geo.chunk_bytes());
                }
            }
        }
    }
}
