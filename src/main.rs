use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use memlock_exporter::cli::{Cli, Command, ServeArgs};
use memlock_exporter::preflight::{check, drill, estimate};
use memlock_exporter::{exit, logging, manpages, serve};

/// Runs before Rust's runtime and `main`: the daemon's stop signals are held from the first
/// instruction that is ours until its handlers are in place (see `serve::hold_stop_signals`).
#[used]
#[link_section = ".init_array"]
static HOLD_STOP_SIGNALS: extern "C" fn() = serve::hold_stop_signals;

/// Counts the heap in use for `memlock_exporter_heap_allocated_bytes` (see `heap`).
#[global_allocator]
static ALLOCATOR: memlock_exporter::heap::CountingAllocator = memlock_exporter::heap::CountingAllocator;

fn main() -> ExitCode {
    memlock_exporter::heap::mark_installed();
    let cli = Cli::parse();
    if !matches!(cli.command, None | Some(Command::Serve(_))) {
        serve::release_stop_signals();
    }
    match cli.command {
        None => run_serve(cli.serve),
        Some(Command::Serve(args)) => run_serve(args),
        Some(Command::Estimate(args)) => ExitCode::from(estimate::run(&args)),
        Some(Command::Check(args)) => ExitCode::from(check::run(&args)),
        Some(Command::Drill(args)) => run_drill(&args),
        Some(Command::Manpages(args)) => ExitCode::from(manpages::run(Cli::command(), &args)),
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
