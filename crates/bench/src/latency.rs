//! The latency suite (seed 000 Fig. 15): 4 KiB random writes, 1 thread, both protocols, as the
//! emulated NVRAM latency goes from 1.0 to 3.0 times DRAM. A commit of k lines costs
//! (m - 1) x (L + (k - 1) x S) more: L one persisted line, S each further line streamed behind
//! it, both measured on this DRAM at the start of the run and printed with the report
//! (pmem::latency says why). Each row's ratios are against the same protocol at 1.0 x (the paper's
//! normalised performance is `throughput_ratio`).

use super::devices::{bench_disk, payload};
use super::measure::{random_indices, run_threads};
use super::{Ctx, Row, Suite, BENCH_BLOCK_BYTES};
use nvstack_core::error::Result;
use nvstack_nvramdisk::Protocol;
use nvstack_pmem::latency::LatencyInjection;

const SUITE: Suite = Suite::Latency;
const B: u64 = BENCH_BLOCK_BYTES as u64;
const MULTIPLES: [f64; 5] = [1.0, 1.5, 2.0, 2.5, 3.0];
const MULTIPLES_QUICK: [f64; 3] = [1.0, 2.0, 3.0];

pub(super) fn run(ctx: &mut Ctx) -> Result<()> {
    let multiples: &[f64] = if ctx.opts.quick {
        &MULTIPLES_QUICK
    } else {
        &MULTIPLES
    };
    let buf = payload(ctx.opts.seed, B as usize);
    for protocol in [Protocol::Fast, Protocol::Paper] {
        let mut d = bench_disk(ctx, protocol, None, LatencyInjection::default())?;
        let name = format!("nvramdisk-{}", d.protocol);
        let mut at_one: Option<(f64, f64)> = None;
        for &m in multiples {
            let latency = LatencyInjection::new(m, ctx.dram);
            d = d.reopen(latency, None)?;
            let ops = ctx.ops(B);
            let warm = ctx.warmup(ops);
            let salt = 0x500 ^ u64::from(protocol.id()) ^ (m * 10.0) as u64;
            let lbas = random_indices(ctx.opts.seed, salt, ops + warm, d.span_blocks);
            let pb = ctx.bar(&format!("{name} at {m:.1}x DRAM"));
            let before = d.disk.stats();
            let t = run_threads(&pb, 1, warm, ops, |i| d.disk.write_atomic(&[lbas[i]], &buf))?;
            let fences = d.fences_since(&before);
            let mut row = Row::new(SUITE, &name, "write", B, 1)
                .protocol(d.protocol)
                .ordering(d.ordering)
                .method(format!(
                    "{} + {:.0} ns per commit + {:.1} ns per further line",
                    d.methods, latency.extra_ns_first_line, latency.extra_ns_per_next_line
                ))
                .x("latency_multiple", m)
                .fences(fences)
                .timed(&t, d.page_bytes);
            let (med1, ops1) = *at_one.get_or_insert((row.median_ns, row.ops_per_sec));
            row.baseline = Some(format!("{name} at 1.0x"));
            row.time_ratio = Some(row.median_ns / med1);
            row.throughput_ratio = Some(row.ops_per_sec / ops1);
            ctx.push(row);
        }
    }
    Ok(())
}
