//! The URI parameters of `file:DB?vfs=nvstack&region=PATH&region_size=SIZE[&powercut=...]`.

use crate::VfsError;
use nvstack_stack::powercut::PowerCutSpec;
use std::path::PathBuf;

/// The longest region path accepted.
pub const REGION_PATH_BYTES_MAX: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// The region image file (created and formatted when missing).
    pub region: PathBuf,
    /// Its size: required to create it; when it exists, checked against it if given.
    pub region_size_bytes: Option<u64>,
    /// Testing only: run the region on the simulated region and cut power (see
    /// `nvstack_stack::powercut`).
    pub powercut: Option<PowerCutSpec>,
    /// Measurement only: record the region's persistent-memory traffic from the open on and
    /// write it, when the region closes, as a committing-simulator trace (docs/mcsim.md) to
    /// this file, which must not exist yet.
    pub record: Option<PathBuf>,
}

/// Parse the parameters; `get` returns a URI parameter's value (None when absent).
pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Params, VfsError> {
    let region = match get("region") {
        None => {
            return Err(VfsError::cantopen(
                "vfs=nvstack needs the URI parameter region=PATH (an emulated NVRAM region \
                 under /dev/shm or a DAX file; created when missing, with region_size=SIZE)",
            ))
        }
        Some(r) if r.is_empty() => {
            return Err(VfsError::cantopen(
                "URI parameter region= is empty: give a PATH",
            ))
        }
        Some(r) if r.len() > REGION_PATH_BYTES_MAX => {
            return Err(VfsError::cantopen(format!(
                "URI parameter region= is {} bytes long (at most {REGION_PATH_BYTES_MAX})",
                r.len()
            )))
        }
        Some(r) => PathBuf::from(r),
    };
    let region_size_bytes = match get("region_size") {
        None => None,
        Some(s) => Some(
            nvstack_core::size::parse_size(&s)
                .map_err(|e| VfsError::cantopen(format!("URI parameter region_size={s}: {e}")))?,
        ),
    };
    let powercut = match get("powercut") {
        None => None,
        Some(s) => Some(
            PowerCutSpec::parse(&s)
                .map_err(|e| VfsError::cantopen(format!("URI parameter powercut={s}: {e}")))?,
        ),
    };
    let record = match get("record") {
        None => None,
        Some(r) if r.is_empty() || r.len() > REGION_PATH_BYTES_MAX => {
            return Err(VfsError::cantopen(format!(
                "URI parameter record= must be a PATH of 1 to {REGION_PATH_BYTES_MAX} bytes"
            )))
        }
        Some(_) if powercut.is_some() => {
            return Err(VfsError::cantopen(
                "URI parameters record= and powercut= exclude each other (a power-cut run \
                 uses the simulated region, which is not recorded)",
            ))
        }
        Some(r) => Some(PathBuf::from(r)),
    };
    debug_assert!(!region.as_os_str().is_empty());
    debug_assert!(region.as_os_str().len() <= REGION_PATH_BYTES_MAX);
    Ok(Params {
        region,
        region_size_bytes,
        powercut,
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn p(pairs: &[(&str, &str)]) -> Result<Params, VfsError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse(|k| m.get(k).cloned())
    }

    #[test]
    fn parses_and_refuses() {
        let ok = p(&[("region", "/dev/shm/r.img"), ("region_size", "32MiB")]).unwrap();
        assert_eq!(ok.region, PathBuf::from("/dev/shm/r.img"));
        assert_eq!(ok.region_size_bytes, Some(32 << 20));
        assert_eq!(ok.powercut, None);
        assert_eq!(ok.record, None);
        let rec = p(&[("region", "/r"), ("record", "/tmp/t.trace")]).unwrap();
        assert_eq!(rec.record, Some(PathBuf::from("/tmp/t.trace")));
        let pc = p(&[("region", "/r"), ("powercut", "M2:7:150")]).unwrap();
        assert_eq!(pc.powercut.unwrap().delay_ms, 150);
        for (bad, needle) in [
            (vec![], "needs the URI parameter region"),
            (vec![("region", "")], "is empty"),
            (
                vec![("region", "/r"), ("region_size", "12 parsecs")],
                "region_size",
            ),
            (vec![("region", "/r"), ("powercut", "M9:1:1")], "powercut"),
            (vec![("region", "/r"), ("record", "")], "record="),
            (
                vec![("region", "/r"), ("record", "/t"), ("powercut", "M2:1:1")],
                "exclude each other",
            ),
        ] {
            let e = p(&bad).unwrap_err();
            assert!(e.msg.contains(needle), "{}", e.msg);
            assert_eq!(e.code, libsqlite3_sys::SQLITE_CANTOPEN);
        }
    }
}
