//! The preflight half: what a job launcher or an operator runs before or beside a job, apart from
//! the daemon. [`machine`] reads the node once; [`check`] judges it against what [`estimate`]
//! derives from the [`nccl`] model, into [`findings`]; [`job_context`] adapts the rules' input
//! and findings to the job's launcher (`--exec`, skips); [`drill`] ramps real pinned or locked
//! memory until the kernel refuses, through libibverbs loaded at run time ([`drill::verbs`]).
//!
//! It stands on memlock-kernel and memlock-core (the parsers and bounded reader, the collectors'
//! readers, gdr, units) and on no HTTP code; the daemon never imports it, only the binary's
//! command line does, to name the commands' flags.

pub mod check;
pub mod drill;
pub mod estimate;
pub mod findings;
pub mod job_context;
pub mod machine;
pub mod nccl;
pub mod policy;
#[cfg(test)]
mod policy_drift;

use std::io::{self, Write};

/// Writes a subcommand's report. A reader that went away (`| head -c 400`) is not an error:
/// nobody wants the rest, so it is dropped quietly and the command keeps its exit status, as
/// ripgrep does. Rust ignores SIGPIPE, so without this the write fails and `println!` panics.
pub(crate) fn write_report(out: &mut dyn Write, text: &str) -> io::Result<()> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// [`write_report`] to stdout.
pub(crate) fn print_report(text: &str) -> io::Result<()> {
    write_report(&mut io::stdout().lock(), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stdout whose every write fails with `errno`.
    struct Failing(i32);

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from_raw_os_error(self.0))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_reader_that_went_away_is_not_an_error_but_a_full_disk_is() {
        assert!(write_report(&mut Failing(libc::EPIPE), "report\n").is_ok());
        let err = write_report(&mut Failing(libc::ENOSPC), "report\n").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        let mut out = Vec::new();
        write_report(&mut out, "report\n").unwrap();
        assert_eq!(out, b"report\n");
    }
}
