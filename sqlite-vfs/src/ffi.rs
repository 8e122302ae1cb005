//! The C side: the entry points SQLite calls when it loads the library, the `nvstack` VFS, and
//! the two io_methods tables (the main database file, passed through to `unix`; journal files,
//! served by the region's store). The only module of this crate with `unsafe`; every block
//! says why it is sound.
//!
//! Every callback body runs under `catch_unwind`: a panic becomes an I/O error code instead of
//! unwinding into SQLite.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

use crate::registry::{self, OpenRegion};
use crate::store::{FileId, StoreError};
use crate::{params, set_last_error, VfsError};
use libsqlite3_sys as sq;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, OnceLock};

const VFS_NAME: &CStr = c"nvstack";
/// SQLITE_OK_LOAD_PERMANENTLY first appeared in 3.14.0.
const SQLITE_VERSION_MIN: c_int = 3_014_000;

/// The routines table SQLite handed us at load time (`sqlite3_api_routines`). The struct in
/// the bindings may be longer than the running SQLite's: only fields SQLite 3.14 already had
/// are ever read, one at a time through the raw pointer (never a reference to the whole).
static API: AtomicPtr<sq::sqlite3_api_routines> = AtomicPtr::new(ptr::null_mut());

/// One routine of the table (checked non-null when the library loaded).
macro_rules! api {
    ($f:ident) => {{
        let p = API.load(Ordering::Acquire);
        assert!(!p.is_null(), "SQLite routines table not set");
        // SAFETY: `p` is the table SQLite passed to the entry point, which stays valid for
        // the life of the process; `$f` is a field SQLite 3.14+ defines (checked at load), and
        // reading it through the raw pointer reads that field only.
        #[allow(unused_unsafe)]
        let f = unsafe { (*p).$f };
        f.expect(concat!("sqlite3_api_routines.", stringify!($f)))
    }};
}

/// Are the routines this library calls all present?
fn api_complete(p: *const sq::sqlite3_api_routines) -> bool {
    // SAFETY: `p` is non-null (checked by the caller) and points at SQLite's routines table;
    // each read is one field SQLite 3.14+ defines.
    unsafe {
        (*p).libversion_number.is_some()
            && (*p).vfs_find.is_some()
            && (*p).vfs_register.is_some()
            && (*p).uri_parameter.is_some()
            && (*p).log.is_some()
            && (*p).mprintf.is_some()
            && (*p).create_function_v2.is_some()
            && (*p).result_text.is_some()
            && (*p).result_null.is_some()
            && (*p).auto_extension.is_some()
    }
}

/// Report an error: to sqlite3_log and to `nvstack_last_error()`; returns its code.
fn fail(e: VfsError) -> c_int {
    debug_assert_ne!(e.code, sq::SQLITE_OK, "a failure has an error code");
    set_last_error(&e.msg);
    let msg = CString::new(format!("nvstack: {}", e.msg.replace('\0', " ")))
        .unwrap_or_else(|_| CString::from(c"nvstack: error"));
    // SAFETY: sqlite3_log with the format "%s" reads exactly one C string argument, `msg`,
    // which outlives the call.
    unsafe { api!(log)(e.code, c"%s".as_ptr(), msg.as_ptr()) };
    e.code
}

/// Run a callback body; a panic becomes `on_panic` (and is reported).
fn guard(on_panic: c_int, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(rc) => rc,
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown".into());
            fail(VfsError::new(
                on_panic,
                format!("internal error (panic): {what}"),
            ))
        }
    }
}

fn store_error(e: StoreError, other: c_int) -> c_int {
    debug_assert_ne!(other, sq::SQLITE_OK, "a failure has an error code");
    match e {
        StoreError::Full(m) => fail(VfsError::new(sq::SQLITE_FULL, m)),
        StoreError::Other(e) => fail(VfsError::new(other, e.to_string())),
        e @ StoreError::PiecesExceeded { .. } => fail(VfsError::new(other, e.to_string())),
    }
}

// ---------------------------------------------------------------------------------------------
// Files

/// Our `sqlite3_file`. For the main database the `unix` VFS's file follows at [`INNER_OFF`].
#[repr(C)]
struct NvFile {
    base: sq::sqlite3_file,
    /// `Box<MainHandle>` or `Box<StoreHandle>`, by `base.pMethods`.
    handle: *mut c_void,
}

const INNER_OFF: usize = std::mem::size_of::<NvFile>().next_multiple_of(16);

struct MainHandle {
    /// Keeps the region open while the database is.
    _region: Arc<OpenRegion>,
}

struct StoreHandle {
    region: Arc<OpenRegion>,
    id: FileId,
    name: String,
    delete_on_close: bool,
}

/// The `unix` file inside one of our main-database files.
///
/// # Safety
/// `file` must be an `NvFile` of at least `szOsFile` bytes opened by [`x_open`].
unsafe fn inner_of(file: *mut sq::sqlite3_file) -> *mut sq::sqlite3_file {
    // SAFETY: the allocation is szOsFile >= INNER_OFF + unix's szOsFile bytes (see `make_vfs`).
    unsafe { file.cast::<u8>().add(INNER_OFF).cast() }
}

/// The store handle of an open journal file.
///
/// # Safety
/// `file` must be an `NvFile` whose methods are [`STORE_METHODS`] (so `handle` is a live
/// `Box<StoreHandle>`); SQLite never calls one file's methods concurrently with its xClose.
unsafe fn store_handle<'a>(file: *mut sq::sqlite3_file) -> &'a StoreHandle {
    // SAFETY: as documented above.
    unsafe { &*((*file.cast::<NvFile>()).handle as *const StoreHandle) }
}

/// The `unix` VFS we wrap (kept in our VFS's pAppData).
///
/// # Safety
/// `vfs` must be the VFS [`make_vfs`] built.
unsafe fn unix_of(vfs: *mut sq::sqlite3_vfs) -> *mut sq::sqlite3_vfs {
    // SAFETY: as documented above; pAppData was set to the unix VFS, which lives forever.
    unsafe { (*vfs).pAppData.cast() }
}

fn uri_param(z_name: *const c_char, key: &CStr) -> Option<String> {
    // SAFETY: `z_name` is the main database's filename as SQLite passed it to xOpen (the form
    // sqlite3_uri_parameter expects); the result is null or a C string owned by SQLite that
    // lives as long as the filename.
    unsafe {
        let v = api!(uri_parameter)(z_name, key.as_ptr());
        (!v.is_null()).then(|| CStr::from_ptr(v).to_string_lossy().into_owned())
    }
}

unsafe extern "C" fn x_open(
    vfs: *mut sq::sqlite3_vfs,
    z_name: sq::sqlite3_filename,
    file: *mut sq::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    guard(sq::SQLITE_CANTOPEN, || {
        debug_assert!(!vfs.is_null() && !file.is_null());
        // SAFETY: SQLite passes our VFS, a zeroed-or-not allocation of szOsFile bytes for
        // `file`, a filename that is null or a C string, and a nullable out pointer.
        unsafe {
            let unix = unix_of(vfs);
            (*file).pMethods = ptr::null();
            let journal =
                sq::SQLITE_OPEN_WAL | sq::SQLITE_OPEN_MAIN_JOURNAL | sq::SQLITE_OPEN_SUPER_JOURNAL;
            if z_name.is_null() || flags & (sq::SQLITE_OPEN_MAIN_DB | journal) == 0 {
                // Temporary files and anything else: the unix VFS's own file, untouched.
                return (*unix).xOpen.expect("unix xOpen")(unix, z_name, file, flags, out_flags);
            }
            let Ok(name) = CStr::from_ptr(z_name).to_str() else {
                return fail(VfsError::cantopen("file name is not UTF-8"));
            };
            if flags & sq::SQLITE_OPEN_MAIN_DB != 0 {
                open_main(unix, z_name, name, file, flags, out_flags)
            } else {
                open_journal(name, file, flags, out_flags)
            }
        }
    })
}

/// A journal of database `name` (its `-wal` or `-journal`) on the file system, if there is
/// one: a run without this VFS left it, and this VFS, which looks for journals in the region
/// only, would ignore it. The database is refused rather than the journal lost.
///
/// # Safety
/// `unix` must be the unix VFS.
unsafe fn journal_on_file_system(unix: *mut sq::sqlite3_vfs, name: &str) -> Option<String> {
    debug_assert!(!unix.is_null() && !name.is_empty());
    for suffix in ["-wal", "-journal"] {
        let other = format!("{name}{suffix}");
        let Ok(c) = CString::new(other.clone()) else {
            continue;
        };
        let mut exists: c_int = 0;
        // SAFETY: the unix VFS's xAccess with a C string and an out int.
        let rc = unsafe {
            (*unix).xAccess.expect("unix xAccess")(
                unix,
                c.as_ptr(),
                sq::SQLITE_ACCESS_EXISTS,
                &mut exists,
            )
        };
        if rc == sq::SQLITE_OK && exists != 0 {
            return Some(other);
        }
    }
    None
}

/// # Safety
/// As for [`x_open`].
unsafe fn open_main(
    unix: *mut sq::sqlite3_vfs,
    z_name: *const c_char,
    name: &str,
    file: *mut sq::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    debug_assert!(!z_name.is_null() && flags & sq::SQLITE_OPEN_MAIN_DB != 0);
    debug_assert!(!unix.is_null() && !file.is_null());
    let params = match params::parse(|k| {
        let key = CString::new(k).expect("parameter names have no NUL");
        uri_param(z_name, &key)
    }) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    // SAFETY: `unix` is the unix VFS (as for x_open).
    if let Some(other) = unsafe { journal_on_file_system(unix, name) } {
        return fail(VfsError::cantopen(format!(
            "{other} exists on the file system (left by a run without vfs=nvstack): open \
             the database once without vfs=nvstack so SQLite recovers it, then again with it"
        )));
    }
    let region = match registry::attach(name, &params) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    // SAFETY: `file` has szOsFile bytes, enough for NvFile plus the unix file at INNER_OFF;
    // the unix VFS's xOpen initialises its file there.
    unsafe {
        let inner = inner_of(file);
        (*inner).pMethods = ptr::null();
        let rc = (*unix).xOpen.expect("unix xOpen")(unix, z_name, inner, flags, out_flags);
        if rc != sq::SQLITE_OK {
            // SQLite would call xClose on a failed open whose pMethods is set: do it for the
            // inner file, since ours stays null.
            if let Some(m) = (*inner).pMethods.as_ref() {
                if let Some(close) = m.xClose {
                    close(inner);
                }
            }
            return rc;
        }
        let nv = file.cast::<NvFile>();
        (*nv).handle = Box::into_raw(Box::new(MainHandle { _region: region })).cast();
        (*nv).base.pMethods = &MAIN_METHODS;
    }
    sq::SQLITE_OK
}

/// # Safety
/// As for [`x_open`].
unsafe fn open_journal(
    name: &str,
    file: *mut sq::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    debug_assert!(
        flags
            & (sq::SQLITE_OPEN_WAL | sq::SQLITE_OPEN_MAIN_JOURNAL | sq::SQLITE_OPEN_SUPER_JOURNAL)
            != 0
    );
    debug_assert!(!file.is_null());
    let Some((region, kind)) = registry::journal_of(name) else {
        return fail(VfsError::cantopen(format!(
            "{name}: no database open with vfs=nvstack in this process owns this journal"
        )));
    };
    let create = flags & sq::SQLITE_OPEN_CREATE != 0;
    if create && flags & sq::SQLITE_OPEN_EXCLUSIVE != 0 {
        match region.store.lookup(name) {
            Ok(Some(_)) => {
                return fail(VfsError::cantopen(format!(
                    "{name} exists (exclusive create)"
                )))
            }
            Ok(None) => {}
            Err(e) => return fail(VfsError::cantopen(e.to_string())),
        }
    }
    let id = match region.store.open_file(name, kind, create) {
        Ok(Some(id)) => id,
        Ok(None) => return sq::SQLITE_CANTOPEN,
        Err(e) => return store_error(e, sq::SQLITE_CANTOPEN),
    };
    let h = StoreHandle {
        region,
        id,
        name: name.to_string(),
        delete_on_close: flags & sq::SQLITE_OPEN_DELETEONCLOSE != 0,
    };
    // SAFETY: `file` has at least size_of::<NvFile>() bytes (szOsFile); `out_flags` is null
    // or writable.
    unsafe {
        let nv = file.cast::<NvFile>();
        (*nv).handle = Box::into_raw(Box::new(h)).cast();
        (*nv).base.pMethods = &STORE_METHODS;
        if !out_flags.is_null() {
            *out_flags = flags;
        }
    }
    sq::SQLITE_OK
}

unsafe extern "C" fn x_delete(
    vfs: *mut sq::sqlite3_vfs,
    z_name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    guard(sq::SQLITE_IOERR_DELETE, || {
        debug_assert!(!vfs.is_null() && !z_name.is_null());
        // SAFETY: SQLite passes our VFS and a C string name.
        unsafe {
            let unix = unix_of(vfs);
            if let Ok(name) = CStr::from_ptr(z_name).to_str() {
                if let Some((region, _)) = registry::journal_of(name) {
                    return match region.store.delete(name) {
                        Ok(true) => sq::SQLITE_OK,
                        Ok(false) => sq::SQLITE_IOERR_DELETE_NOENT,
                        Err(e) => fail(VfsError::new(sq::SQLITE_IOERR_DELETE, e.to_string())),
                    };
                }
            }
            (*unix).xDelete.expect("unix xDelete")(unix, z_name, sync_dir)
        }
    })
}

unsafe extern "C" fn x_access(
    vfs: *mut sq::sqlite3_vfs,
    z_name: *const c_char,
    flags: c_int,
    res_out: *mut c_int,
) -> c_int {
    guard(sq::SQLITE_IOERR_ACCESS, || {
        debug_assert!(!vfs.is_null() && !z_name.is_null() && !res_out.is_null());
        // SAFETY: SQLite passes our VFS, a C string name and a writable out int.
        unsafe {
            let unix = unix_of(vfs);
            if let Ok(name) = CStr::from_ptr(z_name).to_str() {
                if let Some((region, _)) = registry::journal_of(name) {
                    return match region.store.lookup(name) {
                        Ok(found) => {
                            *res_out = c_int::from(found.is_some());
                            sq::SQLITE_OK
                        }
                        Err(e) => fail(VfsError::new(sq::SQLITE_IOERR_ACCESS, e.to_string())),
                    };
                }
            }
            (*unix).xAccess.expect("unix xAccess")(unix, z_name, flags, res_out)
        }
    })
}

/// VFS methods that only pass through to the unix VFS.
macro_rules! vfs_passthrough {
    ($name:ident, $field:ident, ($($arg:ident : $ty:ty),*) -> $ret:ty, $missing:expr) => {
        unsafe extern "C" fn $name(vfs: *mut sq::sqlite3_vfs $(, $arg: $ty)*) -> $ret {
            // SAFETY: `vfs` is ours; the arguments go unchanged to the same method of the
            // unix VFS, whose contract is the one SQLite called us under.
            unsafe {
                let unix = unix_of(vfs);
                match (*unix).$field {
                    Some(f) => f(unix $(, $arg)*),
                    None => $missing,
                }
            }
        }
    };
}

vfs_passthrough!(x_full_pathname, xFullPathname, (z: *const c_char, n: c_int, out: *mut c_char) -> c_int, sq::SQLITE_ERROR);
vfs_passthrough!(x_dl_open, xDlOpen, (z: *const c_char) -> *mut c_void, ptr::null_mut());
vfs_passthrough!(x_dl_error, xDlError, (n: c_int, z: *mut c_char) -> (), ());
vfs_passthrough!(
    x_dl_sym,
    xDlSym,
    (h: *mut c_void, z: *const c_char) -> Option<unsafe extern "C" fn(*mut sq::sqlite3_vfs, *mut c_void, *const c_char)>,
    None
);
vfs_passthrough!(x_dl_close, xDlClose, (h: *mut c_void) -> (), ());
vfs_passthrough!(x_randomness, xRandomness, (n: c_int, z: *mut c_char) -> c_int, 0);
vfs_passthrough!(x_sleep, xSleep, (us: c_int) -> c_int, 0);
vfs_passthrough!(x_current_time, xCurrentTime, (t: *mut f64) -> c_int, sq::SQLITE_ERROR);
vfs_passthrough!(x_get_last_error, xGetLastError, (n: c_int, z: *mut c_char) -> c_int, 0);
vfs_passthrough!(x_current_time_int64, xCurrentTimeInt64, (t: *mut sq::sqlite3_int64) -> c_int, sq::SQLITE_ERROR);
vfs_passthrough!(
    x_set_system_call,
    xSetSystemCall,
    (z: *const c_char, p: sq::sqlite3_syscall_ptr) -> c_int,
    sq::SQLITE_NOTFOUND
);
vfs_passthrough!(x_get_system_call, xGetSystemCall, (z: *const c_char) -> sq::sqlite3_syscall_ptr, None);
vfs_passthrough!(x_next_system_call, xNextSystemCall, (z: *const c_char) -> *const c_char, ptr::null());

// ---------------------------------------------------------------------------------------------
// The main database file: every method passes through to the unix file inside ours.

/// Main-file methods that pass through to the unix file (`$ver`: the io_methods version that
/// introduced the method).
macro_rules! main_passthrough {
    ($name:ident, $field:ident, $ver:expr, ($($arg:ident : $ty:ty),*) -> $ret:ty, $missing:expr) => {
        unsafe extern "C" fn $name(file: *mut sq::sqlite3_file $(, $arg: $ty)*) -> $ret {
            // SAFETY: `file` is one of our main files (its methods are MAIN_METHODS), so the
            // unix file inside it is open and its methods table is valid; the arguments go to
            // the same method under the same contract.
            unsafe {
                let inner = inner_of(file);
                let m = &*(*inner).pMethods;
                match m.$field {
                    Some(f) if m.iVersion >= $ver => f(inner $(, $arg)*),
                    _ => $missing,
                }
            }
        }
    };
}

main_passthrough!(m_read, xRead, 1, (buf: *mut c_void, amt: c_int, off: sq::sqlite3_int64) -> c_int, sq::SQLITE_IOERR_READ);
main_passthrough!(m_write, xWrite, 1, (buf: *const c_void, amt: c_int, off: sq::sqlite3_int64) -> c_int, sq::SQLITE_IOERR_WRITE);
main_passthrough!(m_truncate, xTruncate, 1, (size: sq::sqlite3_int64) -> c_int, sq::SQLITE_IOERR_TRUNCATE);
main_passthrough!(m_sync, xSync, 1, (flags: c_int) -> c_int, sq::SQLITE_IOERR_FSYNC);
main_passthrough!(m_file_size, xFileSize, 1, (size: *mut sq::sqlite3_int64) -> c_int, sq::SQLITE_IOERR_FSTAT);
main_passthrough!(m_lock, xLock, 1, (level: c_int) -> c_int, sq::SQLITE_IOERR_LOCK);
main_passthrough!(m_unlock, xUnlock, 1, (level: c_int) -> c_int, sq::SQLITE_IOERR_UNLOCK);
main_passthrough!(m_check_reserved_lock, xCheckReservedLock, 1, (res: *mut c_int) -> c_int, sq::SQLITE_IOERR_CHECKRESERVEDLOCK);
main_passthrough!(m_file_control, xFileControl, 1, (op: c_int, arg: *mut c_void) -> c_int, sq::SQLITE_NOTFOUND);
main_passthrough!(m_sector_size, xSectorSize, 1, () -> c_int, 4096);
main_passthrough!(m_device_characteristics, xDeviceCharacteristics, 1, () -> c_int, 0);
main_passthrough!(m_shm_map, xShmMap, 2, (pg: c_int, pgsz: c_int, extend: c_int, pp: *mut *mut c_void) -> c_int, sq::SQLITE_IOERR_SHMMAP);
main_passthrough!(m_shm_lock, xShmLock, 2, (off: c_int, n: c_int, flags: c_int) -> c_int, sq::SQLITE_IOERR_SHMLOCK);
main_passthrough!(m_shm_barrier, xShmBarrier, 2, () -> (), ());
main_passthrough!(m_shm_unmap, xShmUnmap, 2, (delete: c_int) -> c_int, sq::SQLITE_OK);
// Without xFetch in the unix file: no mapping (a null `pp`, SQLite's out pointer, inside the
// macro's unsafe block), so SQLite reads instead.
main_passthrough!(m_fetch, xFetch, 3, (off: sq::sqlite3_int64, amt: c_int, pp: *mut *mut c_void) -> c_int, {
    *pp = ptr::null_mut();
    sq::SQLITE_OK
});
main_passthrough!(m_unfetch, xUnfetch, 3, (off: sq::sqlite3_int64, p: *mut c_void) -> c_int, sq::SQLITE_OK);

unsafe extern "C" fn m_close(file: *mut sq::sqlite3_file) -> c_int {
    guard(sq::SQLITE_IOERR_CLOSE, || {
        // SAFETY: `file` is one of our main files being closed (SQLite calls xClose once and
        // nothing after it): close the unix file, then free our handle, which releases the
        // region when this was its last user.
        unsafe {
            let inner = inner_of(file);
            let rc = match (*inner).pMethods.as_ref().and_then(|m| m.xClose) {
                Some(close) => close(inner),
                None => sq::SQLITE_OK,
            };
            let nv = file.cast::<NvFile>();
            let h = std::mem::replace(&mut (*nv).handle, ptr::null_mut());
            if !h.is_null() {
                drop(Box::from_raw(h.cast::<MainHandle>()));
            }
            (*nv).base.pMethods = ptr::null();
            rc
        }
    })
}

static MAIN_METHODS: sq::sqlite3_io_methods = sq::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(m_close),
    xRead: Some(m_read),
    xWrite: Some(m_write),
    xTruncate: Some(m_truncate),
    xSync: Some(m_sync),
    xFileSize: Some(m_file_size),
    xLock: Some(m_lock),
    xUnlock: Some(m_unlock),
    xCheckReservedLock: Some(m_check_reserved_lock),
    xFileControl: Some(m_file_control),
    xSectorSize: Some(m_sector_size),
    xDeviceCharacteristics: Some(m_device_characteristics),
    xShmMap: Some(m_shm_map),
    xShmLock: Some(m_shm_lock),
    xShmBarrier: Some(m_shm_barrier),
    xShmUnmap: Some(m_shm_unmap),
    xFetch: Some(m_fetch),
    xUnfetch: Some(m_unfetch),
};

// ---------------------------------------------------------------------------------------------
// Journal files: served by the region's store.

unsafe extern "C" fn s_close(file: *mut sq::sqlite3_file) -> c_int {
    guard(sq::SQLITE_IOERR_CLOSE, || {
        // SAFETY: `file` is one of our journal files being closed; its handle is taken out
        // and freed exactly once.
        let h = unsafe {
            let nv = file.cast::<NvFile>();
            let h = std::mem::replace(&mut (*nv).handle, ptr::null_mut());
            (*nv).base.pMethods = ptr::null();
            if h.is_null() {
                return sq::SQLITE_OK;
            }
            Box::from_raw(h.cast::<StoreHandle>())
        };
        if h.delete_on_close {
            if let Err(e) = h.region.store.delete(&h.name) {
                return fail(VfsError::new(sq::SQLITE_IOERR_DELETE, e.to_string()));
            }
        }
        sq::SQLITE_OK
    })
}

unsafe extern "C" fn s_read(
    file: *mut sq::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    off: sq::sqlite3_int64,
) -> c_int {
    guard(sq::SQLITE_IOERR_READ, || {
        debug_assert!(!file.is_null() && (amt <= 0 || !buf.is_null()));
        if amt < 0 || off < 0 {
            return fail(VfsError::new(sq::SQLITE_IOERR_READ, "negative read"));
        }
        // SAFETY: our journal file; SQLite gives a writable buffer of `amt` bytes.
        let (handle, buf) = unsafe {
            (
                store_handle(file),
                std::slice::from_raw_parts_mut(buf.cast::<u8>(), amt as usize),
            )
        };
        match handle.region.store.read(handle.id, off as u64, buf) {
            Ok(n) if n == buf.len() => sq::SQLITE_OK,
            Ok(n) => {
                // SQLite's rule: a short read zero-fills the rest.
                buf[n..].fill(0);
                sq::SQLITE_IOERR_SHORT_READ
            }
            Err(e) => fail(VfsError::new(sq::SQLITE_IOERR_READ, e.to_string())),
        }
    })
}

unsafe extern "C" fn s_write(
    file: *mut sq::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    off: sq::sqlite3_int64,
) -> c_int {
    guard(sq::SQLITE_IOERR_WRITE, || {
        debug_assert!(!file.is_null() && (amt <= 0 || !buf.is_null()));
        if amt < 0 || off < 0 {
            return fail(VfsError::new(sq::SQLITE_IOERR_WRITE, "negative write"));
        }
        // SAFETY: our journal file; SQLite gives a readable buffer of `amt` bytes.
        let (handle, data) = unsafe {
            (
                store_handle(file),
                std::slice::from_raw_parts(buf.cast::<u8>(), amt as usize),
            )
        };
        match handle.region.store.write(handle.id, off as u64, data) {
            Ok(()) => sq::SQLITE_OK,
            Err(e) => store_error(e, sq::SQLITE_IOERR_WRITE),
        }
    })
}

unsafe extern "C" fn s_truncate(file: *mut sq::sqlite3_file, size: sq::sqlite3_int64) -> c_int {
    guard(sq::SQLITE_IOERR_TRUNCATE, || {
        debug_assert!(!file.is_null());
        if size < 0 {
            return fail(VfsError::new(sq::SQLITE_IOERR_TRUNCATE, "negative size"));
        }
        // SAFETY: our journal file.
        let handle = unsafe { store_handle(file) };
        match handle.region.store.truncate(handle.id, size as u64) {
            Ok(()) => sq::SQLITE_OK,
            Err(e) => store_error(e, sq::SQLITE_IOERR_TRUNCATE),
        }
    })
}

/// Nothing to do: every store write is an nvramdisk write, which is durable (its data and
/// map entry fenced to the persistence domain) before it returns; there is no cache between
/// SQLite and the media to drain.
unsafe extern "C" fn s_sync(_file: *mut sq::sqlite3_file, _flags: c_int) -> c_int {
    sq::SQLITE_OK
}

unsafe extern "C" fn s_file_size(
    file: *mut sq::sqlite3_file,
    out: *mut sq::sqlite3_int64,
) -> c_int {
    guard(sq::SQLITE_IOERR_FSTAT, || {
        debug_assert!(!file.is_null() && !out.is_null());
        // SAFETY: our journal file.
        let h = unsafe { store_handle(file) };
        match h.region.store.size_bytes(h.id) {
            Ok(n) => {
                // SAFETY: SQLite's writable out pointer.
                unsafe { *out = n as sq::sqlite3_int64 };
                sq::SQLITE_OK
            }
            Err(e) => fail(VfsError::new(sq::SQLITE_IOERR_FSTAT, e.to_string())),
        }
    })
}

/// SQLite locks the main database file and the wal-index, never a journal.
unsafe extern "C" fn s_lock(_file: *mut sq::sqlite3_file, _level: c_int) -> c_int {
    sq::SQLITE_OK
}

unsafe extern "C" fn s_check_reserved_lock(_file: *mut sq::sqlite3_file, res: *mut c_int) -> c_int {
    // SAFETY: SQLite's writable out pointer.
    unsafe { *res = 0 };
    sq::SQLITE_OK
}

unsafe extern "C" fn s_file_control(
    _file: *mut sq::sqlite3_file,
    _op: c_int,
    _arg: *mut c_void,
) -> c_int {
    sq::SQLITE_NOTFOUND
}

unsafe extern "C" fn s_sector_size(file: *mut sq::sqlite3_file) -> c_int {
    guard(4096, || {
        // SAFETY: our journal file.
        let h = unsafe { store_handle(file) };
        h.region.store.geometry().block_bytes as c_int
    })
}

/// Writes reach the media in the order they are issued and each is atomic, so a write never
/// damages bytes around it (power-safe overwrite) and appends are safe.
unsafe extern "C" fn s_device_characteristics(_file: *mut sq::sqlite3_file) -> c_int {
    sq::SQLITE_IOCAP_SEQUENTIAL
        | sq::SQLITE_IOCAP_POWERSAFE_OVERWRITE
        | sq::SQLITE_IOCAP_SAFE_APPEND
}

static STORE_METHODS: sq::sqlite3_io_methods = sq::sqlite3_io_methods {
    iVersion: 1,
    xClose: Some(s_close),
    xRead: Some(s_read),
    xWrite: Some(s_write),
    xTruncate: Some(s_truncate),
    xSync: Some(s_sync),
    xFileSize: Some(s_file_size),
    xLock: Some(s_lock),
    xUnlock: Some(s_lock),
    xCheckReservedLock: Some(s_check_reserved_lock),
    xFileControl: Some(s_file_control),
    xSectorSize: Some(s_sector_size),
    xDeviceCharacteristics: Some(s_device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

// ---------------------------------------------------------------------------------------------
// Registration and entry points

/// Our VFS, registered once per process (its address, as SQLite keeps the pointer).
static VFS: OnceLock<Result<usize, String>> = OnceLock::new();

fn make_vfs(unix: *mut sq::sqlite3_vfs) -> sq::sqlite3_vfs {
    debug_assert!(!unix.is_null());
    // SAFETY: `unix` is the registered unix VFS (non-null, lives forever).
    let (version, sz_unix, mx_path) =
        unsafe { ((*unix).iVersion, (*unix).szOsFile, (*unix).mxPathname) };
    let sz = (INNER_OFF + sz_unix.max(0) as usize).max(std::mem::size_of::<NvFile>());
    // Our file, then the unix file at INNER_OFF (see `inner_of`).
    debug_assert!(sz >= INNER_OFF + sz_unix.max(0) as usize && sz <= c_int::MAX as usize);
    sq::sqlite3_vfs {
        iVersion: version.min(3),
        szOsFile: sz as c_int,
        mxPathname: mx_path,
        pNext: ptr::null_mut(),
        zName: VFS_NAME.as_ptr(),
        pAppData: unix.cast(),
        xOpen: Some(x_open),
        xDelete: Some(x_delete),
        xAccess: Some(x_access),
        xFullPathname: Some(x_full_pathname),
        xDlOpen: Some(x_dl_open),
        xDlError: Some(x_dl_error),
        xDlSym: Some(x_dl_sym),
        xDlClose: Some(x_dl_close),
        xRandomness: Some(x_randomness),
        xSleep: Some(x_sleep),
        xCurrentTime: Some(x_current_time),
        xGetLastError: Some(x_get_last_error),
        xCurrentTimeInt64: Some(x_current_time_int64),
        xSetSystemCall: Some(x_set_system_call),
        xGetSystemCall: Some(x_get_system_call),
        xNextSystemCall: Some(x_next_system_call),
    }
}

fn register_vfs() -> Result<(), String> {
    VFS.get_or_init(|| {
        // SAFETY: sqlite3_vfs_find with a C string; the unix VFS is registered by SQLite on
        // every Unix build and lives for the process.
        let unix = unsafe { api!(vfs_find)(c"unix".as_ptr()) };
        if unix.is_null() {
            return Err("SQLite has no 'unix' VFS to wrap".into());
        }
        let vfs: &'static mut sq::sqlite3_vfs = Box::leak(Box::new(make_vfs(unix)));
        let p: *mut sq::sqlite3_vfs = vfs;
        // SAFETY: `p` is a complete VFS that lives forever (leaked); not made the default.
        let rc = unsafe { api!(vfs_register)(p, 0) };
        if rc != sq::SQLITE_OK {
            return Err(format!("sqlite3_vfs_register failed with code {rc}"));
        }
        Ok(p as usize)
    })
    .clone()
    .map(|_| ())
}

fn result_text(ctx: *mut sq::sqlite3_context, s: Option<String>) {
    match s {
        Some(s) => {
            let len = s.len().min(i32::MAX as usize) as c_int;
            // SAFETY: `ctx` is the context SQLite passed to the function; the text is copied
            // (SQLITE_TRANSIENT) before the call returns.
            unsafe { api!(result_text)(ctx, s.as_ptr().cast(), len, sq::SQLITE_TRANSIENT()) }
        }
        // SAFETY: as above.
        None => unsafe { api!(result_null)(ctx) },
    }
}

unsafe extern "C" fn fn_last_error(
    ctx: *mut sq::sqlite3_context,
    _argc: c_int,
    _argv: *mut *mut sq::sqlite3_value,
) {
    let _ = guard(0, || {
        result_text(ctx, crate::last_error());
        0
    });
}

unsafe extern "C" fn fn_stats(
    ctx: *mut sq::sqlite3_context,
    _argc: c_int,
    _argv: *mut *mut sq::sqlite3_value,
) {
    let _ = guard(0, || {
        result_text(ctx, Some(registry::stats_json()));
        0
    });
}

fn register_functions(db: *mut sq::sqlite3) -> c_int {
    if db.is_null() {
        return sq::SQLITE_OK;
    }
    type Func = unsafe extern "C" fn(*mut sq::sqlite3_context, c_int, *mut *mut sq::sqlite3_value);
    let funcs: [(&CStr, Func); 2] = [
        (c"nvstack_last_error", fn_last_error),
        (c"nvstack_stats", fn_stats),
    ];
    for (name, f) in funcs {
        // SAFETY: `db` is the open connection SQLite is loading us into; the name is a C
        // string; no user data or destructor.
        let rc = unsafe {
            api!(create_function_v2)(
                db,
                name.as_ptr(),
                0,
                sq::SQLITE_UTF8,
                ptr::null_mut(),
                Some(f),
                None,
                None,
                None,
            )
        };
        if rc != sq::SQLITE_OK {
            return rc;
        }
    }
    sq::SQLITE_OK
}

fn set_error_message(pz_err: *mut *mut c_char, msg: &str) {
    if pz_err.is_null() {
        return;
    }
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: SQLite frees *pz_err with sqlite3_free, so it is allocated by sqlite3_mprintf;
    // "%s" reads one C string.
    unsafe { *pz_err = api!(mprintf)(c"%s".as_ptr(), c.as_ptr()) };
}

/// Shared by the entry points: set up the routines table, register the VFS (once) and the
/// functions on `db`.
fn init(
    db: *mut sq::sqlite3,
    pz_err: *mut *mut c_char,
    p_api: *const sq::sqlite3_api_routines,
) -> c_int {
    if p_api.is_null() {
        return sq::SQLITE_ERROR;
    }
    if !api_complete(p_api) {
        // Cannot even report through SQLite's routines reliably; the code says enough.
        return sq::SQLITE_ERROR;
    }
    API.store(p_api.cast_mut(), Ordering::Release);
    // SAFETY: checked present above.
    let version = unsafe { api!(libversion_number)() };
    if version < SQLITE_VERSION_MIN {
        set_error_message(
            pz_err,
            &format!("nvstack: SQLite {version} is too old (3.14.0 or newer needed)"),
        );
        return sq::SQLITE_ERROR;
    }
    if let Err(e) = register_vfs() {
        set_error_message(pz_err, &format!("nvstack: {e}"));
        return sq::SQLITE_ERROR;
    }
    register_functions(db)
}

/// Called by SQLite for each connection opened after the first load: adds the SQL functions.
unsafe extern "C" fn auto_init(
    db: *mut sq::sqlite3,
    pz_err: *mut *mut c_char,
    p_api: *const sq::sqlite3_api_routines,
) -> c_int {
    guard(sq::SQLITE_ERROR, || init(db, pz_err, p_api))
}

fn load(
    db: *mut sq::sqlite3,
    pz_err: *mut *mut c_char,
    p_api: *const sq::sqlite3_api_routines,
) -> c_int {
    guard(sq::SQLITE_ERROR, || {
        let rc = init(db, pz_err, p_api);
        if rc != sq::SQLITE_OK {
            return rc;
        }
        type Entry = unsafe extern "C" fn(
            *mut sq::sqlite3,
            *mut *mut c_char,
            *const sq::sqlite3_api_routines,
        ) -> c_int;
        // SAFETY: sqlite3_auto_extension takes the entry point as `void(*)(void)` and calls it
        // with the (db, pzErrMsg, pApi) signature it really has, as every extension does.
        let rc = unsafe {
            let f = std::mem::transmute::<Entry, unsafe extern "C" fn()>(auto_init as Entry);
            api!(auto_extension)(Some(f))
        };
        if rc != sq::SQLITE_OK {
            return rc;
        }
        // The VFS must outlive this connection: never unload the library.
        sq::SQLITE_OK_LOAD_PERMANENTLY
    })
}

/// The entry point SQLite derives from the file name `libnvstack_sqlite.so`.
///
/// # Safety
/// Called by SQLite's extension loader with a connection, an error-message out pointer and
/// its routines table.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_nvstacksqlite_init(
    db: *mut sq::sqlite3,
    pz_err: *mut *mut c_char,
    p_api: *const sq::sqlite3_api_routines,
) -> c_int {
    load(db, pz_err, p_api)
}

/// The generic entry point (for loaders given no entry point name that try this one).
///
/// # Safety
/// As for [`sqlite3_nvstacksqlite_init`].
#[no_mangle]
pub unsafe extern "C" fn sqlite3_extension_init(
    db: *mut sq::sqlite3,
    pz_err: *mut *mut c_char,
    p_api: *const sq::sqlite3_api_routines,
) -> c_int {
    load(db, pz_err, p_api)
}
