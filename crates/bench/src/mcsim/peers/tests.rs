use super::*;

/// A read of line 1 at cycle 0, then a write of `line` 1 us later (2,700 cycles).
fn read_then_write(line: u64) -> [Arrival; 2] {
    let read = Arrival {
        t: 0,
        line: 1,
        write: false,
    };
    let write = Arrival {
        t: 2700,
        line,
        write: true,
    };
    [read, write]
}

#[test]
fn trace_in_each_peers_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    let arrivals = read_then_write(2);
    // 2700 cycles at 2.7 GHz = 1 us = 1204 cycles of 0.83 ns, 666 of 1.5 ns.
    for (tck_ns, last) in [(0.83, 1204), (1.5, 666)] {
        let got = write_trace(&path, &arrivals, &Config::default(), tck_ns).unwrap();
        assert_eq!(got, last);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("0x40 READ 0\n0x80 WRITE {last}\n"));
    }
}

fn executable(path: &Path, script: &str) {
    std::fs::write(path, script).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(path, mode).unwrap();
}

/// A stand-in for dramsim3main: it serves both requests when run for more than
/// `all_from` cycles, else one, its epochs then `epochs`.
fn fake_dramsim3(dir: &Path, all_from: u64, epochs: &str) -> PathBuf {
    let path = dir.join("fake-dramsim3main");
    let script = format!(
        "#!/bin/sh\n\
         # ini -c CYCLES -t TRACE -o DIR/\n\
         if [ \"$3\" -gt {all_from} ]; then w=1; e='[]'; else w=0; e='{epochs}'; fi\n\
         printf '{{\"0\": {{\"num_reads_done\": 1, \"num_writes_done\": %s}}}}' $w > \"$7dramsim3.json\"\n\
         printf '%s' \"$e\" > \"$7dramsim3epoch.json\"\n"
    );
    executable(&path, &script);
    path
}

#[test]
fn dramsim3_runs_until_all_served_unless_stalled() {
    let dir = tempfile::tempdir().unwrap();
    let arrivals = read_then_write(1);
    let machine = Config::default();
    let serving = r#"[{"channel": 0, "epoch_num": 1, "num_reads_done": 1, "num_writes_done": 0}]"#;
    let stalled = r#"[{"channel": 0, "epoch_num": 1, "num_reads_done": 1, "num_writes_done": 0},
{"channel": 0, "epoch_num": 2, "num_reads_done": 0, "num_writes_done": 0}]"#;
    let kind = Kind::Dramsim3;
    // Still serving when its first drain ends: a second run, 8 times the drain, serves all.
    let program = fake_dramsim3(dir.path(), 2 * DRAIN_CYCLES, serving);
    let run = run_peer(kind, &program, &arrivals, &machine).unwrap();
    assert_eq!((run.runs, run.served, run.requests), (2, 2, 2));
    assert_eq!(run.drain_cycles, DRAIN_CYCLES * DRAIN_GROWTH);
    assert_eq!(run.cycles, 1204 + run.drain_cycles);
    assert!(
        run.all_served() && run.note().contains("all 2 requests served"),
        "{}",
        run.note()
    );
    // Never done but still serving: RUNS runs, then it is reported unfair.
    let program = fake_dramsim3(dir.path(), u64::MAX / 2, serving);
    let run = run_peer(kind, &program, &arrivals, &machine).unwrap();
    assert_eq!((run.runs, run.served), (RUNS, 1));
    assert!(
        !run.stalled() && run.note().contains("still serving"),
        "{}",
        run.note()
    );
    // Stalled: a whole epoch served nothing while a request remained; run once.
    let program = fake_dramsim3(dir.path(), u64::MAX / 2, stalled);
    let run = run_peer(kind, &program, &arrivals, &machine).unwrap();
    assert_eq!((run.runs, run.served), (1, 1));
    assert!(run.stalled(), "{:?}", run.epochs);
    assert_eq!(run.served_until_cycle(), dramsim3::EPOCH_CYCLES);
    assert!(
        run.note()
            .contains("served only 1 of 2 requests, none after DRAM cycle 1204819"),
        "{}",
        run.note()
    );
}

/// A stand-in for DRAMSim2's DRAMSim: it checks its trace and inis are where its arguments
/// say, then prints its statistics: the read served in the first epoch, the write by the end
/// of the run only when run for more than `all_from` cycles; with `stall`, a second whole
/// epoch that served nothing.
fn fake_dramsim2(dir: &Path, all_from: u64, stall: bool) -> PathBuf {
    let path = dir.join("fake-DRAMSim");
    let block = |ch: u32, n: &str| {
        format!(
            "echo ' ============== Printing Statistics [id:{ch}]=============='\n\
             echo '   Total Return Transactions : '{n}' (0 bytes) aggregate average bandwidth'\n"
        )
    };
    let epochs = if stall { 2 } else { 1 };
    let mut blocks = block(0, "0") + &block(1, "0");
    for _ in 0..epochs {
        blocks += &(block(0, "1") + &block(1, "0"));
    }
    blocks += &(block(0, "1") + &block(1, "$w"));
    let script = format!(
        "#!/bin/sh\n\
         # -t TRACE -s SYSTEM -d DEVICE -c CYCLES -S MEGS\n\
         case \"$2\" in */mase_requests.trc) ;; *) echo \"bad trace $2\" >&2; exit 1;; esac\n\
         grep -q '^NUM_CHANS=2' \"$4\" && grep -q '^tWR=100' \"$6\" || exit 1\n\
         [ \"$9\" = -S ] || exit 1\n\
         if [ \"$8\" -gt {all_from} ]; then w=1; else w=0; fi\n\
         {blocks}"
    );
    executable(&path, &script);
    path
}

#[test]
fn dramsim2_runs_until_all_served_unless_stalled() {
    let dir = tempfile::tempdir().unwrap();
    let arrivals = read_then_write(1);
    let machine = Config::default();
    let kind = Kind::Dramsim2;
    // The write served only after a longer drain: a second run.
    let program = fake_dramsim2(dir.path(), 2 * DRAIN_CYCLES, false);
    let run = run_peer(kind, &program, &arrivals, &machine).unwrap();
    assert_eq!((run.runs, run.served, run.requests), (2, 2, 2));
    assert_eq!(run.cycles, 666 + DRAIN_CYCLES * DRAIN_GROWTH);
    assert_eq!(run.epochs, [1]);
    assert!(run.note().starts_with("DRAMSim2 "), "{}", run.note());
    assert!(
        run.note().contains("all 2 requests served"),
        "{}",
        run.note()
    );
    // Its last whole epoch served nothing while a request remained: stalled, run once.
    let program = fake_dramsim2(dir.path(), u64::MAX / 2, true);
    let run = run_peer(kind, &program, &arrivals, &machine).unwrap();
    assert_eq!((run.runs, run.served), (1, 1));
    assert!(run.stalled(), "{:?}", run.epochs);
    assert_eq!(run.served_until_cycle(), dramsim2::EPOCH_CYCLES);
    // A longer run than its program can be asked for is refused before it starts.
    let long = [Arrival {
        t: 6 * dramsim2::CYCLES_MAX,
        ..arrivals[1]
    }];
    let e = run_peer(kind, &program, &long, &machine)
        .unwrap_err()
        .to_string();
    assert!(e.contains("DRAMSim2 can run at most"), "{e}");
}
