//! DRAMSim2 (github:umd-memsys/DRAMSim2) as a peer: the simulator the paper extended with its
//! committing controller. Its trace-driven program `DRAMSim`, run as `DRAMSim -t TRACE -s
//! SYSTEM -d DEVICE -c CYCLES -S MEGS`, reads a trace in its `mase` format (chosen by the
//! file name's prefix; the same `0xADDR READ|WRITE CYCLE` lines as DRAMsim3's), one request
//! a cycle at most, and prints its statistics on standard output at cycle 0, at the end of
//! every epoch and at the end of the run: a block per channel, each with the requests the
//! channel finished so far ("Total Return Transactions", reads returned and writes sent to
//! the devices, a count it never resets).

use nvstack_core::error::{Error, Result};

pub(super) const DEVICE_INI: &str = include_str!("dramsim2-pcm.ini");
pub(super) const SYSTEM_INI: &str = include_str!("dramsim2-system.ini");
/// Its clock: the trace's cycles are in it.
pub(super) const TCK_NS: f64 = 1.5;
/// DRAM cycles of one epoch of its statistics (the system ini's EPOCH_LENGTH).
pub(super) const EPOCH_CYCLES: u64 = 100_000;
/// Its memory, over both channels (each 8 GiB of 4 ranks).
pub(super) const MEGS: u32 = 16_384;
/// The trace's file name: `mase_` names its format.
pub(super) const TRACE_NAME: &str = "mase_requests.trc";
/// Its program reads `-c` with atoi into an unsigned int: a longer run cannot be asked for.
pub(super) const CYCLES_MAX: u64 = i32::MAX as u64;
/// Channels its statistics may name (Table II has 2).
const CHANNELS_MAX: usize = 64;

/// What DRAMSim2 printed: the requests it finished (every channel's last count, together)
/// and those finished in each whole epoch, all channels together, in order.
pub(super) fn outcome(stdout: &str) -> Result<(u64, Vec<u64>)> {
    let counts = channel_counts(stdout)?;
    let blocks = counts[0].len();
    if counts.iter().any(|c| c.len() != blocks) {
        return Err(bad(
            "the channels printed different numbers of epochs".into()
        ));
    }
    let served = counts.iter().map(|c| c[blocks - 1]).sum();
    // Blocks: cycle 0, the end of each epoch, the end of the run (part of an epoch, left out).
    let epochs = (1..blocks.saturating_sub(1))
        .map(|b| counts.iter().map(|c| c[b] - c[b - 1]).sum())
        .collect();
    Ok((served, epochs))
}

fn bad(what: String) -> Error {
    Error::env(format!("DRAMSim2's statistics: {what}"))
}

/// Per channel, its count of finished requests in each block of statistics, in order.
fn channel_counts(stdout: &str) -> Result<Vec<Vec<u64>>> {
    let mut counts: Vec<Vec<u64>> = Vec::new();
    let mut channel = None;
    for line in stdout.lines() {
        if let Some(rest) = line.split("Printing Statistics [id:").nth(1) {
            let id = rest.split(']').next().and_then(|s| s.trim().parse().ok());
            let id: usize = id.ok_or_else(|| bad(format!("no channel in '{line}'")))?;
            if id > counts.len() || id >= CHANNELS_MAX {
                return Err(bad(format!("channel {id} out of order")));
            }
            if id == counts.len() {
                counts.push(Vec::new());
            }
            channel = Some(id);
        } else if let Some(rest) = line
            .trim_start()
            .strip_prefix("Total Return Transactions :")
        {
            let ch = channel
                .take()
                .ok_or_else(|| bad(format!("'{line}' before its channel's header")))?;
            let n: u64 = rest
                .split_whitespace()
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad(format!("no count in '{line}'")))?;
            if counts[ch].last().is_some_and(|&before| n < before) {
                return Err(bad(format!("channel {ch}'s count went down to {n}")));
            }
            counts[ch].push(n);
        }
    }
    if counts.is_empty() {
        return Err(bad("none printed (was the trace or an ini refused?)".into()));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Its statistics as it prints them: a block per channel with its count so far.
    fn printed(blocks: &[&[u64]]) -> String {
        let mut out = String::from("junk before\n");
        for block in blocks {
            for (ch, n) in block.iter().enumerate() {
                out += " =======================================================\n";
                out += &format!(" ============== Printing Statistics [id:{ch}]==============\n");
                out += &format!("   Total Return Transactions : {n} ({} bytes) aggregate average bandwidth 0.000GB/s\n", n * 64);
                out += "      -Rank   0 : \n";
            }
        }
        out
    }

    #[test]
    fn counts_per_channel_and_epoch() {
        // Cycle 0, two epochs, the end of the run.
        let out = printed(&[&[0, 0], &[3, 2], &[3, 4], &[5, 4]]);
        assert_eq!(outcome(&out).unwrap(), (9, vec![5, 2]));
        // A run shorter than an epoch: cycle 0 and its end.
        let out = printed(&[&[0, 0], &[1, 1]]);
        assert_eq!(outcome(&out).unwrap(), (2, vec![]));
    }

    #[test]
    fn bad_statistics_are_refused() {
        let e = outcome("== Error - Could not open trace file\n").unwrap_err();
        assert!(e.to_string().contains("none printed"), "{e}");
        let e = outcome(&printed(&[&[0, 0], &[3, 1], &[2, 1]])).unwrap_err();
        assert!(e.to_string().contains("count went down"), "{e}");
        let e = outcome("   Total Return Transactions : 3 (192 bytes)\n").unwrap_err();
        assert!(e.to_string().contains("before its channel's header"), "{e}");
        let e = outcome(" ==== Printing Statistics [id:1]====\n").unwrap_err();
        assert!(e.to_string().contains("out of order"), "{e}");
        let mut out = printed(&[&[0, 0]]);
        out += " ==== Printing Statistics [id:0]====\n   Total Return Transactions : 1\n";
        let e = outcome(&out).unwrap_err();
        assert!(e.to_string().contains("different numbers"), "{e}");
    }

    #[test]
    fn inis_match_the_suite() {
        for (ini, line) in [
            (DEVICE_INI, format!("tCK={TCK_NS} ;*")),
            (SYSTEM_INI, format!("EPOCH_LENGTH={EPOCH_CYCLES}")),
            (SYSTEM_INI, "NUM_CHANS=2".into()),
            (SYSTEM_INI, "VIS_FILE_OUTPUT=false".into()),
        ] {
            assert!(
                ini.lines().any(|l| l.trim() == line),
                "a DRAMSim2 ini has no '{line}'"
            );
        }
    }
}
