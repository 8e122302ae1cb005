//! On-media layout of an nvramdisk image: geometry and the superblock (docs/format.md).

use nvstack_core::error::{Error, Result};

pub const MAGIC: [u8; 8] = *b"NVSTKDSK";
pub const FORMAT_VERSION: u32 = 1;
/// Each superblock copy occupies one 4 KiB page; the first SB_USED_BYTES hold fields.
pub const SB_PAGE_BYTES: u64 = 4096;
pub const SB_USED_BYTES: usize = 128;
/// One journal slot per lane.
pub const SLOT_BYTES: u64 = 4096;
/// The largest atomic write, in blocks; also the shadow pages reserved per lane.
pub const ATOMIC_BLOCKS_MAX: usize = 64;
pub const LANES_DEFAULT: u32 = 8;
pub const LANES_MAX: u32 = 256;
pub const BLOCK_BYTES_MIN: u32 = 512;
pub const BLOCK_BYTES_MAX: u32 = 65536;
pub const BLOCK_BYTES_DEFAULT: u32 = 4096;
/// Page numbers are 32 bits in a map entry.
pub const PAGES_MAX: u64 = u32::MAX as u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// nvstack's own protocol (the default): two fences per single-block write.
    Fast,
    /// The nvramdisk paper's mapping-table journaling, Table 2, step for step.
    Paper,
}

impl Protocol {
    pub fn id(self) -> u8 {
        match self {
            Protocol::Fast => 1,
            Protocol::Paper => 2,
        }
    }
    pub fn from_id(id: u8) -> Option<Protocol> {
        match id {
            1 => Some(Protocol::Fast),
            2 => Some(Protocol::Paper),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Fast => "fast",
            Protocol::Paper => "paper",
        }
    }
    pub fn parse(s: &str) -> Result<Protocol> {
        match s {
            "fast" => Ok(Protocol::Fast),
            "paper" => Ok(Protocol::Paper),
            _ => Err(Error::bad(format!(
                "unknown protocol '{s}': expected fast or paper"
            ))),
        }
    }
}

/// Where everything lives in a region of `region_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    pub region_bytes: u64,
    pub block_bytes: u32,
    pub lanes: u32,
    /// Logical blocks exported.
    pub blocks: u64,
    /// Physical data pages: blocks + lanes x ATOMIC_BLOCKS_MAX shadow pages.
    pub pages: u64,
    pub journal_off: u64,
    pub map_off: u64,
    pub data_off: u64,
    pub sb2_off: u64,
}

/// Offsets of the two superblock copies in a region of `region_bytes`: the first page and
/// the last.
pub fn superblock_offsets(region_bytes: u64) -> [u64; 2] {
    [0, region_bytes.saturating_sub(SB_PAGE_BYTES)]
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

impl Geometry {
    /// Lay out a region. Errors name the argument that is wrong.
    pub fn compute(region_bytes: u64, block_bytes: u32, lanes: u32) -> Result<Geometry> {
        if !block_bytes.is_power_of_two()
            || !(BLOCK_BYTES_MIN..=BLOCK_BYTES_MAX).contains(&block_bytes)
        {
            return Err(Error::bad(format!(
                "bad block size {block_bytes}: must be a power of two from {BLOCK_BYTES_MIN} to \
                 {BLOCK_BYTES_MAX}"
            )));
        }
        if lanes == 0 || lanes > LANES_MAX {
            return Err(Error::bad(format!(
                "bad lane count {lanes}: must be 1 to {LANES_MAX}"
            )));
        }
        let align = (block_bytes as u64).max(4096);
        if !region_bytes.is_multiple_of(align) {
            return Err(Error::bad(format!(
                "bad size {region_bytes}: must be a multiple of {align} bytes"
            )));
        }
        let b = block_bytes as u64;
        let reserve = lanes as u64 * ATOMIC_BLOCKS_MAX as u64;
        let journal_off = SB_PAGE_BYTES;
        let map_off = journal_off + lanes as u64 * SLOT_BYTES;
        let sb2_off = superblock_offsets(region_bytes)[1];
        let fits = |blocks: u64| -> Option<Geometry> {
            let data_off = round_up(map_off + round_up(blocks * 8, 4096), align);
            let pages = blocks + reserve;
            let end = data_off.checked_add(pages.checked_mul(b)?)?;
            (end <= sb2_off && pages <= PAGES_MAX).then_some(Geometry {
                region_bytes,
                block_bytes,
                lanes,
                blocks,
                pages,
                journal_off,
                map_off,
                data_off,
                sb2_off,
            })
        };
        debug_assert!(map_off.is_multiple_of(4096) && journal_off == SB_PAGE_BYTES);
        let fixed = map_off + SB_PAGE_BYTES + reserve * b + 2 * align;
        let mut blocks = region_bytes.saturating_sub(fixed) / (b + 8);
        blocks = blocks.min(PAGES_MAX - reserve);
        while blocks > 0 {
            if let Some(g) = fits(blocks) {
                // Take any slack the estimate left.
                let mut g = g;
                while let Some(bigger) = fits(g.blocks + 1) {
                    g = bigger;
                }
                assert!(g.map_off + g.map_bytes() <= g.data_off, "map overlaps data");
                assert!(
                    g.data_off + g.pages * b <= g.sb2_off,
                    "data overlaps superblock 2"
                );
                return Ok(g);
            }
            blocks -= 1;
        }
        let need = fits_min(map_off, reserve, b, align);
        Err(Error::bad(format!(
            "size {region_bytes} bytes leaves no room for data: {lanes} lanes of metadata and \
             shadow pages need at least {need} bytes with {block_bytes}-byte blocks"
        )))
    }

    /// The smallest region (a multiple of the alignment) whose geometry exports at least
    /// `blocks` blocks: what to pass to format for a device of a given capacity.
    pub fn region_bytes_for(blocks: u64, block_bytes: u32, lanes: u32) -> Result<u64> {
        let align = (block_bytes as u64).max(4096);
        let b = block_bytes as u64;
        let meta = SB_PAGE_BYTES + lanes as u64 * SLOT_BYTES + round_up(blocks * 8, 4096);
        let pages = blocks + lanes as u64 * ATOMIC_BLOCKS_MAX as u64;
        // An upper bound first, then shrink while the geometry still holds `blocks`.
        let mut hi = round_up(meta + pages * b + SB_PAGE_BYTES, align) + 2 * align;
        let g = Geometry::compute(hi, block_bytes, lanes)?;
        assert!(
            g.blocks >= blocks,
            "upper bound {hi} too small for {blocks} blocks"
        );
        while hi > align {
            match Geometry::compute(hi - align, block_bytes, lanes) {
                Ok(g) if g.blocks >= blocks => hi -= align,
                _ => break,
            }
        }
        Ok(hi)
    }

    pub fn slot_off(&self, lane: u32) -> u64 {
        assert!(lane < self.lanes);
        self.journal_off + lane as u64 * SLOT_BYTES
    }

    pub fn map_entry_off(&self, lba: u64) -> u64 {
        assert!(lba < self.blocks, "lba {lba} >= {}", self.blocks);
        self.map_off + lba * 8
    }

    pub fn page_off(&self, vpn: u32) -> u64 {
        assert!((vpn as u64) < self.pages, "vpn {vpn} >= {}", self.pages);
        self.data_off + vpn as u64 * self.block_bytes as u64
    }

    pub fn map_bytes(&self) -> u64 {
        self.blocks * 8
    }

    /// Fraction of the region that is exported as blocks.
    pub fn usable_fraction(&self) -> f64 {
        (self.blocks * self.block_bytes as u64) as f64 / self.region_bytes as f64
    }
}

fn fits_min(map_off: u64, reserve: u64, b: u64, align: u64) -> u64 {
    round_up(map_off + 4096, align) + (reserve + 1) * b + SB_PAGE_BYTES
}

/// The fields of one superblock copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Superblock {
    pub geometry: Geometry,
    pub protocol: Protocol,
    pub ordering_id: u8,
    pub uuid: [u8; 16],
    pub created_unix_s: u64,
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}
fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

impl Superblock {
    pub fn encode(&self) -> [u8; SB_USED_BYTES] {
        let b = self.encode_unchecked();
        // Pair assertion (the write): the bytes decode to this superblock.
        debug_assert_eq!(
            Superblock::decode(&b, self.geometry.region_bytes).as_ref(),
            Ok(self)
        );
        b
    }

    /// The encoding, without the pair assertion (which `decode`'s own uses).
    fn encode_unchecked(&self) -> [u8; SB_USED_BYTES] {
        let g = &self.geometry;
        let mut b = [0u8; SB_USED_BYTES];
        b[0..8].copy_from_slice(&MAGIC);
        put_u32(&mut b, 8, FORMAT_VERSION);
        put_u32(&mut b, 12, SB_USED_BYTES as u32);
        put_u64(&mut b, 16, g.region_bytes);
        put_u32(&mut b, 24, g.block_bytes);
        put_u32(&mut b, 28, g.lanes);
        put_u64(&mut b, 32, g.blocks);
        put_u64(&mut b, 40, g.pages);
        put_u64(&mut b, 48, g.journal_off);
        put_u64(&mut b, 56, g.map_off);
        put_u64(&mut b, 64, g.data_off);
        put_u64(&mut b, 72, g.sb2_off);
        b[80] = self.protocol.id();
        b[81] = self.ordering_id;
        // 82..84 flags (0), 84..88 slot bytes
        put_u32(&mut b, 84, SLOT_BYTES as u32);
        b[88..104].copy_from_slice(&self.uuid);
        put_u64(&mut b, 104, self.created_unix_s);
        let crc = crc32c::crc32c(&b[..124]);
        put_u32(&mut b, 124, crc);
        b
    }

    /// Decode and validate one copy. `file_bytes` is the image's actual length. The error
    /// names the first thing wrong, checked in the order magic, version, checksum, geometry.
    pub fn decode(b: &[u8], file_bytes: u64) -> std::result::Result<Superblock, String> {
        assert!(b.len() >= SB_USED_BYTES);
        decode_header(b)?;
        let geometry = decode_geometry(b, file_bytes)?;
        let protocol =
            Protocol::from_id(b[80]).ok_or_else(|| format!("unknown protocol id {}", b[80]))?;
        let ordering_id = b[81];
        if nvstack_pmem::ordering::policy_by_id(ordering_id).is_none() {
            return Err(format!("unknown ordering id {ordering_id}"));
        }
        if get_u32(b, 84) as u64 != SLOT_BYTES {
            return Err(format!("unsupported journal slot size {}", get_u32(b, 84)));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[88..104]);
        let sb = Superblock {
            geometry,
            protocol,
            ordering_id,
            uuid,
            created_unix_s: get_u64(b, 104),
        };
        // Pair assertion (the read): a valid copy re-encodes to the bytes read.
        debug_assert!(
            sb.encode_unchecked()[..] == b[..SB_USED_BYTES],
            "superblock re-encodes differently"
        );
        Ok(sb)
    }
}

/// The copy's self-description: magic, version, checksum, size, flags, reserved bytes.
fn decode_header(b: &[u8]) -> std::result::Result<(), String> {
    debug_assert!(b.len() >= SB_USED_BYTES);
    if b[0..8] != MAGIC {
        return Err(format!(
            "bad magic {:02x?} (expected \"NVSTKDSK\"): not an nvstack image",
            &b[0..8]
        ));
    }
    let version = get_u32(b, 8);
    if version != FORMAT_VERSION {
        return Err(format!(
            "unsupported format version {version} (this nvstack reads version {FORMAT_VERSION})"
        ));
    }
    let crc = get_u32(b, 124);
    let want = crc32c::crc32c(&b[..124]);
    if crc != want {
        return Err(format!("bad checksum {crc:#010x} (computed {want:#010x})"));
    }
    if get_u32(b, 12) as usize != SB_USED_BYTES {
        return Err(format!(
            "unsupported superblock size {} (expected {SB_USED_BYTES})",
            get_u32(b, 12)
        ));
    }
    if b[82] != 0 || b[83] != 0 {
        return Err(format!(
            "unsupported feature flags {:#06x}",
            u16::from_le_bytes([b[82], b[83]])
        ));
    }
    if b[112..124].iter().any(|&x| x != 0) {
        return Err("reserved superblock bytes 112..124 are not zero".to_string());
    }
    Ok(())
}

/// The stored geometry, which must be the one its region size, block size and lane count
/// compute, for a file of `file_bytes`.
fn decode_geometry(b: &[u8], file_bytes: u64) -> std::result::Result<Geometry, String> {
    let region_bytes = get_u64(b, 16);
    let block_bytes = get_u32(b, 24);
    let lanes = get_u32(b, 28);
    if region_bytes != file_bytes {
        return Err(if file_bytes < region_bytes {
            format!(
                "image is truncated: superblock says {region_bytes} bytes, file has {file_bytes}"
            )
        } else {
            format!(
                "geometry mismatch: superblock says {region_bytes} bytes, file has {file_bytes}"
            )
        });
    }
    debug_assert!(b.len() >= SB_USED_BYTES);
    let computed = Geometry::compute(region_bytes, block_bytes, lanes)
        .map_err(|e| format!("geometry invalid: {e}"))?;
    let stored = Geometry {
        region_bytes,
        block_bytes,
        lanes,
        blocks: get_u64(b, 32),
        pages: get_u64(b, 40),
        journal_off: get_u64(b, 48),
        map_off: get_u64(b, 56),
        data_off: get_u64(b, 64),
        sb2_off: get_u64(b, 72),
    };
    if stored != computed {
        return Err(format!(
            "geometry mismatch: stored layout {stored:?} differs from the layout of \
             {region_bytes} bytes, {block_bytes}-byte blocks, {lanes} lanes ({computed:?})"
        ));
    }
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_gib_is_at_least_99_5_percent_usable() {
        let g = Geometry::compute(1 << 30, 4096, LANES_DEFAULT).unwrap();
        assert!(
            g.usable_fraction() >= 0.995,
            "usable {}",
            g.usable_fraction()
        );
        assert!(g.data_off + g.pages * 4096 <= g.sb2_off);
        assert!(g.map_off + g.blocks * 8 <= g.data_off);
    }

    #[test]
    fn region_bytes_for_is_the_smallest_that_fits() {
        for (blocks, bs, lanes) in [
            (1, 4096, 1),
            (64, 512, 2),
            (200, 4096, 4),
            (10_000, 8192, 8),
        ] {
            let len = Geometry::region_bytes_for(blocks, bs, lanes).unwrap();
            let g = Geometry::compute(len, bs, lanes).unwrap();
            assert!(g.blocks >= blocks);
            let align = (bs as u64).max(4096);
            let smaller = Geometry::compute(len - align, bs, lanes);
            assert!(smaller.is_err() || smaller.unwrap().blocks < blocks);
        }
    }

    #[test]
    fn geometry_rejects_bad_arguments() {
        assert!(Geometry::compute(1 << 20, 3000, 8).is_err());
        assert!(Geometry::compute(1 << 20, 4096, 0).is_err());
        assert!(Geometry::compute((1 << 20) + 100, 4096, 8).is_err());
        let e = Geometry::compute(64 << 10, 4096, 8)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no room"), "{e}");
    }

    #[test]
    fn superblock_roundtrip_and_errors() {
        let g = Geometry::compute(8 << 20, 4096, 4).unwrap();
        let sb = Superblock {
            geometry: g,
            protocol: Protocol::Paper,
            ordering_id: 4,
            uuid: [7; 16],
            created_unix_s: 1,
        };
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b, 8 << 20).unwrap(), sb);
        let mut bad = b;
        bad[0] = b'X';
        assert!(Superblock::decode(&bad, 8 << 20)
            .unwrap_err()
            .contains("magic"));
        let mut bad = b;
        bad[8] = 9;
        assert!(Superblock::decode(&bad, 8 << 20)
            .unwrap_err()
            .contains("version"));
        let mut bad = b;
        bad[40] ^= 1;
        assert!(Superblock::decode(&bad, 8 << 20)
            .unwrap_err()
            .contains("checksum"));
        assert!(Superblock::decode(&b, 4 << 20)
            .unwrap_err()
            .contains("truncated"));
    }
}
