use std::process::ExitCode;

use clap::Parser;
use memlock_exporter::cli::{Cli, Command};
use memlock_exporter::{exit, logging, serve};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::Serve(args)) => args,
        None => cli.serve,
    };
    let config = match serve::load_config(&args) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("memlock-exporter: {err}");
            return ExitCode::from(exit::USAGE);
        }
    };
    logging::init(config.log_level, config.log_format);
    match serve::run(config) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(err) => {
            tracing::error!(error = %err, "exiting");
            eprintln!("memlock-exporter: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}
