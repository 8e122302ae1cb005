//! The ROB's deferral invariance (filled in below).
