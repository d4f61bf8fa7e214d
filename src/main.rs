//! memlock-exporter: samples locked and pinned memory against every limit that can make an RDMA
//! registration (`ibv_reg_mr`) or `mlock` fail, exports it to Prometheus, and pages before a job
//! fails. The binary is the command line ([`cli`]), the daemon's wiring ([`daemon`]: its own
//! metrics, reload, systemd's watchdog), [`reload`]'s file watch, [`sdnotify`], [`logging`] and
//! [`heap`]; the work is in the member crates (crates/: kernel, core, http, preflight).

mod cli;
mod daemon;
mod heap;
mod logging;
mod manpages;
mod reload;
mod sdnotify;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use cli::{Cli, Command, ServeArgs};
use memlock_core::exit;
use memlock_preflight::{check, drill, estimate};

/// Runs before Rust's runtime and `main`: the daemon's stop signals are held from the first
/// instruction that is ours until its handlers are in place (see `daemon::hold_stop_signals`).
#[used]
#[link_section = ".init_array"]
static HOLD_STOP_SIGNALS: extern "C" fn() = daemon::hold_stop_signals;

/// Counts the heap in use for `memlock_exporter_heap_allocated_bytes` (see `heap`). Not in the
/// binary's unit tests: `heap`'s own test counts its blocks exactly, which other tests' threads
/// allocating through the same counter would upset.
#[cfg(not(test))]
#[global_allocator]
static ALLOCATOR: heap::CountingAllocator = heap::CountingAllocator;

/// How long the exit waits for queued log lines to reach stderr.
const LOG_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

fn main() -> ExitCode {
    heap::mark_installed();
    let cli = Cli::parse();
    if !matches!(cli.command, None | Some(Command::Serve(_))) {
        daemon::release_stop_signals();
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
    let config = match daemon::load_config(&args) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("memlock-exporter: {err}");
            return ExitCode::from(exit::USAGE);
        }
    };
    logging::init(config.log_level, config.log_format);
    let code = match daemon::run(config, &args) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(err) => {
            tracing::error!(error = %err, "exiting");
            eprintln!("memlock-exporter: {err}");
            ExitCode::from(err.exit_code())
        }
    };
    // The log's last lines are queued (logging never waits for stderr's reader): give them a
    // moment to be written, not longer, as a reader that stopped never takes them.
    logging::flush(LOG_FLUSH);
    code
}
