//! The nvcache suite's sustained-write rows (issue 42, item 4): writes through a FULL write
//! cache and through UBJ, against the backing file's own O_DIRECT write bandwidth measured in
//! the same run (the physical floor under both), printed as throughput ratios.
//!
//! - **Sequential**: 1 MiB requests, one after the other through the span (wrapping).
//! - **Random**: 64 KiB requests at random 64 KiB-aligned offsets of the span.
//!
//! Each row drives the library's devices directly (no FUSE, no kernel): `backing-odirect-*`
//! writes the requests to a `FileDevice` (O_DIRECT) and ends with its flush (fdatasync);
//! `wc512-sustained-*` and `wc4k-sustained-*` write them into a write cache of 512 B sectors
//! (the default) and of 4 KiB sectors with the settings a served cache runs with
//! (`write::format::Settings::served`: watermarks 50 %/45 %, its destage thread running), filled past its
//! high watermark before timing, so that every timed byte makes room by a destage (durable on
//! return; the cache holds as much dirty data at the end as at the start); `ubj-sustained-*`
//! writes them into UBJ (default settings: commits every 64 blocks, checkpoints by its
//! watermarks, inline), also filled first, and ends with a commit. Each device has its own
//! backing file in the same directory on a disk (written whole once before, so that no timed
//! write allocates), the images are pre-faulted, and the four alternate within each
//! repetition; a row's figures are those of its median repetition (by throughput).

use crate::measure::{random_indices, timing};
use crate::place::{create_region, mapped_page_bytes, ImageFile};
use crate::{BenchResult, Ctx, Row, Suite, Target, Timing};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_nvcache::write::format::Admit;
use nvstack_nvcache::write::serve::{Destager, Served};
use nvstack_nvcache::{create, FileDevice, Ubj, WriteCache};
use nvstack_nvcache::{ubj, write};
use nvstack_pmem::{MmapRegion, Region};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

const SUITE: Suite = Suite::Nvcache;
const SEQ_REQUEST_BYTES: u64 = 1 << 20;
const RAND_REQUEST_BYTES: u64 = 64 << 10;
const SALT: u64 = 0x4200;

/// How much each row moves: the caches' NVRAM, the span written over, the bytes of one timed
/// repetition, and the repetitions.
struct Sizes {
    cache_bytes: u64,
    span_bytes: u64,
    run_bytes: u64,
    repeats: usize,
}

fn sizes(ctx: &Ctx) -> Sizes {
    let (cache_mib, span_mib, run_mib, repeats) = match (ctx.opts.quick_test, ctx.opts.quick) {
        (true, _) => (4, 32, 8, 1),
        (false, true) => (128, 512, 256, 3),
        (false, false) => (256, 1024, 512, 3),
    };
    Sizes {
        cache_bytes: cache_mib << 20,
        span_bytes: span_mib << 20,
        run_bytes: run_mib << 20,
        repeats,
    }
}

/// A device a repetition writes through: its requests, then (untimed per request, inside the
/// wall time) what makes them durable.
trait Sink {
    fn put(&self, off_bytes: u64, data: &[u8]) -> Result<()>;
    fn settle(&self) -> Result<()>;
}

struct Floor(FileDevice);

impl Sink for Floor {
    fn put(&self, off_bytes: u64, data: &[u8]) -> Result<()> {
        self.0.write(off_bytes / 4096, data)
    }
    fn settle(&self) -> Result<()> {
        self.0.flush()
    }
}

/// The write cache as served: its destage thread stops (and is joined) before the cache goes.
struct WcSink {
    destager: Option<Destager<MmapRegion>>,
    served: Arc<Served<MmapRegion>>,
    sector_bytes: u32,
}

impl Sink for WcSink {
    fn put(&self, off_bytes: u64, data: &[u8]) -> Result<()> {
        self.served
            .write(off_bytes / u64::from(self.sector_bytes), data)
    }
    /// Every write is durable on return.
    fn settle(&self) -> Result<()> {
        Ok(())
    }
}

impl Drop for WcSink {
    fn drop(&mut self) {
        drop(self.destager.take());
    }
}

struct UbjSink(Ubj<MmapRegion>);

impl Sink for UbjSink {
    fn put(&self, off_bytes: u64, data: &[u8]) -> Result<()> {
        let unit = self.0.unit_blocks() as usize * 4096;
        for (k, chunk) in data.chunks(unit).enumerate() {
            self.0
                .write_blocks((off_bytes + (k * unit) as u64) / 4096, chunk)?;
        }
        Ok(())
    }
    fn settle(&self) -> Result<()> {
        self.0.commit()
    }
}

/// A backing file of `bytes` and a label block, on a disk, written whole once (untimed), so
/// that no timed write is a file's first write to its blocks (an allocation).
fn backing_file(
    dir: &Path,
    name: &str,
    bytes: u64,
    data: &[u8],
) -> Result<(ImageFile, FileDevice)> {
    let file = ImageFile::new(dir, name);
    let f = std::fs::File::create(file.path())
        .map_err(|e| Error::env(format!("{}: cannot create: {e}", file.path().display())))?;
    nvstack_pmem::mmap::allocate_file(&f, file.path(), bytes + 4096)?;
    drop(f);
    let dev = FileDevice::open(file.path())?;
    let mut off = 0;
    while off < bytes {
        dev.write(off / 4096, data)?;
        off += data.len() as u64;
    }
    dev.flush()?;
    Ok((file, dev))
}

/// An image region on the place, every page touched before timing.
fn prefaulted(ctx: &Ctx, name: &str, bytes: u64) -> Result<(ImageFile, Arc<MmapRegion>)> {
    let image = ctx.image(name);
    let region = create_region(image.path(), bytes)?;
    let zeros = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < bytes {
        let n = (bytes - off).min(zeros.len() as u64) as usize;
        region.write(off, &zeros[..n]);
        off += n as u64;
    }
    Ok((image, region))
}

/// Write `bytes` from offset 0 in 1 MiB requests, untimed: a cache past its high watermark.
fn fill(sink: &dyn Sink, bytes: u64, buf: &[u8]) -> Result<()> {
    let mut off = 0;
    while off < bytes {
        sink.put(off, &buf[..SEQ_REQUEST_BYTES as usize])?;
        off += SEQ_REQUEST_BYTES;
    }
    Ok(())
}

/// One repetition: every request timed, the wall time including the settle.
fn repetition(sink: &dyn Sink, offsets: &[u64], data: &[u8]) -> Result<Timing> {
    let mut lat = Vec::with_capacity(offsets.len());
    let t0 = Instant::now();
    for &off in offsets {
        let t = Instant::now();
        sink.put(off, data)?;
        lat.push(t.elapsed().as_nanos() as u64);
    }
    sink.settle()?;
    Ok(timing(lat, t0.elapsed().as_secs_f64()))
}

/// The request offsets of repetition `rep`: sequential through the span (after the fill), or
/// random aligned ones.
fn offsets(ctx: &Ctx, z: &Sizes, request_bytes: u64, rep: usize) -> Vec<u64> {
    let n = (z.run_bytes / request_bytes) as usize;
    if request_bytes == SEQ_REQUEST_BYTES {
        let start = z.cache_bytes + rep as u64 * z.run_bytes;
        return (0..n as u64)
            .map(|i| (start + i * request_bytes) % z.span_bytes)
            .collect();
    }
    let salt = SALT + rep as u64;
    random_indices(ctx.opts.seed, salt, n, z.span_bytes / request_bytes)
        .into_iter()
        .map(|i| i * request_bytes)
        .collect()
}

/// The median repetition by throughput.
fn median(mut runs: Vec<Timing>) -> Timing {
    runs.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    runs.swap_remove(runs.len() / 2)
}

/// A write cache of `sector_bytes` sectors as served, over its own backing file, filled past
/// its high watermark (untimed). Returns it with its image and backing file (deleted when
/// dropped, after it).
fn bench_wc(
    ctx: &Ctx,
    z: &Sizes,
    sector_bytes: u32,
    data: &[u8],
) -> Result<(WcSink, ImageFile, ImageFile)> {
    let dir = super::backing_dir();
    let (back, dev) = backing_file(
        &dir,
        &format!("sustain-wc{sector_bytes}"),
        z.span_bytes,
        data,
    )?;
    let layout =
        write::format::Layout::fitting(z.cache_bytes, sector_bytes).expect("a few MiB fit");
    let (image, region) = prefaulted(
        ctx,
        &format!("wc{sector_bytes}-sustain"),
        layout.region_bytes,
    )?;
    let settings = write::format::Settings::default().served(sector_bytes);
    let dev: Arc<dyn BlockDevice> = Arc::new(dev);
    write::create(&*region, &*dev, sector_bytes, settings, &Admit::All)?;
    let cache = WriteCache::open(region, dev, None)?;
    let served = Arc::new(Served::new(Arc::new(cache)));
    let wc = WcSink {
        destager: Some(Destager::start(&served).expect("the served settings' watermarks")),
        served,
        sector_bytes,
    };
    fill(&wc, z.cache_bytes, data)?;
    Ok((wc, image, back))
}

/// UBJ (default settings) over its own backing file, filled (untimed).
fn bench_ubj(ctx: &Ctx, z: &Sizes, data: &[u8]) -> Result<(UbjSink, ImageFile, ImageFile)> {
    let dir = super::backing_dir();
    let (back, dev) = backing_file(&dir, "sustain-ubj", z.span_bytes, data)?;
    let slots = u32::try_from(z.cache_bytes / 4096).expect("small");
    let (image, region) = prefaulted(
        ctx,
        "ubj-sustain",
        ubj::format::Layout::new(slots).region_bytes,
    )?;
    let dev: Arc<dyn BlockDevice> = Arc::new(dev);
    create(&*region, &*dev, ubj::format::Settings::default())?;
    let ubj = UbjSink(Ubj::open(region, dev, None)?);
    fill(&ubj, z.cache_bytes, data)?;
    Ok((ubj, image, back))
}

/// The rows' devices, in row order: the floor, the write caches (512 B and 4 KiB sectors), UBJ.
const DEVICES: [&str; 4] = [
    "backing-odirect",
    "wc512-sustained",
    "wc4k-sustained",
    "ubj-sustained",
];

pub(super) fn run(ctx: &mut Ctx) -> Result<()> {
    let z = sizes(ctx);
    let dir = super::backing_dir();
    // Aligned as O_DIRECT requires: the floor's requests go out in one pwrite each, uncopied.
    let (mut buf, at) =
        nvstack_nvcache::common::backing::aligned_buffer(SEQ_REQUEST_BYTES as usize);
    let data = &mut buf[at..at + SEQ_REQUEST_BYTES as usize];
    let payload = crate::devices::payload(ctx.opts.seed, SEQ_REQUEST_BYTES as usize);
    data.copy_from_slice(&payload);
    let data = &*data;
    let (_fb, floor) = backing_file(&dir, "sustain-floor", z.span_bytes, data)?;
    let floor = Floor(floor);
    let direct = floor.0.direct();
    let (wc512, image, _b512) = bench_wc(ctx, &z, 512, data)?;
    let (wc4k, _i4k, _b4k) = bench_wc(ctx, &z, 4096, data)?;
    let (ubj, _iu, _bu) = bench_ubj(ctx, &z, data)?;
    let page = mapped_page_bytes(image.path()).unwrap_or(0);
    let sinks: [&dyn Sink; 4] = [&floor, &wc512, &wc4k, &ubj];
    for (pattern, request) in [("seq", SEQ_REQUEST_BYTES), ("rand", RAND_REQUEST_BYTES)] {
        let mut runs: [Vec<Timing>; 4] = Default::default();
        let pb = ctx.bar(&format!("sustained {pattern} writes"));
        pb.set_length((sinks.len() * z.repeats) as u64);
        for rep in 0..z.repeats {
            let at = offsets(ctx, &z, request, rep);
            for (k, sink) in sinks.iter().enumerate() {
                runs[k].push(repetition(*sink, &at, &data[..request as usize])?);
                pb.set_position((sinks.len() * rep + k + 1) as u64);
            }
        }
        pb.finish_and_clear();
        push_rows(ctx, pattern, request, (page, direct), runs.map(median));
    }
    for wc in [&wc512, &wc4k] {
        let k = wc.served.cache().stats();
        // Said the same way at every repetition of the suite (notes are printed once each).
        let room = match k.destaged_room {
            0 => "only by its watermarks (no write destaged for room)",
            _ => "by its watermarks and, for writes that found it full, for room",
        };
        ctx.notes.push(format!(
            "nvcache sustained writes: the write cache of {} B sectors destaged {room}; backing \
             files in {} ({})",
            wc.sector_bytes,
            dir.display(),
            if direct { "O_DIRECT" } else { "buffered" }
        ));
    }
    Ok(())
}

fn push_rows(
    ctx: &mut Ctx,
    pattern: &str,
    request: u64,
    (page, direct): (u64, bool),
    t: [Timing; 4],
) {
    let z = sizes(ctx);
    let what = match pattern {
        "seq" => "sequential 1 MiB requests",
        _ => "random 64 KiB requests",
    };
    let base = format!("{}-{pattern}", DEVICES[0]);
    let direct_note = "library devices driven directly, no FUSE";
    let floor = Row::new(SUITE, &base, "write", request, 1)
        .method(if direct {
            "pwrite O_DIRECT"
        } else {
            "pwrite (buffered)"
        })
        .note(format!(
            "{what}: the backing file's own write bandwidth, then fdatasync (the floor); \
             {direct_note}; median of {}",
            z.repeats
        ));
    ctx.push(floor.timed(&t[0], page));
    for (k, sector) in [(1, "512 B"), (2, "4 KiB")] {
        let wc = Row::new(
            SUITE,
            &format!("{}-{pattern}", DEVICES[k]),
            "write",
            request,
            1,
        )
        .protocol("write-cache")
        .method(format!(
            "{sector} sectors, served settings: watermarks 50/45 %, destage thread, runs"
        ))
        .baseline(&base)
        .note(format!(
            "{what} through a full write cache of {sector} sectors ({} MiB of NVRAM past its \
                 high watermark; durable on return); {direct_note}; median of {}",
            z.cache_bytes >> 20,
            z.repeats
        ));
        ctx.push(wc.timed(&t[k], page));
    }
    let ubj = Row::new(
        SUITE,
        &format!("{}-{pattern}", DEVICES[3]),
        "write",
        request,
        1,
    )
    .protocol("ubj")
    .method("4 KiB blocks, default settings (commit per 64 blocks, checkpoints inline)")
    .baseline(&base)
    .note(format!(
        "{what} through a full UBJ cache ({} MiB), a commit at the end; {direct_note}; \
             median of {}",
        z.cache_bytes >> 20,
        z.repeats
    ));
    ctx.push(ubj.timed(&t[3], page));
}

/// Sustained sequential writes through a full write cache: at least 0.8x the backing file's
/// own O_DIRECT writes in the same run (`find`: this run's row of a name, on `page`).
pub(super) fn page_targets<'a>(
    page: u64,
    find: &dyn Fn(&str) -> Option<&'a BenchResult>,
) -> Vec<Target> {
    [
        ("wc512-sustained-seq", "512 B"),
        ("wc4k-sustained-seq", "4 KiB"),
    ]
    .into_iter()
    .filter_map(|(row, sector)| {
        Target::rate_at_least(
            SUITE,
            page,
            &format!(
                "sustained sequential writes through a full write cache ({sector} sectors) \
                     over the backing file's O_DIRECT writes"
            ),
            (find(row), find("backing-odirect-seq")),
            0.8,
        )
    })
    .collect()
}
