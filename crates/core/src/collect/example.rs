//! The example of docs/collectors.md, compiled and run: a collector with one setting is one
//! module (its settings and its `REGISTRATION` included) plus its line in the registry. The
//! document quotes this file between the markers (`the_document_quotes_this_file`).

// example:begin
use std::any::Any;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::budget::Grants;
use crate::collect::settings::{of, Configured, Context, Invalid};
use crate::collect::{Collector, Data, Registration, Stats};
use crate::exposition::{Exposition, Kind};
use memlock_kernel::fsroot::{self, Roots, SourceError};

/// `[collector.locks]` as the file, the environment and the flags give it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RawLocksCollector {
    /// Count at most this many lines of /proc/locks.
    pub(crate) max_lines: u64,
}

impl Default for RawLocksCollector {
    fn default() -> Self {
        Self { max_lines: 10_000 }
    }
}

/// What the collector runs with; a reload restarts the collectors when it changes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LocksConfig {
    pub(crate) max_lines: usize,
}

impl Configured for LocksCollector {
    type Raw = RawLocksCollector;
    type Settings = LocksConfig;

    fn validate(raw: RawLocksCollector) -> Result<LocksConfig, Invalid> {
        if raw.max_lines == 0 {
            return Err(Invalid::new("max_lines", "must be at least 1"));
        }
        Ok(LocksConfig { max_lines: usize::try_from(raw.max_lines).unwrap_or(usize::MAX) })
    }

    fn build(context: &Context, settings: &LocksConfig) -> Self {
        LocksCollector { roots: context.roots.clone(), config: settings.clone() }
    }
}

pub(crate) struct LocksCollector {
    roots: Roots,
    config: LocksConfig,
}

impl Collector for LocksCollector {
    fn name(&self) -> &'static str {
        "locks"
    }

    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data> {
        let text = fsroot::read_string(&self.roots.proc("locks")).map_err(|e| errors.push(e)).ok()?;
        Some(Arc::new(LocksStats { locks: text.lines().take(self.config.max_lines).count() as u64 }))
    }
}

#[derive(Debug)]
pub(crate) struct LocksStats {
    pub locks: u64,
}

impl Stats for LocksStats {
    fn render(&self, out: &mut Exposition, _grants: &Grants) {
        out.family("memlock_example_file_locks", "File locks held (/proc/locks).", Kind::Gauge);
        out.sample(&[], self.locks);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Its entry in the registry: the flags `--collector.locks`, the section `[collector.locks]`.
pub(crate) const REGISTRATION: Registration = Registration {
    name: "locks",
    reads: "/proc/locks",
    default_interval: "5s",
    default_enabled: true,
    settings: of::<LocksCollector>(),
};
// example:end

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ::config::{Map, Value};

    use super::*;
    use crate::collect::settings::Refused;
    use crate::trend::TrendConfig;

    /// The registry's macro as crates/core/src/collect/mod.rs has it, over the example alone.
    macro_rules! collectors {
        ($($name:ident),* $(,)?) => {
            const REGISTRY: &[Registration] = &[$($name::REGISTRATION),*];
        };
    }

    /// Where the registry would declare it.
    mod locks {
        pub(crate) use super::super::REGISTRATION;
    }

    collectors! {
        // registry:begin
        locks,
        // registry:end
    }
    const ENTRY: &Registration = &REGISTRY[0];

    fn section(max_lines: impl Into<Value>) -> Value {
        Value::from(Map::from([("max_lines".to_owned(), max_lines.into())]))
    }

    #[test]
    fn the_example_collector_has_its_key_validates_it_and_runs() {
        let defaults = ENTRY.settings.defaults(false).unwrap();
        assert_eq!(defaults.get("max_lines").and_then(|v| v.clone().into_uint().ok()), Some(10_000), "{defaults:?}");
        match ENTRY.settings.validate(section(0u64)) {
            Err(Refused::Invalid(Invalid { key: "max_lines", message })) => assert_eq!(message, "must be at least 1"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(ENTRY.settings.validate(section("many")), Err(Refused::Type(_))));
        let settings = ENTRY.settings.validate(section(2u64)).unwrap();
        assert_eq!(settings.as_any().downcast_ref::<LocksConfig>(), Some(&LocksConfig { max_lines: 2 }));
        assert!(settings.same(&*ENTRY.settings.validate(section("2")).unwrap()), "equal by value");
        assert!(!settings.same(&*ENTRY.settings.validate(section(3u64)).unwrap()));

        let roots = Roots { procfs: "/proc".into(), sysfs: "/sys".into() };
        let trend = TrendConfig::default();
        let mut collector = settings.build(&Context { roots: &roots, interval: Duration::from_secs(5), trend: &trend });
        assert_eq!(collector.name(), "locks");
        let mut errors = Vec::new();
        let data = collector.collect(&mut errors).expect("this machine has /proc/locks");
        assert!(errors.is_empty(), "{errors:?}");
        let locks = data.as_any().downcast_ref::<LocksStats>().unwrap().locks;
        assert!(locks <= 2, "max_lines caps what is counted: {locks}");
    }

    /// docs/collectors.md shows this file's example and registry entry, word for word.
    #[test]
    fn the_document_quotes_this_file() {
        // Compared line by line without the indentation, which differs between a module and an
        // entry in the middle of the registry.
        let trimmed = |text: &str| text.lines().map(str::trim).collect::<Vec<_>>().join("\n");
        let doc = trimmed(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/collectors.md")));
        let source = include_str!("example.rs");
        for marker in ["example", "registry"] {
            let (begin, end) = (format!("// {marker}:begin\n"), format!("// {marker}:end"));
            let start = source.find(&begin).unwrap() + begin.len();
            let quoted = trimmed(&source[start..start + source[start..].find(&end).unwrap()]);
            assert!(doc.contains(quoted.trim()), "docs/collectors.md no longer quotes the {marker}:\n{quoted}");
        }
    }
}
