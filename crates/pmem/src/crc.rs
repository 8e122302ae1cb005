//! CRC-32C (Castagnoli) with the SSE4.2 `crc32` instruction on three interleaved streams: the
//! checksum the write cache computes on its one-fence commit path (its entry's CRC over a
//! 512-byte sector is the commit record, docs/format.md 12.5).
//!
//! Why not the `crc32c` crate alone: it interleaves three streams only from 768 bytes on, so a
//! 512-byte sector ran as one chain of 64 dependent `crc32` instructions (3 cycles each on AMD
//! Zen 3 and most Intel cores): about 60 ns of a 512 B write. Here every 504 bytes are three
//! 168-byte streams run side by side and joined by a table that shifts a CRC register over 168
//! zero bytes; the result is the same CRC-32C (the tests compare it with the crate's on every
//! length and alignment). Without SSE4.2 the crate computes it.
//!
//! The one `unsafe` is the call into the SSE4.2 function after the CPU was found to have it.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};

/// Bytes of one of the three streams (a multiple of 8).
#[cfg(target_arch = "x86_64")]
const STREAM_BYTES: usize = 168;
/// CRC-32C's polynomial, bit-reflected (the `crc32` instruction's).
#[cfg(target_arch = "x86_64")]
const POLY: u32 = 0x82f6_3b78;

#[cfg(target_arch = "x86_64")]
/// The register after `bytes` zero bytes more, for each of 32 single-bit registers.
const fn shifted_bits(bytes: usize) -> [u32; 32] {
    let mut out = [0u32; 32];
    let mut bit = 0;
    while bit < 32 {
        let mut r = 1u32 << bit;
        let mut step = 0;
        while step < 8 * bytes {
            r = if r & 1 != 0 { (r >> 1) ^ POLY } else { r >> 1 };
            step += 1;
        }
        out[bit] = r;
        bit += 1;
    }
    out
}

#[cfg(target_arch = "x86_64")]
/// `SHIFT[i][b]`: the register whose byte `i` is `b` (others 0) after `STREAM_BYTES` zero
/// bytes. The shift is linear, so a register's is the XOR of its four bytes'.
const SHIFT: [[u32; 256]; 4] = {
    let bits = shifted_bits(STREAM_BYTES);
    let mut t = [[0u32; 256]; 4];
    let mut i = 0;
    while i < 4 {
        let mut b = 0;
        while b < 256 {
            let mut v = 0u32;
            let mut k = 0;
            while k < 8 {
                if b & (1 << k) != 0 {
                    v ^= bits[8 * i + k];
                }
                k += 1;
            }
            t[i][b] = v;
            b += 1;
        }
        i += 1;
    }
    t
};

#[cfg(target_arch = "x86_64")]
fn shift(r: u64) -> u64 {
    let r = r as u32;
    let v = SHIFT[0][(r & 0xff) as usize]
        ^ SHIFT[1][(r >> 8 & 0xff) as usize]
        ^ SHIFT[2][(r >> 16 & 0xff) as usize]
        ^ SHIFT[3][(r >> 24) as usize];
    u64::from(v)
}

#[cfg(target_arch = "x86_64")]
fn word(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("8 bytes"))
}

/// CRC-32C of `data` continuing `crc` (as `crc32c::crc32c_append`: 0 starts a new one).
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2 (checked just above), the only feature the function
        // enables; it takes no pointers.
        return unsafe { crc32c_sse42(crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

/// CRC-32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn crc32c_sse42(crc: u32, data: &[u8]) -> u32 {
    let mut r0 = u64::from(!crc);
    let mut triples = data.chunks_exact(3 * STREAM_BYTES);
    for t in &mut triples {
        let (a, bc) = t.split_at(STREAM_BYTES);
        let (b, c) = bc.split_at(STREAM_BYTES);
        let (mut r1, mut r2) = (0u64, 0u64);
        let words = a
            .chunks_exact(8)
            .zip(b.chunks_exact(8))
            .zip(c.chunks_exact(8));
        for ((x, y), z) in words {
            r0 = _mm_crc32_u64(r0, word(x));
            r1 = _mm_crc32_u64(r1, word(y));
            r2 = _mm_crc32_u64(r2, word(z));
        }
        // The CRC register is linear: the three streams' registers joined over the bytes
        // after each.
        r0 = shift(r0) ^ r1;
        r0 = shift(r0) ^ r2;
    }
    let mut words = triples.remainder().chunks_exact(8);
    for x in &mut words {
        r0 = _mm_crc32_u64(r0, word(x));
    }
    let mut r = r0 as u32;
    for &b in words.remainder() {
        r = _mm_crc32_u8(r, b);
    }
    !r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equals_the_crate_on_every_length_and_alignment() {
        let data: Vec<u8> = (0..2200u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for start in 0..9 {
            for len in (0..1600).chain([2048, 2100]) {
                let d = &data[start..start + len];
                assert_eq!(crc32c(d), crc32c::crc32c(d), "start {start} len {len}");
                let c = 0x1234_5678;
                assert_eq!(crc32c_append(c, d), crc32c::crc32c_append(c, d));
            }
        }
        assert_eq!(crc32c(b"123456789"), 0xe306_9283, "the check value");
    }

    #[test]
    fn a_flipped_bit_in_any_stream_changes_it() {
        let mut d = vec![7u8; 512];
        let c = crc32c(&d);
        for bit in (0..512 * 8).step_by(61) {
            d[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(crc32c(&d), c, "bit {bit}");
            d[bit / 8] ^= 1 << (bit % 8);
        }
    }
}
