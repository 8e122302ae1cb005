//! format, write, read, discard, check, recover.

use crate::{print_json, say, ProtocolArg};
use nvstack_core::blockdev::{write_chunked, BlockDevice};
use nvstack_core::error::{Error, Result};
use nvstack_core::size::format_size;
use nvstack_nvramdisk::check::check_image;
use nvstack_nvramdisk::image::{self, open_image, open_image_readonly};
use nvstack_nvramdisk::{FormatOptions, OpenOptions, Protocol, ATOMIC_BLOCKS_MAX};
use nvstack_pmem::ordering::policy_by_name;
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

pub fn write(path: &Path, lba: u64, input: Option<&Path>, chunked: bool) -> Result<i32> {
    let sb = image::peek(path)?;
    let b = sb.geometry.block_bytes as usize;
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
    if data.len() % b != 0 {
        return Err(Error::bad(format!(
            "input is {} bytes, not a multiple of the block size {b}",
            data.len()
        )));
    }
    let n = (data.len() / b) as u64;
    if n > ATOMIC_BLOCKS_MAX as u64 && !chunked {
        return Err(Error::bad(format!(
            "input is {n} blocks; one atomic write takes at most {ATOMIC_BLOCKS_MAX}: pass --chunked to write it as atomic chunks of {ATOMIC_BLOCKS_MAX}"
        )));
    }
    check_range(lba, n, sb.geometry.blocks, "write")?;
    let disk = open_image(path, OpenOptions::default())?;
    write_chunked(&disk, lba, &data)?;
    eprintln!(
        "wrote {n} blocks at LBA {lba}{}",
        if n > ATOMIC_BLOCKS_MAX as u64 {
            " (atomic chunks of 64)"
        } else {
            " atomically"
        }
    );
    Ok(0)
}

pub fn read(path: &Path, lba: u64, count: u64, output: Option<&Path>) -> Result<i32> {
    let disk = open_image_readonly(path, OpenOptions::default())?;
    check_range(lba, count, disk.blocks(), "read")?;
    let b = disk.block_bytes() as u64;
    let bytes = count
        .checked_mul(b)
        .filter(|&n| n <= 1 << 32)
        .ok_or_else(|| {
            Error::bad(format!(
                "read of {count} blocks is more than 4 GiB: read it in parts"
            ))
        })?;
    let mut buf = vec![0u8; bytes as usize];
    disk.read(lba, &mut buf)?;
    match output {
        Some(p) => std::fs::write(p, &buf)
            .map_err(|e| Error::env(format!("{}: cannot write output: {e}", p.display())))?,
        None => crate::output::out(&buf)?,
    }
    Ok(0)
}

pub fn discard(path: &Path, lba: u64, count: u64) -> Result<i32> {
    let sb = image::peek(path)?;
    check_range(lba, count, sb.geometry.blocks, "discard")?;
    let disk = open_image(path, OpenOptions::default())?;
    disk.discard(lba, count)?;
    eprintln!("discarded {count} blocks at LBA {lba}");
    Ok(0)
}

pub fn check(path: &Path, json: bool) -> Result<i32> {
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
    if let Some(what) = image::repair_superblock(path)? {
        say!("repaired: {what}")?;
    }
    let disk = open_image(path, OpenOptions::default())?;
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
