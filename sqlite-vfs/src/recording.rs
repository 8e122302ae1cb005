//! `record=PATH`: the region's persistent-memory traffic as a committing-simulator trace.
//!
//! The image is mapped as usual and wrapped in pmem's `RecordingRegion`, which logs per thread
//! the lines loaded and stored, flushes, fences and the commit domains' commits (the region's
//! `committed` hook: each nvramdisk lane commits through its domain). Recording starts once the
//! store is open (format and recovery are setup) and the trace is written when the region
//! closes, in the format of docs/mcsim.md, addresses being offsets in the region. Nothing is
//! bound to a sub-queue here: whoever combines traces decides that (`nvstack sim
//! commit-record --workload sqlite` binds each database's region to its own).

use crate::VfsError;
use nvstack_core::blockdev::BlockDevice;
use nvstack_mcsim::{Op, TraceWriter};
use nvstack_nvramdisk::{NvramDisk, OpenOptions};
use nvstack_pmem::record::{Recorded, RecordingRegion};
use nvstack_pmem::MmapRegion;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Instructions charged per region call for the code around it (as `nvstack sim
/// commit-record` charges by default).
const CALL_INSTRUCTIONS: u32 = 20;

pub struct Recorder {
    region: Arc<RecordingRegion<MmapRegion>>,
    out: PathBuf,
}

/// Map the image at `path` (exclusively locked, as an ordinary open) under a recording region
/// whose trace goes to `out`, which must not exist yet.
pub fn open(path: &Path, out: &Path) -> Result<(Arc<dyn BlockDevice>, Recorder), VfsError> {
    if out.exists() {
        return Err(VfsError::cantopen(format!(
            "URI parameter record={}: the file exists (a trace is never overwritten)",
            out.display()
        )));
    }
    let cantopen =
        |e: nvstack_core::Error| VfsError::cantopen(format!("region {}: {e}", path.display()));
    let mapped = nvstack_stack::image::map_nvramdisk(path).map_err(cantopen)?;
    let region = Arc::new(RecordingRegion::new(mapped, CALL_INSTRUCTIONS));
    let disk = NvramDisk::open(region.clone(), OpenOptions::default()).map_err(cantopen)?;
    let rec = Recorder {
        region,
        out: out.to_path_buf(),
    };
    Ok((Arc::new(disk), rec))
}

impl Recorder {
    /// Forget what was recorded so far (setup).
    pub fn start(&self) {
        self.region.take();
    }

    fn write(&self) -> nvstack_core::Result<()> {
        let logs = self.region.take();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&self.out)
            .map_err(|e| nvstack_core::Error::env(format!("{}: {e}", self.out.display())))?;
        let threads = logs.len().max(1);
        let mut w = TraceWriter::new(std::io::BufWriter::new(file), threads)?;
        for (t, log) in logs.iter().enumerate() {
            for &r in log {
                w.op(t, op(r))?;
            }
        }
        w.finish()?
            .flush()
            .map_err(|e| nvstack_core::Error::env(format!("{}: {e}", self.out.display())))
    }
}

impl Drop for Recorder {
    /// The region is closing: write the trace. A failure cannot reach SQLite here, so it is
    /// logged; the trace is then missing, which its reader reports.
    fn drop(&mut self) {
        if let Err(e) = self.write() {
            let msg = format!(
                "nvstack VFS: record={}: cannot write the trace: {e}",
                self.out.display()
            );
            crate::set_last_error(&msg);
            eprintln!("{msg}");
        }
    }
}

/// A recorded step as the simulator's operation (offsets in the region as addresses).
pub fn op(r: Recorded) -> Op {
    match r {
        Recorded::Gap(n) => Op::Gap(n),
        Recorded::Load(a) => Op::Load(a),
        Recorded::Store(a) => Op::Store(a),
        Recorded::Flush(a) => Op::Flush(a),
        Recorded::Fence => Op::Fence,
        Recorded::Commit { off, len } => Op::Commit { addr: off, len },
        Recorded::Bind { off, len } => Op::Bind { addr: off, len },
    }
}
