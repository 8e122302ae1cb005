//! Bad machines, workloads and traces are refused with a message naming what is wrong
//! (`Error::BadInput`: exit code 2 in the program), never a panic.

use nvstack_core::error::Error;
use nvstack_mcsim::kernels::{KernelConfig, KernelWorkload};
use nvstack_mcsim::{run, CacheLevel, Config, Op, TraceReader, TraceWriter, VecWorkload, Workload};

fn refused(cfg: Config) -> String {
    match run(
        &cfg,
        &mut VecWorkload::new(vec![vec![]; cfg.cores as usize]),
    ) {
        Err(Error::BadInput(m)) => m,
        other => panic!("expected a refusal, got {:?}", other.map(|o| o.report)),
    }
}

#[test]
fn bad_machines_name_the_field() {
    let d = Config::default();
    let cases = [
        (
            Config {
                cores: 0,
                ..d.clone()
            },
            "cores = 0",
        ),
        (
            Config {
                retire_width: 5,
                ..d.clone()
            },
            "retire_width = 5",
        ),
        (
            Config {
                l1: CacheLevel {
                    bytes: 3000,
                    ..d.l1
                },
                ..d.clone()
            },
            "l1.bytes = 3000",
        ),
        (
            Config {
                sub_queues: 1,
                ..d.clone()
            },
            "sub_queues = 1",
        ),
        (
            Config {
                credits: 0,
                ..d.clone()
            },
            "credits = 0",
        ),
        (
            Config {
                write_ns: 0,
                ..d.clone()
            },
            "write_ns = 0",
        ),
        (
            Config {
                line_bytes: 48,
                ..d.clone()
            },
            "line_bytes = 48",
        ),
        (
            Config {
                cores: 3,
                ..d.clone()
            },
            "l3_per_core.bytes",
        ),
    ];
    for (cfg, want) in cases {
        let m = refused(cfg);
        assert!(m.contains(want), "{m:?} should name {want:?}");
    }
}

#[test]
fn a_workload_must_have_one_thread_per_core() {
    let cfg = Config {
        cores: 2,
        ..Config::default()
    };
    let Err(Error::BadInput(m)) = run(&cfg, &mut VecWorkload::new(vec![vec![Op::Fence]])) else {
        panic!("refused")
    };
    assert!(m.contains("1 threads but the machine 2 cores"), "{m}");
}

#[test]
fn bad_kernels_name_the_field() {
    for (kc, want) in [
        (
            KernelConfig {
                commit_every: 0,
                ..KernelConfig::default()
            },
            "commit_every = 0",
        ),
        (
            KernelConfig {
                region_bytes: 100_000,
                ..KernelConfig::default()
            },
            "region_bytes = 100000",
        ),
        (
            KernelConfig {
                threads: 0,
                ..KernelConfig::default()
            },
            "threads = 0",
        ),
    ] {
        let Err(Error::BadInput(m)) = KernelWorkload::new(&kc) else {
            panic!("refused")
        };
        assert!(m.contains(want), "{m}");
    }
}

fn read_all(text: &str) -> Result<Vec<(usize, Op)>, Error> {
    let mut r = TraceReader::new(text.as_bytes(), "t.trace")?;
    let mut out = Vec::new();
    for t in 0..r.threads() {
        while let Some(op) = r.next(t)? {
            out.push((t, op));
        }
    }
    Ok(out)
}

#[test]
fn bad_traces_name_the_line() {
    let h = "nvstack-mctrace 1 threads 2\n";
    let cases = [
        (
            "hello\n".to_string(),
            "t.trace line 1: not an nvstack memory trace",
        ),
        (
            "nvstack-mctrace 2 threads 1\n".into(),
            "version \"2\" is not supported",
        ),
        (
            "nvstack-mctrace 1 threads 0\n".into(),
            "thread count must be 1 to 1024",
        ),
        (
            format!("{h}0 G 3\n2 L 40\n"),
            "t.trace line 3: thread 2 is not below the header's 2",
        ),
        (format!("{h}0 X 1\n"), "line 2: unknown operation \"X\""),
        (
            format!("{h}# note\n\n0 L zz\n"),
            "line 4: address \"zz\" is not a hexadecimal number",
        ),
        (
            format!("{h}1 C 40 0\n"),
            "line 2: range 40+0 is empty or wraps",
        ),
        (
            format!("{h}1 B 7\n"),
            "line 2: extra words after the record",
        ),
        (
            format!("{h}1 G -1\n"),
            "instruction count \"-1\" is not a 32-bit number",
        ),
    ];
    for (text, want) in cases {
        match read_all(&text) {
            Err(Error::BadInput(m)) => assert!(m.contains(want), "{m:?} should contain {want:?}"),
            other => panic!("{text:?}: expected a refusal, got {other:?}"),
        }
    }
}

#[test]
fn traces_round_trip_and_stream_per_thread() {
    let ops = [
        (1, Op::Gap(7)),
        (
            0,
            Op::Bind {
                addr: 0x1000,
                len: 0x2000,
            },
        ),
        (1, Op::Store(0x40)),
        (0, Op::Load(0x1040)),
        (0, Op::Flush(0x1040)),
        (1, Op::Fence),
        (
            0,
            Op::Commit {
                addr: 0x1000,
                len: 0x40,
            },
        ),
    ];
    let mut w = TraceWriter::new(Vec::new(), 2).expect("header");
    for (t, op) in ops {
        w.op(t, op).expect("record");
    }
    let text = String::from_utf8(w.finish().expect("flush")).expect("text");
    let mut want: Vec<(usize, Op)> = ops.iter().filter(|(t, _)| *t == 0).copied().collect();
    want.extend(ops.iter().filter(|(t, _)| *t == 1));
    assert_eq!(read_all(&text).expect("reads"), want);
}
