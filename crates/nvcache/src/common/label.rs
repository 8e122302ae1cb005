//! A cache's identity and its label on the backing device, written at create and checked at
//! every open (both caches), and the check that an image holds what its superblock says.

use crate::common::format::Label;
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};

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
