//! The data log beside a device trace (`nvstack serve --record-trace FILE --record-data DATA`;
//! docs/format.md section 13.1): the bytes of every write line of the trace, in the trace's
//! order, so that a replay can hold the volume's contents as they were (seed 004's FAT-aware
//! admission reads the boot sector, the FATs and the directories as the run left them at each
//! write).
//!
//! Binary, little-endian:
//!
//! | part | bytes | what |
//! |---|---|---|
//! | header | 16 | magic `NVSTDATA`, version u32 (1), block bytes u32 (the trace's) |
//! | records | ... | each `W` line's blocks, block bytes each, in the trace's line order |
//! | trailer | 32 | magic `NVSTDEND`, write lines u64, data bytes u64, CRC-32C of the data u32, CRC-32C of the trailer's first 28 bytes u32 |
//!
//! A log without its trailer (a killed daemon), of another length than its trailer says, or
//! whose data fails the checksum is refused whole.

use nvstack_core::error::{Error, Result};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub const DATA_MAGIC: &[u8; 8] = b"NVSTDATA";
pub const DATA_END_MAGIC: &[u8; 8] = b"NVSTDEND";
pub const DATA_VERSION: u32 = 1;
pub const DATA_HEADER_BYTES: u64 = 16;
pub const DATA_TRAILER_BYTES: u64 = 32;

/// The trailer's fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataTrailer {
    pub writes: u64,
    pub bytes: u64,
    pub crc: u32,
}

impl DataTrailer {
    pub fn encode(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..8].copy_from_slice(DATA_END_MAGIC);
        b[8..16].copy_from_slice(&self.writes.to_le_bytes());
        b[16..24].copy_from_slice(&self.bytes.to_le_bytes());
        b[24..28].copy_from_slice(&self.crc.to_le_bytes());
        let own = crc32c::crc32c(&b[..28]);
        b[28..].copy_from_slice(&own.to_le_bytes());
        debug_assert_eq!(DataTrailer::decode(&b), Ok(*self));
        b
    }

    pub fn decode(b: &[u8; 32]) -> std::result::Result<DataTrailer, String> {
        if &b[..8] != DATA_END_MAGIC {
            return Err("no trailer (the recording daemon did not stop cleanly)".into());
        }
        let own = u32::from_le_bytes(b[28..].try_into().expect("4 bytes"));
        if own != crc32c::crc32c(&b[..28]) {
            return Err("the trailer fails its checksum".into());
        }
        let u = |r: std::ops::Range<usize>| u64::from_le_bytes(b[r].try_into().expect("8 bytes"));
        Ok(DataTrailer {
            writes: u(8..16),
            bytes: u(16..24),
            crc: u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")),
        })
    }
}

fn header(block_bytes: u32) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(DATA_MAGIC);
    h[8..12].copy_from_slice(&DATA_VERSION.to_le_bytes());
    h[12..].copy_from_slice(&block_bytes.to_le_bytes());
    h
}

/// Writes a data log; the trace writer calls it under its own lock, so records follow the
/// trace's lines.
pub struct DataWriter {
    out: Box<dyn Write + Send>,
    trailer: DataTrailer,
}

impl DataWriter {
    pub fn new(mut out: Box<dyn Write + Send>, block_bytes: u32) -> std::io::Result<DataWriter> {
        out.write_all(&header(block_bytes))?;
        Ok(DataWriter {
            out,
            trailer: DataTrailer::default(),
        })
    }

    /// One write line's bytes.
    pub fn add(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.out.write_all(data)?;
        self.trailer.writes += 1;
        self.trailer.bytes += data.len() as u64;
        self.trailer.crc = crc32c::crc32c_append(self.trailer.crc, data);
        Ok(())
    }

    /// The trailer, then flush.
    pub fn finish(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.trailer.encode())?;
        self.out.flush()
    }
}

/// Reads a data log record by record, checked whole at open (header and trailer) and the
/// data's checksum at [`DataReader::finish`].
pub struct DataReader {
    path: PathBuf,
    input: std::io::BufReader<std::fs::File>,
    trailer: DataTrailer,
    read: DataTrailer,
}

impl DataReader {
    /// Open `path` for a trace of `block_bytes` blocks.
    pub fn open(path: &Path, block_bytes: u64) -> Result<DataReader> {
        let bad = |m: String| Error::bad(format!("{}: {m}", path.display()));
        let mut f =
            std::fs::File::open(path).map_err(|e| bad(format!("cannot open the data log: {e}")))?;
        let len = f
            .metadata()
            .map_err(|e| bad(format!("cannot read the data log: {e}")))?
            .len();
        if len < DATA_HEADER_BYTES + DATA_TRAILER_BYTES {
            return Err(bad(format!("{len} bytes: too short for a data log")));
        }
        let mut h = [0u8; 16];
        let mut t = [0u8; 32];
        f.read_exact(&mut h)
            .and_then(|()| f.seek(SeekFrom::End(-(DATA_TRAILER_BYTES as i64))))
            .and_then(|_| f.read_exact(&mut t))
            .and_then(|()| f.seek(SeekFrom::Start(DATA_HEADER_BYTES)))
            .map_err(|e| bad(format!("cannot read the data log: {e}")))?;
        if &h[..8] != DATA_MAGIC {
            return Err(bad("not a data log (magic NVSTDATA missing)".into()));
        }
        let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        if version != DATA_VERSION {
            return Err(bad(format!(
                "data log version {version}: this build reads {DATA_VERSION}"
            )));
        }
        let bb = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes"));
        if u64::from(bb) != block_bytes {
            return Err(bad(format!(
                "the data log has {bb}-byte blocks, the trace {block_bytes}: not this trace's log"
            )));
        }
        let trailer = DataTrailer::decode(&t).map_err(bad)?;
        if trailer.bytes + DATA_HEADER_BYTES + DATA_TRAILER_BYTES != len {
            return Err(bad(format!(
                "{len} bytes, the trailer says {} bytes of data: the log was cut or changed",
                trailer.bytes
            )));
        }
        Ok(DataReader {
            path: path.to_path_buf(),
            input: std::io::BufReader::with_capacity(1 << 20, f),
            trailer,
            read: DataTrailer::default(),
        })
    }

    /// The next write line's bytes into `buf` (its length: the line's blocks x block bytes).
    pub fn next_write(&mut self, buf: &mut [u8]) -> Result<()> {
        if self.read.bytes + buf.len() as u64 > self.trailer.bytes {
            return Err(Error::bad(format!(
                "{}: the trace's write {} needs more data than the log holds: not this trace's log",
                self.path.display(),
                self.read.writes + 1
            )));
        }
        self.input.read_exact(buf).map_err(|e| {
            Error::bad(format!(
                "{}: cannot read the data log: {e}",
                self.path.display()
            ))
        })?;
        self.read.writes += 1;
        self.read.bytes += buf.len() as u64;
        self.read.crc = crc32c::crc32c_append(self.read.crc, buf);
        Ok(())
    }

    /// After the trace's last line: every record read and the checksum matched.
    pub fn finish(&self) -> Result<()> {
        if self.read != self.trailer {
            return Err(Error::bad(format!(
                "{}: the trace's writes ({} lines, {} bytes, CRC-32C {:08x}) do not match the \
                 data log's ({} records, {} bytes, CRC-32C {:08x}): not this trace's log, or changed",
                self.path.display(),
                self.read.writes,
                self.read.bytes,
                self.read.crc,
                self.trailer.writes,
                self.trailer.bytes,
                self.trailer.crc
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_reads_back_and_a_cut_or_changed_log_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d");
        let f = std::fs::File::create(&p).unwrap();
        let mut w = DataWriter::new(Box::new(f), 512).unwrap();
        w.add(&[1u8; 512]).unwrap();
        w.add(&[2u8; 1024]).unwrap();
        w.finish().unwrap();
        let mut r = DataReader::open(&p, 512).unwrap();
        let mut a = [0u8; 512];
        let mut b = [0u8; 1024];
        r.next_write(&mut a).unwrap();
        r.next_write(&mut b).unwrap();
        assert!(a.iter().all(|&x| x == 1) && b.iter().all(|&x| x == 2));
        r.finish().unwrap();
        assert!(DataReader::open(&p, 4096).is_err());
        // A changed byte: caught by the data checksum at finish.
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[20] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        let mut r = DataReader::open(&p, 512).unwrap();
        r.next_write(&mut a).unwrap();
        r.next_write(&mut b).unwrap();
        assert!(r.finish().unwrap_err().to_string().contains("do not match"));
        // Cut short: no trailer.
        std::fs::write(&p, &bytes[..bytes.len() - 5]).unwrap();
        let e = DataReader::open(&p, 512).err().unwrap();
        assert_eq!(e.exit_code(), 2);
    }
}
