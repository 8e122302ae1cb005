//! PMDK's libpmemblk (a user-space BTT: an array of blocks on a memory-mapped file, each block
//! write power-fail atomic), bound at run time with `dlopen`, so nvstack neither links it nor
//! needs its headers to build.
//!
//! Debian 12 ships PMDK 1.12.1: `libpmemblk.so.1` (package libpmemblk1, pulled in by
//! libpmemblk-dev) and its dependency `libpmem.so.1` (libpmem1).
//!
//! - [`PmemBlkLib`]: the loaded libraries (loaded once per process, never unloaded).
//! - [`PmemBlkPool`]: one pool; `create`/`open`, `read`/`write`/`set_zero` of whole blocks, closed
//!   on drop. Arguments are checked in Rust before any C call (block length, LBA range, pool size,
//!   path), so C never sees a bad argument from this module.
//! - [`persist_method_description`]: what libpmem will do to make a block durable here, derived
//!   from libpmem 1.12's selection rules, this CPU and the environment overrides.
//!
//! How durable a pool on tmpfs is depends on `pmem_is_pmem()`: true (forced by
//! `PMEM_IS_PMEM_FORCE=1`) makes libpmemblk persist each write with `pmem_memcpy_nodrain` +
//! `pmem_drain` (cache-line flushes or non-temporal stores, then a fence), the same instruction
//! level as nvstack's own persist methods; false makes it call `msync(MS_SYNC)` per write, a
//! system call per block that no real pmem deployment pays. [`PmemBlkLib::load`] therefore sets
//! `PMEM_IS_PMEM_FORCE=1` when the variable is unset (see there).
//!
//! This is a named FFI module: the only `unsafe` outside `src/pmem/`, each block with a
//! `// SAFETY:` comment.

use std::ffi::{c_char, c_int, c_longlong, c_uint, c_void, CStr, CString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// The library file `dlopen`ed for the block pools.
pub const LIBPMEMBLK: &str = "libpmemblk.so.1";
/// Its dependency, opened first (and by name, so both resolve to the same loaded object).
pub const LIBPMEM: &str = "libpmem.so.1";
/// `PMEMBLK_MIN_POOL` of `<libpmemblk.h>` on x86-64: 16 MiB + 8 KiB. (The header's comment says
/// "16MiB + 4KiB" but the value is 8 KiB; `pmemblk_create` refuses 16 MiB + 4 KiB.)
pub const PMEMBLK_MIN_POOL: u64 = (16 << 20) + (8 << 10);
/// `PMEMBLK_MIN_BLK`: smaller block sizes are accepted but stored in 512-byte internal blocks.
pub const PMEMBLK_MIN_BLK: usize = 512;
/// `PMEMBLK_MAJOR_VERSION`/`PMEMBLK_MINOR_VERSION` and `PMEM_MAJOR_VERSION`/`PMEM_MINOR_VERSION` of
/// the 1.12 headers: the API this binding was written against.
const API_MAJOR: c_uint = 1;
const API_MINOR: c_uint = 1;
/// The mode of a created pool file.
const POOL_MODE: libc::mode_t = 0o600;
/// The environment variable libpmem consults to force `pmem_is_pmem()`.
pub const FORCE_PMEM_VAR: &str = "PMEM_IS_PMEM_FORCE";

type PoolPtr = *mut c_void;

/// The C prototypes of the entry points (`<libpmemblk.h>` and `<libpmem.h>`, 1.12.1), named once
/// for [`Api`] and for the [`sym!`] look-ups that fill it.
type CheckVersionFn = unsafe extern "C" fn(c_uint, c_uint) -> *const c_char;
type CreateFn = unsafe extern "C" fn(*const c_char, usize, usize, libc::mode_t) -> PoolPtr;
type OpenFn = unsafe extern "C" fn(*const c_char, usize) -> PoolPtr;
type CloseFn = unsafe extern "C" fn(PoolPtr);
type SizeFn = unsafe extern "C" fn(PoolPtr) -> usize;
type ReadFn = unsafe extern "C" fn(PoolPtr, *mut c_void, c_longlong) -> c_int;
type WriteFn = unsafe extern "C" fn(PoolPtr, *const c_void, c_longlong) -> c_int;
type SetZeroFn = unsafe extern "C" fn(PoolPtr, c_longlong) -> c_int;
type ErrorMsgFn = unsafe extern "C" fn() -> *const c_char;
type AutoFlushFn = unsafe extern "C" fn() -> c_int;

/// The entry points, with the prototypes of `<libpmemblk.h>` and `<libpmem.h>` (1.12.1).
struct Api {
    pmemblk_check_version: CheckVersionFn,
    pmemblk_create: CreateFn,
    pmemblk_open: OpenFn,
    pmemblk_close: CloseFn,
    pmemblk_bsize: SizeFn,
    pmemblk_nblock: SizeFn,
    pmemblk_read: ReadFn,
    pmemblk_write: WriteFn,
    pmemblk_set_zero: SetZeroFn,
    pmemblk_errormsg: ErrorMsgFn,
    pmem_check_version: CheckVersionFn,
    /// `int pmem_has_auto_flush(void)`: 1 on an eADR platform, 0 if not, -1 on error. Looked up
    /// but optional, so an older libpmem still loads.
    pmem_has_auto_flush: Option<AutoFlushFn>,
}

/// The process-wide load: at most one `dlopen` of each library, ever.
static LOADED: OnceLock<Result<Api, String>> = OnceLock::new();

/// Whether `PMEM_IS_PMEM_FORCE=1` was set by [`PmemBlkLib::load`] (not by the user).
static FORCED_BY_LOAD: AtomicBool = AtomicBool::new(false);

/// Serialises `pmemblk_create`, `pmemblk_open` and `pmemblk_close` across threads. PMDK does not
/// promise these are thread-safe (libpmemobj documents its pool management functions as not
/// thread-safe), and libpmemblk 1.12's open path writes a library-global (`ns_cb.ns_is_zeroed` in
/// blk.c's `blk_runtime_init`). Block I/O does not take this lock.
static POOL_MANAGEMENT: Mutex<()> = Mutex::new(());

fn pool_management_lock() -> std::sync::MutexGuard<'static, ()> {
    POOL_MANAGEMENT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Copies a C string the library handed out.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string that stays valid and unmodified for the
/// duration of this call.
unsafe fn owned_c_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees p is a live NUL-terminated string; it is copied at once.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// The calling thread's last `dl*` error, copied.
fn dlerror_string() -> String {
    // SAFETY: dlerror takes no arguments; it returns NULL or a NUL-terminated message in
    // thread-local storage that stays valid until the next dl* call on this thread. No dl* call
    // happens before owned_c_str copies it.
    let p = unsafe { libc::dlerror() };
    // SAFETY: p is NULL or the live NUL-terminated message (above).
    unsafe { owned_c_str(p) }.unwrap_or_else(|| "unknown dlerror".to_string())
}

/// `dlopen(name, RTLD_NOW | RTLD_LOCAL)`, with a message that says what to install.
fn dlopen(name: &str) -> Result<NonNull<c_void>, String> {
    let c_name = CString::new(name).expect("library names have no NUL");
    // SAFETY: c_name is a valid NUL-terminated string for the whole call. RTLD_NOW resolves every
    // symbol now, so a broken install fails here and not in the middle of a write. Loading runs
    // the library's constructors (libpmem's pmem_init reads its PMEM_* variables then); they
    // take no arguments from us.
    let handle = unsafe { libc::dlopen(c_name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    NonNull::new(handle).ok_or_else(|| {
        let why = dlerror_string();
        if why.contains("No such file") {
            format!("{name} not found (install libpmemblk-dev): {why}")
        } else {
            format!("{name} cannot be loaded: {why}")
        }
    })
}

/// `dlsym` that fails with the symbol's name instead of returning NULL.
fn dlsym(handle: NonNull<c_void>, lib: &str, name: &CStr) -> Result<NonNull<c_void>, String> {
    // SAFETY: no arguments; clears any stale error so a NULL below is reported with its own cause.
    unsafe { libc::dlerror() };
    // SAFETY: handle came from a successful dlopen and is never dlclosed; name is NUL-terminated.
    let p = unsafe { libc::dlsym(handle.as_ptr(), name.as_ptr()) };
    NonNull::new(p).ok_or_else(|| {
        format!(
            "{lib}: symbol {} not found: {}",
            name.to_string_lossy(),
            dlerror_string()
        )
    })
}

/// Looks a symbol up and gives it its C prototype.
macro_rules! sym {
    ($handle:expr, $lib:expr, $name:literal, $ty:ty) => {{
        let p = dlsym($handle, $lib, $name)?;
        // SAFETY: p is the non-NULL address of the exported function $name, whose C prototype
        // (from the 1.12 header) is exactly $ty; a function pointer and a data pointer have the
        // same size and representation on every target dlsym exists on (POSIX requires it).
        unsafe { std::mem::transmute::<*mut c_void, $ty>(p.as_ptr()) }
    }};
}

/// Checks one of PMDK's `*_check_version` entry points.
fn check_version(lib: &str, f: CheckVersionFn) -> Result<(), String> {
    // SAFETY: f is the library's check_version(unsigned, unsigned); it returns NULL when the
    // version is compatible, else a pointer to a static string ("must not be modified or freed").
    let reason = unsafe { f(API_MAJOR, API_MINOR) };
    // SAFETY: reason is NULL or that static NUL-terminated string.
    match unsafe { owned_c_str(reason) } {
        None => Ok(()),
        Some(why) => Err(format!(
            "{lib} does not provide API {API_MAJOR}.{API_MINOR}: {why}"
        )),
    }
}

/// Sets PMEM_IS_PMEM_FORCE=1 before libpmem is loaded, unless the user set it.
fn force_pmem_is_pmem() {
    // libpmem reads PMEM_IS_PMEM_FORCE once, at the first pmem_is_pmem() call (libpmem(7),
    // ENVIRONMENT: "not queried at library initialization time, but on the first call to
    // pmem_is_pmem"), which libpmemblk makes when the first pool is created or opened. Setting it
    // here, before dlopen, is therefore early enough for every pool and also for a future libpmem
    // that reads it in its constructor. A value the user set (0, to measure the msync path) is
    // kept. set_var is acceptable because this runs once per process (inside the OnceLock) and
    // callers load the library before spawning the threads that use it; the remaining hazard, a
    // C getenv() racing in some unrelated thread at this instant, is the usual one of set_var.
    if std::env::var_os(FORCE_PMEM_VAR).is_none() {
        std::env::set_var(FORCE_PMEM_VAR, "1");
        FORCED_BY_LOAD.store(true, Ordering::Relaxed);
    }
}

fn load_uncached() -> Result<Api, String> {
    force_pmem_is_pmem();

    // Neither handle is ever dlclosed: a pool holds pointers into libpmemblk's code and data, a
    // `PmemBlkLib` is a `Copy` reference to the function table that any thread may keep, and
    // libpmemblk(7) CAVEATS requires its destructor (which dlclose runs) to be called from the
    // main thread. The libraries are unloaded at process exit, as if linked.
    let pmem = dlopen(LIBPMEM)?;
    let blk = dlopen(LIBPMEMBLK)?;

    let api = Api {
        pmemblk_check_version: sym!(blk, LIBPMEMBLK, c"pmemblk_check_version", CheckVersionFn),
        pmemblk_create: sym!(blk, LIBPMEMBLK, c"pmemblk_create", CreateFn),
        pmemblk_open: sym!(blk, LIBPMEMBLK, c"pmemblk_open", OpenFn),
        pmemblk_close: sym!(blk, LIBPMEMBLK, c"pmemblk_close", CloseFn),
        pmemblk_bsize: sym!(blk, LIBPMEMBLK, c"pmemblk_bsize", SizeFn),
        pmemblk_nblock: sym!(blk, LIBPMEMBLK, c"pmemblk_nblock", SizeFn),
        pmemblk_read: sym!(blk, LIBPMEMBLK, c"pmemblk_read", ReadFn),
        pmemblk_write: sym!(blk, LIBPMEMBLK, c"pmemblk_write", WriteFn),
        pmemblk_set_zero: sym!(blk, LIBPMEMBLK, c"pmemblk_set_zero", SetZeroFn),
        pmemblk_errormsg: sym!(blk, LIBPMEMBLK, c"pmemblk_errormsg", ErrorMsgFn),
        pmem_check_version: sym!(pmem, LIBPMEM, c"pmem_check_version", CheckVersionFn),
        pmem_has_auto_flush: dlsym(pmem, LIBPMEM, c"pmem_has_auto_flush").ok().map(|p| {
            // SAFETY: p is the non-NULL address of `int pmem_has_auto_flush(void)` (libpmem
            // 1.12 header); function and data pointers share one representation (POSIX).
            unsafe { std::mem::transmute::<*mut c_void, AutoFlushFn>(p.as_ptr()) }
        }),
    };
    check_version(LIBPMEM, api.pmem_check_version)?;
    check_version(LIBPMEMBLK, api.pmemblk_check_version)?;
    Ok(api)
}

/// The loaded libpmemblk and libpmem. Cheap to copy; every copy refers to the one process-wide
/// load, which is never unloaded.
#[derive(Clone, Copy)]
pub struct PmemBlkLib {
    api: &'static Api,
}

impl fmt::Debug for PmemBlkLib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PmemBlkLib({LIBPMEMBLK}, {LIBPMEM})")
    }
}

impl PmemBlkLib {
    /// Loads `libpmem.so.1` and `libpmemblk.so.1` (once per process; later calls return the same
    /// result) and checks they provide API 1.1. Fails with a message naming the missing file,
    /// e.g. "libpmemblk.so.1 not found (install libpmemblk-dev): ...".
    ///
    /// Sets `PMEM_IS_PMEM_FORCE=1` first when it is unset, so pools on tmpfs are persisted the
    /// way they would be on real pmem (flushes or non-temporal stores and a fence, not msync).
    /// Call it before spawning threads: it may modify the environment.
    pub fn load() -> Result<PmemBlkLib, String> {
        match LOADED.get_or_init(load_uncached) {
            Ok(api) => Ok(PmemBlkLib { api }),
            Err(e) => Err(e.clone()),
        }
    }

    /// The library if an earlier [`PmemBlkLib::load`] succeeded; never loads it.
    pub fn loaded() -> Option<PmemBlkLib> {
        match LOADED.get() {
            Some(Ok(api)) => Some(PmemBlkLib { api }),
            _ => None,
        }
    }

    /// libpmem's own answer to "does this platform flush CPU caches on power loss (eADR)?"
    /// (`pmem_has_auto_flush`); `None` if libpmem could not tell or lacks the call.
    pub fn has_auto_flush(&self) -> Option<bool> {
        let f = self.api.pmem_has_auto_flush?;
        // SAFETY: f is libpmem's `int pmem_has_auto_flush(void)`: no arguments, no pointers; it
        // reads /sys/bus/nd and returns 1, 0 or -1.
        match unsafe { f() } {
            1 => Some(true),
            0 => Some(false),
            _ => None,
        }
    }

    /// `pmemblk_errormsg()`: the calling thread's last libpmemblk error. Must be called on the
    /// thread whose call failed, before it makes another libpmemblk call.
    fn last_error(&self) -> String {
        // SAFETY: no arguments; returns a pointer to a thread-local static buffer holding a
        // NUL-terminated message (libpmemblk(7), DEBUGGING AND ERROR HANDLING).
        let p = unsafe { (self.api.pmemblk_errormsg)() };
        // SAFETY: p is NULL or that buffer, which only this thread's later libpmemblk calls could
        // change; it is copied now.
        match unsafe { owned_c_str(p) } {
            Some(m) if !m.is_empty() => m,
            _ => format!("unknown error ({})", std::io::Error::last_os_error()),
        }
    }
}

/// One libpmemblk pool: an array of `nblock()` blocks of `bsize()` bytes in a file, each
/// `write` power-fail atomic. Closed on drop. Safe to share between threads: concurrent `read`,
/// `write` and `set_zero` on one pool are what libpmemblk is built for (see the `Sync` impl).
pub struct PmemBlkPool {
    lib: PmemBlkLib,
    pool: NonNull<c_void>,
    path: PathBuf,
    bsize: usize,
    nblock: u64,
}

// SAFETY: the handle is a heap object owned by libpmemblk, not tied to the thread that opened
// it; close (in Drop) may run on any thread (only the library destructor is main-thread bound).
unsafe impl Send for PmemBlkPool {}

// SAFETY: the shared-reference methods (read, write, set_zero, bsize, nblock) may run on one pool
// from several threads at once. pmemblk_write(3): "The write is atomic with respect to other
// reads and writes", i.e. concurrent use is the documented model; PMDK's own test blk_rw_mt
// drives one pool handle from hundreds of threads doing random reads and writes; and the 1.12
// implementation (blk.c) makes each call take a lane with a per-lane mutex (nlane = 2 x online
// CPUs) before entering the BTT, whose contract (btt.c) is exactly "at most nlane threads, each
// in its own lane", with map locks and a read-tracking table between lanes. bsize/nblock read
// immutable fields. Pool management (create/open/close) is serialised by POOL_MANAGEMENT.
unsafe impl Sync for PmemBlkPool {}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: path contains a NUL byte", path.display()))
}

impl PmemBlkPool {
    /// Creates a pool file at `path` (which must not exist; created with mode 0600) of
    /// `pool_bytes` bytes, fully allocated (posix_fallocate), holding blocks of `block_bytes`.
    /// `pool_bytes` must be at least [`PMEMBLK_MIN_POOL`]; libpmemblk keeps about 2% for its BTT
    /// metadata, so `nblock()` is less than `pool_bytes / block_bytes`.
    pub fn create(
        lib: &PmemBlkLib,
        path: &Path,
        block_bytes: usize,
        pool_bytes: u64,
    ) -> Result<PmemBlkPool, String> {
        let shown = path.display();
        if block_bytes == 0 {
            return Err(format!("{shown}: block size must be positive"));
        }
        if block_bytes > u32::MAX as usize {
            return Err(format!("{shown}: block size {block_bytes} exceeds 4 GiB"));
        }
        if pool_bytes < PMEMBLK_MIN_POOL {
            return Err(format!(
                "{shown}: pool size {pool_bytes} is below libpmemblk's minimum {PMEMBLK_MIN_POOL} \
                 (16 MiB + 8 KiB)"
            ));
        }
        let pool_size = usize::try_from(pool_bytes)
            .map_err(|_| format!("{shown}: pool size {pool_bytes} does not fit in size_t"))?;
        if path.symlink_metadata().is_ok() {
            return Err(format!(
                "{shown}: already exists (pmemblk_create makes a new file; use open)"
            ));
        }
        let c = c_path(path)?;
        let _guard = pool_management_lock();
        // SAFETY: c is a NUL-terminated path valid for the call; block and pool sizes were checked
        // above (non-zero bsize, poolsize >= PMEMBLK_MIN_POOL); mode is a plain permission mask.
        // The call returns a new handle or NULL with the reason in pmemblk_errormsg.
        let p = unsafe { (lib.api.pmemblk_create)(c.as_ptr(), block_bytes, pool_size, POOL_MODE) };
        match NonNull::new(p) {
            Some(pool) => Ok(Self::wrap(*lib, pool, path)),
            None => Err(format!("pmemblk_create {shown}: {}", lib.last_error())),
        }
    }

    /// Opens an existing pool. A non-zero `block_bytes` must equal the block size the pool was
    /// created with (libpmemblk checks it); 0 accepts any. A pool file can be open once at a time
    /// (libpmemblk takes a `flock` on it), in this process too.
    pub fn open(lib: &PmemBlkLib, path: &Path, block_bytes: usize) -> Result<PmemBlkPool, String> {
        let c = c_path(path)?;
        let _guard = pool_management_lock();
        // SAFETY: c is a NUL-terminated path valid for the call; any bsize is a valid argument
        // (0 = do not check). Returns a handle or NULL with the reason in pmemblk_errormsg.
        let p = unsafe { (lib.api.pmemblk_open)(c.as_ptr(), block_bytes) };
        match NonNull::new(p) {
            Some(pool) => Ok(Self::wrap(*lib, pool, path)),
            None => Err(format!(
                "pmemblk_open {}: {}",
                path.display(),
                lib.last_error()
            )),
        }
    }

    fn wrap(lib: PmemBlkLib, pool: NonNull<c_void>, path: &Path) -> PmemBlkPool {
        // SAFETY: pool is a live handle just returned by pmemblk_create/open; bsize only reads it.
        let bsize = unsafe { (lib.api.pmemblk_bsize)(pool.as_ptr()) };
        // SAFETY: as above; nblock only reads the handle.
        let nblock = unsafe { (lib.api.pmemblk_nblock)(pool.as_ptr()) };
        PmemBlkPool {
            lib,
            pool,
            path: path.to_path_buf(),
            bsize,
            nblock: nblock as u64,
        }
    }

    /// Bytes per block: the `block_bytes` the pool was created with.
    pub fn bsize(&self) -> usize {
        self.bsize
    }

    /// Usable blocks (LBAs `0..nblock()`).
    pub fn nblock(&self) -> u64 {
        self.nblock
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The LBA as C's `long long`, or an error if it is not a block of this pool.
    fn check_lba(&self, op: &str, lba: u64) -> Result<c_longlong, String> {
        if lba >= self.nblock {
            return Err(format!(
                "{op} {}: lba {lba} out of range (the pool has {} blocks)",
                self.path.display(),
                self.nblock
            ));
        }
        c_longlong::try_from(lba).map_err(|_| format!("{op}: lba {lba} exceeds long long"))
    }

    fn check_len(&self, op: &str, len: usize) -> Result<(), String> {
        if len != self.bsize {
            return Err(format!(
                "{op} {}: buffer of {len} bytes, the block size is {}",
                self.path.display(),
                self.bsize
            ));
        }
        Ok(())
    }

    /// Writes one whole block (`buf.len() == bsize()`), atomically and durably: on return the
    /// block reads back as `buf`, also after a crash. Any alignment of `buf` is fine.
    pub fn write(&self, lba: u64, buf: &[u8]) -> Result<(), String> {
        self.check_len("pmemblk_write", buf.len())?;
        let blockno = self.check_lba("pmemblk_write", lba)?;
        // SAFETY: the handle is live (closed only in Drop, which needs ownership); buf holds
        // exactly bsize readable bytes, which is all pmemblk_write reads from it; blockno is in
        // 0..nblock. Concurrent calls on the pool are allowed (see the Sync impl).
        let rc = unsafe {
            (self.lib.api.pmemblk_write)(self.pool.as_ptr(), buf.as_ptr().cast(), blockno)
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!(
                "pmemblk_write {} lba {lba}: {}",
                self.path.display(),
                self.lib.last_error()
            ))
        }
    }

    /// Reads one whole block into `buf` (`buf.len() == bsize()`). A block never written reads as
    /// zeros. Any alignment of `buf` is fine.
    pub fn read(&self, lba: u64, buf: &mut [u8]) -> Result<(), String> {
        self.check_len("pmemblk_read", buf.len())?;
        let blockno = self.check_lba("pmemblk_read", lba)?;
        // SAFETY: the handle is live; buf is an exclusively borrowed region of exactly bsize
        // writable bytes, which is all pmemblk_read writes; blockno is in 0..nblock.
        let rc = unsafe {
            (self.lib.api.pmemblk_read)(self.pool.as_ptr(), buf.as_mut_ptr().cast(), blockno)
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!(
                "pmemblk_read {} lba {lba}: {}",
                self.path.display(),
                self.lib.last_error()
            ))
        }
    }

    /// Makes a block read back as zeros (a map-entry flag: no data is written).
    pub fn set_zero(&self, lba: u64) -> Result<(), String> {
        let blockno = self.check_lba("pmemblk_set_zero", lba)?;
        // SAFETY: the handle is live and blockno is in 0..nblock; no buffers are involved.
        let rc = unsafe { (self.lib.api.pmemblk_set_zero)(self.pool.as_ptr(), blockno) };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!(
                "pmemblk_set_zero {} lba {lba}: {}",
                self.path.display(),
                self.lib.last_error()
            ))
        }
    }
}

impl Drop for PmemBlkPool {
    fn drop(&mut self) {
        let _guard = pool_management_lock();
        // SAFETY: the handle is live and this is its only close: Drop runs once, with exclusive
        // access, so no read/write on it is in flight. The library is never unloaded.
        unsafe { (self.lib.api.pmemblk_close)(self.pool.as_ptr()) };
    }
}

impl fmt::Debug for PmemBlkPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PmemBlkPool")
            .field("path", &self.path)
            .field("bsize", &self.bsize)
            .field("nblock", &self.nblock)
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// What libpmem will do to persist.
// ---------------------------------------------------------------------------------------------

/// The CPUID bits libpmem 1.12 looks at (src/libpmem2/x86_64/cpu.c: raw CPUID, no check that
/// the OS enabled the AVX state), plus what the OS allows, from `is_x86_feature_detected!`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuBits {
    pub clflush: bool,
    pub clflushopt: bool,
    pub clwb: bool,
    pub avx: bool,
    pub avx512f: bool,
    pub movdir64b: bool,
    /// Vendor string "GenuineIntel" (turns libpmem's write-combining workaround on).
    pub genuine_intel: bool,
    /// `is_x86_feature_detected!("avx")`: the CPU has it and the OS saves its state.
    pub os_avx: bool,
    /// `is_x86_feature_detected!("avx512f")`.
    pub os_avx512f: bool,
}

impl CpuBits {
    /// This CPU, read the way libpmem reads it: each leaf only if the maximum leaf reaches it.
    pub fn detect() -> CpuBits {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        let leaf0 = __cpuid(0);
        let max_leaf = leaf0.eax;
        let vendor: Vec<u8> = [leaf0.ebx, leaf0.edx, leaf0.ecx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .collect();
        let (l1_ecx, l1_edx) = if max_leaf >= 1 {
            let l1 = __cpuid(1);
            (l1.ecx, l1.edx)
        } else {
            (0, 0)
        };
        let (l7_ebx, l7_ecx) = if max_leaf >= 7 {
            let l7 = __cpuid_count(7, 0);
            (l7.ebx, l7.ecx)
        } else {
            (0, 0)
        };
        CpuBits {
            clflush: l1_edx & (1 << 19) != 0,
            avx: l1_ecx & (1 << 28) != 0,
            clflushopt: l7_ebx & (1 << 23) != 0,
            clwb: l7_ebx & (1 << 24) != 0,
            avx512f: l7_ebx & (1 << 16) != 0,
            movdir64b: l7_ecx & (1 << 28) != 0,
            genuine_intel: vendor == b"GenuineIntel",
            os_avx: std::is_x86_feature_detected!("avx"),
            os_avx512f: std::is_x86_feature_detected!("avx512f"),
        }
    }
}

/// A cache-line flush instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushInsn {
    Clflush,
    Clflushopt,
    Clwb,
}

impl FlushInsn {
    pub fn name(self) -> &'static str {
        match self {
            FlushInsn::Clflush => "clflush",
            FlushInsn::Clflushopt => "clflushopt",
            FlushInsn::Clwb => "clwb",
        }
    }
}

/// The instruction set of libpmem's copy loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyIsa {
    Sse2,
    Avx,
    Avx512f,
    /// MOVDIR64B: 64-byte direct stores (non-temporal path only).
    Movdir64b,
}

impl CopyIsa {
    pub fn name(self) -> &'static str {
        match self {
            CopyIsa::Sse2 => "SSE2 (16 B movntdq)",
            CopyIsa::Avx => "AVX (32 B vmovntdq)",
            CopyIsa::Avx512f => "AVX-512F (64 B vmovntdq)",
            CopyIsa::Movdir64b => "MOVDIR64B (64 B direct stores)",
        }
    }

    fn temporal_name(self) -> &'static str {
        match self {
            CopyIsa::Sse2 => "SSE2",
            CopyIsa::Avx => "AVX",
            CopyIsa::Avx512f | CopyIsa::Movdir64b => "AVX-512F",
        }
    }
}

/// How libpmem's `pmem_memcpy_nodrain` copies to pmem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyMethod {
    /// libpmem's ISA-specific loops: `temporal` (stores, then flushes) below the threshold,
    /// `non_temporal` at or above it.
    Isa {
        temporal: CopyIsa,
        non_temporal: CopyIsa,
    },
    /// No non-temporal loops (PMEM_NO_MOVNT=1): libpmem's generic copy, then flushes.
    Generic,
    /// PMEM_NO_MOVNT=1 and PMEM_NO_GENERIC_MEMCPY set non-zero: libc memmove, then flushes.
    Libc,
}

/// Whether `pmem_is_pmem()` (which decides between pmem_persist and msync in libpmemblk) is
/// forced by PMEM_IS_PMEM_FORCE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsPmem {
    Forced(bool),
    /// Unset or another value: detection (true only for Device DAX or a MAP_SYNC mapping on a
    /// DAX file system; false on tmpfs).
    Detected,
}

/// libpmem 1.12's persist configuration, as its initialisation would choose it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistMethod {
    pub cpu: CpuBits,
    pub is_pmem: IsPmem,
    /// The flush instruction (`pmem_deep_flush`, and `pmem_flush` when `flushes`).
    pub flush: Option<FlushInsn>,
    /// Whether `pmem_flush` flushes: false with PMEM_NO_FLUSH=1, or on eADR unless PMEM_NO_FLUSH=0.
    pub flushes: bool,
    /// Why `flushes` is what it is.
    pub flush_reason: String,
    /// Whether `pmem_drain` issues sfence (not when clflush is the flush and flushes are on:
    /// clflush is ordered by itself).
    pub drain_sfence: bool,
    pub copy: CopyMethod,
    /// Copies of at least this many bytes take the non-temporal path (when there is one and
    /// flushes are on).
    pub movnt_threshold: u64,
    /// libpmem's write-combining workaround (sfence-barrier variants of the SSE2/AVX
    /// non-temporal loops); on by default on GenuineIntel.
    pub wc_workaround: bool,
    /// libpmem's eADR answer (`pmem_has_auto_flush`), if the library was loaded.
    pub auto_flush: Option<bool>,
    /// PMEM_IS_PMEM_FORCE=1 was set by [`PmemBlkLib::load`], not inherited.
    pub forced_by_load: bool,
    /// The PMEM_* variables that are set, in the order libpmem's documentation lists them.
    pub overrides: Vec<(String, String)>,
}

/// The variables that change libpmem's choices (libpmem(7) ENVIRONMENT, plus PMEM_AVX,
/// PMEM_AVX512F, PMEM_MOVDIR64B, PMEM_WC_WORKAROUND and PMEM_NO_GENERIC_MEMCPY of
/// src/libpmem2/x86_64/init.c and src/libpmem/pmem.c).
pub const PMEM_ENV_OVERRIDES: [&str; 11] = [
    "PMEM_IS_PMEM_FORCE",
    "PMEM_NO_CLWB",
    "PMEM_NO_CLFLUSHOPT",
    "PMEM_NO_FLUSH",
    "PMEM_NO_MOVNT",
    "PMEM_MOVNT_THRESHOLD",
    "PMEM_AVX512F",
    "PMEM_AVX",
    "PMEM_MOVDIR64B",
    "PMEM_WC_WORKAROUND",
    "PMEM_NO_GENERIC_MEMCPY",
];

/// libpmem's default `Movnt_threshold`.
pub const DEFAULT_MOVNT_THRESHOLD: u64 = 256;

/// C's `atoll` (and `atoi`): leading white space, an optional sign, digits up to the first
/// non-digit; no digits gives 0. Saturates instead of overflowing.
fn c_atoll(s: &str) -> i64 {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let mut v: i64 = 0;
    for b in digits.bytes().take_while(u8::is_ascii_digit) {
        v = v.saturating_mul(10).saturating_add(i64::from(b - b'0'));
    }
    if negative {
        -v
    } else {
        v
    }
}

impl PersistMethod {
    /// Applies libpmem 1.12.1's rules (`pmem_cpuinfo_to_funcs` and `pmem2_arch_init` of
    /// src/libpmem2/x86_64/init.c, `pmem_init` and `pmem_is_pmem_init` of src/libpmem/pmem.c;
    /// checked against the trace of Debian's debug build, libpmem1-debug, at PMEM_LOG_LEVEL=3)
    /// to a CPU, an environment and an eADR answer:
    ///
    /// - flush: clflush if present; clflushopt over it unless PMEM_NO_CLFLUSHOPT=1; clwb over
    ///   both unless PMEM_NO_CLWB=1.
    /// - non-temporal copies, unless PMEM_NO_MOVNT=1: SSE2; AVX if the CPU has it and PMEM_AVX is
    ///   not "0"; AVX-512F likewise with PMEM_AVX512F; MOVDIR64B only if PMEM_MOVDIR64B is set
    ///   and not "0" (opt-in in 1.12.1). With PMEM_NO_MOVNT=1: the generic copy, or libc memmove
    ///   if PMEM_NO_GENERIC_MEMCPY is a non-zero number.
    /// - threshold: 256 bytes, or PMEM_MOVNT_THRESHOLD (atoll) if it is not negative.
    /// - WC workaround: on for GenuineIntel; PMEM_WC_WORKAROUND "1"/"0" forces it.
    /// - flushes: PMEM_NO_FLUSH "1" turns them off, "0" forces them on; otherwise off only on eADR.
    /// - pmem_is_pmem: PMEM_IS_PMEM_FORCE (atoi) 1 forces true, 0 forces false.
    pub fn select(
        cpu: CpuBits,
        env: impl Fn(&str) -> Option<String>,
        auto_flush: Option<bool>,
    ) -> PersistMethod {
        let (flush, flush_has_builtin_fence) = Self::select_flush(&cpu, &env);

        let wc_workaround = match env("PMEM_WC_WORKAROUND").as_deref() {
            Some("1") => true,
            Some("0") => false,
            _ => cpu.genuine_intel,
        };

        let copy = Self::select_copy(&cpu, &env);

        let movnt_threshold = match env("PMEM_MOVNT_THRESHOLD").map(|v| c_atoll(&v)) {
            Some(v) if v >= 0 => v as u64,
            _ => DEFAULT_MOVNT_THRESHOLD,
        };

        let (flushes, flush_reason) = Self::select_flushes(&env, auto_flush);
        // pmem_init: with flushes, the fence is empty when clflush (self-ordering) is the flush;
        // without flushes it is always the architecture's sfence.
        let drain_sfence = if flushes {
            flush.is_some() && !flush_has_builtin_fence
        } else {
            flush.is_some()
        };

        let is_pmem = match env(FORCE_PMEM_VAR).map(|v| c_atoll(&v)) {
            Some(1) => IsPmem::Forced(true),
            Some(0) => IsPmem::Forced(false),
            _ => IsPmem::Detected,
        };

        let overrides = PMEM_ENV_OVERRIDES
            .iter()
            .filter_map(|&name| env(name).map(|v| (name.to_string(), v)))
            .collect();

        PersistMethod {
            cpu,
            is_pmem,
            flush,
            flushes,
            flush_reason,
            drain_sfence,
            copy,
            movnt_threshold,
            wc_workaround,
            auto_flush,
            forced_by_load: false,
            overrides,
        }
    }

    /// The flush instruction (the last one the CPU has and the environment allows, of clflush,
    /// clflushopt and clwb) and whether it is ordered by itself (clflush only).
    fn select_flush(
        cpu: &CpuBits,
        env: &impl Fn(&str) -> Option<String>,
    ) -> (Option<FlushInsn>, bool) {
        let is = |name: &str, value: &str| env(name).as_deref() == Some(value);
        let mut flush = None;
        let mut flush_has_builtin_fence = false;
        if cpu.clflush {
            flush = Some(FlushInsn::Clflush);
            flush_has_builtin_fence = true;
        }
        if cpu.clflushopt && !is("PMEM_NO_CLFLUSHOPT", "1") {
            flush = Some(FlushInsn::Clflushopt);
            flush_has_builtin_fence = false;
        }
        if cpu.clwb && !is("PMEM_NO_CLWB", "1") {
            flush = Some(FlushInsn::Clwb);
            flush_has_builtin_fence = false;
        }
        (flush, flush_has_builtin_fence)
    }

    /// The copy routine: the widest ISA the CPU has and the environment allows, or the
    /// generic or libc copy under PMEM_NO_MOVNT=1.
    fn select_copy(cpu: &CpuBits, env: &impl Fn(&str) -> Option<String>) -> CopyMethod {
        let is = |name: &str, value: &str| env(name).as_deref() == Some(value);
        let no_generic = env("PMEM_NO_GENERIC_MEMCPY").is_some_and(|v| c_atoll(&v) != 0);
        if is("PMEM_NO_MOVNT", "1") {
            if no_generic {
                CopyMethod::Libc
            } else {
                CopyMethod::Generic
            }
        } else {
            // SSE2 is part of x86-64, and libpmem does not test for it.
            let mut temporal = CopyIsa::Sse2;
            let mut non_temporal = CopyIsa::Sse2;
            if cpu.avx && !is("PMEM_AVX", "0") {
                temporal = CopyIsa::Avx;
                non_temporal = CopyIsa::Avx;
            }
            if cpu.avx512f && !is("PMEM_AVX512F", "0") {
                temporal = CopyIsa::Avx512f;
                non_temporal = CopyIsa::Avx512f;
            }
            // MOVDIR64B replaces only the non-temporal loops.
            if cpu.movdir64b && env("PMEM_MOVDIR64B").is_some_and(|v| v != "0") {
                non_temporal = CopyIsa::Movdir64b;
            }
            CopyMethod::Isa {
                temporal,
                non_temporal,
            }
        }
    }

    /// Whether libpmem flushes at all, and why (PMEM_NO_FLUSH, else eADR).
    fn select_flushes(
        env: &impl Fn(&str) -> Option<String>,
        auto_flush: Option<bool>,
    ) -> (bool, String) {
        match env("PMEM_NO_FLUSH").as_deref() {
            Some("1") => (false, "PMEM_NO_FLUSH=1".to_string()),
            Some("0") => (true, "PMEM_NO_FLUSH=0 forces flushing".to_string()),
            _ => match auto_flush {
                Some(true) => (
                    false,
                    "eADR: CPU caches are in the persistence domain".into(),
                ),
                Some(false) => (true, "no eADR: pmem_has_auto_flush() = 0".to_string()),
                None => (true, "eADR not reported (libpmem not loaded)".to_string()),
            },
        }
    }

    /// This machine: its CPU, the process environment, and libpmem's eADR answer if the library
    /// has been loaded (it is never loaded here).
    pub fn detect() -> PersistMethod {
        let auto_flush = PmemBlkLib::loaded().and_then(|lib| lib.has_auto_flush());
        let mut method = PersistMethod::select(
            CpuBits::detect(),
            |name| std::env::var(name).ok(),
            auto_flush,
        );
        method.forced_by_load =
            FORCED_BY_LOAD.load(Ordering::Relaxed) && method.is_pmem == IsPmem::Forced(true);
        method
    }

    /// One line, e.g. "clwb + sfence; >= 256 B: non-temporal AVX-512F; pmem forced".
    pub fn summary(&self) -> String {
        let flush = match (self.flushes, self.flush) {
            (true, Some(f)) => f.name().to_string(),
            (true, None) => "no flush instruction".to_string(),
            (false, _) => "no flush".to_string(),
        };
        let fence = if self.drain_sfence { " + sfence" } else { "" };
        let copy = match self.copy {
            CopyMethod::Isa { non_temporal, .. } if self.flushes => format!(
                ">= {} B: non-temporal {}",
                self.movnt_threshold,
                non_temporal.temporal_name_nt()
            ),
            CopyMethod::Isa { temporal, .. } => {
                format!("{} stores", temporal.temporal_name())
            }
            CopyMethod::Generic => "generic copy".to_string(),
            CopyMethod::Libc => "libc memmove".to_string(),
        };
        let pmem = match self.is_pmem {
            IsPmem::Forced(true) => "pmem forced",
            IsPmem::Forced(false) => "pmem forced off (msync)",
            IsPmem::Detected => "pmem detected (msync on tmpfs)",
        };
        format!("{flush}{fence}; {copy}; {pmem}")
    }
}

impl CopyIsa {
    fn temporal_name_nt(self) -> &'static str {
        match self {
            CopyIsa::Movdir64b => "MOVDIR64B",
            other => other.temporal_name(),
        }
    }
}

impl fmt::Display for PersistMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "libpmem 1.12 persist method (its selection rules applied to this CPU and environment):"
        )?;
        self.fmt_mapping(f)?;
        self.fmt_cpu(f)?;
        self.fmt_copies(f)?;
        self.fmt_environment(f)
    }
}

/// The sections of [`PersistMethod`]'s report, in the order `fmt` writes them.
impl PersistMethod {
    /// How libpmemblk persists the pool's mapping (pmem_is_pmem forced or detected).
    fn fmt_mapping(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.is_pmem {
            IsPmem::Forced(true) => writeln!(
                f,
                "  pool mapping: pmem_is_pmem forced true (PMEM_IS_PMEM_FORCE=1{}): libpmemblk \
                 persists with pmem_memcpy_nodrain + pmem_drain, no msync",
                if self.forced_by_load {
                    ", set by PmemBlkLib::load"
                } else {
                    ""
                }
            )?,
            IsPmem::Forced(false) => writeln!(
                f,
                "  pool mapping: pmem_is_pmem forced false (PMEM_IS_PMEM_FORCE=0): libpmemblk \
                 persists with memcpy + msync(MS_SYNC); the lines below do not apply to block data"
            )?,
            IsPmem::Detected => writeln!(
                f,
                "  pool mapping: pmem_is_pmem detects (true only for Device DAX or MAP_SYNC on a \
                 DAX file system); on tmpfs libpmemblk falls back to memcpy + msync(MS_SYNC)"
            )?,
        }
        Ok(())
    }

    /// The CPU's flush features and the flush and drain instructions chosen from them.
    fn fmt_cpu(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpu = &self.cpu;
        let has: Vec<&str> = [
            (cpu.clflush, "clflush"),
            (cpu.clflushopt, "clflushopt"),
            (cpu.clwb, "clwb"),
            (cpu.avx, "avx"),
            (cpu.avx512f, "avx512f"),
            (cpu.movdir64b, "movdir64b"),
        ]
        .iter()
        .filter(|(present, _)| *present)
        .map(|(_, name)| *name)
        .collect();
        let vendor = if cpu.genuine_intel {
            "GenuineIntel"
        } else {
            "not GenuineIntel"
        };
        writeln!(f, "  cpu: {vendor}; {}", has.join(" "))?;
        let flush = self.flush.map_or("none", FlushInsn::name);
        if self.flushes {
            writeln!(
                f,
                "  flush: {flush} per 64-byte line ({})",
                self.flush_reason
            )?;
        } else {
            writeln!(
                f,
                "  flush: none ({}); pmem_deep_flush would use {flush}",
                self.flush_reason
            )?;
        }
        writeln!(
            f,
            "  drain: {}",
            if self.drain_sfence {
                "sfence"
            } else {
                "nothing (clflush is ordered by itself)"
            }
        )
    }

    /// How block data is copied (temporal, non-temporal, generic, libc) and the WC workaround.
    fn fmt_copies(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.copy {
            CopyMethod::Isa {
                temporal,
                non_temporal,
            } if self.flushes => writeln!(
                f,
                "  copies: < {t} B with {} stores + flush; >= {t} B non-temporal {} \
                 (PMEM_MOVNT_THRESHOLD {}): {}; the BTT's small metadata updates (flog, map \
                 entry) are stores + flush",
                temporal.temporal_name(),
                non_temporal.name(),
                if self
                    .overrides
                    .iter()
                    .any(|(n, _)| n == "PMEM_MOVNT_THRESHOLD")
                {
                    "set"
                } else {
                    "default"
                },
                if self.movnt_threshold <= 4096 {
                    "a 4 KiB block's data is non-temporal"
                } else {
                    "a 4 KiB block's data is stores + flush"
                },
                t = self.movnt_threshold,
            )?,
            CopyMethod::Isa { temporal, .. } => writeln!(
                f,
                "  copies: {} stores, not flushed (no non-temporal path without flushing)",
                temporal.temporal_name()
            )?,
            CopyMethod::Generic => writeln!(
                f,
                "  copies: libpmem's generic copy, then flush (PMEM_NO_MOVNT=1)"
            )?,
            CopyMethod::Libc => writeln!(
                f,
                "  copies: libc memmove, then flush (PMEM_NO_MOVNT=1, PMEM_NO_GENERIC_MEMCPY)"
            )?,
        }
        if matches!(self.copy, CopyMethod::Isa { non_temporal, .. }
            if matches!(non_temporal, CopyIsa::Sse2 | CopyIsa::Avx))
        {
            writeln!(
                f,
                "  WC workaround: {}",
                if self.wc_workaround { "on" } else { "off" }
            )?;
        }
        Ok(())
    }

    /// What the OS and environment change: CPU state not enabled, eADR, PMEM_* overrides.
    fn fmt_environment(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpu = &self.cpu;
        let os_missing: Vec<&str> = [
            (cpu.avx && !cpu.os_avx, "avx"),
            (cpu.avx512f && !cpu.os_avx512f, "avx512f"),
        ]
        .iter()
        .filter(|(missing, _)| *missing)
        .map(|(_, name)| *name)
        .collect();
        if !os_missing.is_empty() {
            writeln!(
                f,
                "  warning: CPUID reports {} but the OS has not enabled its state; libpmem checks \
                 only CPUID",
                os_missing.join(" ")
            )?;
        }
        let eadr = match self.auto_flush {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown (libpmem not loaded)",
        };
        writeln!(f, "  eADR (pmem_has_auto_flush): {eadr}")?;
        if self.overrides.is_empty() {
            write!(f, "  overrides: none")
        } else {
            let set: Vec<String> = self
                .overrides
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            write!(f, "  overrides: {}", set.join(" "))
        }
    }
}

/// What libpmem will use to persist libpmemblk's writes on this machine, several lines: see
/// [`PersistMethod::select`] for the rules. Libpmem cannot report its choice itself (only its
/// debug build logs it), so this re-derives it; eADR comes from libpmem if it is loaded.
pub fn persist_method_description() -> String {
    PersistMethod::detect().to_string()
}

/// The peer library, for a test. Missing, the test fails naming what to install: a test of the
/// peer never passes without the peer (scripts/deps.sh installs it when run as root).
#[cfg(test)]
pub(crate) fn required_for_test() -> PmemBlkLib {
    PmemBlkLib::load().unwrap_or_else(|e| {
        panic!("libpmemblk is missing: install Debian's libpmemblk-dev (scripts/deps.sh does, as root): {e}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    const BLOCK: usize = 4096;
    const POOL: u64 = 64 << 20;

    fn shm_dir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("nvstack-peer-")
            .tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .expect("temporary directory")
    }

    /// A block that names its LBA and a generation, different in every 8-byte word.
    fn pattern(lba: u64, generation: u64) -> Vec<u8> {
        (0..BLOCK / 8)
            .flat_map(|i| {
                (lba.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (generation << 48) ^ i as u64)
                    .to_le_bytes()
            })
            .collect()
    }

    #[test]
    fn create_write_read_reopen() {
        let lib = required_for_test();
        let dir = shm_dir();
        let path = dir.path().join("pool");
        let lbas: Vec<u64>;
        {
            let pool = PmemBlkPool::create(&lib, &path, BLOCK, POOL).unwrap();
            assert_eq!(pool.bsize(), BLOCK);
            let n = pool.nblock();
            assert!(n > 256 && n < POOL / BLOCK as u64, "nblock {n}");
            eprintln!("64 MiB pool of 4 KiB blocks: {n} blocks");
            lbas = vec![0, 1, 7, n / 2, n - 1];
            let mut buf = vec![0xffu8; BLOCK];
            pool.read(3, &mut buf).unwrap();
            assert!(
                buf.iter().all(|&b| b == 0),
                "an unwritten block reads as zeros"
            );
            for &lba in &lbas {
                pool.write(lba, &pattern(lba, 1)).unwrap();
            }
            for &lba in &lbas {
                pool.read(lba, &mut buf).unwrap();
                assert_eq!(buf, pattern(lba, 1), "lba {lba}");
            }
            pool.write(1, &pattern(1, 2)).unwrap();
            pool.set_zero(7).unwrap();
            let meta = std::fs::metadata(&path).unwrap();
            assert_eq!(meta.len(), POOL);
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        }
        let pool = PmemBlkPool::open(&lib, &path, BLOCK).unwrap();
        let mut buf = vec![0u8; BLOCK];
        for &lba in &lbas {
            pool.read(lba, &mut buf).unwrap();
            let want = match lba {
                1 => pattern(1, 2),
                7 => vec![0; BLOCK],
                _ => pattern(lba, 1),
            };
            assert_eq!(buf, want, "lba {lba} after reopen");
        }
        // Open twice: libpmemblk holds a flock on the file.
        let err = PmemBlkPool::open(&lib, &path, BLOCK).unwrap_err();
        assert!(err.starts_with("pmemblk_open"), "{err}");
        drop(pool);
        // The block size is checked by libpmemblk on open; 0 accepts the stored one.
        let err = PmemBlkPool::open(&lib, &path, 512).unwrap_err();
        assert!(err.contains("bsize"), "{err}");
        assert_eq!(PmemBlkPool::open(&lib, &path, 0).unwrap().bsize(), BLOCK);
    }

    #[test]
    fn unaligned_buffers_work() {
        let lib = required_for_test();
        let dir = shm_dir();
        let pool = PmemBlkPool::create(&lib, &dir.path().join("pool"), BLOCK, POOL).unwrap();
        let mut backing = vec![0u8; BLOCK + 3];
        backing[3..].copy_from_slice(&pattern(5, 9));
        pool.write(5, &backing[3..]).unwrap();
        let mut out = vec![0u8; BLOCK + 1];
        pool.read(5, &mut out[1..]).unwrap();
        assert_eq!(&out[1..], &pattern(5, 9)[..]);
    }

    #[test]
    fn bad_arguments_fail_before_c() {
        let lib = required_for_test();
        let dir = shm_dir();
        let path = dir.path().join("pool");
        let pool = PmemBlkPool::create(&lib, &path, BLOCK, POOL).unwrap();
        let n = pool.nblock();
        let mut buf = vec![0u8; BLOCK];
        // Our own messages (libpmemblk's say "lba out of range (nlba N)"): C was not called.
        for lba in [n, n + 1, u64::MAX] {
            let e = pool.write(lba, &buf).unwrap_err();
            assert!(e.contains(&format!("lba {lba} out of range")), "{e}");
            let e = pool.read(lba, &mut buf).unwrap_err();
            assert!(e.contains(&format!("lba {lba} out of range")), "{e}");
            let e = pool.set_zero(lba).unwrap_err();
            assert!(e.contains("out of range"), "{e}");
        }
        for len in [0, 1, BLOCK - 1, BLOCK + 1, 2 * BLOCK] {
            let e = pool.write(0, &vec![1u8; len]).unwrap_err();
            assert!(e.contains(&format!("buffer of {len} bytes")), "{e}");
            let e = pool.read(0, &mut vec![0u8; len]).unwrap_err();
            assert!(e.contains(&format!("buffer of {len} bytes")), "{e}");
        }
        // Nothing was written by the refused calls.
        pool.read(0, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        // Create: existing file, small pool, zero block size, all refused in Rust.
        let e = PmemBlkPool::create(&lib, &path, BLOCK, POOL).unwrap_err();
        assert!(e.contains("already exists"), "{e}");
        let small = dir.path().join("small");
        let e = PmemBlkPool::create(&lib, &small, BLOCK, PMEMBLK_MIN_POOL - 1).unwrap_err();
        assert!(e.contains("below libpmemblk's minimum"), "{e}");
        assert!(!small.exists());
        let e = PmemBlkPool::create(&lib, &small, 0, POOL).unwrap_err();
        assert!(e.contains("block size"), "{e}");
        // The minimum itself is accepted.
        let min = PmemBlkPool::create(&lib, &small, BLOCK, PMEMBLK_MIN_POOL).unwrap();
        assert!(min.nblock() > 0);
        // A missing pool is libpmemblk's error, with its message.
        let e = PmemBlkPool::open(&lib, &dir.path().join("absent"), BLOCK).unwrap_err();
        assert!(
            e.starts_with("pmemblk_open") && e.len() > "pmemblk_open".len() + 10,
            "{e}"
        );
    }

    #[test]
    fn two_threads_disjoint_lbas() {
        let lib = required_for_test();
        let dir = shm_dir();
        let pool =
            Arc::new(PmemBlkPool::create(&lib, &dir.path().join("pool"), BLOCK, POOL).unwrap());
        let handles: Vec<_> = (0..2u64)
            .map(|t| {
                let pool = Arc::clone(&pool);
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; BLOCK];
                    // Thread t owns the LBAs congruent to t mod 2.
                    for round in 1..=20u64 {
                        for i in 0..200u64 {
                            let lba = 2 * i + t;
                            pool.write(lba, &pattern(lba, round)).unwrap();
                            pool.read(lba, &mut buf).unwrap();
                            assert_eq!(buf, pattern(lba, round), "thread {t} lba {lba}");
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let mut buf = vec![0u8; BLOCK];
        for lba in 0..400 {
            pool.read(lba, &mut buf).unwrap();
            assert_eq!(buf, pattern(lba, 20), "lba {lba}");
        }
    }

    #[test]
    fn load_forces_pmem_and_reports_missing_library_by_name() {
        let _lib = required_for_test();
        // Set by load() unless the user had set it.
        assert!(std::env::var_os(FORCE_PMEM_VAR).is_some());
        assert!(PmemBlkLib::loaded().is_some());
        let e = dlopen("libpmemblk-nvstack-absent.so.1").unwrap_err();
        assert!(
            e.starts_with("libpmemblk-nvstack-absent.so.1 not found (install libpmemblk-dev)"),
            "{e}"
        );
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    /// A Sapphire-Rapids-like CPU (the machine these rules were checked on).
    const SPR: CpuBits = CpuBits {
        clflush: true,
        clflushopt: true,
        clwb: true,
        avx: true,
        avx512f: true,
        movdir64b: true,
        genuine_intel: true,
        os_avx: true,
        os_avx512f: true,
    };

    fn isa(temporal: CopyIsa, non_temporal: CopyIsa) -> CopyMethod {
        CopyMethod::Isa {
            temporal,
            non_temporal,
        }
    }

    /// The cases traced with Debian's libpmem1-debug 1.12.1 (PMEM_LOG_LEVEL=3) on such a CPU.
    #[test]
    fn selection_matches_libpmem_1_12_trace() {
        let m = |pairs: &[(&str, &str)]| PersistMethod::select(SPR, env_of(pairs), Some(false));
        let d = m(&[]);
        assert_eq!(d.flush, Some(FlushInsn::Clwb));
        assert!(d.flushes && d.drain_sfence && d.wc_workaround);
        assert_eq!(d.copy, isa(CopyIsa::Avx512f, CopyIsa::Avx512f));
        assert_eq!(d.movnt_threshold, 256);
        assert_eq!(d.is_pmem, IsPmem::Detected);
        assert!(d.overrides.is_empty());

        assert_eq!(
            m(&[("PMEM_NO_CLWB", "1")]).flush,
            Some(FlushInsn::Clflushopt)
        );
        let c = m(&[("PMEM_NO_CLWB", "1"), ("PMEM_NO_CLFLUSHOPT", "1")]);
        assert_eq!(c.flush, Some(FlushInsn::Clflush));
        assert!(!c.drain_sfence, "clflush needs no fence");
        assert_eq!(m(&[("PMEM_NO_CLWB", "yes")]).flush, Some(FlushInsn::Clwb));

        for v in ["1", "2", ""] {
            let x = m(&[("PMEM_MOVDIR64B", v)]);
            assert_eq!(x.copy, isa(CopyIsa::Avx512f, CopyIsa::Movdir64b), "{v:?}");
        }
        assert_eq!(
            m(&[("PMEM_MOVDIR64B", "0")]).copy,
            isa(CopyIsa::Avx512f, CopyIsa::Avx512f)
        );
        assert_eq!(
            m(&[("PMEM_AVX512F", "0")]).copy,
            isa(CopyIsa::Avx, CopyIsa::Avx)
        );
        assert_eq!(
            m(&[("PMEM_AVX512F", "2")]).copy,
            isa(CopyIsa::Avx512f, CopyIsa::Avx512f)
        );
        assert_eq!(
            m(&[("PMEM_AVX512F", "0"), ("PMEM_AVX", "0")]).copy,
            isa(CopyIsa::Sse2, CopyIsa::Sse2)
        );
        assert_eq!(m(&[("PMEM_NO_MOVNT", "1")]).copy, CopyMethod::Generic);
        assert_eq!(
            m(&[("PMEM_NO_MOVNT", "1"), ("PMEM_NO_GENERIC_MEMCPY", "1")]).copy,
            CopyMethod::Libc
        );
        let nf = m(&[("PMEM_NO_FLUSH", "1")]);
        assert!(!nf.flushes && nf.drain_sfence);
        assert_eq!(nf.flush, Some(FlushInsn::Clwb));
        let t = m(&[
            ("PMEM_MOVNT_THRESHOLD", "1024"),
            ("PMEM_WC_WORKAROUND", "0"),
        ]);
        assert_eq!(t.movnt_threshold, 1024);
        assert!(!t.wc_workaround);
        assert_eq!(t.overrides.len(), 2);
    }

    #[test]
    fn selection_edge_rules() {
        let m = |cpu, pairs: &[(&str, &str)], eadr| PersistMethod::select(cpu, env_of(pairs), eadr);
        // atoll semantics for the threshold: negative ignored, junk is 0, leading digits count.
        assert_eq!(
            m(SPR, &[("PMEM_MOVNT_THRESHOLD", "-5")], None).movnt_threshold,
            256
        );
        assert_eq!(
            m(SPR, &[("PMEM_MOVNT_THRESHOLD", "x")], None).movnt_threshold,
            0
        );
        assert_eq!(
            m(SPR, &[("PMEM_MOVNT_THRESHOLD", " 64k")], None).movnt_threshold,
            64
        );
        // PMEM_IS_PMEM_FORCE is atoi'd: "1" and " 1" force true, "0" and junk force false.
        assert_eq!(
            m(SPR, &[("PMEM_IS_PMEM_FORCE", "1")], None).is_pmem,
            IsPmem::Forced(true)
        );
        assert_eq!(
            m(SPR, &[("PMEM_IS_PMEM_FORCE", " 1")], None).is_pmem,
            IsPmem::Forced(true)
        );
        assert_eq!(
            m(SPR, &[("PMEM_IS_PMEM_FORCE", "no")], None).is_pmem,
            IsPmem::Forced(false)
        );
        assert_eq!(
            m(SPR, &[("PMEM_IS_PMEM_FORCE", "2")], None).is_pmem,
            IsPmem::Detected
        );
        // eADR turns flushing off unless PMEM_NO_FLUSH=0.
        assert!(!m(SPR, &[], Some(true)).flushes);
        assert!(m(SPR, &[("PMEM_NO_FLUSH", "0")], Some(true)).flushes);
        // An old CPU: clflush only, no AVX; an AMD CPU has no WC workaround unless forced.
        let old = CpuBits {
            clflush: true,
            ..CpuBits::default()
        };
        let o = m(old, &[], None);
        assert_eq!(o.flush, Some(FlushInsn::Clflush));
        assert!(!o.drain_sfence && !o.wc_workaround);
        assert_eq!(o.copy, isa(CopyIsa::Sse2, CopyIsa::Sse2));
        assert!(m(old, &[("PMEM_WC_WORKAROUND", "1")], None).wc_workaround);
        // MOVDIR64B without the CPU bit is never chosen.
        let no_m = CpuBits {
            movdir64b: false,
            ..SPR
        };
        assert_eq!(
            m(no_m, &[("PMEM_MOVDIR64B", "1")], None).copy,
            isa(CopyIsa::Avx512f, CopyIsa::Avx512f)
        );
    }

    #[test]
    fn c_atoll_matches_c() {
        for (s, v) in [
            ("", 0),
            ("0", 0),
            ("42", 42),
            ("  -7", -7),
            ("+3x", 3),
            ("x3", 0),
            ("\t12 ", 12),
            ("99999999999999999999999", i64::MAX),
        ] {
            assert_eq!(c_atoll(s), v, "{s:?}");
        }
    }

    #[test]
    fn describes_this_machine() {
        // Load first (when present) so eADR comes from libpmem and the forced variable shows.
        let _ = PmemBlkLib::load();
        let d = persist_method_description();
        eprintln!("{d}");
        eprintln!("summary: {}", PersistMethod::detect().summary());
        assert!(d.contains("flush:") && d.contains("drain:") && d.contains("overrides:"));
    }
}
