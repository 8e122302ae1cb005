//! format, write, read, discard, check, recover.

use crate::{print_json, say, ProtocolArg};
use nvstack_core::blockdev::write_chunked;
use nvstack_core::error::{Error, Result};
use nvstack_core::size::format_size;
use nvstack_nvramdisk::check::check_image;
use nvstack_nvramdisk::image;
use nvstack_nvramdisk::{FormatOptions, OpenOptions, Protocol};
use nvstack_pmem::ordering::policy_by_name;
use nvstack_stack::image::open_nvramdisk;
use nvstack_stack::kind::{expect_nvramdisk, peek, Promise};
use nvstack_stack::{Access, Image};
use std::io::Read;
use std::path::Path;

pub fn format(
    path: &Path,
    size: u64,
    block_bytes: u32,
    lanes: u32,
    protocol: ProtocolArg,
    ordering: &str,
    force: bool,
) -> Result<i32> {
    let fo = FormatOptions {
        block_bytes,
        lanes,
        protocol: match protocol {
            ProtocolArg::Fast => Protocol::Fast,
            ProtocolArg::Paper => Protocol::Paper,
        },
        ordering: policy_by_name(ordering)?,
    };
    // The library names its parameter; the user's word for it is the flag.
    if path.exists() && !force {
        return Err(Error::bad(format!(
            "{}: file exists; pass --force to overwrite it",
            path.display()
        )));
    }
    let sb = image::format_image(path, size, &fo, force)?;
    let g = sb.geometry;
    say!(
        "formatted {}: {} region, {} blocks of {} B ({:.2} % usable), {} lanes, protocol {}, ordering {}",
        path.display(),
        format_size(size),
        g.blocks,
        g.block_bytes,
        g.usable_fraction() * 100.0,
        g.lanes,
        fo.protocol.name(),
        fo.ordering.name
    )?;
    Ok(0)
}

fn check_range(lba: u64, count: u64, blocks: u64, what: &str) -> Result<()> {
    if count == 0 {
        return Err(Error::bad(format!(
            "{what} of 0 blocks: --count must be at least 1"
        )));
    }
    if lba.checked_add(count).is_none_or(|end| end > blocks) {
        return Err(Error::bad(format!(
            "{what} of {count} blocks at LBA {lba} is out of range: the device has {blocks} blocks (LBA 0 to {})",
            blocks.saturating_sub(1)
        )));
    }
    Ok(())
}

fn read_input(input: Option<&Path>) -> Result<Vec<u8>> {
    let data = match input {
        Some(p) => std::fs::read(p)
            .map_err(|e| Error::bad(format!("{}: cannot read input: {e}", p.display())))?,
        None => {
            let mut v = Vec::new();
            std::io::stdin()
                .read_to_end(&mut v)
                .map_err(|e| Error::env(format!("stdin: {e}")))?;
            v
        }
    };
    if data.is_empty() {
        return Err(Error::bad("no data to write: the input is empty"));
    }
    Ok(data)
}

pub fn write(path: &Path, lba: u64, input: Option<&Path>, chunked: bool) -> Result<i32> {
    let s = peek(path)?;
    let b = s.block_bytes as usize;
    let one_epoch = s.promise == Promise::WholeAtFlush;
    let data = read_input(input)?;
    if data.len() % b != 0 {
        return Err(Error::bad(format!(
            "input is {} bytes, not a multiple of the block size {b}",
            data.len()
        )));
    }
    let (n, unit) = ((data.len() / b) as u64, s.unit_blocks);
    if n > unit && !chunked {
        return Err(Error::bad(format!(
            "input is {n} blocks; one {} write takes at most {unit}: pass --chunked to write it \
             as chunks of {unit}",
            if one_epoch {
                "whole (one-epoch)"
            } else {
                "atomic"
            }
        )));
    }
    check_range(lba, n, s.blocks, "write")?;
    let dev = Image::open(path, Access::Write, None)?;
    write_chunked(dev.device(), lba, &data)?;
    let how = match (n > unit, one_epoch) {
        (true, false) => format!(" (atomic chunks of {unit})"),
        (false, false) => " atomically".to_string(),
        (true, true) => format!(" (chunks of {unit}, each whole in one epoch)"),
        (false, true) => " whole in one epoch".to_string(),
    };
    match dev.close_written()? {
        Some(epoch) => eprintln!("wrote {n} blocks at LBA {lba}{how}; committed: epoch {epoch}"),
        None => eprintln!("wrote {n} blocks at LBA {lba}{how}"),
    }
    Ok(0)
}

pub fn read(path: &Path, lba: u64, count: u64, output: Option<&Path>) -> Result<i32> {
    let s = peek(path)?;
    check_range(lba, count, s.blocks, "read")?;
    let bytes = count
        .checked_mul(u64::from(s.block_bytes))
        .filter(|&n| n <= 1 << 32)
        .ok_or_else(|| {
            Error::bad(format!(
                "read of {count} blocks is more than 4 GiB: read it in parts"
            ))
        })?;
    let dev = Image::open(path, Access::ReadOnly, None)?;
    let mut buf = vec![0u8; bytes as usize];
    dev.device().read(lba, &mut buf)?;
    match output {
        Some(p) => std::fs::write(p, &buf)
            .map_err(|e| Error::env(format!("{}: cannot write output: {e}", p.display())))?,
        None => crate::output::out(&buf)?,
    }
    Ok(0)
}

pub fn discard(path: &Path, lba: u64, count: u64) -> Result<i32> {
    let s = peek(path)?;
    check_range(lba, count, s.blocks, "discard")?;
    let dev = Image::open(path, Access::Write, None)?;
    dev.device().discard(lba, count)?;
    match dev.close_written()? {
        Some(epoch) => eprintln!("discarded {count} blocks at LBA {lba}; committed: epoch {epoch}"),
        None => eprintln!("discarded {count} blocks at LBA {lba}"),
    }
    Ok(0)
}

pub fn check(path: &Path, json: bool) -> Result<i32> {
    expect_nvramdisk(path, "check it with nvstack cache check")?;
    let r = check_image(path)?;
    if json {
        print_json(&r)?;
    } else {
        say!("image     {}", r.image)?;
        say!(
            "superblock {}; {}",
            r.superblock_copies[0],
            r.superblock_copies[1]
        )?;
        say!("protocol  {}, ordering {}", r.protocol, r.ordering)?;
        say!(
            "blocks    {} logical, {} pages: {} mapped, {} free (pool minus mapped)",
            r.blocks,
            r.pages,
            r.mapped_blocks,
            r.free_pages
        )?;
        for p in &r.pending_recovery {
            say!("pending   {p}")?;
        }
        for f in &r.findings {
            say!("DAMAGE    {f}")?;
        }
        say!(
            "result    {}",
            if r.consistent {
                if r.pending_recovery.is_empty() {
                    "consistent"
                } else {
                    "consistent (an interrupted write awaits recovery)"
                }
            } else {
                "DAMAGED"
            }
        )?;
    }
    Ok(if r.consistent { 0 } else { 1 })
}

pub fn recover(path: &Path) -> Result<i32> {
    expect_nvramdisk(
        path,
        "a cache recovers at every open (nvstack cache check shows what it would do)",
    )?;
    if let Some(what) = image::repair_superblock(path)? {
        say!("repaired: {what}")?;
    }
    let disk = open_nvramdisk(path, OpenOptions::default(), Access::Write)?;
    let rep = disk.recovery_report();
    if rep.was_clean() {
        say!("{}: clean, nothing to recover", path.display())?;
    }
    for a in &rep.actions {
        say!("{a}")?;
    }
    say!(
        "{} blocks mapped, {} pages free",
        rep.mapped_blocks,
        rep.free_pages
    )?;
    Ok(0)
}
