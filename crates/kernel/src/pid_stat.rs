//! `/proc/PID/stat`: only the task flags, to tell a kernel thread on kernels whose `status` has
//! no `Kthread:` line.
//!
//! `do_task_stat()` (fs/proc/array.c) prints `pid (comm) state ppid pgrp session tty_nr tpgid
//! flags ...`; `flags` is `task->flags`, where `PF_KTHREAD` (include/linux/sched.h) marks a
//! kernel thread. The comm may hold spaces and parentheses, so the fields are counted from the
//! last `)`.

use super::ParseError;

/// `PF_KTHREAD`, include/linux/sched.h.
pub const PF_KTHREAD: u64 = 0x0020_0000;

/// Whether the task is a kernel thread (`PF_KTHREAD` in the ninth field).
pub fn is_kernel_thread(text: &str) -> Result<bool, ParseError> {
    let Some((_, after_comm)) = text.rsplit_once(')') else {
        return Err(ParseError::Format("no `)` closing the command name".into()));
    };
    // state, ppid, pgrp, session, tty_nr, tpgid, flags.
    let Some(flags) = after_comm.split_ascii_whitespace().nth(6) else {
        return Err(ParseError::MissingValue { line: 1, key: "flags".into() });
    };
    let flags = super::field_u64(1, "flags", flags)?;
    Ok(flags & PF_KTHREAD != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_threads_carry_pf_kthread() {
        // kthreadd and a user process whose leader exited (pthread_exit), both read on 6.18.
        let kthreadd = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 1 0 0 20 0 1 0 3 0 0 18446744073709551615 0 0 0";
        assert_eq!(is_kernel_thread(kthreadd), Ok(true));
        let leader = "23195 (leader_exit) Z 1 23182 9644 0 -1 4227084 93 0 0 0 0 0 0 0 20 0 2 0 5312 0 0";
        assert_eq!(is_kernel_thread(leader), Ok(false));
        // A comm with spaces and a `)` of its own.
        assert_eq!(is_kernel_thread("7 (a) b (c)) S 1 7 7 0 -1 4194560 0 0"), Ok(false));
    }

    #[test]
    fn malformed_stat_is_an_error() {
        assert!(matches!(is_kernel_thread("2 kthreadd S 0"), Err(ParseError::Format(_))));
        assert!(matches!(is_kernel_thread("2 (kthreadd) S 0 0 0"), Err(ParseError::MissingValue { .. })));
        assert!(matches!(is_kernel_thread("2 (k) S 0 0 0 0 -1 x1"), Err(ParseError::NotANumber { .. })));
        assert_eq!(is_kernel_thread(""), Err(ParseError::Format("no `)` closing the command name".into())));
    }
}
