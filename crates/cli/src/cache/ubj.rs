//! `nvstack cache create --cache ubj`: a UBJ cache image over a backing file (its other verbs
//! are the stack's, whichever the kind: mod.rs).

use super::Create;
use crate::say;
use nvstack_core::error::Result;
use nvstack_core::size::format_size;
use nvstack_nvcache::ubj::format::Settings;
use nvstack_nvcache::ubj::image::{self, CreateOptions};
use std::path::Path;

pub(super) fn create(path: &Path, c: &Create) -> Result<i32> {
    c.write.refuse_for_ubj()?;
    let o = CreateOptions {
        size: c.size,
        backing: c.backing,
        backing_size: c.backing_size,
        settings: c.settings.apply(Settings::default())?,
        force: c.force,
    };
    let made = image::create_image(path, &o)?;
    let sb = made.superblock;
    say!(
        "created {}: UBJ cache of {} slots ({} of NVRAM) over {}{}, {} blocks ({})",
        path.display(),
        sb.slots,
        format_size(o.size),
        made.backing.display(),
        if made.backing_created {
            " (created)"
        } else {
            ""
        },
        sb.blocks,
        format_size(sb.blocks * 4096)
    )?;
    say!("settings {}", sb.settings.describe())?;
    Ok(0)
}
