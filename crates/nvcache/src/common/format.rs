//! What both caches' formats share (docs/format.md 10.3, 10.4, 10.9): the commit word's
//! codec, the backing path record, the label in the backing device's last block, and the
//! limits of a block number and a sequence number.
//!
//! Media assumptions (the same as nvramdisk's): an aligned 8-byte non-temporal store reaches
//! media whole (old or new, never a mix); stores before a fence are durable when it returns, in
//! no particular order among themselves; nothing is durable before a fence. Every encoder has
//! its decoder beside it, and each encode checks in debug builds that its output decodes to its
//! input.

use nvstack_core::error::{Error, Result};
use nvstack_pmem::Region;

/// The backing label's magic: "NVSLABEL".
pub const LABEL_MAGIC: u64 = u64::from_le_bytes(*b"NVSLABEL");
/// The label's format version.
pub const LABEL_VERSION: u32 = 1;
/// Bytes of the label: the backing device's last block (4 KiB for both caches).
pub const LABEL_BYTES: usize = 4096;
/// Offset of both caches' slot tables (UBJ: 16-byte entries; the write cache: 32-byte ones).
pub const TABLE_OFF: u64 = 8192;
/// Most slots a cache may have (either kind).
pub const SLOTS_MAX: u32 = 1 << 26;
/// Bytes of a backing device's block (both caches' backing files: O_DIRECT-aligned 4 KiB).
pub const BACKING_BLOCK_BYTES: u32 = 4096;
/// Offsets of the two commit words, each on a line of its own (both caches: 10.4 and 12.2).
pub const COMMIT_OFF: [u64; 2] = [4096, 4096 + 64];
/// Largest block number an entry can name (48 bits).
pub const LBA_MAX: u64 = (1 << 48) - 1;
/// Largest epoch (commit sequence number) an entry or commit word can hold (48 bits): at a
/// million commits a second, nine years.
pub const SEQ_MAX: u64 = (1 << 48) - 1;
/// A crc32c folded to 16 bits: the check bits of entries and commit words.
pub(crate) fn check16(words: &[u64]) -> u64 {
    let mut crc = 0u32;
    for w in words {
        crc = crc32c::crc32c_append(crc, &w.to_le_bytes());
    }
    u64::from((crc ^ (crc >> 16)) & 0xffff)
}

/// Encode a commit word: the epoch of the last commit (48 bits) and 16 check bits. Zero is
/// never a valid word (epoch 0 encodes with nonzero check bits), so a zeroed region has none.
pub fn encode_commit(epoch: u64) -> u64 {
    assert!(epoch <= SEQ_MAX, "epoch {epoch} beyond 48 bits");
    let raw = epoch | check16(&[0xC0, epoch]) << 48;
    debug_assert_eq!(decode_commit(raw), Some(epoch));
    raw
}

/// The epoch a commit word holds, or None when its check bits do not match.
pub fn decode_commit(raw: u64) -> Option<u64> {
    let epoch = raw & SEQ_MAX;
    (raw >> 48 == check16(&[0xC0, epoch])).then_some(epoch)
}

/// The committed sequence number (UBJ: epoch): the newest valid commit word of the two.
/// Neither valid is damage (a finding).
pub(crate) fn committed_epoch<R: Region + ?Sized>(region: &R) -> Result<u64> {
    COMMIT_OFF
        .iter()
        .filter_map(|&off| decode_commit(region.load_u64(off)))
        .max()
        .ok_or_else(|| Error::finding("nvcache: both commit words fail their check bits"))
}

/// Most bytes of a backing path record's path (UBJ's record runs from offset 512 to the end
/// of its superblock's 4 KiB block; the write cache's, shorter, checks its own room).
pub const PATH_BYTES_MAX: usize = 4096 - 512 - 8;

/// The backing path record: where the backing file was at create (absolute), so that commands
/// need only the image. It is a hint, not a promise: the label's identity decides whether a
/// file is this cache's backing device, and `--backing FILE` names a moved one.
pub fn encode_path(path: &str) -> Result<Vec<u8>> {
    let bytes = path.as_bytes();
    if bytes.is_empty() || bytes.len() > PATH_BYTES_MAX || bytes.contains(&0) {
        return Err(Error::bad(format!(
            "backing path {path:?}: must be 1 to {PATH_BYTES_MAX} bytes without NUL"
        )));
    }
    let mut b = Vec::with_capacity(8 + bytes.len());
    b.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    b.extend_from_slice(&crc32c::crc32c(bytes).to_le_bytes());
    b.extend_from_slice(bytes);
    b.resize(b.len().div_ceil(8) * 8, 0);
    debug_assert_eq!(decode_path(&b).ok().as_deref(), Some(path));
    Ok(b)
}

/// The backing path a record holds (`b` from PATH_OFF to the block's end), naming what is wrong.
pub fn decode_path(b: &[u8]) -> Result<String> {
    let len = u32::from_le_bytes(b[0..4].try_into().unwrap()) as usize;
    if len == 0 || len > PATH_BYTES_MAX || b.len() < 8 + len {
        return Err(Error::bad(format!(
            "nvcache superblock: backing path record of {len} bytes"
        )));
    }
    let bytes = &b[8..8 + len];
    if u32::from_le_bytes(b[4..8].try_into().unwrap()) != crc32c::crc32c(bytes) {
        return Err(Error::bad(
            "nvcache superblock: backing path record fails its checksum",
        ));
    }
    String::from_utf8(bytes.to_vec())
        .map_err(|_| Error::bad("nvcache superblock: backing path is not UTF-8"))
}

/// The label in the backing device's last block: which cache it belongs to, so that a cache is
/// never attached to the wrong disk. It travels with a copy of the backing file and survives a
/// detach (the file system on the other blocks never sees it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label {
    pub identity: u128,
    /// Blocks before the label (the blocks the cache exports).
    pub blocks: u64,
    /// True after `detach`: the backing device alone is the whole state.
    pub detached: bool,
}

impl Label {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; LABEL_BYTES];
        b[0..8].copy_from_slice(&LABEL_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&LABEL_VERSION.to_le_bytes());
        b[12..28].copy_from_slice(&self.identity.to_le_bytes());
        b[28..36].copy_from_slice(&self.blocks.to_le_bytes());
        b[36] = u8::from(self.detached);
        let crc = crc32c::crc32c(&b[..40]);
        b[40..44].copy_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(Label::decode(&b).ok(), Some(*self));
        b
    }

    pub fn decode(b: &[u8]) -> Result<Label> {
        if b.len() < 44 || b[0..8] != LABEL_MAGIC.to_le_bytes() {
            return Err(Error::bad(
                "the backing device's last block holds no nvcache label",
            ));
        }
        let crc = u32::from_le_bytes(b[40..44].try_into().unwrap());
        if crc != crc32c::crc32c(&b[..40]) || b[36] > 1 {
            return Err(Error::bad(
                "the backing device's nvcache label fails its checksum",
            ));
        }
        if b[8..12] != LABEL_VERSION.to_le_bytes() {
            return Err(Error::bad(
                "the backing device's nvcache label has another version",
            ));
        }
        Ok(Label {
            identity: u128::from_le_bytes(b[12..28].try_into().unwrap()),
            blocks: u64::from_le_bytes(b[28..36].try_into().unwrap()),
            detached: b[36] == 1,
        })
    }
}
