//! The stack on real image files of every kind: identified, peeked and opened through one
//! entry point, written and read back after a close, served with the right threads, and each
//! refusal naming what is wrong.

use crate::kind::{expect_cache, expect_nvramdisk, identify, peek, Kind, Promise};
use crate::served::{self, Backend, ServeSpec};
use crate::{Access, Image};
use nvstack_nvcache::write::format::Admit;
use nvstack_nvcache::{ubj, write};
use std::path::{Path, PathBuf};

const CACHE_BYTES: u64 = 4 << 20;
const BACKING_BYTES: u64 = 16 << 20;

/// One image of each kind (the caches over their own backing files) in a scratch directory.
struct Images {
    _dir: tempfile::TempDir,
    disk: PathBuf,
    ubj: PathBuf,
    wc: PathBuf,
    junk: PathBuf,
}

fn images() -> Images {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let p = |n: &str| dir.path().join(n);
    let fo = nvstack_nvramdisk::FormatOptions::default();
    nvstack_nvramdisk::image::format_image(&p("disk.img"), 8 << 20, &fo, false).unwrap();
    let o = ubj::image::CreateOptions {
        size: CACHE_BYTES,
        backing: &p("ubj.backing"),
        backing_size: Some(BACKING_BYTES),
        settings: Default::default(),
        force: false,
    };
    ubj::image::create_image(&p("ubj.img"), &o).unwrap();
    let o = write::image::CreateOptions {
        size: CACHE_BYTES,
        sector_bytes: 512,
        backing: &p("wc.backing"),
        backing_size: Some(BACKING_BYTES),
        settings: write::format::Settings::default(),
        admit: Admit::All,
        force: false,
    };
    write::image::create_image(&p("wc.img"), &o).unwrap();
    std::fs::write(p("junk"), vec![7u8; 8192]).unwrap();
    Images {
        disk: p("disk.img"),
        ubj: p("ubj.img"),
        wc: p("wc.img"),
        junk: p("junk"),
        _dir: dir,
    }
}

#[test]
fn every_kind_is_identified_and_peeked_with_its_promise() {
    let im = images();
    assert_eq!(identify(&im.disk).unwrap(), Some(Kind::Nvramdisk));
    assert_eq!(identify(&im.ubj).unwrap(), Some(Kind::Ubj));
    assert_eq!(identify(&im.wc).unwrap(), Some(Kind::WriteCache));
    assert_eq!(identify(&im.junk).unwrap(), None);
    let e = identify(Path::new("/dev/shm/no-such-nvstack-image")).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    let (d, u, w) = (
        peek(&im.disk).unwrap(),
        peek(&im.ubj).unwrap(),
        peek(&im.wc).unwrap(),
    );
    assert_eq!((d.promise, d.block_bytes), (Promise::AtomicOnReturn, 4096));
    assert_eq!((u.promise, u.block_bytes), (Promise::WholeAtFlush, 4096));
    assert_eq!((w.promise, w.block_bytes), (Promise::AdmittedOnReturn, 512));
    assert_eq!(u.blocks, BACKING_BYTES / 4096);
    assert_eq!(w.blocks, BACKING_BYTES / 512);
    // A file of no kind is read as an nvramdisk, whose check names the fault.
    let e = peek(&im.junk).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
}

#[test]
fn a_write_through_any_image_survives_its_close_and_reads_back() {
    let im = images();
    for path in [&im.disk, &im.ubj, &im.wc] {
        let shape = peek(path).unwrap();
        let bb = shape.block_bytes as usize;
        let data: Vec<u8> = (0..4 * bb).map(|i| (i % 253) as u8).collect();
        let img = Image::open(path, Access::Write, None).unwrap();
        assert_eq!(img.kind(), shape.kind);
        assert_eq!(img.backing().is_some(), shape.kind.is_cache());
        img.device().write(5, &data).unwrap();
        let epoch = img.close_written().unwrap();
        assert_eq!(epoch.is_some(), shape.kind == Kind::Ubj, "{path:?}");
        let img = Image::open(path, Access::ReadOnly, None).unwrap();
        let mut back = vec![0u8; data.len()];
        img.device().read(5, &mut back).unwrap();
        assert!(back == data, "{path:?}: read back differs");
    }
}

#[test]
fn the_wrong_kind_is_refused_naming_both() {
    let im = images();
    let e = expect_cache(&im.disk, "nvstack info reads it").unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.to_string().contains("an nvramdisk image, not a cache"),
        "{e}"
    );
    for (p, name) in [
        (&im.ubj, "a UBJ cache image"),
        (&im.wc, "a write cache image"),
    ] {
        let e = expect_nvramdisk(p, "nvstack cache check reads it").unwrap_err();
        assert!(e.to_string().contains(name), "{e}");
        expect_cache(p, "-").unwrap();
    }
    expect_nvramdisk(&im.disk, "-").unwrap();
}

#[test]
fn served_caches_start_their_threads_and_close_as_data() {
    let im = images();
    for (path, ubj) in [(&im.ubj, true), (&im.wc, false)] {
        let spec = ServeSpec {
            image: Some(path),
            ..ServeSpec::default()
        };
        let s = served::open(Backend::of_kind(identify(path).unwrap()), &spec).unwrap();
        assert!(s
            .what
            .contains(if ubj { "UBJ cache" } else { "write cache" }));
        let c = s.cache.as_ref().expect("a served cache");
        s.dev
            .write(0, &vec![9u8; s.dev.block_bytes() as usize])
            .unwrap();
        let closed = c.close().unwrap();
        assert_eq!(
            matches!(closed, nvstack_nvcache::Closed::Ubj { .. }),
            ubj,
            "{path:?}"
        );
    }
    let s = served::open(
        Backend::Nvramdisk,
        &ServeSpec {
            image: Some(&im.disk),
            ..ServeSpec::default()
        },
    )
    .unwrap();
    assert!(s.cache.is_none() && s.what == "clean", "{}", s.what);
}

#[test]
fn serving_refuses_missing_parts_and_names_what_raw_would_destroy() {
    let im = images();
    let e = served::open(Backend::DirectFile, &ServeSpec::default())
        .err()
        .unwrap();
    assert!(e.to_string().contains("no backing file"), "{e}");
    let e = served::open(Backend::Cache, &ServeSpec::default())
        .err()
        .unwrap();
    assert!(e.to_string().contains("backend cache: no image"), "{e}");
    assert_eq!(
        served::holds_an_image(&im.ubj).unwrap(),
        Some("a UBJ cache image")
    );
    assert_eq!(served::holds_an_image(&im.junk).unwrap(), None);
    // A cache's backing file is live until the cache detaches.
    let backing = crate::kind::backing_of(&im.wc, None).unwrap();
    assert!(served::live_cache_backing(&backing).unwrap().is_some());
    let raw = ServeSpec {
        image: Some(&im.junk),
        raw_block_bytes: Some(1024),
        ..ServeSpec::default()
    };
    let e = served::open(Backend::Raw, &raw).err().unwrap();
    assert!(e.to_string().contains("512 or 4096"), "{e}");
}

/// Without the feature `powercut`, a power cut is refused by name; with it (the workspace
/// build, whose program enables it), the nvramdisk runs on the simulated region.
#[test]
fn a_power_cut_is_refused_without_the_feature_and_served_with_it() {
    let im = images();
    let spec = ServeSpec {
        image: Some(&im.disk),
        power_cut: Some(crate::powercut::PowerCutSpec::parse("M1:3:1000").unwrap()),
        ..ServeSpec::default()
    };
    let r = served::open(Backend::Nvramdisk, &spec);
    if cfg!(feature = "powercut") {
        let s = r.unwrap();
        assert!(s.what.contains("power cut M1:3:1000"), "{}", s.what);
    } else {
        let e = r.err().unwrap();
        assert!(e.to_string().contains("no power-cut machinery"), "{e}");
    }
}

#[test]
fn the_cache_verbs_answer_reports_whichever_the_kind() {
    use crate::cache::{act, check, status, stored_json, Verb};
    let im = images();
    for (img, block_bytes) in [(&im.ubj, 4096usize), (&im.wc, 512)] {
        // Written and closed: the cache holds the blocks, the backing file does not yet.
        let o = Image::open(img, Access::Write, None).unwrap();
        o.device().write(3, &vec![0x5a; 2 * block_bytes]).unwrap();
        o.close_written().unwrap();
        let st = status(img, None).unwrap();
        assert!(!st.finding && st.exit_code() == 0);
        assert!(st.text().starts_with("image "), "{}", st.text());
        assert!(st.json.is_object(), "status JSON: {}", st.json);
        let c = check(img, None).unwrap();
        assert_eq!(c.exit_code(), 0, "{}", c.text());
        assert!(c.text().contains("consistent"), "{}", c.text());
        let wb = act(img, None, Verb::Writeback).unwrap();
        assert!(wb.text().contains("wrote back 2 blocks"), "{}", wb.text());
        let cs = act(img, None, Verb::ClearStats).unwrap();
        assert!(cs.text().contains("counters cleared"), "{}", cs.text());
        let sb = stored_json(img).unwrap();
        assert!(sb["blocks"].as_u64().unwrap() > 0, "{sb}");
        let d = act(img, None, Verb::Detach).unwrap();
        assert!(d.text().contains("detached:"), "{}", d.text());
        // Detached: the cache no longer opens over its backing file.
        assert!(act(img, None, Verb::Writeback).is_err());
    }
    // An nvramdisk is no cache: refused, named, before anything opens.
    let e = status(&im.disk, None).unwrap_err();
    assert!(
        e.exit_code() == 2 && e.to_string().contains("not a cache image"),
        "{e}"
    );
}

#[test]
fn every_kind_is_its_own_arm_of_the_table() {
    for k in Kind::ALL {
        let ops = k.ops();
        assert_eq!(ops.kind(), k);
        assert_eq!(k.is_cache(), ops.as_cache().is_some());
        // No two kinds claim one magic.
        let others = Kind::ALL.into_iter().filter(|o| *o != k);
        let im = images();
        let flash = flash_file(im._dir.path());
        let own = match k {
            Kind::Nvramdisk => &im.disk,
            Kind::Ubj => &im.ubj,
            Kind::WriteCache => &im.wc,
            Kind::Flash => &flash,
        };
        let magic: [u8; 8] = std::fs::read(own).unwrap()[..8].try_into().unwrap();
        assert!(ops.claims(magic));
        for o in others {
            assert!(!o.ops().claims(magic), "{o:?} claims {k:?}'s magic");
        }
    }
}

/// A small flash state file: 64 blocks of 32 pages of 512 bytes, 6 kept spare (4 log blocks).
fn flash_file(dir: &Path) -> PathBuf {
    use nvstack_flash::ftl::{FtlConfig, FtlKind};
    use nvstack_flash::geometry::{Geometry, Timing};
    let geo = Geometry {
        blocks: 64,
        spare_blocks: 6,
        ..Geometry::SMALL_BLOCK
    };
    let h = nvstack_flash::file::Header {
        geo,
        ftl: FtlConfig {
            kind: FtlKind::LogBlock,
            log_blocks: 4,
        },
        timing: Timing::for_geometry(&geo),
    };
    let p = dir.join("flash.img");
    nvstack_flash::device::create(&p, h, false).unwrap();
    p
}

#[test]
fn a_flash_state_file_is_a_kind_of_its_own() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let f = flash_file(dir.path());
    assert_eq!(identify(&f).unwrap(), Some(Kind::Flash));
    let s = peek(&f).unwrap();
    assert_eq!((s.block_bytes, s.blocks), (512, 58 * 32));
    assert_eq!((s.promise, s.unit_blocks), (Promise::PageAtFlush, 1));
    assert_eq!(Backend::of_kind(Some(Kind::Flash)), Backend::Flash);
    // Written, closed, read back by a read-only open (which writes nothing).
    let data: Vec<u8> = (0..3 * 512).map(|i| (i % 251) as u8).collect();
    let o = Image::open(&f, Access::Write, None).unwrap();
    assert!(o.backing().is_none() && o.cache().is_none());
    o.device().write(7, &data).unwrap();
    assert_eq!(o.close_written().unwrap(), None);
    let before = std::fs::read(&f).unwrap();
    let r = Image::open(&f, Access::ReadOnly, None).unwrap();
    let mut back = vec![0u8; data.len()];
    r.device().read(7, &mut back).unwrap();
    assert_eq!(back, data);
    let e = r.device().write(0, &data[..512]).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    drop(r);
    assert_eq!(std::fs::read(&f).unwrap(), before, "a reader wrote nothing");
    // Not an nvramdisk, not a cache; served on its own backend.
    let e = expect_nvramdisk(&f, "unused").unwrap_err();
    assert!(
        e.to_string()
            .contains("a flash state file, not an nvramdisk"),
        "{e}"
    );
    let e = crate::cache::status(&f, None).unwrap_err();
    assert!(e.to_string().contains("not a cache image"), "{e}");
    let spec = ServeSpec {
        image: Some(&f),
        ..Default::default()
    };
    let sv = served::open(Backend::Flash, &spec).unwrap();
    assert!(
        sv.cache.is_none() && sv.what.contains("log-block FTL"),
        "{}",
        sv.what
    );
    let mut one = vec![0u8; 512];
    sv.dev.read(8, &mut one).unwrap();
    assert_eq!(one, data[512..1024]);
}
