//! Blocks that name themselves: what the oracle writes, and how a block read back is decoded
//! (zeros, a version of its own LBA, or why it is neither). Every oracle judges decoded
//! versions only, so this is shared by all of them and by the demo (`nvstack demo`).

/// Contents of block `lba` at `version`: a stamp (lba, version, crc32c of both and of the
/// rest), then a pattern derived from both, so that a torn, misplaced or stale block is
/// recognised.
pub fn block(lba: u64, version: u64, bytes: usize) -> Vec<u8> {
    let mut b = vec![0u8; bytes];
    fill_block(lba, version, &mut b);
    b
}

pub fn fill_block(lba: u64, version: u64, b: &mut [u8]) {
    debug_assert!(
        b.len() > STAMP_BYTES,
        "a block holds its stamp and a pattern"
    );
    let mut x =
        lba.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version.wrapping_mul(0xd6e8_feb8_6659_fd93);
    for c in b[STAMP_BYTES..].chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
    }
    let stamp = Stamp {
        lba,
        version,
        crc: block_crc(lba, version, &b[STAMP_BYTES..]),
    };
    b[..STAMP_BYTES].copy_from_slice(&stamp.to_bytes());
    // Pair assertion, write side: what is encoded decodes to the same block and version.
    debug_assert_eq!(Stamp::from_bytes(b), stamp);
    debug_assert_eq!(decode_block(lba, b), Ok(Some(version)));
}

/// Bytes of a block's stamp: LBA, version, then the CRC32C of the three.
const STAMP_BYTES: usize = 20;

/// The CRC32C of a block's LBA, version and pattern. The LBA and version are covered too: a
/// block torn between two versions (one's stamp words, the other's pattern) must not read as
/// either.
fn block_crc(lba: u64, version: u64, pattern: &[u8]) -> u32 {
    let head = crc32c::crc32c(&lba.to_le_bytes());
    let head = crc32c::crc32c_append(head, &version.to_le_bytes());
    crc32c::crc32c_append(head, pattern)
}

/// The head of every block the oracle writes: who wrote it, and the checksum of the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    lba: u64,
    version: u64,
    crc: u32,
}

impl Stamp {
    fn to_bytes(self) -> [u8; STAMP_BYTES] {
        let mut s = [0u8; STAMP_BYTES];
        s[0..8].copy_from_slice(&self.lba.to_le_bytes());
        s[8..16].copy_from_slice(&self.version.to_le_bytes());
        s[16..20].copy_from_slice(&self.crc.to_le_bytes());
        s
    }

    /// The stamp at the head of block `b`.
    fn from_bytes(b: &[u8]) -> Stamp {
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Stamp {
            lba: word(0),
            version: word(8),
            crc: u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")),
        }
    }
}

/// Why a block read back is neither zeros nor a version of its own LBA. The texts are the
/// report's (docs/crashtest.md 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// The block's stamp names another LBA: a misdirected write or a page mapped twice.
    #[error("holds LBA {holds_lba}'s contents")]
    Misplaced { holds_lba: u64 },
    /// The checksum over the stamp and the pattern fails: the block is torn.
    #[error("torn: its checksum fails")]
    Torn,
}

/// What a block holds: None for zeros, Some(version), or the reason it is neither.
pub fn decode_block(lba: u64, b: &[u8]) -> Result<Option<u64>, BlockError> {
    debug_assert!(b.len() > STAMP_BYTES, "a block holds a stamp and a pattern");
    if b.iter().all(|&x| x == 0) {
        return Ok(None);
    }
    let stamp = Stamp::from_bytes(b);
    // Pair assertion, read side: the stamp decoded encodes to the bytes read.
    debug_assert_eq!(stamp.to_bytes(), b[..STAMP_BYTES]);
    if stamp.lba != lba {
        return Err(BlockError::Misplaced {
            holds_lba: stamp.lba,
        });
    }
    if stamp.crc != block_crc(stamp.lba, stamp.version, &b[STAMP_BYTES..]) {
        return Err(BlockError::Torn);
    }
    Ok(Some(stamp.version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_roundtrip_and_tearing_is_seen() {
        let b = block(7, 3, 512);
        assert_eq!(decode_block(7, &b), Ok(Some(3)));
        let misplaced = decode_block(8, &b);
        assert_eq!(misplaced, Err(BlockError::Misplaced { holds_lba: 7 }));
        // The report's texts (docs/crashtest.md 5).
        assert_eq!(misplaced.unwrap_err().to_string(), "holds LBA 7's contents");
        let mut t = b.clone();
        t[300..].copy_from_slice(&block(7, 4, 512)[300..]);
        assert_eq!(decode_block(7, &t), Err(BlockError::Torn));
        assert_eq!(BlockError::Torn.to_string(), "torn: its checksum fails");
        assert_eq!(decode_block(7, &[0u8; 512]), Ok(None));
        // Torn at the version word: version 4's stamp words over version 3's pattern (and the
        // other way round) is neither version. (The checksum once covered the pattern only,
        // and this read as version 4.)
        let newer = block(7, 4, 512);
        let mut t = b.clone();
        t[..16].copy_from_slice(&newer[..16]);
        assert_eq!(decode_block(7, &t), Err(BlockError::Torn));
        let mut t = newer.clone();
        t[8..16].copy_from_slice(&b[8..16]);
        assert_eq!(decode_block(7, &t), Err(BlockError::Torn));
    }
}
