//! The engine on tiny hand-made recordings, with counts worked out by hand: a FAT16 volume of
//! 8,192 sectors (2 reserved, two FATs of 32 sectors at 2 and 34, the root directory at 66,
//! data from 67, one sector a cluster), a few requests 1 µs apart.

use super::changed::Changed;
use super::engine::{self, AdmitKind, DestagePolicy, Device, Job, Mode, Outcome};
use super::fatcount::{Bits, FatTracker, Kind, Layout};
use super::input::{self, Paths, SECTOR_BYTES};
use super::{device, jobs, Plan};
use crate::field::{Field, LabError};
use nvstack_flash::ftl::FtlKind;
use nvstack_sim::trace::nvdata::DataWriter;
use nvstack_sim::trace::nvstack::Tally;
use std::path::Path;

const SECTORS: u64 = 8192;
const FAT_SECTOR: u64 = 2;
const DATA_SECTOR: u64 = 100;
const S: usize = SECTOR_BYTES as usize;

/// A request of a hand-made trace.
enum Req {
    /// Sectors written from `lba`, with these bytes (whole sectors).
    W(u64, Vec<u8>),
    R(u64, u64),
    F,
}

fn volume() -> Vec<u8> {
    let mut v = vec![0u8; SECTORS as usize * S];
    let b = &mut v[..S];
    b[0] = 0xEB; // The jump nvcache's boot-sector check wants.
    b[11..13].copy_from_slice(&512u16.to_le_bytes());
    b[13] = 1;
    b[14..16].copy_from_slice(&2u16.to_le_bytes());
    b[16] = 2;
    b[17..19].copy_from_slice(&16u16.to_le_bytes());
    b[19..21].copy_from_slice(&(SECTORS as u16).to_le_bytes());
    b[22..24].copy_from_slice(&32u16.to_le_bytes());
    b[510] = 0x55;
    b[511] = 0xAA;
    v
}

/// A recording of `reqs` on `image` in `dir`: trace, data log and image, no run record.
fn record(dir: &Path, image: &[u8], reqs: &[Req]) -> Paths {
    let mut text = format!("nvstack-trace 1 block_bytes=512 blocks={SECTORS}\n");
    let mut tally = Tally::default();
    let data = std::fs::File::create(dir.join("data")).unwrap();
    let mut log = DataWriter::new(Box::new(data), 512).unwrap();
    for (i, r) in reqs.iter().enumerate() {
        let (op, lba, n) = match r {
            Req::W(lba, bytes) => {
                log.add(bytes).unwrap();
                ('W', *lba, bytes.len() / S)
            }
            Req::R(lba, n) => ('R', *lba, *n as usize),
            Req::F => ('F', 0, 0),
        };
        let line = format!("{} 0 {op} {lba} {n}", 1000 * (i + 1));
        tally.add(line.as_bytes());
        text.push_str(&line);
        text.push('\n');
    }
    text.push_str(&tally.end_line());
    text.push('\n');
    log.finish().unwrap();
    std::fs::write(dir.join("trace"), text).unwrap();
    std::fs::write(dir.join("image"), image).unwrap();
    Paths {
        trace: dir.join("trace"),
        data: dir.join("data"),
        image: dir.join("image"),
        run: None,
    }
}

fn plan(paths: Paths) -> Plan {
    Plan {
        paths,
        nvram_kib: vec![0, 8],
        log_blocks: 64,
        nvram_sector_ns: 28_160,
        seed_only: false,
        check_fat_walk: true,
    }
}

fn job(mode: Mode, nvram_bytes: u64) -> Job {
    Job {
        mode,
        nvram_bytes,
        policy: DestagePolicy::Lrw,
        admit: AdmitKind::FatMetadata,
        ftl: FtlKind::LogBlock,
        keep_pages: true,
        check_admission: nvram_bytes > 0,
    }
}

/// Replay `reqs` on the hand-made volume as `job`; the device settings too.
fn replay(reqs: &[Req], job: Job) -> (Outcome, Device) {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(record(dir.path(), &volume(), reqs));
    let input = input::load(&p.paths).unwrap();
    let dev = device(&p, input.header.blocks).unwrap();
    let view = Changed::derive(&input);
    (engine::run(&input, job, dev, Some(&view)).unwrap(), dev)
}

/// The device time of `reads`, `programs` and `erases` on the test's flash.
fn flash_ns(dev: &Device, reads: u64, programs: u64, erases: u64) -> u64 {
    dev.timing.time_ns(&dev.geometry, reads, programs, erases)
}

fn sector(byte: u8) -> Vec<u8> {
    vec![byte; S]
}

#[test]
fn without_nvram_every_sector_written_is_one_flash_program_the_application_waits_for() {
    let reqs = [
        Req::W(DATA_SECTOR, sector(1)),
        Req::W(200, [sector(2), sector(3)].concat()),
        Req::F,
        Req::R(DATA_SECTOR, 1),
        Req::R(300, 1),
    ];
    let (o, dev) = replay(&reqs, job(Mode::Sync, 0));
    assert_eq!((o.flash.page_programs, o.flash.block_erases), (3, 0));
    // A page never written reads as zeros with no NAND read.
    assert_eq!(o.flash.page_reads, 1);
    assert_eq!(o.host_ns, 4 * 1000, "five requests 1 µs apart");
    let (program, read) = (flash_ns(&dev, 0, 1, 0), flash_ns(&dev, 1, 0, 0));
    assert_eq!(o.foreground_device_ns, 3 * program + read);
    assert_eq!(o.exec_ns, o.host_ns + o.foreground_device_ns);
    assert_eq!((o.nvram_sector_writes, o.destaged, o.bypassed), (0, 0, 0));
    // A page cache would have served the read of the sector written before, not the other.
    let pc = o
        .page_cache
        .expect("a synchronous run has the page-cache figures");
    assert_eq!((pc.hit_sectors, pc.flash_reads_saved), (1, 1));
    assert_eq!(pc.exec_ns, o.exec_ns - flash_ns(&dev, 1, 0, 0));
    assert_eq!(o.logical_writes[DATA_SECTOR as usize], 1);
}

#[test]
fn fat_metadata_goes_to_the_nvram_and_file_data_past_it() {
    let reqs = [
        Req::W(FAT_SECTOR, sector(7)),
        Req::W(DATA_SECTOR, sector(1)),
        Req::R(FAT_SECTOR, 1),
    ];
    let (o, dev) = replay(&reqs, job(Mode::Sync, 8 << 10));
    assert_eq!((o.nvram_sector_writes, o.bypassed, o.destaged), (1, 1, 0));
    assert_eq!((o.nvram_sector_reads, o.flash.page_reads), (1, 0));
    assert_eq!(
        o.flash.page_programs, 1,
        "only the data sector reached the flash"
    );
    assert_eq!(o.held_in_nvram_at_end, 1);
    assert_eq!(
        o.foreground_device_ns,
        2 * dev.nvram_sector_ns + flash_ns(&dev, 0, 1, 0)
    );
    // The independent counter agrees with the admission: one metadata write, caught.
    let a = o.admission.expect("the run checks the admission");
    assert_eq!((a.metadata_writes, a.caught, a.admitted_data), (1, 1, 0));
    let k = o.kinds.expect("the counter's kinds");
    assert_eq!((k.fat, k.data, k.directory, k.reserved), (1, 1, 0, 0));
    assert!(o.fat_walk_checks >= 1, "the FAT walk was cross-checked");
}

#[test]
fn a_full_nvram_destages_the_least_recently_written_sectors_to_the_flash() {
    // 1 KiB: two sectors of data and the spare slot.
    let reqs: Vec<Req> = (0..5)
        .map(|i| Req::W(FAT_SECTOR + i, sector(i as u8 + 1)))
        .collect();
    let (o, _) = replay(&reqs, job(Mode::Sync, 1 << 10));
    assert_eq!(o.slots, 3);
    assert_eq!(o.nvram_sector_writes, 5);
    assert_eq!(
        o.destaged + o.held_in_nvram_at_end,
        5,
        "each sector held or destaged"
    );
    assert_eq!(o.destaged, 3, "{o:?}");
    assert_eq!(
        o.flash.page_programs, o.destaged,
        "a destaged sector is one program"
    );
    assert_eq!(
        o.destaged_data_area, 0,
        "FAT sectors are not in the data area"
    );
    // LRW: the first three written went to the flash, the last two stayed.
    let written: Vec<u32> = (0..5)
        .map(|i| o.logical_writes[(FAT_SECTOR + i) as usize])
        .collect();
    assert_eq!(written, [1, 1, 1, 0, 0]);
}

#[test]
fn an_asynchronous_run_waits_for_metadata_only_and_writes_data_back_at_the_end() {
    let reqs = [
        Req::W(DATA_SECTOR, sector(1)),
        Req::W(DATA_SECTOR, sector(2)),
        Req::W(FAT_SECTOR, sector(3)),
        Req::R(DATA_SECTOR, 1),
    ];
    let (o, dev) = replay(&reqs, job(Mode::Async, 8 << 10));
    assert_eq!(
        o.foreground_device_ns, dev.nvram_sector_ns,
        "only the FAT write waited"
    );
    assert_eq!(o.nvram_sector_writes, 1);
    // The data sector was dirty once in the volatile cache, written back at unmount; the
    // read hit it there.
    assert_eq!(o.volatile_writebacks, 1);
    assert_eq!((o.flash.page_programs, o.flash.page_reads), (1, 0));
    assert!(
        o.page_cache.is_none(),
        "page-cache figures are the synchronous runs'"
    );

    let (v, _) = replay(&reqs, job(Mode::VfatAsync, 0));
    assert_eq!(v.foreground_device_ns, 0, "VFAT waits for no write");
    assert_eq!((v.volatile_writebacks, v.flash.page_programs), (2, 2));
}

#[test]
fn the_changed_sector_view_keeps_only_sectors_whose_bytes_changed() {
    let dir = tempfile::tempdir().unwrap();
    let mut pair = sector(0);
    pair.extend(sector(9));
    // Zeros over zeros (unchanged), then two sectors of which the second changed.
    let reqs = [Req::W(DATA_SECTOR, sector(0)), Req::W(DATA_SECTOR, pair)];
    let p = plan(record(dir.path(), &volume(), &reqs));
    let input = input::load(&p.paths).unwrap();
    let view = Changed::derive(&input);
    let st = view.stats;
    assert_eq!(
        (
            st.write_requests,
            st.requests_unchanged,
            st.requests_partly_changed
        ),
        (2, 1, 1)
    );
    assert_eq!(
        (
            st.sectors_written,
            st.sectors_changed,
            st.sectors_dropped,
            st.runs
        ),
        (3, 1, 2, 1)
    );
    assert!(view.runs(0).is_empty());
    assert_eq!((view.runs(1)[0].offset, view.runs(1)[0].sectors), (1, 1));
    let dev = device(&p, input.header.blocks).unwrap();
    let raw = engine::run(&input, job(Mode::Sync, 0), dev, Some(&view)).unwrap();
    let changed = engine::run(&input, job(Mode::SyncChanged, 0), dev, Some(&view)).unwrap();
    assert_eq!(
        (raw.flash.page_programs, changed.flash.page_programs),
        (3, 1)
    );
    assert_eq!(changed.logical_writes[DATA_SECTOR as usize + 1], 1);
    assert_eq!(changed.logical_writes[DATA_SECTOR as usize], 0);
    let e = engine::run(&input, job(Mode::SyncChanged, 0), dev, None).unwrap_err();
    assert!(
        e.to_string().contains("without the changed-sector view"),
        "{e}"
    );
}

#[test]
fn the_fat_counter_reads_a_volume_made_by_mkfs_fat() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fat.img");
    let made = std::process::Command::new("/sbin/mkfs.fat")
        .args([
            "-C", "-F", "16", "-s", "1", "-r", "512", "-f", "2", "-R", "4",
        ])
        .arg(&img)
        .arg("8192")
        .output()
        .expect("mkfs.fat is missing: run `bash scripts/deps.sh` (it installs dosfstools)");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let bytes = std::fs::read(&img).unwrap();
    let mut t = FatTracker::new(bytes.clone()).unwrap();
    let l = t.layout;
    assert_eq!(
        (l.bits, l.reserved, l.fats, l.root_sectors),
        (Bits::Fat16, 4, 2, 32)
    );
    assert_eq!(l.data_start, 4 + 2 * l.fat_sectors + 32);
    assert_eq!(
        Layout::parse(&bytes[..512], 16384).unwrap().data_start,
        l.data_start
    );
    assert_eq!(t.kind(0), Kind::Reserved);
    assert_eq!(t.kind(4), Kind::Fat);
    assert_eq!(
        t.kind(l.data_start - 1),
        Kind::Directory,
        "the last root sector"
    );
    assert_eq!(t.kind(l.data_start), Kind::Data);
    // A directory named in the root at cluster 3, chained to cluster 4, which ends it.
    let mut fat = bytes[4 * S..5 * S].to_vec();
    fat[6..8].copy_from_slice(&4u16.to_le_bytes());
    fat[8..10].copy_from_slice(&0xFFFFu16.to_le_bytes());
    let mut root = vec![0u8; S];
    root[..11].copy_from_slice(b"SUBDIR     ");
    root[11] = 0x10;
    root[26..28].copy_from_slice(&3u16.to_le_bytes());
    assert_eq!(t.write(4, &fat), vec![true]);
    let root_first = l.data_start - l.root_sectors;
    assert_eq!(t.write(root_first, &root), vec![true]);
    let cluster3 = l.data_start + 1;
    assert!(t.is_metadata(cluster3) && t.is_metadata(cluster3 + 1));
    assert!(!t.is_metadata(cluster3 + 2), "past the chain's end");
    assert_eq!(t.directory_sectors(), 2);
    assert_eq!(
        t.write(cluster3, &sector(0)),
        vec![true],
        "a directory sector now"
    );
}

#[test]
fn a_volume_that_is_not_fat_is_refused_naming_the_image_field() {
    let e = FatTracker::new(vec![0u8; SECTORS as usize * S])
        .err()
        .unwrap();
    assert_eq!(e.field, Field::Image);
    assert!(
        e.to_string()
            .starts_with("image: not a FAT volume: no 0x55AA"),
        "{e}"
    );
    let mut v = volume();
    v[11..13].copy_from_slice(&4096u16.to_le_bytes());
    let e = Layout::parse(&v[..512], SECTORS).err().unwrap();
    assert!(e.text.contains("not 512"), "{e}");
    // The engine refuses it the same way.
    let dir = tempfile::tempdir().unwrap();
    let p = plan(record(
        dir.path(),
        &vec![0u8; SECTORS as usize * S],
        &[Req::F],
    ));
    let input = input::load(&p.paths).unwrap();
    let dev = device(&p, input.header.blocks).unwrap();
    match engine::run(&input, job(Mode::Sync, 0), dev, None) {
        Err(LabError::Invalid(i)) => assert_eq!(i.field, Field::Image),
        other => panic!("not refused by field: {:?}", other.map(|o| o.exec_ns)),
    }
}

#[test]
fn a_bad_trace_line_is_refused_naming_the_file_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = record(dir.path(), &volume(), &[Req::F, Req::F]);
    let text = std::fs::read_to_string(&p.trace).unwrap();
    let bad = text.replacen("2000 0 F 0 0", "2000 0 X 0 0", 1);
    assert_ne!(bad, text);
    std::fs::write(&p.trace, bad).unwrap();
    let e = input::load(&p).err().unwrap();
    let want = format!("{}:3:", p.trace.display());
    assert!(e.to_string().starts_with(&want), "wanted {want} in: {e}");
    assert_eq!(nvstack_core::Error::from(e).exit_code(), 2);
}

#[test]
fn a_wrong_image_and_a_bad_run_record_are_refused_by_their_fields() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = record(dir.path(), &volume(), &[Req::F]);
    std::fs::write(&p.image, [0u8; 4096]).unwrap();
    match input::load(&p) {
        Err(LabError::Invalid(i)) => {
            assert_eq!(i.field, Field::Image);
            assert!(i.render(&|_| "--image").contains("--image "), "{i}");
            assert!(i.text.contains("not the volume"), "{i}");
        }
        other => panic!("not refused by field: {}", other.is_ok()),
    }
    std::fs::write(&p.image, volume()).unwrap();
    let run = dir.path().join("run.json");
    std::fs::write(&run, r#"{"elapsed_s": -1, "cpu_s": {}}"#).unwrap();
    p.run = Some(run.clone());
    match input::load(&p) {
        Err(LabError::Invalid(i)) => {
            assert_eq!(i.field, Field::Run);
            assert!(i.text.contains("elapsed_s must be positive"), "{i}");
        }
        other => panic!("not refused by field: {}", other.is_ok()),
    }
    // A good record scales the gaps to the CPU time: 2 ms of CPU over one 1 µs gap.
    std::fs::write(&run, r#"{"elapsed_s": 1, "cpu_s": {"a": 0.002}}"#).unwrap();
    let p2 = record(dir.path(), &volume(), &[Req::F, Req::F]);
    let input = input::load(&Paths {
        run: Some(run),
        ..p2
    })
    .unwrap();
    assert_eq!(
        (input.host.source.as_str(), input.host.host_ns),
        ("cpu", 2_000_000)
    );
}

#[test]
fn a_plan_refuses_sizes_by_field_and_makes_the_seeds_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plan(record(dir.path(), &volume(), &[Req::F]));
    p.check().unwrap();
    for (kib, says) in [
        (vec![], "nvram_kib: give at least one size"),
        (vec![0, 65537], "nvram_kib 65537: at most 65536"),
        (vec![8, 16], "nvram_kib: the sweep needs 0"),
    ] {
        p.nvram_kib = kib;
        let e = p.check().unwrap_err();
        assert_eq!(e.field, Field::NvramKib);
        assert!(e.to_string().starts_with(says), "{e}");
    }
    // The VFAT baseline, then per size sync, sync-changed and async; beyond the seed the
    // page-mapped FTL at each size, three policies and admit-all with NVRAM, and its VFAT run.
    assert_eq!(jobs(&[0, 8], true).len(), 1 + 2 * 3);
    let all = jobs(&[0, 8], false);
    assert_eq!(all.len(), 1 + (3 + 1) + (3 + 1 + 3 + 1) + 1);
    assert_eq!(
        all.iter().filter(|j| j.check_admission).count(),
        2,
        "top size, raw and view"
    );
    assert_eq!(
        all.iter().filter(|j| j.keep_pages).count(),
        2,
        "sync at 0 and the top"
    );
}
