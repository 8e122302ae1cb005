//! The persist instructions user space can issue on x86-64, picked by CPU feature detection.
//!
//! This is the only file that emits cache-line flushes, non-temporal stores and fences. Every
//! function here works on raw addresses inside a mapping that the caller has bounds-checked.

use std::arch::asm;
use std::arch::x86_64::{
    __cpuid, __cpuid_count, _mm256_loadu_si256, _mm256_stream_si256, _mm_clflush, _mm_loadu_si128,
    _mm_prefetch, _mm_sfence, _mm_stream_si128, _mm_stream_si64, _MM_HINT_T0,
};
use std::sync::OnceLock;

pub const LINE_BYTES: u64 = 64;

/// Which line-flush instruction a `flush` issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum FlushKind {
    /// clflush: evicts the line; serialised with other clflushes (slow, always present).
    Clflush,
    /// clflushopt: evicts the line; weakly ordered, needs an sfence.
    Clflushopt,
    /// clwb: writes the line back and may keep it cached; weakly ordered, needs an sfence.
    Clwb,
}

impl FlushKind {
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clflush => "clflush",
            FlushKind::Clflushopt => "clflushopt",
            FlushKind::Clwb => "clwb",
        }
    }
}

/// What this CPU offers, read once with cpuid.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct CpuFeatures {
    pub clflush: bool,
    pub clflushopt: bool,
    pub clwb: bool,
    pub sse2: bool,
    pub avx2: bool,
    pub avx512f: bool,
}

pub fn features() -> CpuFeatures {
    static F: OnceLock<CpuFeatures> = OnceLock::new();
    *F.get_or_init(|| {
        // cpuid is available on every x86-64 CPU; leaves 1 and 7 are architectural.
        let (l1, l7) = (__cpuid(1), __cpuid_count(7, 0));
        CpuFeatures {
            clflush: l1.edx & (1 << 19) != 0,
            clflushopt: l7.ebx & (1 << 23) != 0,
            clwb: l7.ebx & (1 << 24) != 0,
            sse2: l1.edx & (1 << 26) != 0,
            avx2: std::is_x86_feature_detected!("avx2"),
            avx512f: std::is_x86_feature_detected!("avx512f"),
        }
    })
}

/// The best weakly-ordered flush this CPU has (clwb > clflushopt > clflush).
pub fn best_flush() -> FlushKind {
    let f = features();
    if f.clwb {
        FlushKind::Clwb
    } else if f.clflushopt {
        FlushKind::Clflushopt
    } else {
        FlushKind::Clflush
    }
}

/// Whether `kind` can be issued here; ordering policies that name a missing one are refused.
pub fn has_flush(kind: FlushKind) -> bool {
    let f = features();
    match kind {
        FlushKind::Clflush => f.clflush,
        FlushKind::Clflushopt => f.clflushopt,
        FlushKind::Clwb => f.clwb,
    }
}

/// The width of the non-temporal copy loop, for `nvstack info`.
pub fn nt_copy_name() -> &'static str {
    if features().avx2 {
        "vmovntdq (AVX2, 32 B)"
    } else {
        "movntdq (SSE2, 16 B)"
    }
}

/// Flush every line overlapping [addr, addr+len).
///
/// # Safety
/// The range must lie inside a live mapping.
pub unsafe fn flush_range(addr: *const u8, len: usize, kind: FlushKind) {
    if len == 0 {
        return;
    }
    debug_assert!((addr as usize).checked_add(len).is_some(), "range wraps");
    let start = (addr as usize) & !(LINE_BYTES as usize - 1);
    let end = addr as usize + len;
    let mut p = start;
    while p < end {
        // SAFETY: p is inside the caller's live mapping (rounded down to its line start, which
        // shares the page). The feature was checked when the policy was accepted.
        unsafe {
            match kind {
                FlushKind::Clflush => _mm_clflush(p as *const u8),
                FlushKind::Clflushopt => {
                    asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
                }
                FlushKind::Clwb => asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags)),
            }
        }
        p += LINE_BYTES as usize;
    }
}

/// sfence: orders all earlier stores, flushes and non-temporal stores of this thread before
/// any later store.
#[inline]
pub fn sfence() {
    // SAFETY: sfence has no operands and no memory effects beyond ordering.
    unsafe { _mm_sfence() }
}

/// prefetcht0: a hint to load the line holding `p` into every cache level. It never faults
/// and changes nothing, whatever `p` is.
#[inline]
pub fn prefetch(p: *const u8) {
    // SAFETY: a prefetch is a hint: it does not dereference `p` architecturally and cannot
    // fault; SSE is part of the x86-64 baseline.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) }
}

/// One 8-byte non-temporal store (movnti).
///
/// # Safety
/// `dst` must be 8-byte aligned and inside a live writable mapping.
#[inline]
pub unsafe fn nt_store_u64(dst: *mut u64, v: u64) {
    debug_assert_eq!(dst as usize % 8, 0);
    // SAFETY: caller guarantees alignment and validity.
    unsafe { _mm_stream_si64(dst as *mut i64, v as i64) }
}

/// Copy with non-temporal stores. `dst` and `len` must be multiples of 8.
///
/// # Safety
/// `dst..dst+len` must be inside a live writable mapping, `src..src+len` readable, no overlap.
pub unsafe fn nt_copy(dst: *mut u8, src: *const u8, len: usize) {
    assert!(
        (dst as usize).is_multiple_of(8) && len.is_multiple_of(8),
        "nt_copy needs 8-byte alignment"
    );
    let mut d = dst;
    let mut s = src;
    let mut n = len;
    // Head: 8-byte stores until dst is 32-byte aligned.
    while n >= 8 && !(d as usize).is_multiple_of(32) {
        // SAFETY: inside the caller's ranges; d is 8-aligned.
        unsafe {
            nt_store_u64(d as *mut u64, (s as *const u64).read_unaligned());
            d = d.add(8);
            s = s.add(8);
        }
        n -= 8;
    }
    if n >= 32 {
        let body = n & !31;
        // SAFETY: d is 32-byte aligned; body bytes are inside both ranges.
        unsafe {
            if features().avx2 {
                nt_body_avx2(d, s, body);
            } else {
                nt_body_sse2(d, s, body);
            }
            d = d.add(body);
            s = s.add(body);
        }
        n -= body;
    }
    while n >= 8 {
        // SAFETY: as in the head loop.
        unsafe {
            nt_store_u64(d as *mut u64, (s as *const u64).read_unaligned());
            d = d.add(8);
            s = s.add(8);
        }
        n -= 8;
    }
    debug_assert_eq!(n, 0);
}

/// # Safety
/// `d` is 32-byte aligned; `d..d+len` writable and `s..s+len` readable; `len` a multiple of 32;
/// the CPU has AVX2.
#[target_feature(enable = "avx2")]
unsafe fn nt_body_avx2(d: *mut u8, s: *const u8, len: usize) {
    debug_assert!((d as usize).is_multiple_of(32) && len.is_multiple_of(32));
    let mut i = 0;
    while i < len {
        // SAFETY: d+i is 32-aligned and inside the destination; s+i readable (unaligned load).
        unsafe {
            let v = _mm256_loadu_si256(s.add(i) as *const _);
            _mm256_stream_si256(d.add(i) as *mut _, v);
        }
        i += 32;
    }
}

/// # Safety
/// `d` is 16-byte aligned; `d..d+len` writable and `s..s+len` readable; `len` a multiple of 16.
unsafe fn nt_body_sse2(d: *mut u8, s: *const u8, len: usize) {
    debug_assert!((d as usize).is_multiple_of(16) && len.is_multiple_of(16));
    let mut i = 0;
    while i < len {
        // SAFETY: d+i is 16-aligned and inside the destination; s+i readable (unaligned load).
        unsafe {
            let v = _mm_loadu_si128(s.add(i) as *const _);
            _mm_stream_si128(d.add(i) as *mut _, v);
        }
        i += 16;
    }
}
