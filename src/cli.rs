//! Command-line interface. Flag names follow node_exporter (`--web.listen-address`,
//! `--path.procfs`, `--collector.<name>`); each sets the configuration key of the same name,
//! overriding the file and the environment.

use clap::{Parser, Subcommand};

pub use crate::daemon::args::ServeArgs;

#[derive(Debug, Parser)]
#[command(
    name = "memlock-exporter",
    version,
    about = "Prometheus exporter for locked and pinned memory against the limits that stop RDMA registration",
    after_help = "Exit codes: 0 clean shutdown, 1 runtime failure, 2 bad flags or configuration."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Flags of `serve`, which is also what runs with no subcommand.
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the exporter daemon (the default).
    Serve(ServeArgs),
    /// Estimate how much host memory NCCL will register (and pin) per process and per node, and
    /// compare it with the memlock limit and the node's available memory.
    Estimate(memlock_preflight::estimate::EstimateArgs),
    /// Preflight for a job launcher: memlock limits, memory, cgroup, hugepages, overcommit, NCCL
    /// environment and RDMA ports. Exit 0 all pass, 1 any FAIL (WARN too with --strict), 2 the
    /// check could not run. With `--exec -- CMD`, CMD runs in its place when nothing fails.
    Check(memlock_preflight::check::CheckArgs),
    /// Ramp real pinned (io_uring) or locked (mlock) memory until the kernel refuses, to prove
    /// the alert pipeline end to end.
    Drill(memlock_preflight::drill::DrillArgs),
    /// Write the man pages into a directory (a packaging step).
    #[command(hide = true)]
    Manpages(crate::manpages::ManpagesArgs),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_is_the_default_and_flags_become_keys() {
        let cli =
            Cli::try_parse_from(["memlock-exporter", "--web.listen-address", "127.0.0.1:1", "--no-collector.numa"])
                .unwrap();
        assert!(cli.command.is_none());
        let o = cli.serve.overrides();
        assert!(o.iter().any(|(k, v)| k == "web.listen_address" && v.clone().into_string().unwrap() == "127.0.0.1:1"));
        assert!(o.iter().any(|(k, v)| k == "collector.numa.enabled" && !v.clone().into_bool().unwrap()));
        assert!(!o.iter().any(|(k, _)| k == "collector.node.enabled"));

        let cli =
            Cli::try_parse_from(["memlock-exporter", "serve", "--no-collector.node", "--collector.node"]).unwrap();
        let Some(Command::Serve(args)) = cli.command else { panic!("serve subcommand") };
        assert!(args.overrides().iter().any(|(k, v)| k == "collector.node.enabled" && v.clone().into_bool().unwrap()));
    }

    /// Every collector of the registry has its `--collector.<name>` and `--no-collector.<name>`.
    #[test]
    fn every_registered_collector_has_its_flags() {
        let load = |flags| {
            let sources = memlock_core::config::Sources { file: None, env: Some(Default::default()), flags };
            memlock_core::config::load(&sources).unwrap()
        };
        for registration in memlock_core::collect::REGISTRY {
            let name = registration.name;
            let cli = Cli::try_parse_from(["memlock-exporter", &format!("--collector.{name}")]).unwrap();
            assert!(load(cli.serve.overrides()).collector(name).unwrap().enabled, "{name}");
            let cli = Cli::try_parse_from(["memlock-exporter", &format!("--no-collector.{name}")]).unwrap();
            assert!(!load(cli.serve.overrides()).collector(name).unwrap().enabled, "{name}");
        }
    }

    #[test]
    fn unknown_flags_are_usage_errors() {
        let err = Cli::try_parse_from(["memlock-exporter", "--web.listen-adress", "x"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }
}
