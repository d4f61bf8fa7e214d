use std::process::ExitCode;

use clap::Parser;
use memlock_exporter::cli::{Cli, Command, ServeArgs};
use memlock_exporter::{check, drill, estimate, exit, logging, serve};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        None => run_serve(cli.serve),
        Some(Command::Serve(args)) => run_serve(args),
        Some(Command::Estimate(args)) => ExitCode::from(estimate::run(&args)),
        Some(Command::Check(args)) => ExitCode::from(check::run(&args)),
        Some(Command::Drill(args)) => run_drill(&args),
    }
}

fn run_drill(args: &drill::DrillArgs) -> ExitCode {
    match drill::run(args) {
        Ok(_) => ExitCode::from(exit::OK),
        Err(err) => {
            eprintln!("memlock-exporter drill: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}

fn run_serve(args: ServeArgs) -> ExitCode {
    let config = match serve::load_config(&args) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("memlock-exporter: {err}");
            return ExitCode::from(exit::USAGE);
        }
    };
    logging::init(config.log_level, config.log_format);
    match serve::run(config, &args) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(err) => {
            tracing::error!(error = %err, "exiting");
            eprintln!("memlock-exporter: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}
