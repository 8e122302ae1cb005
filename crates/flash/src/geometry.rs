//! The chip's shape and its datasheet constants: every number the model uses is a field here,
//! so a caller can model another part by changing fields, not code.
//!
//! The defaults are the seed's class of device (seed 004: 64 MB of NAND under a log-block FTL):
//! a 512 Mbit small-block SLC NAND such as Samsung's K9F1208U0C, 512 + 16 bytes per page, 32
//! pages per block, 4,096 blocks. Its constants come from a datasheet of the same class and
//! geometry, Numonyx NAND512W3A2S (512 Mbit, 528-byte pages, 4,096 blocks, 3 V), and the
//! Numonyx 3 V DC table; docs/flash.md cites both and lists every value.

use nvstack_core::error::Error;
use std::fmt;

/// A setting the model refuses, named as the structs spell it; the program maps each to its
/// flag (`--page-size` and so on), so the library never guesses how its caller spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    PageDataBytes,
    PageSpareBytes,
    PagesPerBlock,
    Blocks,
    SpareBlocks,
    LogBlocks,
}

impl Field {
    pub fn name(self) -> &'static str {
        match self {
            Field::PageDataBytes => "page_data_bytes",
            Field::PageSpareBytes => "page_spare_bytes",
            Field::PagesPerBlock => "pages_per_block",
            Field::Blocks => "blocks",
            Field::SpareBlocks => "spare_blocks",
            Field::LogBlocks => "log_blocks",
        }
    }
}

/// A refused setting: the field and what is wrong with it (the text follows the field's name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub field: Field,
    pub text: String,
}

impl Invalid {
    fn new(field: Field, text: String) -> Invalid {
        Invalid { field, text }
    }

    /// The message with the field spelled by `name` (a flag, for the program).
    pub fn render(&self, name: &dyn Fn(Field) -> &'static str) -> String {
        format!("{} {}", name(self.field), self.text)
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&Field::name))
    }
}

impl From<Invalid> for Error {
    fn from(e: Invalid) -> Error {
        Error::bad(e)
    }
}

/// Page sizes a geometry may have: powers of two from 512 B to 16 KiB.
pub const PAGE_DATA_BYTES_MIN: u32 = 512;
pub const PAGE_DATA_BYTES_MAX: u32 = 16 << 10;
/// The FTL keeps 16 bytes of its own in each page's spare area (logical page, role, sequence
/// number, checksum: docs/format.md section 11), so a spare area holds at least that.
pub const PAGE_SPARE_BYTES_MIN: u32 = 16;
pub const PAGE_SPARE_BYTES_MAX: u32 = 4096;
/// Pages per block: a power of two up to 256 (the log-block FTL keeps a page's place in a
/// block in a byte-sized map entry plus one "none" value, so 256 is its ceiling).
pub const PAGES_PER_BLOCK_MAX: u32 = 256;
/// Every physical page number fits in a `u32` with room for the "none" marker.
pub const PAGES_MAX: u64 = 1 << 31;
/// Blocks kept out of the logical space beyond the log blocks: one for a merge's new data
/// block, one for the merge that recovery may have to finish after a crash in the middle of
/// a merge (which holds the first one).
pub const SPARE_BLOCKS_BEYOND_LOGS: u32 = 2;

/// The chip's shape. Logical capacity = (blocks - spare_blocks) x pages_per_block pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    pub page_data_bytes: u32,
    pub page_spare_bytes: u32,
    pub pages_per_block: u32,
    pub blocks: u32,
    /// Blocks the FTL keeps out of the logical space: its log blocks and merge targets
    /// (log-block FTL) or its over-provisioning (page-mapped FTL).
    pub spare_blocks: u32,
}

impl Geometry {
    /// The seed's device: K9F1208-class small-block SLC, 64 MiB, with the spare blocks the
    /// default 64 log blocks need.
    pub const SMALL_BLOCK: Geometry = Geometry {
        page_data_bytes: 512,
        page_spare_bytes: 16,
        pages_per_block: 32,
        blocks: 4096,
        spare_blocks: LOG_BLOCKS_DEFAULT + SPARE_BLOCKS_BEYOND_LOGS,
    };

    /// A large-block part: `page_data_bytes` pages with 1/32 of it as spare (64 bytes for 2 KiB
    /// pages, 128 for 4 KiB, as large-block datasheets have), 64 pages a block, 64 MiB (512
    /// blocks of 2 KiB pages, 256 of 4 KiB) but at least [`LARGE_BLOCK_BLOCKS_MIN`] blocks, so
    /// that 8 and 16 KiB pages still leave room beside the default log blocks (128, 256 MiB).
    pub fn large_block(page_data_bytes: u32) -> Geometry {
        let pages_per_block = 64;
        let block_bytes = u64::from(page_data_bytes.max(1)) * pages_per_block;
        Geometry {
            page_data_bytes,
            page_spare_bytes: page_data_bytes / 32,
            pages_per_block: pages_per_block as u32,
            blocks: ((64u64 << 20) / block_bytes).max(u64::from(LARGE_BLOCK_BLOCKS_MIN)) as u32,
            spare_blocks: LOG_BLOCKS_DEFAULT + SPARE_BLOCKS_BEYOND_LOGS,
        }
    }

    pub fn pages(&self) -> u64 {
        u64::from(self.blocks) * u64::from(self.pages_per_block)
    }

    pub fn logical_blocks(&self) -> u32 {
        self.blocks - self.spare_blocks
    }

    pub fn logical_pages(&self) -> u64 {
        u64::from(self.logical_blocks()) * u64::from(self.pages_per_block)
    }

    /// Bytes a page occupies with its spare area (what one program or read moves on the bus).
    pub fn page_raw_bytes(&self) -> u32 {
        self.page_data_bytes + self.page_spare_bytes
    }

    /// The shape alone: sizes in range and a logical space of at least one block.
    pub fn validate(&self) -> Result<(), Invalid> {
        let p = self.page_data_bytes;
        if !p.is_power_of_two() || !(PAGE_DATA_BYTES_MIN..=PAGE_DATA_BYTES_MAX).contains(&p) {
            return Err(Invalid::new(
                Field::PageDataBytes,
                format!("{p}: must be a power of two from 512 to 16384 bytes"),
            ));
        }
        let s = self.page_spare_bytes;
        if !(PAGE_SPARE_BYTES_MIN..=PAGE_SPARE_BYTES_MAX).contains(&s) {
            return Err(Invalid::new(
                Field::PageSpareBytes,
                format!("{s}: must be 16 to 4096 bytes (the FTL keeps 16 bytes there)"),
            ));
        }
        let n = self.pages_per_block;
        if !n.is_power_of_two() || !(2..=PAGES_PER_BLOCK_MAX).contains(&n) {
            return Err(Invalid::new(
                Field::PagesPerBlock,
                format!("{n}: must be a power of two from 2 to {PAGES_PER_BLOCK_MAX}"),
            ));
        }
        if self.blocks == 0 || self.pages() > PAGES_MAX {
            return Err(Invalid::new(
                Field::Blocks,
                format!(
                    "{}: must be at least 1, and blocks x pages per block at most 2^31",
                    self.blocks
                ),
            ));
        }
        if self.spare_blocks >= self.blocks {
            return Err(Invalid::new(
                Field::SpareBlocks,
                format!(
                    "{}: leaves no logical block (the device has {} blocks)",
                    self.spare_blocks, self.blocks
                ),
            ));
        }
        Ok(())
    }
}

/// The fewest blocks a large-block default has (four times the default spare blocks, rounded).
pub const LARGE_BLOCK_BLOCKS_MIN: u32 = 256;

/// The log blocks of Kim et al.'s FTL unless told otherwise (seed 004 used 64).
pub const LOG_BLOCKS_DEFAULT: u32 = 64;

/// Time and power of one part. Times are per operation as the datasheet states them; the bus
/// moves one byte per `transfer_ps_per_byte` (its serial access cycle), data and spare alike.
/// Energy is E = V x I x t per operation, with t the operation's time as [`Timing::read_ns`]
/// and its siblings compute it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Timing {
    /// tR: cell array to page register.
    pub read_ns: u64,
    /// tPROG: page register to cells.
    pub program_ns: u64,
    /// tBERS: one block erase.
    pub erase_ns: u64,
    /// Serial access cycle (tRC, tWC), picoseconds a byte.
    pub transfer_ps_per_byte: u64,
    /// Supply voltage, millivolts.
    pub supply_mv: u32,
    /// Operating current while reading, programming, erasing, microamperes.
    pub read_ua: u32,
    pub program_ua: u32,
    pub erase_ua: u32,
}

impl Timing {
    /// Small-block 3 V class (NAND512W3A2S, K9F1208U0C class): tR 12 us (max, random
    /// access), 30 ns serial access, tPROG 200 us (typ), tBERS 2 ms (typ); 3.3 V and the 3 V
    /// family's typical operating current of 10 mA for read, program and erase.
    pub const SMALL_BLOCK: Timing = Timing {
        read_ns: 12_000,
        program_ns: 200_000,
        erase_ns: 2_000_000,
        transfer_ps_per_byte: 30_000,
        supply_mv: 3_300,
        read_ua: 10_000,
        program_ua: 10_000,
        erase_ua: 10_000,
    };

    /// Large-block 3 V class (NAND02G-B2D: 2 KiB pages): tR 25 us (max), 25 ns serial
    /// access, tPROG 200 us (typ), tBERS 1.5 ms (typ); the same supply and current as above.
    pub const LARGE_BLOCK: Timing = Timing {
        read_ns: 25_000,
        program_ns: 200_000,
        erase_ns: 1_500_000,
        transfer_ps_per_byte: 25_000,
        supply_mv: 3_300,
        read_ua: 10_000,
        program_ua: 10_000,
        erase_ua: 10_000,
    };

    /// The class a page size belongs to: 512-byte pages are small-block parts.
    pub fn for_geometry(geo: &Geometry) -> Timing {
        if geo.page_data_bytes <= 512 {
            Timing::SMALL_BLOCK
        } else {
            Timing::LARGE_BLOCK
        }
    }

    fn transfer_ns(&self, geo: &Geometry) -> u64 {
        (u64::from(geo.page_raw_bytes()) * self.transfer_ps_per_byte).div_ceil(1000)
    }

    /// One page read: tR, then the page and its spare out over the bus.
    pub fn page_read_ns(&self, geo: &Geometry) -> u64 {
        self.read_ns + self.transfer_ns(geo)
    }

    /// One page program: the page and its spare in over the bus, then tPROG.
    pub fn page_program_ns(&self, geo: &Geometry) -> u64 {
        self.transfer_ns(geo) + self.program_ns
    }

    pub fn block_erase_ns(&self) -> u64 {
        self.erase_ns
    }

    /// Device time of these counts of operations, ns.
    pub fn time_ns(&self, geo: &Geometry, reads: u64, programs: u64, erases: u64) -> u64 {
        reads * self.page_read_ns(geo)
            + programs * self.page_program_ns(geo)
            + erases * self.block_erase_ns()
    }

    /// Energy of these counts, joules: V x I x t per operation kind.
    pub fn energy_j(&self, geo: &Geometry, reads: u64, programs: u64, erases: u64) -> f64 {
        let v = f64::from(self.supply_mv) * 1e-3;
        let joules =
            |ua: u32, ns: u64, n: u64| v * f64::from(ua) * 1e-6 * ns as f64 * 1e-9 * n as f64;
        joules(self.read_ua, self.page_read_ns(geo), reads)
            + joules(self.program_ua, self.page_program_ns(geo), programs)
            + joules(self.erase_ua, self.block_erase_ns(), erases)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_seeds_64_mib_small_block_part() {
        let g = Geometry::SMALL_BLOCK;
        g.validate().unwrap();
        assert_eq!(g.pages() * u64::from(g.page_data_bytes), 64 << 20);
        assert_eq!(g.page_raw_bytes(), 528);
        for p in [2048, 4096] {
            let l = Geometry::large_block(p);
            l.validate().unwrap();
            assert_eq!(l.pages() * u64::from(p), 64 << 20);
            assert_eq!(l.pages_per_block, 64);
        }
        for p in [8192, 16384] {
            let l = Geometry::large_block(p);
            l.validate().unwrap();
            assert_eq!(
                l.blocks, LARGE_BLOCK_BLOCKS_MIN,
                "room beside the default log blocks"
            );
        }
    }

    #[test]
    fn bad_shapes_name_their_field() {
        let g = Geometry::SMALL_BLOCK;
        for (bad, field) in [
            (
                Geometry {
                    page_data_bytes: 1000,
                    ..g
                },
                Field::PageDataBytes,
            ),
            (
                Geometry {
                    page_data_bytes: 256,
                    ..g
                },
                Field::PageDataBytes,
            ),
            (
                Geometry {
                    page_data_bytes: 32 << 10,
                    ..g
                },
                Field::PageDataBytes,
            ),
            (
                Geometry {
                    page_spare_bytes: 8,
                    ..g
                },
                Field::PageSpareBytes,
            ),
            (
                Geometry {
                    pages_per_block: 48,
                    ..g
                },
                Field::PagesPerBlock,
            ),
            (
                Geometry {
                    pages_per_block: 512,
                    ..g
                },
                Field::PagesPerBlock,
            ),
            (Geometry { blocks: 0, ..g }, Field::Blocks),
            (
                Geometry {
                    spare_blocks: 4096,
                    ..g
                },
                Field::SpareBlocks,
            ),
        ] {
            let e = bad.validate().unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.to_string().starts_with(field.name()), "{e}");
        }
    }

    #[test]
    fn time_and_energy_follow_v_times_i_times_t() {
        let g = Geometry::SMALL_BLOCK;
        let t = Timing::SMALL_BLOCK;
        // 528 bytes at 30 ns = 15,840 ns on the bus.
        assert_eq!(t.page_read_ns(&g), 12_000 + 15_840);
        assert_eq!(t.page_program_ns(&g), 15_840 + 200_000);
        assert_eq!(t.time_ns(&g, 2, 3, 1), 2 * 27_840 + 3 * 215_840 + 2_000_000);
        // One erase: 3.3 V x 10 mA x 2 ms = 66 uJ.
        let e = t.energy_j(&g, 0, 0, 1);
        assert!((e - 66e-6).abs() < 1e-12, "{e}");
        let sum = t.energy_j(&g, 2, 3, 1);
        let parts = 2.0 * t.energy_j(&g, 1, 0, 0) + 3.0 * t.energy_j(&g, 0, 1, 0) + e;
        assert!((sum - parts).abs() < 1e-12);
    }
}
