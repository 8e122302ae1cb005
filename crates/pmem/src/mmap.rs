//! Regions over memory mappings: a file under /dev/shm (DRAM emulating NVRAM, the default), a
//! file on a DAX file system (mapped with MAP_SYNC, so stores reach media without fsync; no DAX
//! device exists on the development machines, so that path is untested), or anonymous memory
//! (tests).
//!
//! The file's length is checked before the mapping is touched (no SIGBUS), and every mapping is
//! pre-faulted when created so that no later timing measures page faults.

use super::{cpu, FlushKind, Region};
use nvstack_core::error::{Error, Result};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// How an image file is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Shared and writable: stores go to the file (tmpfs) or the media (DAX).
    Shared,
    /// Private copy-on-write: recovery may run in memory, nothing ever reaches the file.
    /// Used by `read`, `info` and `check`.
    PrivateCopy,
}

/// What backs a shared mapping; printed by `nvstack info`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Backing {
    /// tmpfs (/dev/shm): DRAM standing in for NVRAM, as the papers did.
    EmulatedTmpfs,
    /// A DAX file system mapped with MAP_SYNC: real persistent memory.
    DaxMapSync,
    /// A private copy-on-write mapping of any file (read-only commands).
    PrivateCopy,
    /// Anonymous memory (tests).
    Anonymous,
}

pub struct MmapRegion {
    base: *mut u8,
    len: u64,
    backing: Backing,
    // Keeps the flock alive as long as the mapping.
    _file: Option<File>,
}

// SAFETY: the mapping is plain shared memory owned by this struct; concurrent access is
// coordinated by the layers above (lanes, stripes, seqlock reads), as for any shared memory.
unsafe impl Send for MmapRegion {}
// SAFETY: see Send.
unsafe impl Sync for MmapRegion {}

const TMPFS_MAGIC: i64 = 0x0102_1994;

fn is_tmpfs(file: &File) -> bool {
    // SAFETY: fstatfs writes into a zeroed statfs struct we own.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::fstatfs(file.as_raw_fd(), &mut st) == 0 && st.f_type as i64 == TMPFS_MAGIC
    }
}

impl MmapRegion {
    /// Anonymous, zeroed, pre-faulted memory of `len` bytes.
    pub fn anonymous(len: u64) -> Result<MmapRegion> {
        assert!(
            len > 0 && len.is_multiple_of(4096),
            "anonymous region length {len} not page-aligned"
        );
        // SAFETY: a fresh private anonymous mapping; no file, no aliasing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::env(format!(
                "cannot map {len} bytes of anonymous memory: {}",
                std::io::Error::last_os_error()
            )));
        }
        let r = MmapRegion {
            base: p as *mut u8,
            len,
            backing: Backing::Anonymous,
            _file: None,
        };
        r.prefault();
        Ok(r)
    }

    /// Map an open (and already locked) file whose length the caller has validated.
    pub fn map_file(file: File, path: &Path, access: Access) -> Result<MmapRegion> {
        let len = file
            .metadata()
            .map_err(|e| Error::env(format!("{}: cannot stat: {e}", path.display())))?
            .len();
        if len == 0 || len % 4096 != 0 {
            return Err(Error::bad(format!(
                "{}: length {len} is not a positive multiple of 4096 bytes",
                path.display()
            )));
        }
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let (flags, backing) = match access {
            Access::PrivateCopy => (libc::MAP_PRIVATE, Backing::PrivateCopy),
            Access::Shared if is_tmpfs(&file) => (libc::MAP_SHARED, Backing::EmulatedTmpfs),
            Access::Shared => (
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                Backing::DaxMapSync,
            ),
        };
        // SAFETY: mapping a file we hold open; its length was read above and is the length we
        // map, so no access can fall past the end of the file (no SIGBUS).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                prot,
                flags | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            if backing == Backing::DaxMapSync {
                return Err(Error::env(format!(
                    "{}: not on tmpfs and MAP_SYNC was refused ({e}): the file system is not DAX, \
                     so stores to it would not be durable. Put the image under /dev/shm (DRAM \
                     emulating NVRAM) or on a file system mounted with -o dax",
                    path.display()
                )));
            }
            return Err(Error::env(format!("{}: mmap failed: {e}", path.display())));
        }
        let r = MmapRegion {
            base: p as *mut u8,
            len,
            backing,
            _file: Some(file),
        };
        r.prefault();
        Ok(r)
    }

    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// Touch every page so that later accesses never fault (MAP_POPULATE is a hint only).
    fn prefault(&self) {
        // Every 8-byte word is then 8-aligned in memory too (the atomic loads and stores).
        debug_assert!(
            (self.base as usize).is_multiple_of(4096) && self.len.is_multiple_of(4096),
            "a mapping is whole pages"
        );
        let mut off = 0;
        while off < self.len {
            // SAFETY: off < len, inside the mapping.
            unsafe {
                std::ptr::read_volatile(self.base.add(off as usize));
            }
            off += 4096;
        }
    }

    #[inline]
    fn at(&self, off: u64, len: u64) -> *mut u8 {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "region access [{off}, +{len}) past end {}",
            self.len
        );
        // SAFETY: bounds checked just above.
        unsafe { self.base.add(off as usize) }
    }

    #[inline]
    fn word(&self, off: u64) -> &AtomicU64 {
        assert!(off.is_multiple_of(8), "unaligned 8-byte access at {off}");
        // SAFETY: in bounds (checked by `at`), 8-aligned, and the mapping outlives &self.
        unsafe { &*(self.at(off, 8) as *const AtomicU64) }
    }
}

impl Drop for MmapRegion {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in the constructor.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len as usize);
        }
    }
}

impl Region for MmapRegion {
    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, off: u64, dst: &mut [u8]) {
        let p = self.at(off, dst.len() as u64);
        // SAFETY: source in bounds; dst is a distinct Rust buffer. Concurrent writers may race
        // with this copy: the nvramdisk read path detects that with its seqlock and retries.
        unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) }
    }

    fn load_u64(&self, off: u64) -> u64 {
        self.word(off).load(Ordering::Acquire)
    }

    fn write(&self, off: u64, src: &[u8]) {
        let p = self.at(off, src.len() as u64);
        // SAFETY: destination in bounds and writable; src is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) }
    }

    fn store_u64(&self, off: u64, v: u64) {
        self.word(off).store(v, Ordering::Release)
    }

    fn write_nt(&self, off: u64, src: &[u8]) {
        let p = self.at(off, src.len() as u64);
        // SAFETY: in bounds; nt_copy asserts the 8-byte alignment of p and len.
        unsafe { cpu::nt_copy(p, src.as_ptr(), src.len()) }
    }

    fn store_u64_nt(&self, off: u64, v: u64) {
        let w = self.word(off);
        // SAFETY: w is an 8-aligned word inside the mapping.
        unsafe { cpu::nt_store_u64(w.as_ptr(), v) }
    }

    fn flush(&self, off: u64, len: u64, kind: FlushKind) {
        let p = self.at(off, len);
        // SAFETY: range in bounds.
        unsafe { cpu::flush_range(p, len as usize, kind) }
    }

    fn fence(&self) {
        cpu::sfence()
    }
}

/// Allocate the whole of `file` (`len` bytes) so that no later store can fail for lack of
/// space (tmpfs would otherwise SIGBUS on a page it cannot allocate). The file must be empty.
pub fn allocate_file(file: &File, path: &Path, len: u64) -> Result<()> {
    // SAFETY: fallocate on a file descriptor we own; no memory is touched.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len as libc::off_t) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::env(format!(
            "{}: cannot allocate {len} bytes: {e}",
            path.display()
        )));
    }
    Ok(())
}

/// The system page size in bytes.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_roundtrip() {
        let r = MmapRegion::anonymous(1 << 20).unwrap();
        let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        r.write_nt(8192, &data);
        r.fence();
        let mut out = vec![0u8; 4096];
        r.read(8192, &mut out);
        assert_eq!(out, data);
        r.store_u64_nt(64, 0xdead_beef);
        r.store_u64(72, 7);
        r.flush(64, 16, cpu::best_flush());
        r.fence();
        assert_eq!(r.load_u64(64), 0xdead_beef);
        assert_eq!(r.load_u64(72), 7);
        // Odd-aligned NT copy: head and tail paths.
        r.write_nt(8, &data[..72]);
        let mut out = vec![0u8; 72];
        r.read(8, &mut out);
        assert_eq!(&out[..], &data[..72]);
    }

    #[test]
    #[should_panic(expected = "past end")]
    fn out_of_bounds_panics() {
        let r = MmapRegion::anonymous(4096).unwrap();
        let mut b = [0u8; 16];
        r.read(4090, &mut b);
    }
}
