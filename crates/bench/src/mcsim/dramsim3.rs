//! DRAMsim3 (github:umd-memsys/DRAMsim3) as a peer: its trace-driven program `dramsim3main`,
//! run as `dramsim3main INI -c CYCLES -t TRACE -o DIR/`, writes its final statistics to
//! `DIR/dramsim3.json` (one object per channel) and its per-epoch ones to
//! `DIR/dramsim3epoch.json` (an array of one object per channel and epoch).

use nvstack_core::error::{Error, Result};
use std::path::Path;

/// The peer's machine (its tCK is the DRAM clock the trace's cycles are in).
pub(super) const INI: &str = include_str!("dramsim3-pcm.ini");
pub(super) const TCK_NS: f64 = 0.83;
/// DRAM cycles of one epoch of its statistics (the ini's epoch_period, 1 ms).
pub(super) const EPOCH_CYCLES: u64 = 1_204_819;

/// Requests DRAMsim3 finished, from its statistics (one object per channel).
pub(super) fn served(path: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::env(format!("DRAMsim3's statistics {}: {e}", path.display())))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::env(format!("DRAMsim3's statistics {}: {e}", path.display())))?;
    let channels = json.as_object().into_iter().flat_map(|m| m.values());
    let mut served = 0;
    for ch in channels {
        for key in ["num_reads_done", "num_writes_done"] {
            served += ch
                .get(key)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| {
                    Error::env(format!(
                        "DRAMsim3's statistics {}: no {key}",
                        path.display()
                    ))
                })?;
        }
    }
    Ok(served)
}

/// Requests DRAMsim3 finished in each epoch of its statistics (an array of one object per
/// channel and epoch), both channels together, in epoch order; none if the run was shorter
/// than an epoch (it then writes no file).
pub(super) fn epoch_served(path: &Path) -> Result<Vec<u64>> {
    let bad = |e: String| {
        Error::env(format!(
            "DRAMsim3's epoch statistics {}: {e}",
            path.display()
        ))
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(bad(e.to_string())),
    };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let objects = json.as_array().ok_or_else(|| bad("not an array".into()))?;
    let mut epochs: Vec<u64> = Vec::new();
    for o in objects {
        let count = |key: &str| {
            o.get(key)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| bad(format!("no {key}")))
        };
        let epoch = usize::try_from(count("epoch_num")?).map_err(|e| bad(e.to_string()))?;
        // Epochs count from 1, each channel's object in turn.
        if epoch == 0 || epoch > epochs.len() + 1 {
            return Err(bad(format!("epoch {epoch} out of order")));
        }
        if epoch > epochs.len() {
            epochs.push(0);
        }
        epochs[epoch - 1] += count("num_reads_done")? + count("num_writes_done")?;
    }
    Ok(epochs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics() {
        let dir = tempfile::tempdir().unwrap();
        let stats = dir.path().join("s.json");
        std::fs::write(
            &stats,
            r#"{"0": {"num_reads_done": 3, "num_writes_done": 4}, "1": {"num_reads_done": 5, "num_writes_done": 0}}"#,
        )
        .unwrap();
        assert_eq!(served(&stats).unwrap(), 12);
        std::fs::write(&stats, r#"{"0": {"num_reads_done": 3}}"#).unwrap();
        let e = served(&stats).unwrap_err().to_string();
        assert!(e.contains("num_writes_done"), "{e}");
    }

    #[test]
    fn ini_matches_the_suite() {
        for line in [
            format!("tCK = {TCK_NS}"),
            format!("epoch_period = {EPOCH_CYCLES}"),
            "unified_queue = true".to_string(),
        ] {
            assert!(
                INI.lines().any(|l| l.trim() == line),
                "dramsim3-pcm.ini has no '{line}'"
            );
        }
    }

    #[test]
    fn epoch_statistics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.json");
        assert_eq!(
            epoch_served(&path).unwrap(),
            Vec::<u64>::new(),
            "no file: no epoch"
        );
        std::fs::write(
            &path,
            r#"[{"channel": 0, "epoch_num": 1, "num_reads_done": 3, "num_writes_done": 1},
{"channel": 1, "epoch_num": 1, "num_reads_done": 2, "num_writes_done": 0},
{"channel": 0, "epoch_num": 2, "num_reads_done": 0, "num_writes_done": 0},
{"channel": 1, "epoch_num": 2, "num_reads_done": 0, "num_writes_done": 0}]"#,
        )
        .unwrap();
        assert_eq!(epoch_served(&path).unwrap(), [6, 0]);
        std::fs::write(
            &path,
            r#"[{"channel": 0, "epoch_num": 2, "num_reads_done": 0, "num_writes_done": 0}]"#,
        )
        .unwrap();
        let e = epoch_served(&path).unwrap_err().to_string();
        assert!(e.contains("out of order"), "{e}");
    }
}
