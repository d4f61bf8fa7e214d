//! The layers (built-in defaults, the file, the environment, the flags), merged by the `config`
//! crate, and where each key was set, so that every error names the layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use config::{Environment, File, FileFormat, Map, Value, ValueKind};

use super::raw::{collector_sections, RawConfig};
use super::validate::{type_error, validate};
use super::{Config, ConfigError, ENV_PREFIX};

/// Where each layer comes from. Flags arrive as `(key, value)` pairs already named like the
/// file's keys (`collector.node.enabled`).
#[derive(Debug, Default, Clone)]
pub struct Sources {
    pub file: Option<PathBuf>,
    /// `None` reads the process environment; tests pass a map.
    pub env: Option<BTreeMap<String, String>>,
    pub flags: Vec<(String, Value)>,
}

/// Builds and validates the configuration from its layers.
pub fn load(sources: &Sources) -> Result<Config, ConfigError> {
    let other = |e: config::ConfigError| ConfigError::Other(e.to_string());
    let defaults = config::Config::try_from(&RawConfig::default()).map_err(other)?;
    let mut builder = config::Config::builder()
        .set_default("collector", Value::from(collector_sections(false).map_err(other)?))
        .map_err(other)?
        .add_source(defaults);
    let mut file_keys = Map::new();
    if let Some(path) = &sources.file {
        // Read it ourselves so a missing file, a directory or bad TOML names the file.
        // A reload runs on the daemon's event loop: the reader does not block on a FIFO.
        let text = memlock_kernel::fsroot::read_regular_text(path, memlock_kernel::fsroot::MAX_FILE_BYTES)
            .map_err(|e| ConfigError::File { path: path.clone(), message: e.detail() })?;
        let file = File::from_str(&text, FileFormat::Toml).required(true);
        file_keys = config::Source::collect(&file)
            .map_err(|e| ConfigError::File { path: path.clone(), message: e.to_string() })?;
        builder = builder.add_source(file);
    }
    let mut env = Environment::with_prefix(ENV_PREFIX).prefix_separator("_").separator("__").try_parsing(true);
    if let Some(map) = &sources.env {
        env = env.source(Some(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Map<_, _>>()));
    }
    let env_keys = config::Source::collect(&env).map_err(other)?;
    builder = builder.add_source(env);
    for (key, value) in &sources.flags {
        builder = builder.set_override(key.as_str(), value.clone()).map_err(other)?;
    }
    let merged = builder.build().map_err(other)?;

    let origin_of = |key: &str| -> String {
        if sources.flags.iter().any(|(k, _)| k == key) {
            format!("the command-line flags ({})", flag_name(key))
        } else if env_keys.contains_key(key) {
            format!("the environment ({ENV_PREFIX}_{})", key.to_uppercase().replace('.', "__"))
        } else if let (Some(path), true) = (&sources.file, lookup(&file_keys, key)) {
            path.display().to_string()
        } else {
            "the built-in defaults".into()
        }
    };
    let mut known = config::Source::collect(&config::Config::try_from(&RawConfig::key_template()).map_err(other)?)
        .map_err(other)?;
    known.insert("collector".into(), Value::from(collector_sections(true).map_err(other)?));
    let given = config::Source::collect(&merged).map_err(other)?;
    check_known_keys("", &given, &known, &origin_of)?;

    let raw: RawConfig = merged.try_deserialize().map_err(|e| type_error(e, "", &origin_of))?;
    let sections = given.get("collector").cloned().unwrap_or_else(|| Value::from(Map::<String, Value>::new()));
    let mut config = validate(raw, sections, sources.file.clone(), &origin_of)?;
    leaf_keys("", &file_keys, &mut config.file_keys);
    Ok(config)
}

/// The dotted names of every value in a nested table (an empty list counts: it is a value).
fn leaf_keys(prefix: &str, table: &Map<String, Value>, out: &mut BTreeSet<String>) {
    for (name, value) in table {
        let key = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
        match &value.kind {
            ValueKind::Table(inner) if !inner.is_empty() => leaf_keys(&key, inner, out),
            _ => {
                out.insert(key);
            }
        }
    }
}

/// Whether a dotted key is present in a nested table.
fn lookup(table: &Map<String, Value>, key: &str) -> bool {
    let mut current = table;
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        match current.get(part) {
            None => return false,
            Some(_) if parts.peek().is_none() => return true,
            Some(Value { kind: ValueKind::Table(inner), .. }) => current = inner,
            Some(_) => return false,
        }
    }
    false
}

/// The flag that sets a key, for messages (`web.listen_address` -> `--web.listen-address`).
pub(crate) fn flag_name(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

fn check_known_keys(
    prefix: &str,
    given: &Map<String, Value>,
    known: &Map<String, Value>,
    origin_of: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    for (name, value) in given {
        let key = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
        let Some(expected) = known.get(name) else {
            let mut names: Vec<&str> = known.keys().map(String::as_str).collect();
            names.sort_unstable();
            let section = if prefix.is_empty() { "at the top level".to_owned() } else { format!("in [{prefix}]") };
            return Err(ConfigError::UnknownKey {
                origin: origin_of(&key),
                key,
                hint: format!("; known keys {section}: {}", names.join(", ")),
            });
        };
        if let (ValueKind::Table(given_table), ValueKind::Table(known_table)) = (&value.kind, &expected.kind) {
            check_known_keys(&key, given_table, known_table, origin_of)?;
        }
    }
    Ok(())
}
