//! The kernel functions the failures collector probes, and what their return values mean.

use crate::collect::process::Counter;

/// What the kernel checks a refused request against, where this collector can read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The process's own counter (VmPin or VmLck) plus the size against its soft limit.
    Process(Counter),
    /// The user's counter (not in /proc): a failure of this function is the limit.
    User,
}

/// One probed kernel function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// The function, also the `call` label.
    pub function: &'static str,
    /// The size argument's position (`$argN`, Documentation/trace/kprobetrace.rst).
    pub(crate) size_arg: usize,
    /// The modules that may hold the function when it is not built in, by kernel version:
    /// probed there before they are loaded (see [`Call::size_fetch`]).
    pub modules: &'static [&'static str],
    /// Bytes per unit of the size argument: 0 for pages (the page size).
    pub(crate) size_unit: u64,
    /// `$retval`'s type: the function's return type.
    pub(crate) ret_type: &'static str,
    /// The return probe's filter (kernel/trace/trace_events_filter.c syntax): failures only.
    pub(crate) failure_filter: &'static str,
    pub check: Check,
}

impl Call {
    /// The errno of a return value that is a failure, `None` for a success.
    pub fn errno(&self, ret: i128) -> Option<i32> {
        match self.ret_type {
            // bool: false is the refusal, which the caller turns into -ENOMEM (shmem_lock).
            "u8" => (ret == 0).then_some(libc::ENOMEM),
            // ERR_PTR: -MAX_ERRNO..-1; any other value is a pointer.
            _ => (-4095..0).contains(&ret).then(|| i32::try_from(-ret).unwrap_or(0)),
        }
    }

    /// The entry probe's fetch of the size. `$argN` needs the function to resolve when the probe
    /// is defined (kernel/trace/trace_probe.c, `parse_probe_vars`: only with TPARG_FL_FENTRY,
    /// which `__trace_kprobe_create` sets when `kprobe_on_func_entry` finds the symbol); for a
    /// function of a module not loaded yet, the register that holds the argument at the entry
    /// (the calling convention's), `None` on an architecture this does not know.
    pub(crate) fn size_fetch(&self, resolved: bool) -> Option<String> {
        if resolved {
            return Some(format!("$arg{}:u64", self.size_arg));
        }
        ARG_REGISTERS.get(self.size_arg.checked_sub(1)?).map(|register| format!("%{register}:u64"))
    }

    /// The event names' stem: the function without leading underscores.
    pub fn stem(&self) -> &'static str {
        self.function.trim_start_matches('_')
    }
}

/// The registers of the first arguments at a function's entry (x86-64 System V, AAPCS64).
#[cfg(target_arch = "x86_64")]
const ARG_REGISTERS: &[&str] = &["di", "si", "dx", "cx", "r8", "r9"];
#[cfg(target_arch = "aarch64")]
const ARG_REGISTERS: &[&str] = &["x0", "x1", "x2", "x3", "x4", "x5"];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ARG_REGISTERS: &[&str] = &[];

/// The functions, in the order they are reported.
pub(crate) const CALLS: [Call; 4] = [
    Call {
        function: "ib_umem_get",
        size_arg: 3,
        // drivers/infiniband/core/Makefile: umem.o is ib_uverbs's on 6.1 (ib_uverbs-$(CONFIG_INFINIBAND_USER_MEM)),
        // ib_core's before and again in later kernels.
        modules: &["ib_uverbs", "ib_core"],
        size_unit: 1,
        ret_type: "s64",
        failure_filter: "ret < 0 && ret >= -4095",
        check: Check::Process(Counter::Pinned),
    },
    Call {
        function: "do_mlock",
        size_arg: 2,
        modules: &[],
        size_unit: 1,
        ret_type: "s32",
        failure_filter: "ret < 0",
        check: Check::Process(Counter::Locked),
    },
    Call {
        function: "__io_account_mem",
        size_arg: 2,
        modules: &[],
        size_unit: 0,
        ret_type: "s32",
        failure_filter: "ret < 0",
        check: Check::User,
    },
    Call {
        function: "user_shm_lock",
        size_arg: 1,
        modules: &[],
        size_unit: 1,
        ret_type: "u8",
        failure_filter: "ret == 0",
        check: Check::User,
    },
];

/// The errno's name, for the label (the failures these functions return).
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::EINTR => "EINTR",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        other => return format!("E{other}"),
    };
    name.to_owned()
}
