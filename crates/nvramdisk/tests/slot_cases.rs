//! `nvstack check` and recovery judge every journal slot alike (slot.rs's one table): for a
//! grid of crafted slot states, of both protocols and under a word-atomic (p4) and a flushed
//! (p6) journal, the image is consistent for `check` exactly when recovery opens it, the
//! damage `check` lists is the damage recovery names (the same words, listed once), and what
//! `check` calls pending is what recovery then acts on.
//!
//! Before the classifier was shared, this failed on review defect D1: a checksum-valid fast
//! record whose new entry is the never-written entry {unmapped, generation 0} was pending for
//! `check` and damage for recovery.

use nvstack_nvramdisk::check::check_image;
use nvstack_nvramdisk::entry::Entry;
use nvstack_nvramdisk::image::{format_image, open_image_readonly};
use nvstack_nvramdisk::journal::{
    FAST_RECORD_HEADER, FAST_RECORD_REPLICA, LBA_NULL, PAPER_INTENT, PAPER_INTENT_COMMIT, PAPER_L1,
    PAPER_L2, PAPER_VPN,
};
use nvstack_nvramdisk::{FormatOptions, Geometry, OpenOptions, Protocol};
use nvstack_pmem::ordering::policy_by_name;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const IMAGE_BYTES: u64 = 8 << 20;
const LANES: u32 = 2;

/// A formatted image with LBAs 0..8 written (one atomic write: a paper intent), then LBA 3
/// rewritten; returns its bytes and geometry.
fn base_image(dir: &Path, protocol: Protocol, ordering: &str) -> (Vec<u8>, Geometry) {
    let path = dir.join(format!("base-{}-{ordering}", protocol.name()));
    let options = FormatOptions {
        lanes: LANES,
        protocol,
        ordering: policy_by_name(ordering).expect("policy"),
        ..Default::default()
    };
    let sb = format_image(&path, IMAGE_BYTES, &options, false).expect("format");
    let disk = nvstack_nvramdisk::image::open_image(&path, OpenOptions::default()).expect("open");
    let block = sb.geometry.block_bytes as usize;
    disk.write_atomic(&(0..8).collect::<Vec<u64>>(), &vec![7u8; 8 * block])
        .expect("write");
    disk.write_atomic(&[3], &vec![9u8; block]).expect("write");
    drop(disk);
    (std::fs::read(&path).expect("read image"), sb.geometry)
}

fn word_at(bytes: &[u8], offset: u64) -> u64 {
    let at = offset as usize;
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// A fast record's bytes (docs/format.md section 5), built by hand: the test does not trust
/// the codec it checks.
fn fast_record(seq: u64, entries: &[(u64, u64, u64)]) -> Vec<u8> {
    let mut record = Vec::new();
    record.extend_from_slice(&seq.to_le_bytes());
    record.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    record.extend_from_slice(&[0u8; 4]);
    for &(lba, old, new) in entries {
        for word in [lba, old, new] {
            record.extend_from_slice(&word.to_le_bytes());
        }
    }
    let crc = crc32c::crc32c(&record[..12]);
    let crc = crc32c::crc32c_append(crc, &[0u8; 4]);
    let crc = crc32c::crc32c_append(crc, &record[FAST_RECORD_HEADER..]);
    record[12..16].copy_from_slice(&crc.to_le_bytes());
    record
}

/// A named slot state: the bytes to write into the image at each offset.
type Case = (String, Vec<(u64, Vec<u8>)>);

/// Slot states of the fast protocol, in lane 0.
fn fast_cases(image: &[u8], geo: &Geometry) -> Vec<Case> {
    let slot = geo.slot_off(0);
    let lba = 20;
    let old = word_at(image, geo.map_entry_off(lba));
    let free_page = geo.pages as u32 - 1; // never handed out to 9 blocks of writes
    let journaled = Entry {
        vpn: Some(free_page),
        gen: 1,
    }
    .encode(lba);
    let news = [
        ("journaled", journaled),
        ("never-written (D1)", Entry::NEVER_WRITTEN.encode(lba)),
        (
            "page out of range",
            Entry {
                vpn: Some(geo.pages as u32 + 3),
                gen: 1,
            }
            .encode(lba),
        ),
        ("corrupt word", journaled ^ 1),
        ("zero word", 0),
    ];
    let mut cases = Vec::new();
    for (what, new) in news {
        let record = fast_record(5, &[(lba, old, new)]);
        cases.push((format!("fast record, {what}"), vec![(slot, record.clone())]));
        let mut torn = record.clone();
        torn[FAST_RECORD_HEADER + 3] ^= 0x40;
        let copies = vec![(slot, torn), (slot + FAST_RECORD_REPLICA, record)];
        cases.push((format!("fast record, {what}, copy 1 torn"), copies));
    }
    let out_of_range = fast_record(6, &[(geo.blocks + 4, old, journaled)]);
    cases.push((
        "fast record, LBA out of range".into(),
        vec![(slot, out_of_range)],
    ));
    let mut torn = fast_record(7, &[(lba, old, journaled)]);
    torn[20] ^= 1;
    cases.push(("fast record torn in both copies".into(), vec![(slot, torn)]));
    cases
}

/// Slot states of the paper protocol: lane 0's replicas, and the intent's slot.
fn paper_cases(image: &[u8], geo: &Geometry) -> Vec<Case> {
    let slot = geo.slot_off(0);
    let word = |value: u64| value.to_le_bytes().to_vec();
    let free_page = geo.pages as u32 - 1;
    let vpns = [
        (
            "journaled VPN",
            Entry {
                vpn: Some(free_page),
                gen: 1,
            }
            .encode(5),
        ),
        ("never-written VPN", Entry::NEVER_WRITTEN.encode(5)),
        (
            "corrupt VPN",
            Entry {
                vpn: Some(free_page),
                gen: 1,
            }
            .encode(5)
                ^ 2,
        ),
    ];
    let replicas = [LBA_NULL, 5, 6, 0, geo.blocks + 9, u64::MAX - 1];
    let mut cases = Vec::new();
    for (what, vpn) in vpns {
        for l1 in replicas {
            for l2 in replicas {
                let stores = vec![
                    (slot + PAPER_VPN, word(vpn)),
                    (slot + PAPER_L1, word(l1)),
                    (slot + PAPER_L2, word(l2)),
                ];
                cases.push((format!("paper {what}, L1 {l1:#x}, L2 {l2:#x}"), stores));
            }
        }
    }
    // The intent of the 8-block write is in one of the lanes' slots, its commit word clear.
    let intent_slot = (0..geo.lanes)
        .map(|lane| geo.slot_off(lane))
        .find(|&slot| word_at(image, slot + PAPER_INTENT) != 0)
        .expect("a slot holds the intent");
    let crc = word_at(image, intent_slot + PAPER_INTENT) >> 32;
    for (what, commit) in [
        ("matching", (1 << 32) | crc),
        ("stale", 1 << 32 | (crc ^ 1)),
    ] {
        let stores = vec![(intent_slot + PAPER_INTENT_COMMIT, word(commit))];
        cases.push((format!("paper intent commit word {what}"), stores));
    }
    let mut bad_intent = vec![(intent_slot + PAPER_INTENT_COMMIT, word((1 << 32) | crc))];
    bad_intent.push((intent_slot + PAPER_INTENT + 8, word(12345)));
    cases.push(("paper intent fails its CRC".into(), bad_intent));
    cases
}

/// Check the image at `path` and open it (recovery in a private copy): they must agree.
fn judge(path: &Path, case: &str) {
    let report = check_image(path).unwrap_or_else(|e| panic!("{case}: check failed: {e}"));
    let findings = &report.findings;
    for (i, finding) in findings.iter().enumerate() {
        assert!(
            !findings[..i].contains(finding),
            "{case}: listed twice: {finding}"
        );
        let both = report.pending_recovery.contains(finding);
        assert!(!both, "{case}: pending and damage at once: {finding}");
    }
    match open_image_readonly(path, OpenOptions::default()) {
        Ok(disk) => {
            assert!(
                report.consistent,
                "{case}: recovery opens, check says {findings:?}"
            );
            let acted = disk.recovery_report().actions.len();
            let pending = report.pending_recovery.len();
            // A fast record whose entries are all new already is pending for check and
            // retired without a counted action; every other pending case is an action.
            assert!(
                acted <= pending,
                "{case}: recovery acted on {acted}, check saw {pending}"
            );
        }
        Err(e) => {
            assert_eq!(e.exit_code(), 1, "{case}: {e}");
            assert!(
                !report.consistent,
                "{case}: check consistent, recovery refused: {e}"
            );
            let first = &findings[0];
            assert!(
                e.to_string().contains(first.as_str()),
                "{case}: {e} vs {first}"
            );
        }
    }
}

fn run_grid(protocol: Protocol, ordering: &str) -> usize {
    let dir = tempfile::tempdir_in("/dev/shm").expect("temp dir");
    let (image, geo) = base_image(dir.path(), protocol, ordering);
    let cases = match protocol {
        Protocol::Fast => fast_cases(&image, &geo),
        Protocol::Paper => paper_cases(&image, &geo),
    };
    let path: PathBuf = dir.path().join("case");
    for (case, stores) in &cases {
        std::fs::write(&path, &image).expect("write image");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        for (offset, bytes) in stores {
            file.write_all_at(bytes, *offset).expect("patch");
        }
        drop(file);
        judge(&path, &format!("{}/{ordering}: {case}", protocol.name()));
    }
    cases.len()
}

#[test]
fn check_and_recovery_agree_on_fast_slots() {
    for ordering in ["p4", "p6"] {
        assert!(run_grid(Protocol::Fast, ordering) >= 12);
    }
}

#[test]
fn check_and_recovery_agree_on_paper_slots() {
    for ordering in ["p4", "p6"] {
        assert!(run_grid(Protocol::Paper, ordering) >= 3 * 36 + 3);
    }
}

/// D1 itself, by name: damage for both, in the same words, listed once.
#[test]
fn a_never_written_entry_in_a_valid_record_is_damage_for_both() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("temp dir");
    let (image, geo) = base_image(dir.path(), Protocol::Fast, "p4");
    let path = dir.path().join("d1");
    std::fs::write(&path, &image).expect("write image");
    let lba = 20;
    let old = word_at(&image, geo.map_entry_off(lba));
    let record = fast_record(5, &[(lba, old, Entry::NEVER_WRITTEN.encode(lba))]);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    file.write_all_at(&record, geo.slot_off(0)).expect("patch");
    drop(file);
    let report = check_image(&path).expect("check");
    assert!(
        report.pending_recovery.is_empty(),
        "{:?}",
        report.pending_recovery
    );
    assert_eq!(report.findings.len(), 1, "{:?}", report.findings);
    assert!(
        report.findings[0].contains("no journaled entry"),
        "{:?}",
        report.findings
    );
    let Err(e) = open_image_readonly(&path, OpenOptions::default()) else {
        panic!("recovery accepted a record that check calls damage");
    };
    assert!(e.to_string().contains(&report.findings[0]), "{e}");
}
