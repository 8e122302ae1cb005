//! The host CPU's prefetch hint, the crate's one `unsafe` (allowed at this module's
//! declaration in lib.rs). The floor and the engine know a thread's next access a round of
//! turns ahead; asking the host for its cache sets then hides most of a lookup's wait for host
//! memory, which was most of its time.

/// Ask the host to bring `tag`'s line into its caches. `_mm_prefetch` is an intrinsic, and an
/// intrinsic is `unsafe` to call even when, as here, it has no effect on the program's state.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn warm(tag: &u64) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: a prefetch is a hint: it does not read into the program's state, cannot fault,
    // and `tag` is a live reference besides.
    unsafe { _mm_prefetch::<{ _MM_HINT_T0 }>(std::ptr::from_ref(tag).cast()) }
}

/// Elsewhere no hint: the lookup reads the set when it comes to it.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub(crate) fn warm(_tag: &u64) {}
