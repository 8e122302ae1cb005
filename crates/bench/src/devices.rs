//! The devices the suites time: a formatted, pre-filled nvramdisk, and a raw region for the
//! floors. Both are sized so that random offsets are uniform over the whole span.

use super::place::{create_region, mapped_page_bytes, ImageFile};
use super::{Ctx, BENCH_BLOCK_BYTES};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Result;
use nvstack_nvramdisk::layout::LANES_DEFAULT;
use nvstack_nvramdisk::{
    format_region, FormatOptions, Geometry, NvramDisk, OpenOptions, Protocol, ATOMIC_BLOCKS_MAX,
};
use nvstack_pmem::latency::LatencyInjection;
use nvstack_pmem::{Method, MmapRegion, OrderingPolicy, Region};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// A formatted nvramdisk whose first `span_blocks` blocks were each written once.
pub(super) struct BenchDisk<R: Region = MmapRegion> {
    pub disk: NvramDisk<R>,
    pub page_bytes: u64,
    pub span_blocks: u64,
    pub protocol: &'static str,
    pub ordering: &'static str,
    /// "data nt + map nt + journal nt".
    pub methods: String,
    /// Dropped after the device (field order): the file goes once the mapping is gone.
    _file: ImageFile,
}

/// `n` bytes of seeded random data (what every timed write stores).
pub(super) fn payload(seed: u64, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    SmallRng::seed_from_u64(seed).fill(&mut buf[..]);
    buf
}

/// Format an image of `protocol` (and `ordering`, else the default) big enough for the span,
/// open it with `latency`, and write every block of the span once (so writes recycle shadow
/// pages and reads copy real pages).
pub(super) fn bench_disk(
    ctx: &mut Ctx,
    protocol: Protocol,
    ordering: Option<OrderingPolicy>,
    latency: LatencyInjection,
) -> Result<BenchDisk> {
    bench_disk_with(ctx, protocol, ordering, latency, |r| r)
}

/// [`bench_disk`] on `wrap(the mapped region)`: e.g. a region without ordering guarantees.
pub(super) fn bench_disk_with<R: Region, F: FnOnce(Arc<MmapRegion>) -> Arc<R>>(
    ctx: &mut Ctx,
    protocol: Protocol,
    ordering: Option<OrderingPolicy>,
    latency: LatencyInjection,
    wrap: F,
) -> Result<BenchDisk<R>> {
    let b = BENCH_BLOCK_BYTES as u64;
    let span_blocks = ctx.span() / b;
    let lanes = LANES_DEFAULT;
    let bytes = Geometry::region_bytes_for(span_blocks, BENCH_BLOCK_BYTES, lanes)?;
    let file = ctx.image(&format!("nvramdisk-{}", protocol.name()));
    let path = file.path().to_path_buf();
    let region = wrap(create_region(&path, bytes)?);
    let mut fo = FormatOptions {
        protocol,
        lanes,
        ..Default::default()
    };
    if let Some(o) = ordering {
        fo.ordering = o;
    }
    format_region(&*region, &fo)?;
    let disk = NvramDisk::open(
        region,
        OpenOptions {
            latency,
            ..Default::default()
        },
    )?;
    assert!(disk.blocks() >= span_blocks, "region sized for the span");
    let fill = payload(ctx.opts.seed ^ 0x5eed, ATOMIC_BLOCKS_MAX * b as usize);
    let pb = ctx.bar(&format!("nvramdisk-{} pre-fill", protocol.name()));
    pb.set_length(span_blocks);
    let mut lba = 0;
    while lba < span_blocks {
        let n = (span_blocks - lba).min(ATOMIC_BLOCKS_MAX as u64);
        disk.write(lba, &fill[..(n * b) as usize])?;
        lba += n;
        pb.set_position(lba);
    }
    pb.finish_and_clear();
    let o = disk.ordering();
    Ok(BenchDisk {
        page_bytes: mapped_page_bytes(&path).unwrap_or(0),
        span_blocks,
        protocol: protocol.name(),
        ordering: o.name,
        methods: methods(&o),
        disk,
        _file: file,
    })
}

/// The persist method per region kind, for a row's `persist_method`.
fn methods(o: &OrderingPolicy) -> String {
    format!(
        "data {} + map {} + journal {}",
        o.data.name(),
        o.map.name(),
        o.journal.name()
    )
}

impl<R: Region> BenchDisk<R> {
    /// Reopen the device with `latency` injected (recovery finds nothing to do).
    pub fn reopen(
        self,
        latency: LatencyInjection,
        ordering: Option<OrderingPolicy>,
    ) -> Result<BenchDisk<R>> {
        self.reopen_with(OpenOptions {
            latency,
            ordering,
            ..Default::default()
        })
    }

    /// Reopen the device with `oo`.
    pub fn reopen_with(self, oo: OpenOptions) -> Result<BenchDisk<R>> {
        let region = self.disk.region().clone();
        drop(self.disk);
        let disk = NvramDisk::open(region, oo)?;
        let o = disk.ordering();
        Ok(BenchDisk {
            ordering: o.name,
            methods: methods(&o),
            disk,
            ..self
        })
    }

    /// Fences per write since `before` (the device's own counters).
    pub fn fences_since(&self, before: &nvstack_nvramdisk::DiskStats) -> f64 {
        let after = self.disk.stats();
        let w = (after.writes - before.writes).max(1) as f64;
        (after.persist.fences - before.persist.fences) as f64 / w
    }
}

/// A raw region: `span` bytes of data and an 8 MiB commit-word area after it.
pub(super) struct RawRegion {
    pub region: Arc<MmapRegion>,
    pub page_bytes: u64,
    pub span: u64,
    _file: ImageFile,
}

/// Where floor-2fence's commit words go: a separate 8 MiB area after the span.
pub const COMMIT_AREA_BYTES: u64 = 8 << 20;

pub(super) fn raw_region(ctx: &mut Ctx, extra: u64) -> Result<RawRegion> {
    let span = ctx.span();
    let file = ctx.image("raw");
    let region = create_region(file.path(), span + COMMIT_AREA_BYTES + extra)?;
    Ok(RawRegion {
        page_bytes: mapped_page_bytes(file.path()).unwrap_or(0),
        region,
        span,
        _file: file,
    })
}

/// Persist one 8-byte word with `m`: a non-temporal store, or a cached store and a flush of
/// its line. The fence is the caller's.
#[inline]
pub(super) fn store_word<R: Region + ?Sized>(r: &R, m: Method, off: u64, v: u64) {
    match m {
        Method::Nt => r.store_u64_nt(off, v),
        Method::Flush(k) => {
            r.store_u64(off, v);
            r.flush(off, 8, k);
        }
    }
}

/// Store `data` with `m` (non-temporal copy, or cached copy and line flushes). The fence is
/// the caller's.
#[inline]
pub(super) fn store_bytes<R: Region + ?Sized>(r: &R, m: Method, off: u64, data: &[u8]) {
    match m {
        Method::Nt => r.write_nt(off, data),
        Method::Flush(k) => {
            r.write(off, data);
            r.flush(off, data.len() as u64, k);
        }
    }
}
