//! Mapping-table entries: one 8-byte word per logical block.
//!
//! ```text
//! bits  0..32  vpn      physical data page (0 when unmapped)
//! bits 32..54  gen      22-bit generation, +1 on every change of this entry (never 0 once
//!                       written: it runs 1..=2^22-1 and wraps to 1)
//! bit  54      mapped   0: the block reads as zeros (never written, or discarded)
//! bit  55      present  always 1 in a valid entry, so an all-zero word is damage
//! bits 56..64  check    CRC-8 of (lba, bits 0..56)
//! ```
//! "Never written" is the valid entry {unmapped, gen 0}; format writes it into every slot.
//! The generation makes successive values of one entry distinct, which readers use as a
//! seqlock (an unchanged entry across a page copy proves the page was not recycled). The check
//! bits, keyed by the LBA, catch a flipped bit, a zeroed word, or a word written to the wrong
//! entry.

const GEN_BITS: u32 = 22;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;
const MAPPED_BIT: u64 = 1 << 54;
const PRESENT_BIT: u64 = 1 << 55;
const BODY_MASK: u64 = (1 << 56) - 1;

/// An entry word whose check bits do not match (a flipped bit, or a word of another LBA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CorruptEntry;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub vpn: Option<u32>,
    pub gen: u32,
}

/// CRC-8 (polynomial 0x2F, initial value 0xFF, no reflection, no final xor) over the 15 bytes
/// LBA (8, little-endian) then entry body (7, little-endian): as for any CRC-8 with this
/// polynomial, every single-bit flip and every burst of up to 8 bits in the word is detected.
const CRC8_POLY: u8 = 0x2f;
/// Bytes the check covers: the LBA's 8, then the body's 7.
const CHECKED_BYTES: usize = 15;

/// CRC-8 of one byte with a zero register: the classic byte table.
const fn crc8_byte(mut c: u8) -> u8 {
    let mut k = 0;
    while k < 8 {
        c = if c & 0x80 != 0 {
            (c << 1) ^ CRC8_POLY
        } else {
            c << 1
        };
        k += 1;
    }
    c
}

/// Position tables: `CRC8_AT[p][v]` is what byte value `v` at position `p` of the 15 contributes
/// to the CRC. The CRC is affine over GF(2), so the check bits are `CRC8_ZEROS` (the CRC of 15
/// zero bytes, which carries the initial 0xFF) xor one lookup per byte. Why not the byte-serial
/// loop: its 15 dependent lookups sat between the map entry's load and its store on every
/// write (48 ns for a decode and an encode, measured); 15 independent lookups overlap.
const CRC8_AT: [[u8; 256]; CHECKED_BYTES] = {
    let mut t = [[0u8; 256]; CHECKED_BYTES];
    let mut v = 0;
    while v < 256 {
        // The byte at position p is followed by CHECKED_BYTES - 1 - p zero bytes.
        let mut c = crc8_byte(v as u8);
        let mut p = CHECKED_BYTES;
        while p > 0 {
            p -= 1;
            t[p][v] = c;
            c = crc8_byte(c);
        }
        v += 1;
    }
    t
};

const CRC8_ZEROS: u8 = {
    let mut c: u8 = 0xff;
    let mut i = 0;
    while i < CHECKED_BYTES {
        c = crc8_byte(c);
        i += 1;
    }
    c
};

fn check_bits(lba: u64, body: u64) -> u64 {
    let mut c = CRC8_ZEROS;
    let mut i = 0;
    while i < 8 {
        c ^= CRC8_AT[i][(lba >> (8 * i)) as u8 as usize];
        i += 1;
    }
    while i < CHECKED_BYTES {
        c ^= CRC8_AT[i][(body >> (8 * (i - 8))) as u8 as usize];
        i += 1;
    }
    c as u64
}

impl Entry {
    /// The entry of a block that was never written.
    pub const NEVER_WRITTEN: Entry = Entry { vpn: None, gen: 0 };

    pub fn encode(self, lba: u64) -> u64 {
        let mut body = PRESENT_BIT | (self.gen as u64 & GEN_MASK) << 32;
        if let Some(v) = self.vpn {
            body |= MAPPED_BIT | v as u64;
        }
        let raw = body | (check_bits(lba, body) << 56);
        // Pair assertion: what we write must decode to itself.
        debug_assert_eq!(Entry::decode(lba, raw), Ok(self));
        raw
    }

    /// Decode the entry of `lba`; Err(CorruptEntry) when the check bits do not match.
    pub fn decode(lba: u64, raw: u64) -> Result<Entry, CorruptEntry> {
        let body = raw & BODY_MASK;
        if raw >> 56 != check_bits(lba, body) || body & PRESENT_BIT == 0 {
            return Err(CorruptEntry);
        }
        let gen = ((body >> 32) & GEN_MASK) as u32;
        let vpn = (body & MAPPED_BIT != 0).then_some(body as u32);
        if vpn.is_none() && body as u32 != 0 {
            return Err(CorruptEntry); // an unmapped entry carries no page number
        }
        if vpn.is_some() && gen == 0 {
            return Err(CorruptEntry); // generation 0 is only ever "never written"
        }
        Ok(Entry { vpn, gen })
    }

    /// Decode a word that was checked when it entered DRAM (the map mirror: a word decoded at
    /// open, or one [`Entry::encode`] produced), skipping the check bits: the fields only.
    /// Err for the zero word, which the mirror holds for an entry that failed its check at
    /// open. Tests (debug builds) still verify the check bits against `lba`.
    #[inline]
    pub fn decode_checked_before(lba: u64, raw: u64) -> Result<Entry, CorruptEntry> {
        if raw & PRESENT_BIT == 0 {
            return Err(CorruptEntry);
        }
        let body = raw & BODY_MASK;
        let gen = ((body >> 32) & GEN_MASK) as u32;
        let vpn = (body & MAPPED_BIT != 0).then_some(body as u32);
        let e = Entry { vpn, gen };
        debug_assert_eq!(Entry::decode(lba, raw), Ok(e), "mirror word of LBA {lba}");
        Ok(e)
    }

    /// The next value of this entry: mapped to `vpn` (or unmapped), generation + 1.
    pub fn next(self, vpn: Option<u32>) -> Entry {
        let mut gen = (self.gen + 1) & GEN_MASK as u32;
        if gen == 0 {
            gen = 1; // generation 0 means "never written"
        }
        Entry { vpn, gen }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check bits the straightforward way: one byte at a time through the register.
    fn check_bits_serial(lba: u64, body: u64) -> u64 {
        let mut c: u8 = 0xff;
        for &b in lba.to_le_bytes().iter().chain(&body.to_le_bytes()[..7]) {
            c = crc8_byte(c ^ b);
        }
        c as u64
    }

    #[test]
    fn position_tables_equal_the_serial_crc() {
        // A fixed message, then random ones, then every single body bit.
        let msg = *b"123456789012345";
        let lba = u64::from_le_bytes(msg[..8].try_into().unwrap());
        let mut body_bytes = [0u8; 8];
        body_bytes[..7].copy_from_slice(&msg[8..]);
        let body = u64::from_le_bytes(body_bytes);
        assert_eq!(check_bits(lba, body), check_bits_serial(lba, body));
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (lba, body) = (x.rotate_left(17), x & BODY_MASK);
            assert_eq!(check_bits(lba, body), check_bits_serial(lba, body));
        }
        for bit in 0..56 {
            assert_eq!(check_bits(3, 1 << bit), check_bits_serial(3, 1 << bit));
        }
        assert_eq!(check_bits(0, 0), CRC8_ZEROS as u64);
    }

    #[test]
    fn roundtrip_and_detection() {
        let e = Entry {
            vpn: Some(12345),
            gen: 77,
        };
        let raw = e.encode(9);
        assert_eq!(Entry::decode(9, raw), Ok(e));
        assert!(
            Entry::decode(10, raw).is_err(),
            "entry of another LBA must not decode"
        );
        let mut flips_caught = 0;
        for bit in 0..64 {
            if Entry::decode(9, raw ^ (1 << bit)).is_err() {
                flips_caught += 1;
            }
        }
        assert_eq!(flips_caught, 64, "every single-bit flip is caught");
        let u = Entry { vpn: None, gen: 3 };
        assert_eq!(Entry::decode(5, u.encode(5)), Ok(u));
        assert!(Entry::decode(5, 0).is_err(), "a zeroed word is damage");
        let nw = Entry::NEVER_WRITTEN.encode(5);
        assert_eq!(Entry::decode(5, nw), Ok(Entry::NEVER_WRITTEN));
        assert!(Entry::decode(5, !0).is_err());
        assert_eq!(
            Entry {
                vpn: None,
                gen: GEN_MASK as u32
            }
            .next(None)
            .gen,
            1
        );
    }
}
