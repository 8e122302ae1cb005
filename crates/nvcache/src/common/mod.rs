//! What both caches share: the backing file device, the generic image layer (create in
//! place, validate, open both files), and the system calls under them.

pub mod backing;
pub mod format;
pub mod image;
pub mod label;
pub mod live;
#[allow(unsafe_code)]
mod sys;
pub mod ticker;
