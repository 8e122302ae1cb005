//! A cache's identity and its label on the backing device, written at create and checked at
//! every open (both caches), and the check that an image holds what its superblock says.

use crate::common::backing::FileDevice;
use crate::common::format::{Label, LABEL_BYTES};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use std::path::{Path, PathBuf};

/// A new cache's identity (random: two caches never share one).
pub(crate) fn random_identity() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let word = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .elapsed()
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    };
    u128::from(word()) << 64 | u128::from(word())
}

/// Write a new cache's label (not detached) into `blocks`, the backing device's last block,
/// and flush it: the label is durable before the cache's superblock names the device.
pub(crate) fn write_label(backing: &dyn BlockDevice, identity: u128, blocks: u64) -> Result<()> {
    let label = Label {
        identity,
        blocks,
        detached: false,
    };
    backing.write(blocks, &label.encode())?;
    backing.flush()
}

/// The label in block `blocks` (of `block_bytes`) names the cache of `identity` over `blocks`
/// blocks, and the backing device was not detached from it (either kind of cache).
pub(crate) fn check_label_names(
    backing: &dyn BlockDevice,
    block_bytes: usize,
    identity: u128,
    blocks: u64,
) -> Result<()> {
    let mut b = vec![0u8; block_bytes];
    backing.read(blocks, &mut b)?;
    let label = Label::decode(&b)?;
    if label.identity != identity || label.blocks != blocks {
        return Err(Error::bad(format!(
            "backing device belongs to another cache (label identity {:032x}, this cache \
             {:032x})",
            label.identity, identity
        )));
    }
    if label.detached {
        return Err(Error::bad(
            "backing device was detached from this cache: it alone is the state now",
        ));
    }
    Ok(())
}

/// The region holds the layout its superblock describes (`what`: the image's kind, named in
/// the error).
pub(crate) fn check_region_holds(region_bytes: u64, need_bytes: u64, what: &str) -> Result<()> {
    if region_bytes < need_bytes {
        return Err(Error::bad(format!(
            "{what}: {region_bytes} bytes, its superblock needs {need_bytes}"
        )));
    }
    Ok(())
}

/// What an offline look at a cache's backing file saw.
pub(crate) struct BackingSeen {
    pub path: Option<String>,
    pub direct: bool,
    pub detached: bool,
}

/// The backing file's size and label, read under a shared lock (`check` and `status`, either
/// cache): `path_record` is the image's, `over` replaces it, `(identity, blocks)` the cache's.
/// A foreign file (another size, another cache's label) is a finding; a file that cannot be
/// opened is the error it is, naming it, not damage (missing: exit 2; unreadable, or locked by
/// a writer: exit 3).
pub(crate) fn inspect_backing(
    path_record: &Result<PathBuf>,
    over: Option<&Path>,
    (identity, blocks): (u128, u64),
    findings: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Result<BackingSeen> {
    let mut seen = BackingSeen {
        path: None,
        direct: false,
        detached: false,
    };
    let bpath = match (over, path_record) {
        (Some(p), _) => p.to_path_buf(),
        (None, Ok(p)) => p.clone(),
        (None, Err(e)) => {
            findings.push(e.to_string());
            return Ok(seen);
        }
    };
    seen.path = Some(bpath.display().to_string());
    let dev = FileDevice::open_readonly(&bpath)?;
    seen.direct = dev.direct();
    if dev.blocks() != blocks + 1 {
        findings.push(format!(
            "backing file: {} blocks, but this cache was created over {blocks} blocks and a \
             label block",
            dev.blocks()
        ));
        return Ok(seen);
    }
    let mut b = vec![0u8; LABEL_BYTES];
    dev.read(blocks, &mut b)?;
    match Label::decode(&b) {
        Err(e) => findings.push(format!("backing file: {e}")),
        Ok(l) if l.identity != identity || l.blocks != blocks => findings.push(format!(
            "backing file belongs to another cache (label identity {:032x})",
            l.identity
        )),
        Ok(l) if l.detached => {
            seen.detached = true;
            notes.push(
                "detached: the backing file alone is the whole state, and this cache no longer \
                 opens over it"
                    .into(),
            );
        }
        Ok(_) => {}
    }
    Ok(seen)
}
