//! The flags of `serve`, which is also what runs with no subcommand: they live with the daemon
//! so that it needs nothing of [`crate::cli`], which names the preflight commands too.

use std::path::PathBuf;

use clap::Args;
use config::Value;

#[derive(Debug, Args, Default, Clone)]
pub struct ServeArgs {
    /// Optional TOML configuration file; flags and MEMLOCK_EXPORTER_* variables override it.
    #[arg(long = "config.file", value_name = "PATH")]
    pub config_file: Option<PathBuf>,
    /// Address to listen on: ":9478" (all interfaces), "127.0.0.1:9478", "[::1]:9478".
    #[arg(long = "web.listen-address", value_name = "ADDR")]
    pub listen_address: Option<String>,
    /// Path under which metrics are served.
    #[arg(long = "web.telemetry-path", value_name = "PATH")]
    pub telemetry_path: Option<String>,
    /// TLS and basic auth configuration (Prometheus exporter-toolkit format, YAML).
    #[arg(long = "web.config.file", value_name = "PATH")]
    pub web_config_file: Option<String>,
    /// Requests served at the same time; more get 503 at once (0: no limit). Default 40.
    #[arg(long = "web.max-requests", value_name = "N")]
    pub max_requests: Option<u64>,
    /// Bytes of snapshot text that responses in flight may keep alive; the slowest are closed to
    /// make room, or 503 (0: no limit). Default 67108864 (64 MiB).
    #[arg(long = "web.max-response-bytes", value_name = "BYTES")]
    pub max_response_bytes: Option<u64>,
    /// procfs mount point (the host's /proc; /host/proc in a container).
    #[arg(long = "path.procfs", value_name = "PATH")]
    pub procfs: Option<String>,
    /// sysfs mount point.
    #[arg(long = "path.sysfs", value_name = "PATH")]
    pub sysfs: Option<String>,
    /// `--collector.<name>` and `--no-collector.<name>` for every registered collector.
    #[command(flatten)]
    pub collectors: CollectorToggles,
    /// Alertmanager to push fast-path alerts to (repeatable): http://host:9093.
    #[arg(long = "alertmanager.url", value_name = "URL")]
    pub alertmanager_urls: Vec<String>,
    /// At most this many series per scrape, those that page first (0: no limit). Default 500.
    #[arg(long = "series.limit", value_name = "N")]
    pub series_limit: Option<u64>,
    /// Log level: debug, info, warn, error.
    #[arg(long = "log.level", value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log format: text or json.
    #[arg(long = "log.format", value_name = "FORMAT")]
    pub log_format: Option<String>,
}

impl ServeArgs {
    /// The configuration keys these flags set, for the top configuration layer.
    pub fn overrides(&self) -> Vec<(String, Value)> {
        let mut out: Vec<(String, Value)> = Vec::new();
        let strings = [
            ("web.listen_address", &self.listen_address),
            ("web.telemetry_path", &self.telemetry_path),
            ("web.config_file", &self.web_config_file),
            ("path.procfs", &self.procfs),
            ("path.sysfs", &self.sysfs),
            ("log.level", &self.log_level),
            ("log.format", &self.log_format),
        ];
        for (key, value) in strings {
            if let Some(v) = value {
                out.push((key.into(), Value::from(v.as_str())));
            }
        }
        if let Some(n) = self.max_requests {
            out.push(("web.max_requests".into(), Value::from(n)));
        }
        if let Some(n) = self.series_limit {
            out.push(("series.limit".into(), Value::from(n)));
        }
        if let Some(n) = self.max_response_bytes {
            out.push(("web.max_response_bytes".into(), Value::from(n)));
        }
        if !self.alertmanager_urls.is_empty() {
            let urls: Vec<Value> = self.alertmanager_urls.iter().map(|u| Value::from(u.as_str())).collect();
            out.push(("alerting.alertmanager_urls".into(), Value::from(urls)));
        }
        for (name, enabled) in &self.collectors.0 {
            out.push((format!("collector.{name}.enabled"), Value::from(*enabled)));
        }
        out
    }
}

/// The collector switches given on the command line, in registry order: `(name, enabled)` for
/// each collector whose `--collector.<name>` or `--no-collector.<name>` was given (the later wins,
/// as in node_exporter). The flags are made from [`memlock_core::collect::REGISTRY`], so a new collector
/// gets them without an edit here.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CollectorToggles(pub Vec<(&'static str, bool)>);

fn enable_flag(name: &str) -> String {
    format!("collector.{name}")
}

fn disable_flag(name: &str) -> String {
    format!("no-collector.{name}")
}

impl clap::FromArgMatches for CollectorToggles {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut toggles = Self::default();
        toggles.update_from_arg_matches(matches)?;
        Ok(toggles)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        for registration in memlock_core::collect::REGISTRY {
            let flag = |id: String| matches.try_get_one::<bool>(&id).ok().flatten().copied().unwrap_or(false);
            let enabled = match (flag(enable_flag(registration.name)), flag(disable_flag(registration.name))) {
                (true, _) => true,
                (_, true) => false,
                _ => continue,
            };
            self.0.retain(|(name, _)| *name != registration.name);
            self.0.push((registration.name, enabled));
        }
        Ok(())
    }
}

impl Args for CollectorToggles {
    fn augment_args(mut command: clap::Command) -> clap::Command {
        for registration in memlock_core::collect::REGISTRY {
            let (on, off) = (enable_flag(registration.name), disable_flag(registration.name));
            command = command
                .arg(
                    clap::Arg::new(on.clone())
                        .long(on.clone())
                        .action(clap::ArgAction::SetTrue)
                        .overrides_with(off.clone())
                        .help(format!(
                            "Enable the {} collector ({}). Default {}.",
                            registration.name,
                            registration.reads,
                            if registration.default_enabled { "on" } else { "off" }
                        )),
                )
                .arg(
                    clap::Arg::new(off.clone())
                        .long(off)
                        .action(clap::ArgAction::SetTrue)
                        .overrides_with(on)
                        .help(format!("Disable the {} collector.", registration.name)),
                );
        }
        command
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}
