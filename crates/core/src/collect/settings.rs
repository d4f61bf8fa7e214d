//! A collector's own settings: the keys of `[collector.<name>]` beside `enabled` and `interval`.
//!
//! The collector's module defines them twice, raw (what the file, the environment and the flags
//! may say, every field with a default) and validated, and how the collector is built from them:
//! it implements [`Configured`], and its one entry in [`super::REGISTRY`] names it with [`of`].
//! [`crate::config`] merges the layers, refuses unknown keys against the raw defaults and turns
//! an [`Invalid`] into an error that names the whole key and the layer that set it. A reload
//! compares the validated settings with `PartialEq` ([`CollectorConfig`]). A collector without
//! settings of its own is built by the function its entry gives to [`Plain`]. docs/collectors.md
//! walks through adding one.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use ::config::{Map, Value};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::Collector;
use crate::trend::TrendConfig;
use memlock_kernel::fsroot::Roots;

/// What every collector is built from besides its own settings.
pub struct Context<'a> {
    pub roots: &'a Roots,
    /// The collector's interval.
    pub interval: Duration,
    pub trend: &'a TrendConfig,
}

/// A value of a collector's own key that validation refused: `key` within the section
/// (`top_n`), `message` says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub key: &'static str,
    pub message: String,
}

impl Invalid {
    pub fn new(key: &'static str, message: impl Into<String>) -> Self {
        Self { key, message: message.into() }
    }
}

/// A collector with settings of its own.
pub trait Configured: Collector + Sized + 'static {
    /// The section's keys as the layers give them. `#[serde(default)]`: every key may be left out.
    /// (Unknown keys are refused before this is deserialized, against its serialized defaults.)
    type Raw: Serialize + DeserializeOwned + Default;
    /// What the collector runs with. A reload restarts the collectors when this changes.
    type Settings: fmt::Debug + Clone + PartialEq + Send + Sync + 'static;

    /// The defaults with every list given one element: the `config` crate drops empty lists
    /// when it serializes, and the key check must still know that those keys exist.
    fn key_template() -> Self::Raw {
        Self::Raw::default()
    }

    fn validate(raw: Self::Raw) -> Result<Self::Settings, Invalid>;

    fn build(context: &Context, settings: &Self::Settings) -> Self;
}

/// A collector's section as the configuration layer sees it, whatever its types.
pub trait Section: Sync {
    /// The section's own keys and their defaults (`template`: [`Configured::key_template`]).
    fn defaults(&self, template: bool) -> Result<Map<String, Value>, ::config::ConfigError>;
    /// Deserializes and validates the section's own keys (`enabled` and `interval` taken out).
    fn validate(&self, own: Value) -> Result<Arc<dyn Settings>, Refused>;
}

/// Why a section's own keys were refused; keys are relative to the section.
#[derive(Debug)]
pub enum Refused {
    /// Not of the key's type (deserialization).
    Type(::config::ConfigError),
    Invalid(Invalid),
}

/// A collector's validated settings, whatever their type.
pub trait Settings: fmt::Debug + Send + Sync {
    /// The collector's own settings type ([`Configured::Settings`]; `()` for none).
    fn as_any(&self) -> &dyn Any;
    fn same(&self, other: &dyn Settings) -> bool;
    fn build(&self, context: &Context) -> Box<dyn Collector>;
}

/// A registered collector's part of the configuration.
#[derive(Debug, Clone)]
pub struct CollectorConfig {
    pub name: &'static str,
    pub enabled: bool,
    pub interval: Duration,
    pub settings: Arc<dyn Settings>,
}

impl PartialEq for CollectorConfig {
    fn eq(&self, other: &Self) -> bool {
        // Destructured, so that a field added and not compared does not compile. (`derive`
        // cannot compare the `Arc<dyn Settings>`: rust-lang/rust#31740.)
        let Self { name, enabled, interval, settings } = self;
        *name == other.name
            && *enabled == other.enabled
            && *interval == other.interval
            && settings.same(&*other.settings)
    }
}

impl CollectorConfig {
    /// Its own settings, if they are of type `T`.
    pub fn settings<T: 'static>(&self) -> Option<&T> {
        self.settings.as_any().downcast_ref()
    }
}

/// The section of the collector `C`, for its [`super::Registration`].
pub const fn of<C: Configured>() -> &'static dyn Section {
    &Own::<C>(PhantomData)
}

struct Own<C>(PhantomData<fn() -> C>);

impl<C: Configured> Section for Own<C> {
    fn defaults(&self, template: bool) -> Result<Map<String, Value>, ::config::ConfigError> {
        let raw = if template { C::key_template() } else { C::Raw::default() };
        ::config::Source::collect(&::config::Config::try_from(&raw)?)
    }

    fn validate(&self, own: Value) -> Result<Arc<dyn Settings>, Refused> {
        let raw = C::Raw::deserialize(own).map_err(Refused::Type)?;
        let settings = C::validate(raw).map_err(Refused::Invalid)?;
        Ok(Arc::new(Validated::<C>(settings)))
    }
}

struct Validated<C: Configured>(C::Settings);

impl<C: Configured> fmt::Debug for Validated<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<C: Configured> Settings for Validated<C> {
    fn as_any(&self) -> &dyn Any {
        &self.0
    }

    fn same(&self, other: &dyn Settings) -> bool {
        other.as_any().downcast_ref::<C::Settings>().is_some_and(|other| *other == self.0)
    }

    fn build(&self, context: &Context) -> Box<dyn Collector> {
        Box::new(C::build(context, &self.0))
    }
}

/// The section of a collector without settings of its own, and how it is built.
pub struct Plain(pub fn(&Context) -> Box<dyn Collector>);

impl Section for Plain {
    fn defaults(&self, _template: bool) -> Result<Map<String, Value>, ::config::ConfigError> {
        Ok(Map::new())
    }

    fn validate(&self, own: Value) -> Result<Arc<dyn Settings>, Refused> {
        // No keys of its own: the key check has refused any; this still refuses a section that
        // is not a table.
        let RawCollector {} = RawCollector::deserialize(own).map_err(Refused::Type)?;
        Ok(Arc::new(PlainSettings(self.0)))
    }
}

/// Named as the sections of these collectors were before settings were split out, for the
/// error about a section that is not a table.
#[derive(Deserialize)]
struct RawCollector {}

struct PlainSettings(fn(&Context) -> Box<dyn Collector>);

impl fmt::Debug for PlainSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("()")
    }
}

impl Settings for PlainSettings {
    fn as_any(&self) -> &dyn Any {
        &()
    }

    fn same(&self, other: &dyn Settings) -> bool {
        other.as_any().is::<()>()
    }

    fn build(&self, context: &Context) -> Box<dyn Collector> {
        (self.0)(context)
    }
}
