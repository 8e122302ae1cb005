//! The ordering suite (seed 000 Fig. 7, Tables 5-6, Fig. 8; seed 003):
//! - raw store latency, 8 B and 4 KiB, for every persist method user space has: `async`
//!   (cached stores, nothing persisted: the baseline), `nt` (non-temporal stores + sfence) and
//!   each cache-line flush this CPU offers (`clflush`, `clflushopt`, `clwb`: cached stores,
//!   one flush per line, sfence); loads of the same sizes for reference. Write-through,
//!   uncachable and write-combining mappings need kernel page attributes: not offered.
//! - 4 KiB random writes under every ordering policy, both protocols (Table 6, Fig. 8),
//!   against the same protocol under the default policy.
//! - per-range commit against global commit (seed 003), 1 and 2 threads: each thread stores
//!   4 KiB with cached stores into its own commit domain, then commits either its own dirty
//!   lines and one fence, or (global) every domain's dirty lines and one fence, holding all
//!   domains while it does, as a drain of everything must.

use super::devices::{bench_disk, payload, raw_region, store_bytes};
use super::measure::{random_indices, run_threads};
use super::{Ctx, Row, Suite, BENCH_BLOCK_BYTES};
use nvstack_core::error::Result;
use nvstack_nvramdisk::Protocol;
use nvstack_pmem::latency::LatencyInjection;
use nvstack_pmem::ordering::{check_available, POLICIES};
use nvstack_pmem::{cpu, CommitDomain, FlushKind, Method, Region};
use std::sync::Mutex;

const SUITE: Suite = Suite::Ordering;
const B: u64 = BENCH_BLOCK_BYTES as u64;

pub(super) fn run(ctx: &mut Ctx) -> Result<()> {
    raw_methods(ctx)?;
    policies(ctx)?;
    domains(ctx)?;
    Ok(())
}

/// The persist methods this CPU offers, with their names.
fn methods() -> Vec<(&'static str, Option<Method>)> {
    let mut m = vec![("async", None), ("nt", Some(Method::Nt))];
    for k in [FlushKind::Clflush, FlushKind::Clflushopt, FlushKind::Clwb] {
        if cpu::has_flush(k) {
            m.push((k.name(), Some(Method::Flush(k))));
        }
    }
    m
}

/// Table 5's instruction counts for one write of `size` bytes with `m`.
fn instructions(size: u64, m: Option<Method>) -> String {
    let words = size / 8;
    let lines = size.div_ceil(64);
    match m {
        None => format!("{words} x mov (no persist)"),
        Some(Method::Nt) if size >= 32 => format!("nt copy ({}) + sfence", cpu::nt_copy_name()),
        Some(Method::Nt) => format!("{words} x movnti + sfence"),
        Some(Method::Flush(k)) => format!("{words} x mov + {lines} x {} + sfence", k.name()),
    }
}

fn raw_methods(ctx: &mut Ctx) -> Result<()> {
    let raw = raw_region(ctx, 0)?;
    let r = &*raw.region;
    let buf = payload(ctx.opts.seed, B as usize);
    for size in [8u64, B] {
        let ops = ctx.ops(B);
        let warm = ctx.warmup(ops);
        let offs = random_indices(ctx.opts.seed, 0x600 ^ size, ops + warm, raw.span / size);
        let data = &buf[..size as usize];
        for (name, m) in methods() {
            let pb = ctx.bar(&format!("store {size} B {name}"));
            let t = run_threads(&pb, 1, warm, ops, |i| {
                let off = offs[i] * size;
                match m {
                    None => r.write(off, data),
                    Some(m) => {
                        if size == 8 {
                            super::devices::store_word(r, m, off, i as u64);
                        } else {
                            store_bytes(r, m, off, data);
                        }
                        r.fence();
                    }
                }
                Ok(())
            })?;
            let mut row = Row::new(SUITE, name, "write", size, 1).method(instructions(size, m));
            if m.is_some() {
                row = row.baseline("async");
            }
            ctx.push(row.timed(&t, raw.page_bytes));
        }
        let pb = ctx.bar(&format!("load {size} B"));
        let t = run_threads(&pb, 1, warm, ops, |i| {
            let mut out = [0u8; B as usize];
            r.read(offs[i] * size, &mut out[..size as usize]);
            std::hint::black_box(&mut out);
            Ok(())
        })?;
        let row = Row::new(SUITE, "load", "read", size, 1)
            .method(format!("{} x mov", size / 8))
            .timed(&t, raw.page_bytes);
        ctx.push(row);
    }
    Ok(())
}

fn policies(ctx: &mut Ctx) -> Result<()> {
    let buf = payload(ctx.opts.seed, B as usize);
    for protocol in [Protocol::Fast, Protocol::Paper] {
        let mut d = bench_disk(ctx, protocol, None, LatencyInjection::default())?;
        let name = format!("nvramdisk-{}", d.protocol);
        let mut first: Option<(f64, f64, &'static str)> = None;
        for p in POLICIES.iter().filter(|p| check_available(p).is_ok()) {
            d = d.reopen(LatencyInjection::default(), Some(*p))?;
            let ops = ctx.ops(B);
            let warm = ctx.warmup(ops);
            let salt = 0x610 ^ u64::from(protocol.id()) << 8 ^ u64::from(p.id);
            let lbas = random_indices(ctx.opts.seed, salt, ops + warm, d.span_blocks);
            let pb = ctx.bar(&format!("{name} ordering {}", p.name));
            let before = d.disk.stats();
            let t = run_threads(&pb, 1, warm, ops, |i| d.disk.write_atomic(&[lbas[i]], &buf))?;
            let fences = d.fences_since(&before);
            let mut row = Row::new(SUITE, &name, "write", B, 1)
                .protocol(d.protocol)
                .ordering(p.name)
                .method(d.methods.clone())
                .fences(fences)
                .timed(&t, d.page_bytes);
            // POLICIES lists the default (p4) first: every other policy is compared with it.
            let (med, rate, base) = *first.get_or_insert((row.median_ns, row.ops_per_sec, p.name));
            row.baseline = Some(format!("{name} ordering {base}"));
            row.time_ratio = Some(row.median_ns / med);
            row.throughput_ratio = Some(row.ops_per_sec / rate);
            ctx.push(row);
        }
    }
    Ok(())
}

/// One commit domain per thread, thread t's holding the `part` bytes at t * part.
fn thread_domains(threads: usize, part: u64) -> Vec<Mutex<CommitDomain>> {
    (0..threads)
        .map(|t| {
            let range = [(t as u64 * part, part)];
            Mutex::new(CommitDomain::new(
                t as u32,
                &range,
                LatencyInjection::default(),
            ))
        })
        .collect()
}

fn domains(ctx: &mut Ctx) -> Result<()> {
    let raw = raw_region(ctx, 0)?;
    let r = &*raw.region;
    let buf = payload(ctx.opts.seed, B as usize);
    let m = Method::Flush(cpu::best_flush());
    for threads in [1usize, 2] {
        let ops = ctx.ops(B);
        let warm = ctx.warmup(ops);
        let per = ops + warm;
        // Thread t owns [t * part, (t + 1) * part) of the span.
        let part = raw.span / threads as u64;
        let offs = random_indices(
            ctx.opts.seed,
            0x620 ^ threads as u64,
            per * threads,
            part / B,
        );
        for global in [false, true] {
            let doms = thread_domains(threads, part);
            let all = Mutex::new(());
            let name = if global {
                "global-commit"
            } else {
                "per-range-commit"
            };
            let pb = ctx.bar(&format!("{name} x{threads}"));
            let t = run_threads(&pb, threads, warm, ops, |i| {
                let t = i / per;
                let off = t as u64 * part + offs[i] * B;
                lock(&doms[t]).store(r, m, off, &buf);
                if global {
                    // A drain of everything: every domain's dirty lines, then one fence.
                    let _all = lock(&all);
                    let mut guards: Vec<_> = doms.iter().map(lock).collect();
                    let mut refs: Vec<&mut CommitDomain> =
                        guards.iter_mut().map(|g| &mut **g).collect();
                    CommitDomain::commit_global(&mut refs, r);
                } else {
                    lock(&doms[t]).commit(r);
                }
                Ok(())
            })?;
            let mut row = Row::new(SUITE, name, "write", B, threads).method(format!(
                "4 KiB cached + {} {}, sfence",
                m.name(),
                if global {
                    "every domain's dirty lines"
                } else {
                    "own dirty lines"
                }
            ));
            if !global {
                row = row.baseline("global-commit");
            }
            ctx.push(row.timed(&t, raw.page_bytes));
        }
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
