//! The state file (docs/format.md section 11): a header, two slots of counters, then every page
//! with its spare area, as the chip would hold them. Each codec sits beside its decoder.
//!
//! - The header (4 KiB) holds the geometry, the FTL's settings and the timing, under a CRC-32C.
//! - Counters (statistics, not data) are saved at flush and close, into the older of two slots,
//!   each with a generation and a CRC-32C, so a process killed while saving keeps the other.
//! - Page p lives at `pages_offset + p x (data + spare)`: its data, then its spare area (logical
//!   page and role, sequence number, CRC-32C of the data and those 12 bytes, the rest 0xFF).
//!   An erased page is all 0xFF. A page is written with one `pwrite`, an erase with one.

use crate::ftl::{FtlConfig, FtlKind, Merges};
use crate::geometry::{Geometry, Timing};
use crate::nand::{Counters, Media, Oob, Scan};
use nvstack_core::error::{Error, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

pub const MAGIC: &[u8; 8] = b"NVSFLASH";
pub const VERSION: u32 = 1;
pub const HEADER_BYTES: u64 = 4096;
/// Bytes of the header the checksum covers (the CRC follows them).
const HEADER_BODY_BYTES: usize = 112;
/// Bytes the FTL uses of a spare area.
pub const OOB_BYTES: usize = 16;
/// Bit 31 of the spare area's first word: the page was written as a log page.
const LOG_BIT: u32 = 1 << 31;
/// Counter slot: generation, 10 totals, then the arrays, then a CRC-32C.
const TOTALS: usize = 10;

/// What the header says: everything needed to open the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub geo: Geometry,
    pub ftl: FtlConfig,
    pub timing: Timing,
}

/// Where things are in a file of this header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub counters_offset: u64,
    pub slot_bytes: u64,
    pub pages_offset: u64,
    pub file_bytes: u64,
}

impl Header {
    pub fn layout(&self) -> Layout {
        let g = &self.geo;
        let body = 8 + 8 * TOTALS as u64 + 4 * (u64::from(g.blocks) + 2 * g.pages()) + 4;
        let slot_bytes = body.next_multiple_of(4096);
        let pages_offset = HEADER_BYTES + 2 * slot_bytes;
        Layout {
            counters_offset: HEADER_BYTES,
            slot_bytes,
            pages_offset,
            file_bytes: pages_offset + g.pages() * u64::from(g.page_raw_bytes()),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let (g, t, l) = (&self.geo, &self.timing, self.layout());
        let mut b = Vec::with_capacity(HEADER_BYTES as usize);
        b.extend_from_slice(MAGIC);
        let kind = match self.ftl.kind {
            FtlKind::LogBlock => 1u32,
            FtlKind::Page => 2,
        };
        for w in [
            VERSION,
            kind,
            g.page_data_bytes,
            g.page_spare_bytes,
            g.pages_per_block,
        ] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        for w in [g.blocks, g.spare_blocks, self.ftl.log_blocks] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        for w in [t.read_ns, t.program_ns, t.erase_ns, t.transfer_ps_per_byte] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        for w in [t.supply_mv, t.read_ua, t.program_ua, t.erase_ua] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        for w in [l.counters_offset, l.pages_offset, l.file_bytes] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        assert_eq!(
            b.len(),
            HEADER_BODY_BYTES,
            "the header body's fields fill it exactly"
        );
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b.resize(HEADER_BYTES as usize, 0);
        debug_assert_eq!(
            Header::decode(&b).ok(),
            Some(*self),
            "the header round-trips"
        );
        b
    }

    /// The header of `b`, checked in order: magic, version, checksum, settings, layout.
    pub fn decode(b: &[u8]) -> Result<Header> {
        if b.len() < HEADER_BODY_BYTES + 4 || &b[..8] != MAGIC {
            return Err(Error::bad(
                "not an nvstack flash state file (no NVSFLASH magic)",
            ));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if u32_at(8) != VERSION {
            return Err(Error::bad(format!(
                "flash state file version {} (this nvstack reads version {VERSION})",
                u32_at(8)
            )));
        }
        if u32_at(HEADER_BODY_BYTES) != crc32c::crc32c(&b[..HEADER_BODY_BYTES]) {
            return Err(Error::bad("the header is damaged (checksum mismatch)"));
        }
        let kind = match u32_at(12) {
            1 => FtlKind::LogBlock,
            2 => FtlKind::Page,
            k => {
                return Err(Error::bad(format!(
                    "the header names FTL kind {k}, unknown"
                )))
            }
        };
        let h = Header {
            geo: Geometry {
                page_data_bytes: u32_at(16),
                page_spare_bytes: u32_at(20),
                pages_per_block: u32_at(24),
                blocks: u32_at(28),
                spare_blocks: u32_at(32),
            },
            ftl: FtlConfig {
                kind,
                log_blocks: u32_at(36),
            },
            timing: Timing {
                read_ns: u64_at(40),
                program_ns: u64_at(48),
                erase_ns: u64_at(56),
                transfer_ps_per_byte: u64_at(64),
                supply_mv: u32_at(72),
                read_ua: u32_at(76),
                program_ua: u32_at(80),
                erase_ua: u32_at(84),
            },
        };
        h.ftl
            .validate(&h.geo)
            .map_err(|e| Error::bad(format!("the header's settings are refused: {e}")))?;
        let l = h.layout();
        if (u64_at(88), u64_at(96), u64_at(104))
            != (l.counters_offset, l.pages_offset, l.file_bytes)
        {
            return Err(Error::bad("the header's offsets do not match its geometry"));
        }
        Ok(h)
    }
}

/// The counters a file keeps: the chip's, the merges, and the host's requests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Saved {
    pub counters: Counters,
    pub merges: Merges,
    pub host_reads: u64,
    pub host_writes: u64,
}

impl Saved {
    pub fn new(geo: &Geometry) -> Saved {
        Saved {
            counters: Counters::new(geo),
            ..Saved::default()
        }
    }

    fn encode(&self, generation: u64, slot_bytes: u64) -> Vec<u8> {
        let (c, m) = (&self.counters, &self.merges);
        let mut b = Vec::with_capacity(slot_bytes as usize);
        b.extend_from_slice(&generation.to_le_bytes());
        let totals = [c.reads, c.programs, c.erases, m.switch, m.partial, m.full];
        for w in totals
            .into_iter()
            .chain([m.recovery, m.copies, self.host_reads, self.host_writes])
        {
            b.extend_from_slice(&w.to_le_bytes());
        }
        for xs in [&c.block_erases, &c.page_reads, &c.page_programs] {
            for x in xs.iter() {
                b.extend_from_slice(&x.to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        assert!(
            b.len() as u64 <= slot_bytes,
            "a counter slot holds its counters"
        );
        b.resize(slot_bytes as usize, 0);
        b
    }

    /// A slot's generation and counters, or None when its checksum fails.
    fn decode(b: &[u8], geo: &Geometry) -> Option<(u64, Saved)> {
        let n = 8 + 8 * TOTALS + 4 * (geo.blocks as usize + 2 * geo.pages() as usize);
        let crc = u32::from_le_bytes(b[n..n + 4].try_into().ok()?);
        if crc != crc32c::crc32c(&b[..n]) {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[8 + 8 * i..16 + 8 * i].try_into().unwrap());
        let mut at = 8 + 8 * TOTALS;
        let mut array = |len: usize| -> Vec<u32> {
            let v = (0..len)
                .map(|i| u32::from_le_bytes(b[at + 4 * i..at + 4 * i + 4].try_into().unwrap()))
                .collect();
            at += 4 * len;
            v
        };
        let block_erases = array(geo.blocks as usize);
        let page_reads = array(geo.pages() as usize);
        let page_programs = array(geo.pages() as usize);
        let counters = Counters {
            reads: u64_at(0),
            programs: u64_at(1),
            erases: u64_at(2),
            block_erases,
            page_reads,
            page_programs,
        };
        let merges = Merges {
            switch: u64_at(3),
            partial: u64_at(4),
            full: u64_at(5),
            recovery: u64_at(6),
            copies: u64_at(7),
        };
        let gen = u64::from_le_bytes(b[..8].try_into().unwrap());
        Some((
            gen,
            Saved {
                counters,
                merges,
                host_reads: u64_at(8),
                host_writes: u64_at(9),
            },
        ))
    }
}

/// An open state file: the header, and the newest saved counters with their generation.
pub struct StateFile {
    pub file: File,
    pub header: Header,
    pub layout: Layout,
    pub generation: u64,
}

fn io(path: &Path, what: &str) -> impl Fn(std::io::Error) -> Error {
    let (path, what) = (path.display().to_string(), what.to_string());
    move |e| Error::env(format!("{path}: {what}: {e}"))
}

impl StateFile {
    /// Write a new state file: header, zero counters, every page erased. `file` is new and
    /// empty (the caller created it, refusing an existing one without --force, and locked it).
    pub fn create(file: File, path: &Path, header: Header) -> Result<StateFile> {
        header.ftl.validate(&header.geo)?;
        let layout = header.layout();
        let e = io(path, "cannot write the state file");
        file.set_len(0).map_err(&e)?;
        file.write_all_at(&header.encode(), 0).map_err(&e)?;
        let zero = Saved::new(&header.geo);
        for (slot, gen) in [(0u64, 1u64), (1, 0)] {
            let at = layout.counters_offset + slot * layout.slot_bytes;
            file.write_all_at(&zero.encode(gen, layout.slot_bytes), at)
                .map_err(&e)?;
        }
        let chunk = vec![0xffu8; 1 << 20];
        let mut at = layout.pages_offset;
        while at < layout.file_bytes {
            let n = chunk.len().min((layout.file_bytes - at) as usize);
            file.write_all_at(&chunk[..n], at).map_err(&e)?;
            at += n as u64;
        }
        file.sync_all().map_err(&e)?;
        Ok(StateFile {
            file,
            header,
            layout,
            generation: 1,
        })
    }

    /// Open a state file (locked by the caller): the header checked, the file's length, and
    /// the newest intact counter slot. Anything damaged is refused, naming it.
    pub fn open(file: File, path: &Path) -> Result<(StateFile, Saved)> {
        let bad = |m: String| Error::bad(format!("{}: {m}", path.display()));
        let len = file.metadata().map_err(io(path, "cannot read"))?.len();
        let mut head = vec![0u8; HEADER_BYTES.min(len) as usize];
        file.read_exact_at(&mut head, 0)
            .map_err(io(path, "cannot read"))?;
        let header = Header::decode(&head).map_err(|e| bad(e.to_string()))?;
        let layout = header.layout();
        if len != layout.file_bytes {
            return Err(bad(format!(
                "the file has {len} bytes; its header's geometry needs {} (truncated or extended)",
                layout.file_bytes
            )));
        }
        let mut best: Option<(u64, Saved)> = None;
        for slot in 0..2 {
            let mut b = vec![0u8; layout.slot_bytes as usize];
            let at = layout.counters_offset + slot * layout.slot_bytes;
            file.read_exact_at(&mut b, at)
                .map_err(io(path, "cannot read"))?;
            if let Some((gen, saved)) = Saved::decode(&b, &header.geo) {
                if best.as_ref().is_none_or(|(g, _)| gen > *g) {
                    best = Some((gen, saved));
                }
            }
        }
        let (generation, saved) =
            best.ok_or_else(|| bad("both counter slots are damaged (checksum mismatch)".into()))?;
        Ok((
            StateFile {
                file,
                header,
                layout,
                generation,
            },
            saved,
        ))
    }

    /// Save the counters into the older slot (the newer stays intact if this write is cut).
    pub fn save(&mut self, saved: &Saved, path: &Path) -> Result<()> {
        self.generation += 1;
        let slot = self.generation % 2;
        let at = self.layout.counters_offset + slot * self.layout.slot_bytes;
        let b = saved.encode(self.generation, self.layout.slot_bytes);
        self.file
            .write_all_at(&b, at)
            .map_err(io(path, "cannot save the counters"))
    }
}

/// Encode a page's spare area (`spare` bytes long) for `data`.
pub fn encode_oob(data: &[u8], oob: Oob, spare: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(spare);
    assert!(
        oob.lpn < LOG_BIT,
        "a logical page number leaves the role bit free"
    );
    let word = oob.lpn | if oob.log { LOG_BIT } else { 0 };
    b.extend_from_slice(&word.to_le_bytes());
    b.extend_from_slice(&oob.seq.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(data), &b);
    b.extend_from_slice(&crc.to_le_bytes());
    b.resize(spare, 0xff);
    debug_assert_eq!(
        decode_oob(data, &b),
        Scan::Valid(oob),
        "the spare area round-trips"
    );
    b
}

/// What a page's data and spare area say.
pub fn decode_oob(data: &[u8], spare: &[u8]) -> Scan {
    if spare.iter().all(|&x| x == 0xff) && data.iter().all(|&x| x == 0xff) {
        return Scan::Erased;
    }
    let word = u32::from_le_bytes(spare[..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(spare[12..16].try_into().expect("4 bytes"));
    if crc != crc32c::crc32c_append(crc32c::crc32c(data), &spare[..12]) {
        return Scan::Torn;
    }
    Scan::Valid(Oob {
        lpn: word & !LOG_BIT,
        log: word & LOG_BIT != 0,
        seq: u64::from_le_bytes(spare[4..12].try_into().expect("8 bytes")),
    })
}

/// Pages in the state file.
pub struct FileMedia {
    file: File,
    geo: Geometry,
    pages_offset: u64,
    buf: Vec<u8>,
    /// The block the scan at open read whole, to read each block with one call.
    scanned: Option<(u32, Vec<u8>)>,
}

impl FileMedia {
    pub fn new(file: File, header: &Header) -> FileMedia {
        FileMedia {
            file,
            geo: header.geo,
            pages_offset: header.layout().pages_offset,
            buf: Vec::new(),
            scanned: None,
        }
    }

    fn at(&self, ppn: u32) -> u64 {
        self.pages_offset + u64::from(ppn) * u64::from(self.geo.page_raw_bytes())
    }

    fn err(e: std::io::Error) -> Error {
        Error::env(format!("flash state file: {e}"))
    }
}

impl Media for FileMedia {
    fn program(&mut self, ppn: u32, data: &[u8], oob: Oob) -> Result<()> {
        assert_eq!(
            data.len(),
            self.geo.page_data_bytes as usize,
            "a whole page"
        );
        self.buf.clear();
        self.buf.extend_from_slice(data);
        let spare = encode_oob(data, oob, self.geo.page_spare_bytes as usize);
        self.buf.extend_from_slice(&spare);
        self.file
            .write_all_at(&self.buf, self.at(ppn))
            .map_err(FileMedia::err)
    }

    fn read(&mut self, ppn: u32, data: &mut [u8]) -> Result<()> {
        self.file
            .read_exact_at(data, self.at(ppn))
            .map_err(FileMedia::err)
    }

    fn erase(&mut self, block: u32) -> Result<()> {
        let ppb = self.geo.pages_per_block;
        let bytes = ppb as usize * self.geo.page_raw_bytes() as usize;
        let ones = vec![0xffu8; bytes];
        self.file
            .write_all_at(&ones, self.at(block * ppb))
            .map_err(FileMedia::err)
    }

    fn scan(&mut self, ppn: u32) -> Result<Scan> {
        let ppb = self.geo.pages_per_block;
        let raw = self.geo.page_raw_bytes() as usize;
        let block = ppn / ppb;
        if self.scanned.as_ref().is_none_or(|(b, _)| *b != block) {
            let mut b = vec![0u8; ppb as usize * raw];
            self.file
                .read_exact_at(&mut b, self.at(block * ppb))
                .map_err(FileMedia::err)?;
            self.scanned = Some((block, b));
        }
        let (_, bytes) = self.scanned.as_ref().expect("just read");
        let page = &bytes[(ppn % ppb) as usize * raw..][..raw];
        let data_bytes = self.geo.page_data_bytes as usize;
        Ok(decode_oob(&page[..data_bytes], &page[data_bytes..]))
    }
}
