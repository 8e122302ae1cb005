//! `nvstack demo`: the main job. For both protocols: format an emulated NVRAM region under
//! /dev/shm, write and read tagged blocks, cut writes mid-protocol at named steps (as a power
//! failure would), recover, verify every block is all old or all new, check, and report.

use crate::{print_json, say};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_crashtest::oracle::BlockError;
use nvstack_nvramdisk::check::check_image;
use nvstack_nvramdisk::image::{format_image, Disk};
use nvstack_nvramdisk::{Action, Event, FormatOptions, OpenOptions, Phase, Protocol, Step};
use nvstack_stack::image::open_nvramdisk;
use nvstack_stack::Access;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

const BLOCK: usize = 4096;

/// Blocks that name their LBA and version, with a checksum (the crash checker's oracle blocks).
fn tagged(lba: u64, version: u64) -> Vec<u8> {
    nvstack_crashtest::oracle::block(lba, version, BLOCK)
}

#[derive(serde::Serialize)]
struct Cut {
    protocol: &'static str,
    write: String,
    cut_at: String,
    recovery: String,
    outcome: String,
}

#[derive(serde::Serialize)]
struct ProtocolRun {
    protocol: &'static str,
    blocks: u64,
    writes: u64,
    write_ops_per_sec: f64,
    reads_verified: u64,
    read_ops_per_sec: f64,
    fences_per_write: f64,
    check: String,
}

#[derive(serde::Serialize)]
struct Report {
    image: String,
    runs: Vec<ProtocolRun>,
    cuts: Vec<Cut>,
    ok: bool,
}

struct Cleanup(Option<PathBuf>);
impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

pub fn run(image: Option<PathBuf>, size: u64, json: bool) -> Result<i32> {
    let (path, _cleanup) = match image {
        Some(p) => (p, Cleanup(None)),
        None => {
            let p = PathBuf::from(format!("/dev/shm/nvstack-demo-{}.img", std::process::id()));
            (p.clone(), Cleanup(Some(p)))
        }
    };
    let mut report = Report {
        image: path.display().to_string(),
        runs: vec![],
        cuts: vec![],
        ok: true,
    };
    for (i, protocol) in [Protocol::Fast, Protocol::Paper].into_iter().enumerate() {
        let fo = FormatOptions {
            protocol,
            ..Default::default()
        };
        // The first format refuses an existing file (the demo has no --force: it never
        // overwrites what it did not make); the second reuses the file this run created.
        if i == 0 && path.exists() {
            return Err(Error::bad(format!(
                "{}: file exists; the demo formats a new image: give --image a path that does not exist",
                path.display()
            )));
        }
        format_image(&path, size, &fo, i > 0)?;
        if !json {
            eprintln!(
                "[{}] formatted {} ({} bytes)",
                protocol.name(),
                path.display(),
                size
            );
        }
        report.runs.push(workload(&path, protocol)?);
        for cut in cuts(protocol) {
            let c = cut_and_recover(&path, protocol, &cut)?;
            report.ok &= !c.outcome.starts_with("FAIL");
            report.cuts.push(c);
        }
        let r = check_image(&path)?;
        let last = report.runs.last_mut().expect("pushed above");
        last.check = if r.consistent {
            "consistent".into()
        } else {
            format!("DAMAGED: {:?}", r.findings)
        };
        report.ok &= r.consistent;
    }
    if json {
        print_json(&report)?;
    } else {
        print_report(&report)?;
    }
    if !report.ok {
        return Err(Error::finding(
            "demo found a violation (see the report above)",
        ));
    }
    Ok(0)
}

fn workload(path: &Path, protocol: Protocol) -> Result<ProtocolRun> {
    let d = open_nvramdisk(path, OpenOptions::default(), Access::Write)?;
    let blocks = d.blocks();
    let span = blocks.min(20_000);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(42);
    let mut latest = vec![0u64; span as usize];
    let writes = 20_000u64;
    let bufs: Vec<(u64, Vec<u8>)> = (0..writes)
        .map(|i| {
            let lba = rng.gen_range(0..span);
            (lba, tagged(lba, i + 1))
        })
        .collect();
    let fences0 = d.stats().persist.fences;
    let t = Instant::now();
    for (lba, b) in &bufs {
        d.write(*lba, b)?;
    }
    let wsecs = t.elapsed().as_secs_f64();
    let fences = d.stats().persist.fences - fences0;
    for (i, (lba, _)) in bufs.iter().enumerate() {
        latest[*lba as usize] = i as u64 + 1;
    }
    // One 64-block atomic write, then read everything back.
    let mut big = Vec::with_capacity(64 * BLOCK);
    for l in 0..64 {
        big.extend_from_slice(&tagged(l, writes + 1));
        latest[l as usize] = writes + 1;
    }
    d.write(0, &big)?;
    let mut buf = vec![0u8; BLOCK];
    let t = Instant::now();
    for lba in 0..span {
        d.read(lba, &mut buf)?;
        let want = latest[lba as usize];
        let got = nvstack_crashtest::oracle::decode_block(lba, &buf).map_err(Error::finding)?;
        if got != (want != 0).then_some(want) {
            return Err(Error::finding(format!(
                "LBA {lba}: read version {got:?}, wrote {want}"
            )));
        }
    }
    let rsecs = t.elapsed().as_secs_f64();
    Ok(ProtocolRun {
        protocol: protocol.name(),
        blocks,
        writes,
        write_ops_per_sec: writes as f64 / wsecs,
        reads_verified: span,
        read_ops_per_sec: span as f64 / rsecs,
        fences_per_write: fences as f64 / writes as f64,
        check: String::new(),
    })
}

struct CutSpec {
    name: &'static str,
    blocks: u64,
    step: Step,
    phase: Phase,
    /// Stop at the n-th matching event (1-based), for multi-block steps.
    nth: u64,
}

fn cuts(p: Protocol) -> Vec<CutSpec> {
    let c = |name, blocks, step, phase, nth| CutSpec {
        name,
        blocks,
        step,
        phase,
        nth,
    };
    match p {
        Protocol::Fast => vec![
            c("F1 data half written", 1, Step::Data, Phase::Stored, 1),
            c("F2 data persisted", 1, Step::Data, Phase::Persisted, 1),
            c(
                "F3 map stored, not persisted",
                1,
                Step::Map,
                Phase::Stored,
                1,
            ),
            c("R2 record persisted", 64, Step::Record, Phase::Persisted, 1),
            c(
                "R3 map entries partly stored (10 of 64)",
                64,
                Step::Map,
                Phase::Stored,
                10,
            ),
            c(
                "R4 map persisted, record valid",
                64,
                Step::Map,
                Phase::Persisted,
                1,
            ),
        ],
        Protocol::Paper => vec![
            c("S2 VPN journaled", 1, Step::JournalVpn, Phase::Persisted, 1),
            c("S4 L1 journaled", 1, Step::JournalL1, Phase::Persisted, 1),
            c(
                "S6 both replicas journaled",
                1,
                Step::JournalL2,
                Phase::Persisted,
                1,
            ),
            c("S8 map checkpointed", 1, Step::Map, Phase::Persisted, 1),
            c("S10 L1 reset", 1, Step::ResetL1, Phase::Persisted, 1),
            c(
                "intent committed (64 blocks)",
                64,
                Step::IntentCommit,
                Phase::Persisted,
                1,
            ),
            c(
                "intent map partly stored (10 of 64)",
                64,
                Step::Map,
                Phase::Stored,
                10,
            ),
        ],
    }
}

fn cut_and_recover(path: &Path, p: Protocol, cut: &CutSpec) -> Result<Cut> {
    let base = 100u64; // LBAs base..base+blocks hold version 1, then get version 2 cut short
    let n = cut.blocks;
    {
        let d = open_nvramdisk(path, OpenOptions::default(), Access::Write)?;
        let mut old = Vec::new();
        for l in base..base + n {
            old.extend_from_slice(&tagged(l, 1));
        }
        d.write(base, &old)?;
    }
    let seen = Arc::new(AtomicU64::new(0));
    let (step, phase, nth) = (cut.step, cut.phase, cut.nth);
    let s2 = seen.clone();
    let hook = Arc::new(move |e: &Event| {
        if e.step == step && e.phase == phase && s2.fetch_add(1, Ordering::Relaxed) + 1 == nth {
            Action::Stop
        } else {
            Action::Continue
        }
    });
    let options = OpenOptions {
        hook: Some(hook),
        ..Default::default()
    };
    let d: Disk = open_nvramdisk(path, options, Access::Write)?;
    let mut new = Vec::new();
    for l in base..base + n {
        new.extend_from_slice(&tagged(l, 2));
    }
    let stopped = matches!(d.write(base, &new), Err(Error::Stopped(_)));
    drop(d); // the power fails here
    let d = open_nvramdisk(path, OpenOptions::default(), Access::Write)?;
    let rep = d.recovery_report();
    let recovery = if rep.actions.is_empty() {
        "nothing to do".to_string()
    } else {
        rep.actions.join("; ")
    };
    let mut versions = BTreeSet::new();
    let mut buf = vec![0u8; BLOCK];
    let mut torn = None;
    for l in base..base + n {
        d.read(l, &mut buf)?;
        match nvstack_crashtest::oracle::decode_block(l, &buf) {
            Ok(v) => {
                versions.insert(v);
            }
            Err(e) => torn = Some(e),
        }
    }
    Ok(Cut {
        protocol: p.name(),
        write: format!("{n} block{}", if n > 1 { "s" } else { "" }),
        cut_at: cut.name.to_string(),
        recovery,
        outcome: outcome(stopped, torn, &versions, n),
    })
}

/// What the cut left of an `n`-block write of version 2 over version 1: all old or all new
/// passes; a cut never reached, a torn block or mixed versions fail.
fn outcome(
    stopped: bool,
    torn: Option<BlockError>,
    versions: &BTreeSet<Option<u64>>,
    n: u64,
) -> String {
    match (stopped, torn, versions.len()) {
        (false, _, _) => "FAIL: the cut point was never reached".to_string(),
        (_, Some(e), _) => format!("FAIL: {e}"),
        (_, None, 1) => match versions.first() {
            Some(Some(1)) if n == 1 => "old".to_string(),
            Some(Some(2)) if n == 1 => "new".to_string(),
            Some(Some(1)) => format!("all {n} blocks old"),
            Some(Some(2)) => format!("all {n} blocks new"),
            v => format!("FAIL: unexpected version {v:?}"),
        },
        _ => format!("FAIL: mixed versions {versions:?} across an atomic write"),
    }
}

fn print_report(r: &Report) -> Result<()> {
    say!("")?;
    say!("nvstack demo on {}", r.image)?;
    say!("")?;
    say!(
        "{:<9} {:>9} {:>10} {:>13} {:>12} {:>12} {:>10}  check",
        "protocol",
        "blocks",
        "writes",
        "writes/s",
        "fences/write",
        "reads ok",
        "reads/s"
    )?;
    for x in &r.runs {
        say!(
            "{:<9} {:>9} {:>10} {:>13.0} {:>12.2} {:>12} {:>10.0}  {}",
            x.protocol,
            x.blocks,
            x.writes,
            x.write_ops_per_sec,
            x.fences_per_write,
            x.reads_verified,
            x.read_ops_per_sec,
            x.check
        )?;
    }
    say!("")?;
    say!("Writes cut mid-protocol (power failure), then recovered:")?;
    say!(
        "{:<9} {:<10} {:<42} {:<22} recovery",
        "protocol",
        "write",
        "cut at",
        "after recovery"
    )?;
    for c in &r.cuts {
        say!(
            "{:<9} {:<10} {:<42} {:<22} {}",
            c.protocol,
            c.write,
            c.cut_at,
            c.outcome,
            c.recovery
        )?;
    }
    say!("")?;
    say!(
        "result: {}",
        if r.ok {
            "OK: every cut write is all old or all new; images check consistent"
        } else {
            "FAILED"
        }
    )?;
    Ok(())
}
