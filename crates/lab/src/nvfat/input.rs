//! A recording read whole for the replays: the device trace's lines, every write's bytes from
//! the data log, the volume as it stood when the recording started, and the run's times.

use crate::field::{Field, Invalid, LabResult};
use nvstack_core::error::{Error, Result};
use nvstack_sim::trace::nvdata::DataReader;
use nvstack_sim::trace::nvstack::{DeviceEvents, DeviceOp, TraceHeader};
use std::path::{Path, PathBuf};

/// The replay's sector (seed 004's; the write cache's 512-byte slots and the flash's pages).
pub const SECTOR_BYTES: u64 = 512;

/// One trace line, with the host time before it.
#[derive(Clone, Copy, Debug)]
pub struct Ev {
    /// Host time between the previous request's end and this one's start, ns (scaled to the
    /// run's CPU time when the run's record is given).
    pub gap_ns: u64,
    pub op: DeviceOp,
    pub lba: u64,
    pub blocks: u64,
    /// Where a write's bytes start in [`Input::data`].
    pub data_off: u64,
}

/// Where the host time came from.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HostTime {
    /// `cpu` (the run record's CPU seconds minus the device's waits) or `wall` (the trace's
    /// span minus the waits: no run record).
    pub source: String,
    pub host_ns: u64,
    pub trace_span_ns: u64,
    pub device_wait_ns: u64,
    pub run_cpu_ns: Option<u64>,
    pub run_elapsed_ns: Option<u64>,
    /// Requests that started before the previous one ended (a gap of 0 was used).
    pub overlapping_requests: u64,
}

pub struct Input {
    pub trace: PathBuf,
    pub header: TraceHeader,
    pub events: Vec<Ev>,
    pub data: Vec<u8>,
    pub image: Vec<u8>,
    pub host: HostTime,
    pub counts: OpCounts,
}

#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct OpCounts {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub discards: u64,
    pub read_blocks: u64,
    pub write_blocks: u64,
}

/// The paths of a recording (`scripts/nvfat-record.sh` writes them side by side).
#[derive(Clone, Debug)]
pub struct Paths {
    pub trace: PathBuf,
    pub data: PathBuf,
    pub image: PathBuf,
    pub run: Option<PathBuf>,
}

/// The run record's times, seconds.
#[derive(serde::Deserialize)]
struct RunRecord {
    elapsed_s: f64,
    cpu_s: std::collections::BTreeMap<String, f64>,
}

fn read_run(p: &Path) -> std::result::Result<RunRecord, Invalid> {
    let bad = |what: String| Invalid::new(Field::Run, format!(" {}: {what}", p.display()));
    let text = std::fs::read_to_string(p).map_err(|e| bad(format!("cannot read: {e}")))?;
    let r: RunRecord = serde_json::from_str(&text)
        .map_err(|e| bad(format!("not a run record (elapsed_s, cpu_s): {e}")))?;
    if !(r.elapsed_s.is_finite() && r.elapsed_s > 0.0)
        || r.cpu_s.values().any(|v| !v.is_finite() || *v < 0.0)
    {
        return Err(bad(
            "elapsed_s must be positive and every cpu_s finite and not negative".into(),
        ));
    }
    Ok(r)
}

fn read_image(p: &Path, h: &TraceHeader) -> std::result::Result<Vec<u8>, Invalid> {
    let bad = |what: String| Invalid::new(Field::Image, format!(" {}: {what}", p.display()));
    let img = std::fs::read(p).map_err(|e| bad(format!("cannot read: {e}")))?;
    let want = h.blocks * h.block_bytes;
    if img.len() as u64 != want {
        return Err(bad(format!(
            "{} bytes, the trace's device has {want} ({} blocks of {}): not the volume this \
             trace was recorded on",
            img.len(),
            h.blocks,
            h.block_bytes
        )));
    }
    Ok(img)
}

fn check_header(p: &Paths, header: &TraceHeader) -> Result<()> {
    if header.block_bytes != SECTOR_BYTES {
        return Err(Error::bad(format!(
            "{}: {}-byte blocks; sim nvfat replays 512-byte sectors (record with `nvstack serve \
             --backend raw --block-size 512`, as scripts/nvfat-record.sh does)",
            p.trace.display(),
            header.block_bytes
        )));
    }
    if !(header.blocks * SECTOR_BYTES).is_multiple_of(4096) {
        return Err(Error::bad(format!(
            "{}: {} sectors: the write cache's backing device needs whole 4 KiB blocks",
            p.trace.display(),
            header.blocks
        )));
    }
    Ok(())
}

/// The trace's events read whole, with every write's bytes from the data log.
#[derive(Default)]
struct Events {
    evs: Vec<Ev>,
    data: Vec<u8>,
    counts: OpCounts,
    /// The trace's span, from the first request's start to the last one's end, ns.
    span_ns: u64,
    waits_ns: u64,
    overlapping: u64,
}

fn read_events(events: DeviceEvents, log: &mut DataReader) -> Result<Events> {
    let mut e = Events::default();
    let (mut last_end, mut first_start) = (None::<u64>, 0u64);
    for ev in events {
        let ev = ev?;
        let start = ev.time_ns - ev.wait_ns;
        let gap_ns = match last_end {
            None => {
                first_start = start;
                0
            }
            Some(end) if start < end => {
                e.overlapping += 1;
                0
            }
            Some(end) => start - end,
        };
        last_end = Some(ev.time_ns);
        e.waits_ns += ev.wait_ns;
        let data_off = e.data.len() as u64;
        let c = &mut e.counts;
        match ev.op {
            DeviceOp::Write => {
                let n = (ev.blocks * SECTOR_BYTES) as usize;
                e.data.resize(e.data.len() + n, 0);
                log.next_write(&mut e.data[data_off as usize..])?;
                c.writes += 1;
                c.write_blocks += ev.blocks;
            }
            DeviceOp::Read => {
                c.reads += 1;
                c.read_blocks += ev.blocks;
            }
            DeviceOp::Flush => c.flushes += 1,
            DeviceOp::Discard => c.discards += 1,
        }
        e.evs.push(Ev {
            gap_ns,
            op: ev.op,
            lba: ev.lba,
            blocks: ev.blocks,
            data_off,
        });
    }
    e.span_ns = last_end.unwrap_or(0) - first_start;
    Ok(e)
}

/// The recording read whole; a bad image or run record is refused naming its field.
pub fn load(p: &Paths) -> LabResult<Input> {
    let (header, events) = DeviceEvents::open(&p.trace)?;
    check_header(p, &header)?;
    let image = read_image(&p.image, &header)?;
    let mut log = DataReader::open(&p.data, header.block_bytes)?;
    let mut e = read_events(events, &mut log)?;
    log.finish()?;
    let host = host_time(p, &mut e.evs, e.span_ns, e.waits_ns, e.overlapping)?;
    Ok(Input {
        trace: p.trace.clone(),
        header,
        events: e.evs,
        data: e.data,
        image,
        host,
        counts: e.counts,
    })
}

/// The host time between requests: the recorded gaps, scaled so that they add up to the run's
/// CPU time minus the device's waits when the run record is given.
fn host_time(p: &Paths, evs: &mut [Ev], span: u64, waits: u64, overl: u64) -> LabResult<HostTime> {
    let gaps: u64 = evs.iter().map(|e| e.gap_ns).sum();
    let mut h = HostTime {
        source: "wall".into(),
        host_ns: gaps,
        trace_span_ns: span,
        device_wait_ns: waits,
        run_cpu_ns: None,
        run_elapsed_ns: None,
        overlapping_requests: overl,
    };
    let Some(rp) = &p.run else { return Ok(h) };
    let r = read_run(rp)?;
    let cpu_ns = (r.cpu_s.values().sum::<f64>() * 1e9) as u64;
    h.run_cpu_ns = Some(cpu_ns);
    h.run_elapsed_ns = Some((r.elapsed_s * 1e9) as u64);
    let host = cpu_ns.saturating_sub(waits);
    if gaps > 0 && host > 0 {
        let k = host as f64 / gaps as f64;
        for e in evs.iter_mut() {
            e.gap_ns = (e.gap_ns as f64 * k) as u64;
        }
        h.host_ns = evs.iter().map(|e| e.gap_ns).sum();
        h.source = "cpu".into();
    }
    Ok(h)
}
