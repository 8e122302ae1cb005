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

/// CRC-8 (polynomial 0x2F) over the LBA and the entry body: as for any CRC-8 with this
/// polynomial, every single-bit flip and every burst of up to 8 bits in the word is detected.
const CRC8_TABLE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u8;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x80 != 0 {
                (c << 1) ^ 0x2f
            } else {
                c << 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

fn check_bits(lba: u64, body: u64) -> u64 {
    let mut c: u8 = 0xff;
    for b in lba
        .to_le_bytes()
        .iter()
        .chain(body.to_le_bytes()[..7].iter())
    {
        c = CRC8_TABLE[(c ^ b) as usize];
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
