//! The simulator's enumerations as command-line values: the library's types know no clap, so
//! each flag gets a parser here that accepts exactly the names the library's `name()` spells,
//! with the same possible values, help lines and errors the derived `ValueEnum` gave.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use nvstack_policy::PolicyKind;
use nvstack_sim::cache::Model;
use nvstack_sim::trace::libcachesim::OutFormat;
use nvstack_sim::trace::TraceFormat;

/// A parser for one of `all`, each spelled `name(v)`, with `help(v)` beside it in `--help`.
fn pick<T: Copy + Send + Sync + 'static>(
    all: &'static [T],
    name: fn(T) -> &'static str,
    help: fn(T) -> Option<&'static str>,
) -> impl TypedValueParser<Value = T> {
    let values = all.iter().map(move |&v| {
        let p = PossibleValue::new(name(v));
        match help(v) {
            Some(h) => p.help(h),
            None => p,
        }
    });
    PossibleValuesParser::new(values).map(move |text| {
        // clap has already refused every text that is not one of the names above.
        *all.iter()
            .find(|&&v| name(v) == text)
            .expect("a possible value")
    })
}

/// `--format`: a trace format.
pub fn trace_format() -> impl TypedValueParser<Value = TraceFormat> {
    pick(&TraceFormat::ALL, TraceFormat::name, |f| Some(f.describe()))
}

/// `--model`: a cache model.
pub fn model() -> impl TypedValueParser<Value = Model> {
    pick(&Model::ALL, Model::name, |_| None)
}

/// `--policy`: an NVRAM replacement policy.
pub fn policy() -> impl TypedValueParser<Value = PolicyKind> {
    pick(&PolicyKind::ALL, PolicyKind::name, |_| None)
}

/// `--out-format`: a libCacheSim trace format.
pub fn out_format() -> impl TypedValueParser<Value = OutFormat> {
    pick(&OutFormat::ALL, OutFormat::name, |f| match f {
        OutFormat::OracleGeneral => {
            Some("libCacheSim's oracleGeneral binary records (24 bytes each)")
        }
        OutFormat::Csv => Some("`time,obj_id,obj_size,op` with a header line"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `text` with `parser` as clap would for a flag `--x`.
    fn parse<T: Clone + Send + Sync + 'static>(
        parser: impl TypedValueParser<Value = T>,
        text: &str,
    ) -> Result<T, clap::Error> {
        let cmd = clap::Command::new("t");
        parser.parse_ref(&cmd, None, std::ffi::OsStr::new(text))
    }

    #[test]
    fn every_name_parses_to_its_value_and_nothing_else_does() {
        for f in TraceFormat::ALL {
            assert_eq!(parse(trace_format(), f.name()).unwrap(), f);
        }
        for m in Model::ALL {
            assert_eq!(parse(model(), m.name()).unwrap(), m);
        }
        for p in PolicyKind::ALL {
            assert_eq!(parse(policy(), p.name()).unwrap(), p);
        }
        for o in OutFormat::ALL {
            assert_eq!(parse(out_format(), o.name()).unwrap(), o);
        }
        assert!(parse(trace_format(), "tpc").is_err());
        assert!(parse(model(), "lfu").is_err());
        assert!(parse(policy(), "LRU").is_err());
        assert!(parse(out_format(), "oraclegeneral").is_err());
    }

    #[test]
    fn possible_values_are_listed_in_the_library_order() {
        let names: Vec<String> = trace_format()
            .possible_values()
            .unwrap()
            .map(|p| p.get_name().to_string())
            .collect();
        assert_eq!(names, TraceFormat::ALL.map(|f| f.name()));
    }
}
