//! A process SIGKILLed in the middle of a merge (switch, partial, full: while copying, before
//! erasing, between two erases) or of a garbage collection comes back with every acknowledged
//! write readable, and goes on working (every page rewritten and read back). The test
//! runs itself as the child (an environment variable says so), which writes through the block
//! device and stops at the chosen merge step until it is killed.

mod common;

use common::{header, page, tag_of};
use nvstack_core::blockdev::BlockDevice;
use nvstack_flash::device::{self, FlashDevice, Latency};
use nvstack_flash::ftl::{FtlKind, MergeKind, MergeStep};
use nvstack_test_support::Watched;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD: &str = "NVSTACK_FLASH_KILL_CHILD";
const TEST: &str = "killed_in_the_middle_of_a_merge_every_acknowledged_write_survives";

/// The stops: a merge step and which occurrence of it; whether recovery must finish a merge.
/// (A partial merge's copies make the log read as a second data block, so before its erase
/// recovery runs when it copied anything: either may happen there.)
const STOPS: [(FtlKind, MergeStep, u32, Option<bool>); 7] = [
    (
        FtlKind::LogBlock,
        MergeStep::Copied(MergeKind::Full),
        5,
        Some(true),
    ),
    (
        FtlKind::LogBlock,
        MergeStep::Erased(MergeKind::Full),
        4,
        Some(true),
    ),
    (
        FtlKind::LogBlock,
        MergeStep::Copied(MergeKind::Partial),
        3,
        Some(true),
    ),
    (
        FtlKind::LogBlock,
        MergeStep::BeforeErase(MergeKind::Switch),
        3,
        Some(false),
    ),
    (
        FtlKind::LogBlock,
        MergeStep::BeforeErase(MergeKind::Partial),
        2,
        None,
    ),
    // The page-mapped FTL's garbage collection: while copying, and with every copy done.
    (FtlKind::Page, MergeStep::Copied(MergeKind::Full), 40, None),
    (
        FtlKind::Page,
        MergeStep::BeforeErase(MergeKind::Full),
        12,
        None,
    ),
];

/// The child: writes a mix of hot, sequential and random pages, saying BEGIN and ACK around
/// each; at the chosen merge step it says STOP and waits to be killed.
fn child(path: &Path, stop: usize) {
    let dev = FlashDevice::open(path, Latency::Counted).unwrap();
    let (_, step, nth, _) = STOPS[stop];
    let mut seen = 0;
    dev.set_hook(Box::new(move |s| {
        if s == step {
            seen += 1;
            if seen == nth {
                println!("STOP");
                std::io::stdout().flush().unwrap();
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
    }));
    let (mut rng, mut cursor) = (7u64, 48u32);
    for i in 1..20_000u32 {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = (rng >> 33) as u32;
        let lpn = match r % 10 {
            0..=4 => r / 10 % 40,
            5..=7 => {
                cursor = if cursor >= 160 { 48 } else { cursor + 1 };
                cursor
            }
            _ => r / 10 % 336,
        };
        println!("BEGIN {lpn} {i}");
        dev.write(u64::from(lpn), &page(i)).unwrap();
        println!("ACK {lpn} {i}");
    }
    println!("END");
}

#[test]
fn killed_in_the_middle_of_a_merge_every_acknowledged_write_survives() {
    if let Ok(arg) = std::env::var(CHILD) {
        let (path, stop) = arg.rsplit_once(':').unwrap();
        return child(Path::new(path), stop.parse().unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    for (stop, &(kind, step, nth, must_recover)) in STOPS.iter().enumerate() {
        let path = dir.path().join(format!("kill{stop}"));
        device::create(&path, header(kind), false).unwrap();
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, format!("{}:{stop}", path.display()))
            .stdout(Stdio::piped());
        let mut w = Watched::spawn(&mut cmd, Duration::from_secs(60));
        let out = BufReader::new(w.child.stdout.take().unwrap());
        let (mut acked, mut in_flight) = (vec![None; 336], None);
        let mut stopped = false;
        for line in out.lines() {
            let line = line.unwrap();
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["BEGIN", l, t] => {
                    in_flight = Some((l.parse::<usize>().unwrap(), t.parse().unwrap()))
                }
                ["ACK", l, t] => {
                    acked[l.parse::<usize>().unwrap()] = Some(t.parse::<u32>().unwrap());
                    in_flight = None;
                }
                ["STOP"] => {
                    stopped = true;
                    break;
                }
                _ => {}
            }
        }
        assert!(
            stopped,
            "{kind:?} {step:?} #{nth}: the child never reached it"
        );
        w.kill();
        let dev = FlashDevice::open(&path, Latency::Counted).unwrap();
        for (lpn, want) in acked.iter().enumerate() {
            let got = tag_of(&dev, lpn as u64);
            let flying = in_flight.filter(|&(l, _)| l == lpn).map(|(_, t)| t);
            assert!(
                got == *want || (flying.is_some() && got == flying),
                "{kind:?} {step:?} #{nth}: lpn {lpn} reads {got:?}, acknowledged {want:?}"
            );
        }
        let recovered = dev.saved().merges.recovery;
        if let Some(must) = must_recover {
            assert_eq!(
                recovered > 0,
                must,
                "{step:?} #{nth}: recovery merges {recovered}"
            );
        }
        for lpn in 0..336u64 {
            dev.write(lpn, &page(100_000 + lpn as u32)).unwrap();
        }
        for lpn in 0..336u64 {
            assert_eq!(
                tag_of(&dev, lpn),
                Some(100_000 + lpn as u32),
                "{kind:?}: after recovery"
            );
        }
    }
}
