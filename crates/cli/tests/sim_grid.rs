//! `nvstack sim sweep --grid FILE` with the real binary: a grid file gives the sweep the flags
//! give (the flags are the default grid), and a bad grid file is refused with exit 2 naming the
//! file, the key and what is wrong, before any output is made.

mod common;

use common::run;
use std::path::Path;

/// A DiskSim trace of writes and reads over 6 blocks, 1 s apart.
fn tiny_trace(dir: &Path) -> String {
    let mut text = String::new();
    for i in 0..40u64 {
        let sector = (i * 7 % 6) * 8;
        let op = u64::from(i % 3 == 0);
        text.push_str(&format!("{} 0 {sector} 8 {op}\n", i * 1_000_000_000));
    }
    let path = dir.join("tiny.trace");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_grid_file_sweeps_what_the_same_flags_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    tiny_trace(d);
    // The trace path is relative to the grid file's folder.
    std::fs::write(
        d.join("grid.toml"),
        "nvram = [\"0\", \"8KiB\"]\nseeds = 2\n[[trace]]\npath = \"tiny.trace\"\nformat = \"disksim\"\n",
    )
    .unwrap();
    let out_grid = d.join("by-grid");
    let out_flags = d.join("by-flags");
    let g = run(&[
        "sim",
        "sweep",
        "--grid",
        d.join("grid.toml").to_str().unwrap(),
        "--output",
        out_grid.to_str().unwrap(),
    ]);
    assert_eq!(g.code, 0, "{}", g.stderr);
    let trace = format!("{}:disksim", d.join("tiny.trace").display());
    let f = run(&[
        "sim",
        "sweep",
        "--trace",
        &trace,
        "--nvram",
        "0,8KiB",
        "--seeds",
        "2",
        "--output",
        out_flags.to_str().unwrap(),
    ]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    for name in ["sweep.csv", "tables.txt"] {
        let a = std::fs::read_to_string(out_grid.join(name)).unwrap();
        let b = std::fs::read_to_string(out_flags.join(name)).unwrap();
        assert_eq!(a, b, "{name}");
    }
    let out_json = d.join("by-grid-json");
    let j = common::json(&[
        "sim",
        "sweep",
        "--grid",
        d.join("grid.toml").to_str().unwrap(),
        "--output",
        out_json.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(j["points"].as_array().unwrap().len(), 28);
    assert_eq!(j["seeds"], 2);
    let csv = std::fs::read_to_string(out_grid.join("sweep.csv")).unwrap();
    assert_eq!(csv.lines().filter(|l| l.starts_with("cache,")).count(), 28);
}

#[test]
fn a_bad_grid_file_is_refused_naming_file_key_and_fault() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    tiny_trace(d);
    let tr = "[[trace]]\npath = \"tiny.trace\"\nformat = \"disksim\"\n";
    let cases = [
        ("syntax.toml", format!("nvram = [\n{tr}"), "not a TOML file"),
        (
            "typo.toml",
            format!("seedz = 2\n{tr}"),
            "key 'seedz': unknown key",
        ),
        (
            "seeds.toml",
            format!("seeds = 0\n{tr}"),
            "key 'seeds': 0: give 1 to 100",
        ),
        (
            "size.toml",
            format!("nvram = [1000]\n{tr}"),
            "key 'nvram': 1000: not a multiple of the block size",
        ),
        (
            "format.toml",
            tr.replace("disksim", "disk"),
            "key 'trace[0].format': unknown format 'disk'",
        ),
        (
            "path.toml",
            tr.replace("tiny.trace", "none.trace"),
            "key 'trace[0].path': ",
        ),
        ("empty.toml", String::new(), "key 'trace': missing"),
    ];
    for (name, text, want) in cases {
        let file = d.join(name);
        std::fs::write(&file, text).unwrap();
        let out = d.join(format!("out-{name}"));
        let r = run(&[
            "sim",
            "sweep",
            "--grid",
            file.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ]);
        assert_eq!(r.code, 2, "{name}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("{}: ", file.display())),
            "{name}: {}",
            r.stderr
        );
        assert!(r.stderr.contains(want), "{name}: {}", r.stderr);
        assert!(!out.exists(), "{name}: output made");
    }
    let missing = run(&[
        "sim",
        "sweep",
        "--grid",
        "/nonexistent/g.toml",
        "--output",
        "x",
    ]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(missing
        .stderr
        .contains("/nonexistent/g.toml: cannot read the grid"));
    // The grid replaces the flags of the default grid: both at once is a usage error.
    let both = run(&[
        "sim", "sweep", "--grid", "g.toml", "--seeds", "3", "--output", "x",
    ]);
    assert_eq!(both.code, 2, "{}", both.stderr);
}
