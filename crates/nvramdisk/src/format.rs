//! Formatting a region, and reading its two superblock copies (docs/format.md section 3).
//!
//! [`SuperblockCopies`] is the one place that decodes and judges the copies: the device's open
//! insists they agree ([`SuperblockCopies::agreed`]), `nvstack recover` rewrites a single
//! damaged copy from the intact one ([`SuperblockCopies::repairable`]), and `nvstack check`
//! reports each copy and goes on from an intact one ([`SuperblockCopies::intact`]).

use super::entry::Entry;
use super::journal::{LBA_NULL, PAPER_L1, PAPER_L2};
use super::layout::{superblock_offsets, Geometry, Protocol, Superblock, SB_USED_BYTES};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::ordering::{self, OrderingPolicy};
use nvstack_pmem::Region;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

#[derive(Clone)]
pub struct FormatOptions {
    pub block_bytes: u32,
    pub lanes: u32,
    pub protocol: Protocol,
    pub ordering: OrderingPolicy,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            block_bytes: super::layout::BLOCK_BYTES_DEFAULT,
            lanes: super::layout::LANES_DEFAULT,
            protocol: Protocol::Fast,
            ordering: ordering::policy_by_name(ordering::DEFAULT_POLICY)
                .expect("the default policy exists"),
        }
    }
}

/// Both superblock copies of an image (copy 1 at offset 0, copy 2 in the last page), each
/// decoded on its own.
pub struct SuperblockCopies {
    pub region_bytes: u64,
    /// The first SB_USED_BYTES of each copy, as read.
    pub bytes: [Vec<u8>; 2],
    /// Each copy decoded, or why it is damaged.
    pub decoded: [std::result::Result<Superblock, String>; 2],
}

impl SuperblockCopies {
    /// Decode the copies read from an image of `region_bytes`.
    pub fn decode(bytes: [Vec<u8>; 2], region_bytes: u64) -> SuperblockCopies {
        debug_assert!(bytes.iter().all(|copy| copy.len() == SB_USED_BYTES));
        let decoded = [
            Superblock::decode(&bytes[0], region_bytes),
            Superblock::decode(&bytes[1], region_bytes),
        ];
        SuperblockCopies {
            region_bytes,
            bytes,
            decoded,
        }
    }

    /// Read both copies out of a region.
    pub fn read_region<R: Region + ?Sized>(region: &R) -> SuperblockCopies {
        let offsets = superblock_offsets(region.len());
        let bytes = offsets.map(|offset| {
            let mut copy = vec![0u8; SB_USED_BYTES];
            region.read(offset, &mut copy);
            copy
        });
        SuperblockCopies::decode(bytes, region.len())
    }

    /// Read both copies out of an image file of `len` bytes with plain reads (nothing mapped,
    /// so a short file gets an error, not SIGBUS).
    pub fn read_file(file: &File, path: &Path, len: u64) -> Result<SuperblockCopies> {
        let mut bytes = [vec![0u8; SB_USED_BYTES], vec![0u8; SB_USED_BYTES]];
        for (copy, offset) in bytes.iter_mut().zip(superblock_offsets(len)) {
            file.read_exact_at(copy, offset).map_err(|e| {
                Error::bad(format!(
                    "{}: cannot read superblock at {offset}: {e}",
                    path.display()
                ))
            })?;
        }
        Ok(SuperblockCopies::decode(bytes, len))
    }

    pub fn offsets(&self) -> [u64; 2] {
        superblock_offsets(self.region_bytes)
    }

    /// The rule of an open: both copies valid and equal. The error says which copy is damaged
    /// and whether `nvstack recover` can repair it.
    pub fn agreed(&self) -> Result<Superblock> {
        let offset2 = self.offsets()[1];
        match &self.decoded {
            [Ok(first), Ok(second)] if first == second => Ok(*first),
            [Ok(_), Ok(_)] => Err(Error::bad(
                "the two superblock copies are valid but disagree: run `nvstack check` to see them",
            )),
            [Err(e1), Err(e2)] => Err(Error::bad(if e1 == e2 {
                e1.clone()
            } else {
                format!("superblock copy 1 (offset 0): {e1}; copy 2 (offset {offset2}): {e2}")
            })),
            _ => {
                let (good, why) = self.repairable().expect("exactly one copy is damaged");
                Err(Error::bad(format!(
                    "{}; copy {} is intact, so `nvstack recover IMAGE` can repair it",
                    self.damage(1 - good, why),
                    good + 1
                )))
            }
        }
    }

    /// "superblock copy N (offset O) is damaged: WHY", for copy index `copy`.
    fn damage(&self, copy: usize, why: &str) -> String {
        let offset = self.offsets()[copy];
        format!(
            "superblock copy {} (offset {offset}) is damaged: {why}",
            copy + 1
        )
    }

    /// Each copy's state: "copy N (offset O): ok", or its damage.
    pub fn describe(&self) -> [String; 2] {
        let offsets = self.offsets();
        [0, 1].map(|i| match &self.decoded[i] {
            Ok(_) => format!("copy {} (offset {}): ok", i + 1, offsets[i]),
            Err(e) => format!("copy {} (offset {}): {e}", i + 1, offsets[i]),
        })
    }

    /// When exactly one copy is damaged: (the intact copy's index, why the other is damaged).
    pub fn repairable(&self) -> Option<(usize, &str)> {
        match &self.decoded {
            [Ok(_), Err(e)] => Some((0, e)),
            [Err(e), Ok(_)] => Some((1, e)),
            _ => None,
        }
    }

    /// The superblock of an intact copy (copy 1 when both are), its index, and the damage
    /// found (a damaged copy, or two valid copies that disagree). Err when neither copy is
    /// valid, naming copy 1's damage.
    pub fn intact(&self) -> Result<(Superblock, usize, Vec<String>)> {
        match &self.decoded {
            [Err(e), Err(_)] => Err(Error::bad(format!("no valid superblock copy: {e}"))),
            [Ok(first), Ok(second)] => {
                let findings = if first == second {
                    vec![]
                } else {
                    vec!["the two superblock copies are valid but disagree".to_string()]
                };
                Ok((*first, 0, findings))
            }
            _ => {
                let (good, why) = self.repairable().expect("exactly one copy is damaged");
                let sb = *self.decoded[good].as_ref().expect("the intact copy");
                Ok((sb, good, vec![self.damage(1 - good, why)]))
            }
        }
    }
}

fn random_uuid() -> [u8; 16] {
    let mut uuid = [0u8; 16];
    if let Ok(mut urandom) = File::open("/dev/urandom") {
        use std::io::Read;
        if urandom.read_exact(&mut uuid).is_ok() {
            return uuid;
        }
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    uuid.copy_from_slice(&now.as_nanos().to_le_bytes());
    uuid
}

/// Write a fresh, empty image onto `region` (every block reads as zeros).
pub fn format_region<R: Region + ?Sized>(
    region: &R,
    options: &FormatOptions,
) -> Result<Superblock> {
    ordering::check_available_on(&options.ordering, region)?;
    let geo = Geometry::compute(region.len(), options.block_bytes, options.lanes)?;
    write_empty_metadata(region, &geo, options.protocol);
    let sb = Superblock {
        geometry: geo,
        protocol: options.protocol,
        ordering_id: options.ordering.id,
        uuid: random_uuid(),
        created_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let bytes = sb.encode();
    // Metadata first, then copy 2, then copy 1: copy 1 is the format's commit point.
    let [offset1, offset2] = superblock_offsets(region.len());
    region.fence();
    region.write_nt(offset2, &bytes);
    region.fence();
    region.write_nt(offset1, &bytes);
    region.fence();
    // Pair assertion: what was written reads back as the same valid image.
    let back = SuperblockCopies::read_region(region)
        .agreed()
        .expect("freshly formatted image must validate");
    assert_eq!(
        back, sb,
        "superblock read back differs from the one written"
    );
    Ok(sb)
}

/// Journal slots that read as zeros ("no record"), every map entry "never written", and for
/// the paper protocol both LBA replicas NULL (the paper's initial state S0; LBA 0 is a block).
fn write_empty_metadata<R: Region + ?Sized>(region: &R, geo: &Geometry, protocol: Protocol) {
    const CHUNK_BYTES: usize = 1 << 20;
    let zeros = vec![0u8; CHUNK_BYTES];
    let mut offset = geo.journal_off;
    while offset < geo.map_off {
        let len = (geo.map_off - offset).min(CHUNK_BYTES as u64);
        region.write_nt(offset, &zeros[..len as usize]);
        offset += len;
    }
    let mut chunk = vec![0u8; CHUNK_BYTES];
    let mut lba = 0u64;
    while lba < geo.blocks {
        let count = (geo.blocks - lba).min(CHUNK_BYTES as u64 / 8);
        let words = chunk[..count as usize * 8].chunks_exact_mut(8);
        for (i, word) in words.enumerate() {
            let entry = Entry::NEVER_WRITTEN.encode(lba + i as u64);
            word.copy_from_slice(&entry.to_le_bytes());
        }
        region.write_nt(geo.map_entry_off(lba), &chunk[..count as usize * 8]);
        lba += count;
    }
    if protocol == Protocol::Paper {
        for lane in 0..geo.lanes {
            let slot = geo.slot_off(lane);
            region.store_u64_nt(slot + PAPER_L1, LBA_NULL);
            region.store_u64_nt(slot + PAPER_L2, LBA_NULL);
        }
    }
    debug_assert_eq!(
        region.load_u64(geo.map_entry_off(geo.blocks - 1)),
        Entry::NEVER_WRITTEN.encode(geo.blocks - 1)
    );
}
