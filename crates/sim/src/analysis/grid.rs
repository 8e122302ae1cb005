//! The grid file: a TOML file naming the traces of a sweep, their formats and the lists of
//! parameters, read by `nvstack sim sweep --grid FILE` and by the Python package
//! (`nvstack.sweep`). docs/sim.md section 3 documents it; this is its one reader.
//!
//! ```toml
//! nvram = ["0", "64KiB", "1MiB"]   # NVRAM sizes (bytes or KiB/MiB/GiB); default 0, 64KiB..64MiB
//! seeds = 5                        # seeds of the random policy, 1 to 100; default 5
//! block_size = 4096                # default for every trace; default 4096
//!
//! [[trace]]
//! path = "cloudPhysicsIO.csv"      # relative to the grid file's folder
//! format = "cloudphysics"
//! # block_size = 512, skip_bad_lines = false, interarrival_us = 100 (fio v2) may follow
//! ```
//!
//! A bad file is refused (exit 2) with a message naming the file, the key and what is wrong;
//! an unknown key is refused too (a typo must not fall back to a default silently).

use super::{nvram_grid_default, SweepPlan, TraceSpec, RANDOM_SEEDS_DEFAULT};
use crate::field::{Field, Invalid};
use crate::trace::{ReaderOptions, TraceFormat, BLOCK_BYTES_DEFAULT};
use nvstack_core::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The keys of the file's top level and of each `[[trace]]` table.
const TOP_KEYS: [&str; 4] = ["nvram", "seeds", "block_size", "trace"];
const TRACE_KEYS: [&str; 5] = [
    "path",
    "format",
    "block_size",
    "skip_bad_lines",
    "interarrival_us",
];

/// A grid as read from its file: the sweep's traces and parameters, before an output folder
/// is chosen.
#[derive(Clone, Debug)]
pub struct Grid {
    /// The file it was read from (for messages).
    pub file: PathBuf,
    pub traces: Vec<TraceSpec>,
    pub nvram_bytes: Vec<u64>,
    pub seeds: u64,
}

impl Grid {
    /// Read and check the grid file at `path`.
    pub fn read(path: &Path) -> Result<Grid> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::bad(format!("{}: cannot read the grid: {e}", path.display())))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Grid::parse(&text, path, dir)
    }

    /// Parse grid `text` read from `file`; relative trace paths are taken from `dir`.
    pub fn parse(text: &str, file: &Path, dir: &Path) -> Result<Grid> {
        let bad = |key: &str, what: String| {
            Error::bad(format!("{}: key '{key}': {what}", file.display()))
        };
        let table: toml::Table = text
            .parse()
            .map_err(|e| Error::bad(format!("{}: not a TOML file: {e}", file.display())))?;
        if let Some(k) = table.keys().find(|k| !TOP_KEYS.contains(&k.as_str())) {
            return Err(bad(
                k,
                format!("unknown key (known: {})", TOP_KEYS.join(", ")),
            ));
        }
        let block_default = match table.get("block_size") {
            None => BLOCK_BYTES_DEFAULT,
            Some(v) => block_size(v).map_err(|w| bad("block_size", w))?,
        };
        let nvram_bytes = match table.get("nvram") {
            None => nvram_grid_default(),
            Some(v) => sizes(v).map_err(|w| bad("nvram", w))?,
        };
        let seeds = match table.get("seeds") {
            None => RANDOM_SEEDS_DEFAULT,
            Some(v) => whole(v).map_err(|w| bad("seeds", w))?,
        };
        let traces = match table.get("trace") {
            Some(toml::Value::Array(a)) if !a.is_empty() => a
                .iter()
                .enumerate()
                .map(|(i, t)| trace(t, block_default, dir).map_err(|(k, w)| bad(&k(i), w)))
                .collect::<Result<Vec<_>>>()?,
            Some(_) => return Err(bad("trace", "expected one or more [[trace]] tables".into())),
            None => return Err(bad("trace", "missing: name at least one [[trace]]".into())),
        };
        let grid = Grid {
            file: file.to_path_buf(),
            traces,
            nvram_bytes,
            seeds,
        };
        grid.plan(PathBuf::new())
            .jobs()
            .map_err(|e| grid.refused(&e))?;
        Ok(grid)
    }

    /// The sweep of this grid, its files written into `output`.
    pub fn plan(&self, output: PathBuf) -> SweepPlan {
        SweepPlan {
            traces: self.traces.clone(),
            nvram_bytes: self.nvram_bytes.clone(),
            seeds: self.seeds,
            output,
        }
    }

    /// A setting the sweep refused, as bad input naming the file and the grid's keys.
    pub fn refused(&self, e: &Invalid) -> Error {
        let key = grid_key(e.field);
        let text = e.render(&grid_key);
        let what = text.strip_prefix(key).unwrap_or(&text).trim_start();
        Error::bad(format!("{}: key '{key}': {what}", self.file.display()))
    }
}

/// The grid key each sweep setting comes from.
pub fn grid_key(field: Field) -> &'static str {
    match field {
        Field::NvramBytes | Field::NvramBlocks => "nvram",
        Field::Seeds => "seeds",
        Field::BlockBytes => "block_size",
        Field::Traces => "trace",
        other => other.name(),
    }
}

/// The key path of a `[[trace]]` entry's key, for messages: `trace[2].format`.
type KeyOf = Box<dyn Fn(usize) -> String>;

fn trace(
    v: &toml::Value,
    block_default: u32,
    dir: &Path,
) -> std::result::Result<TraceSpec, (KeyOf, String)> {
    let key = |k: &'static str| -> KeyOf { Box::new(move |i| format!("trace[{i}].{k}")) };
    let t = v.as_table().ok_or_else(|| -> (KeyOf, String) {
        (
            Box::new(|i| format!("trace[{i}]")),
            "expected a table".to_string(),
        )
    })?;
    if let Some(k) = t.keys().find(|k| !TRACE_KEYS.contains(&k.as_str())) {
        let k = k.clone();
        return Err((
            Box::new(move |i| format!("trace[{i}].{k}")),
            format!("unknown key (known: {})", TRACE_KEYS.join(", ")),
        ));
    }
    let path = match t.get("path") {
        Some(toml::Value::String(s)) if !s.is_empty() => {
            let p = dir.join(s);
            if !p.is_file() {
                return Err((key("path"), format!("{}: no such file", p.display())));
            }
            p
        }
        Some(_) => return Err((key("path"), "expected a file name (a string)".into())),
        None => return Err((key("path"), "missing".into())),
    };
    let format = match t.get("format") {
        Some(toml::Value::String(s)) => TraceFormat::parse(s).ok_or_else(|| {
            let names: Vec<&str> = TraceFormat::ALL.iter().map(|f| f.name()).collect();
            (
                key("format"),
                format!("unknown format '{s}' (known: {})", names.join(", ")),
            )
        })?,
        Some(_) => return Err((key("format"), "expected a format name (a string)".into())),
        None => return Err((key("format"), "missing".into())),
    };
    let block_bytes = match t.get("block_size") {
        None => block_default,
        Some(v) => block_size(v).map_err(|w| (key("block_size"), w))?,
    };
    let skip_bad_lines = match t.get("skip_bad_lines") {
        None => false,
        Some(toml::Value::Boolean(b)) => *b,
        Some(_) => return Err((key("skip_bad_lines"), "expected true or false".into())),
    };
    let interarrival_ns = match t.get("interarrival_us") {
        None => None,
        Some(v) => Some(
            whole(v)
                .map_err(|w| (key("interarrival_us"), w))?
                .saturating_mul(1000),
        ),
    };
    Ok(TraceSpec {
        path,
        format,
        block_bytes,
        options: ReaderOptions {
            skip_bad_lines,
            interarrival_ns,
        },
    })
}

/// A whole, non-negative number.
fn whole(v: &toml::Value) -> std::result::Result<u64, String> {
    match v {
        toml::Value::Integer(n) => {
            u64::try_from(*n).map_err(|_| format!("{n}: must not be negative"))
        }
        other => Err(format!("expected a whole number, not {}", other.type_str())),
    }
}

/// A block size: a power of two from 512 to 1 MiB.
fn block_size(v: &toml::Value) -> std::result::Result<u32, String> {
    let n = whole(v)?;
    match u32::try_from(n) {
        Ok(b) if b.is_power_of_two() && (512..=1 << 20).contains(&b) => Ok(b),
        _ => Err(format!("{n}: must be a power of two from 512 to 1048576")),
    }
}

/// A list of sizes: byte counts, or strings with a KiB, MiB or GiB suffix.
fn sizes(v: &toml::Value) -> std::result::Result<Vec<u64>, String> {
    let a = v
        .as_array()
        .ok_or_else(|| format!("expected a list of sizes, not {}", v.type_str()))?;
    if a.is_empty() {
        return Err("expected at least one size".into());
    }
    a.iter()
        .enumerate()
        .map(|(i, x)| match x {
            toml::Value::String(s) => {
                nvstack_core::size::parse_size(s).map_err(|e| format!("entry {i}: {e}"))
            }
            other => whole(other).map_err(|e| format!("entry {i}: {e}")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Grid> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sim");
        Grid::parse(text, Path::new("g.toml"), &dir)
    }

    fn trace_file() -> String {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sim");
        let f = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "trace" || e == "csv"))
            .expect("a sample trace");
        f.file_name().unwrap().to_string_lossy().into_owned()
    }

    #[test]
    fn a_grid_names_traces_sizes_and_seeds() {
        let t = trace_file();
        let g = parse(&format!(
            "nvram = [\"0\", \"64KiB\", 8192]\nseeds = 3\nblock_size = 512\n\
             [[trace]]\npath = \"{t}\"\nformat = \"disksim\"\n\
             [[trace]]\npath = \"{t}\"\nformat = \"disksim\"\nblock_size = 4096\nskip_bad_lines = true\n"
        ))
        .unwrap();
        assert_eq!(g.nvram_bytes, vec![0, 65536, 8192]);
        assert_eq!(g.seeds, 3);
        assert_eq!(g.traces.len(), 2);
        assert_eq!(
            (g.traces[0].block_bytes, g.traces[1].block_bytes),
            (512, 4096)
        );
        assert!(g.traces[1].options.skip_bad_lines && g.traces[0].path.is_file());
        let d = parse(&format!("[[trace]]\npath = \"{t}\"\nformat = \"msr\"\n")).unwrap();
        assert_eq!(
            (d.nvram_bytes, d.seeds),
            (nvram_grid_default(), RANDOM_SEEDS_DEFAULT)
        );
    }

    #[test]
    fn a_bad_grid_names_the_file_the_key_and_the_fault() {
        let t = trace_file();
        let tr = format!("[[trace]]\npath = \"{t}\"\nformat = \"disksim\"\n");
        for (text, want) in [
            (format!("nvram = [\n{tr}"), "g.toml: not a TOML file"),
            (
                format!("seedz = 2\n{tr}"),
                "g.toml: key 'seedz': unknown key",
            ),
            (
                format!("seeds = 0\n{tr}"),
                "g.toml: key 'seeds': 0: give 1 to 100",
            ),
            (
                format!("seeds = -1\n{tr}"),
                "key 'seeds': -1: must not be negative",
            ),
            (
                format!("seeds = \"5\"\n{tr}"),
                "key 'seeds': expected a whole number, not string",
            ),
            (
                format!("nvram = 5\n{tr}"),
                "key 'nvram': expected a list of sizes, not integer",
            ),
            (
                format!("nvram = []\n{tr}"),
                "key 'nvram': expected at least one size",
            ),
            (
                format!("nvram = [\"5XB\"]\n{tr}"),
                "key 'nvram': entry 0: bad size '5XB'",
            ),
            (
                format!("nvram = [1000]\n{tr}"),
                "key 'nvram': 1000: not a multiple of the block size",
            ),
            (
                format!("block_size = 1000\n{tr}"),
                "key 'block_size': 1000: must be a power of two",
            ),
            ("seeds = 2\n".to_string(), "key 'trace': missing"),
            (
                "trace = 3\n".to_string(),
                "key 'trace': expected one or more [[trace]] tables",
            ),
            (
                tr.replace("disksim", "disk"),
                "key 'trace[0].format': unknown format 'disk' (known: cloudphysics",
            ),
            (
                tr.replace("format", "fromat"),
                "key 'trace[0].fromat': unknown key",
            ),
            (tr.replace(&t, "nope.trace"), "key 'trace[0].path': "),
            (
                format!("{tr}{tr}interarrival_us = \"x\"\n"),
                "key 'trace[1].interarrival_us': expected a whole number",
            ),
        ] {
            let e = parse(&text).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().contains(want), "{text}: {e}");
            assert!(e.to_string().starts_with("g.toml: "), "{e}");
        }
    }
}
