//! `cache status` on a cache a serve daemon holds: the daemon's live figures (it publishes
//! them at `nvstack_export::stats::LIVE_DIR`, with or without `--stats`), and the image's
//! superblock read with plain reads (the daemon holds the image's lock: nothing else is read).
//! The cache's rows are the stack's, whichever the kind; here the daemon's.

use crate::{print_json, say};
use nvstack_core::error::{Error, Result};
use std::path::Path;

/// Print the live status when a daemon serves `path`; None when none does.
pub fn status(path: &Path, json: bool) -> Result<Option<i32>> {
    let Some(s) = nvstack_export::stats::read_live(path) else {
        return Ok(None);
    };
    let Some(live) = s.cache else {
        return Err(Error::bad(format!(
            "{}: its daemon (pid {}) publishes no cache state",
            path.display(),
            s.pid
        )));
    };
    let cache = nvstack_stack::cache::live(path, &live)?;
    if json {
        let mut v = serde_json::json!({
            "image": path.display().to_string(),
            "live": true,
            "pid": s.pid,
            "daemon": {
                "writes_acked": s.writes_acked,
                "writes_durable": s.writes_durable,
                "fsyncs": s.fsyncs,
                "fsync_covered": s.fsync_covered,
                "discards": s.discards,
            },
        });
        for (k, x) in cache
            .json
            .as_object()
            .expect("the stack's live JSON is an object")
        {
            v[k] = x.clone();
        }
        print_json(&v)?;
        return Ok(Some(0));
    }
    say!(
        "image        {} (served: live figures of daemon pid {})",
        path.display(),
        s.pid
    )?;
    crate::output::out(cache.text().as_bytes())?;
    say!(
        "daemon       {} writes acknowledged, {} fsyncs, {} discards",
        s.writes_acked,
        s.fsyncs,
        s.discards
    )?;
    Ok(Some(0))
}
