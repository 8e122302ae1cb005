//! scripts/bench-mcsim.sh, the command that measures the committing simulator against its
//! peers (issue 24): bad arguments are refused with a clear message and exit code 2, and the
//! peers and the binary named by the environment reach `nvstack bench` unchanged (stand-ins
//! here: the real run takes ten minutes and builds DRAMsim3 and DRAMSim2 from source).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench-mcsim.sh")
}

fn run(args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(script()).args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("bash runs")
}

#[test]
fn bad_arguments_exit_2_naming_them() {
    for (args, says) in [
        (&["--bogus"][..], "unknown argument '--bogus'"),
        (&["--repeat", "0"][..], "--repeat needs 1 to 9"),
        (&["--repeat"][..], "--repeat needs 1 to 9"),
    ] {
        let out = run(args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn both_peers_and_the_options_reach_the_bench() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("nvstack");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"3=$NVSTACK_DRAMSIM3 2=$NVSTACK_DRAMSIM2 args=$*\"\n",
    )
    .unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&fake, mode).unwrap();
    let (p3, p2) = (dir.path().join("dramsim3main"), dir.path().join("DRAMSim"));
    let envs = [
        ("NVSTACK_BIN", fake.as_path()),
        ("NVSTACK_DRAMSIM3", p3.as_path()),
        ("NVSTACK_DRAMSIM2", p2.as_path()),
    ];
    let out = run(&["--quick", "--repeat", "2", "--json"], &envs);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = format!(
        "3={} 2={} args=bench --suite mcsim --no-huge --quick --repeat 2 --json",
        p3.display(),
        p2.display()
    );
    assert_eq!(stdout.trim(), want);
}
