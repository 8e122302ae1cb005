//! `nvstack info`: the host's persist instructions, or an image's format.

use crate::{print_json, say};
use nvstack_core::error::Result;
use nvstack_core::size::format_size;
use nvstack_nvramdisk::OpenOptions;
use nvstack_pmem::cpu::{self, CpuFeatures};
use nvstack_pmem::latency::measure_dram_store_latency_ns;
use nvstack_pmem::mmap::page_size;
use nvstack_pmem::ordering::{OrderingPolicy, DEFAULT_POLICY, POLICIES};
use nvstack_stack::image::open_nvramdisk;
use nvstack_stack::Access;
use std::path::Path;

#[derive(serde::Serialize)]
struct HostInfo {
    cpu: CpuFeatures,
    best_flush: &'static str,
    nt_copy: &'static str,
    page_bytes: u64,
    dram_store_latency_ns: f64,
    policies: Vec<OrderingPolicy>,
    default_policy: &'static str,
    not_available: &'static str,
}

pub fn host(json: bool) -> Result<i32> {
    let h = HostInfo {
        cpu: cpu::features(),
        best_flush: cpu::best_flush().name(),
        nt_copy: cpu::nt_copy_name(),
        page_bytes: page_size(),
        dram_store_latency_ns: measure_dram_store_latency_ns(),
        policies: POLICIES.to_vec(),
        default_policy: DEFAULT_POLICY,
        not_available: "write-through (MWT), uncachable (MUC) and write-combining (MWC) need kernel page attributes; user space cannot set them",
    };
    if json {
        print_json(&h)?;
        return Ok(0);
    }
    let yn = |b: bool| if b { "yes" } else { "no" };
    say!("CPU persist instructions")?;
    say!(
        "  clflush {}  clflushopt {}  clwb {}  sse2 {}  avx2 {}  avx512f {}",
        yn(h.cpu.clflush),
        yn(h.cpu.clflushopt),
        yn(h.cpu.clwb),
        yn(h.cpu.sse2),
        yn(h.cpu.avx2),
        yn(h.cpu.avx512f)
    )?;
    say!(
        "  chosen line flush     {} (best of clwb > clflushopt > clflush)",
        h.best_flush
    )?;
    say!("  non-temporal copy     {} + sfence", h.nt_copy)?;
    say!("  page size             {} B", h.page_bytes)?;
    say!(
        "  DRAM store latency    {:.0} ns (median, one 64 B line non-temporal + sfence, random lines of 64 MiB)",
        h.dram_store_latency_ns
    )?;
    say!("Ordering policies (--ordering): data / mapping table / journal")?;
    for p in &h.policies {
        say!(
            "  {:<14} {:<10} {:<10} {:<10}{}",
            p.name,
            p.data.name(),
            p.map.name(),
            p.journal.name(),
            if p.name == h.default_policy {
                "  (default)"
            } else {
                ""
            }
        )?;
    }
    say!("  {}", h.not_available)?;
    Ok(0)
}

#[derive(serde::Serialize)]
struct ImageInfo {
    image: String,
    superblock: nvstack_nvramdisk::Superblock,
    protocol: &'static str,
    ordering: OrderingPolicy,
    usable_fraction: f64,
    mapped_blocks: u64,
    free_pages: u64,
    pending_recovery: Vec<String>,
}

pub fn image(path: &Path, json: bool) -> Result<i32> {
    nvstack_stack::kind::expect_nvramdisk(path, "nvstack cache status shows it")?;
    let d = open_nvramdisk(path, OpenOptions::default(), Access::ReadOnly)?;
    let g = *d.geometry();
    let rep = d.recovery_report().clone();
    let info = ImageInfo {
        image: path.display().to_string(),
        superblock: *d.superblock(),
        protocol: d.protocol().name(),
        ordering: d.ordering(),
        usable_fraction: g.usable_fraction(),
        mapped_blocks: rep.mapped_blocks,
        free_pages: rep.free_pages,
        pending_recovery: rep.actions.clone(),
    };
    if json {
        print_json(&info)?;
        return Ok(0);
    }
    say!("image        {}", info.image)?;
    say!(
        "format       nvstack v{}",
        nvstack_nvramdisk::layout::FORMAT_VERSION
    )?;
    say!(
        "region       {} ({} bytes)",
        format_size(g.region_bytes),
        g.region_bytes
    )?;
    say!(
        "blocks       {} x {} B = {} ({:.2} % of the region)",
        g.blocks,
        g.block_bytes,
        format_size(g.blocks * g.block_bytes as u64),
        g.usable_fraction() * 100.0
    )?;
    say!(
        "pages        {} ({} shadow pages reserved)",
        g.pages,
        g.pages - g.blocks
    )?;
    say!("lanes        {}", g.lanes)?;
    say!("protocol     {}", info.protocol)?;
    say!(
        "ordering     {} (data {}, map {}, journal {})",
        info.ordering.name,
        info.ordering.data.name(),
        info.ordering.map.name(),
        info.ordering.journal.name()
    )?;
    say!(
        "layout       journal @{}, map @{}, data @{}, superblock copies @0 and @{}",
        g.journal_off,
        g.map_off,
        g.data_off,
        g.sb2_off
    )?;
    say!(
        "mapped       {} blocks, {} pages free",
        info.mapped_blocks,
        info.free_pages
    )?;
    if info.pending_recovery.is_empty() {
        say!("recovery     none pending")?;
    }
    for a in &info.pending_recovery {
        say!("recovery     pending: {a}")?;
    }
    Ok(0)
}
