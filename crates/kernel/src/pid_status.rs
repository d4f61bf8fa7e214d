//! `/proc/PID/status`: the fields the process collector needs (Name, VmLck, VmPin, CapEff).
//!
//! Each line is `Key:`, a TAB, then the value; memory values are `<kB, right-aligned in 8> kB`.
//! `proc_pid_status()` (fs/proc/array.c) prints the `Vm*` block (`task_mem`) only for a task
//! with an mm (`get_task_mm`): kernel threads, zombies, and the main thread of a process that
//! called pthread_exit() while other threads run on (`exit_mm` dropped its mm) print none. So
//! a missing block alone does not make a kernel thread: `Kthread:` says it where the kernel
//! prints it (6.18 here; 6.1 does not), `/proc/PID/stat`'s flags elsewhere
//! ([`super::pid_stat`]). The key set grows with kernel versions, so lines are matched by key,
//! never by position.
//!
//! This parser runs once per process per full scan, so it borrows from the text and allocates
//! nothing: a scan of the file stops as soon as every wanted key has been seen.

use super::{field_u64, ParseError, Parsed};

/// `CAP_IPC_LOCK` (include/uapi/linux/capability.h): exempts a process from RLIMIT_MEMLOCK.
pub(crate) const CAP_IPC_LOCK_BIT: u32 = 14;

/// The parsed fields, borrowing the command name from the text. Sizes are bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status<'a> {
    /// The command name (`comm`) as the kernel printed it: `\n` and `\\` arrive escaped
    /// ([`unescape_name`] gives the name itself).
    pub name: &'a str,
    /// `Kthread:` (6.x kernels); `None` on kernels that do not print it.
    pub kthread: Option<bool>,
    /// Whether any `Vm*` line was present: false for kernel threads, zombies and a process
    /// whose main thread has exited.
    pub has_vm: bool,
    /// `VmLck`: memory locked with mlock()/mlockall(), charged to `mm->locked_vm`.
    pub locked_bytes: Option<u64>,
    /// `VmPin`: long-term pinned memory (RDMA registrations, io_uring buffers), `mm->pinned_vm`.
    pub pinned_bytes: Option<u64>,
    /// `CapEff`, the effective capability mask.
    pub cap_eff: Option<u64>,
    /// The real uid (`Uid:`'s first field): whose process it is, for sharing the places of every
    /// ranking fairly among owners.
    pub uid: Option<u32>,
}

impl Status<'_> {
    /// Whether the task is a kernel thread, as far as `status` tells: `Kthread:` where printed,
    /// else a `Vm*` block proves a user process. `None` on kernels without `Kthread:` when the
    /// block is missing: a kernel thread, or a process whose main thread exited
    /// (`/proc/PID/stat` tells them apart).
    pub fn kernel_thread(&self) -> Option<bool> {
        match self.kthread {
            Some(kthread) => Some(kthread),
            None if self.has_vm => Some(false),
            None => None,
        }
    }

    /// Whether `CAP_IPC_LOCK` is in the effective set (the memlock limit is then not enforced,
    /// as long as the capability is held in the initial user namespace). `None` without `CapEff`.
    pub fn ipc_lock(&self) -> Option<bool> {
        self.cap_eff.map(|mask| (mask >> CAP_IPC_LOCK_BIT) & 1 == 1)
    }
}

/// Parses the text of `/proc/PID/status`, all or nothing ([`Parsed::strict`]).
pub fn parse(text: &str) -> Result<Status<'_>, ParseError> {
    parse_fields(text)?.strict()
}

/// Parses the text of `/proc/PID/status` field by field: a wanted key with a malformed value
/// is an error of that field only (the field is unknown, the process still sampled). Unknown
/// keys and lines without a colon are skipped. Text without a `Name:` line is an error
/// ([`ParseError::Empty`] when nothing at all was recognised).
pub fn parse_fields(text: &str) -> Result<Parsed<Status<'_>>, ParseError> {
    let mut name = None;
    let mut kthread = None;
    let mut has_vm = false;
    let mut locked_bytes = None;
    let mut pinned_bytes = None;
    let mut cap_eff = None;
    let mut uid = None;
    let mut recognised = false;
    let mut field_errors = Vec::new();
    for (index, line) in text.split('\n').enumerate() {
        let Some((key, raw)) = line.split_once(':') else { continue };
        // The kernel writes exactly one TAB after the colon; what follows belongs to the value
        // (a comm may start or end with spaces).
        let value = raw.strip_prefix('\t').unwrap_or(raw);
        let line_no = index + 1;
        let outcome = match key {
            "Name" => {
                name = Some(value);
                Ok(())
            }
            "Kthread" => parse_flag(line_no, key, value).map(|v| kthread = Some(v)),
            "VmLck" => {
                has_vm = true;
                parse_kb(line_no, key, value).map(|v| locked_bytes = Some(v))
            }
            "VmPin" => {
                has_vm = true;
                parse_kb(line_no, key, value).map(|v| pinned_bytes = Some(v))
            }
            "CapEff" => parse_hex(line_no, key, value).map(|v| cap_eff = Some(v)),
            // `Uid:\treal\teffective\tsaved\tfs` (task_state, fs/proc/array.c).
            "Uid" => {
                let real = value.split('\t').next().unwrap_or("");
                field_u64(line_no, key, real)
                    .and_then(|v| u32::try_from(v).map_err(|_| ParseError::Overflow { line: line_no, key: key.into() }))
                    .map(|v| uid = Some(v))
            }
            _ if key.starts_with("Vm") => {
                has_vm = true;
                Ok(())
            }
            _ => continue,
        };
        if let Err(error) = outcome {
            field_errors.push(error);
        }
        recognised = true;
        if name.is_some() && locked_bytes.is_some() && pinned_bytes.is_some() && cap_eff.is_some() {
            // Everything after this point is signal masks and CPU lists.
            break;
        }
    }
    if !recognised {
        return Err(ParseError::Empty);
    }
    let Some(name) = name else {
        return Err(ParseError::Format("no Name line".into()));
    };
    Ok(Parsed { value: Status { name, kthread, has_vm, locked_bytes, pinned_bytes, cap_eff, uid }, field_errors })
}

/// The command name as the task has it. `proc_task_name()` (fs/proc/array.c) writes it to
/// `status` through `seq_escape_str(m, tcomm, ESCAPE_SPACE | ESCAPE_SPECIAL, "\n\\")`, whose
/// `only` set narrows the escaping to two characters: a newline becomes `\n`, a backslash `\\`.
/// Undone here, so the exposition escapes the name once (a newline in a label reads `\n`,
/// not `\\n`). Allocates only for a name with a backslash.
pub fn unescape_name(raw: &str) -> std::borrow::Cow<'_, str> {
    if !raw.contains('\\') {
        return std::borrow::Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('\\') => out.push('\\'),
            // Not something the kernel writes: kept as it came.
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `   47716 kB` -> bytes.
pub(crate) fn parse_kb(line: usize, key: &str, value: &str) -> Result<u64, ParseError> {
    let mut fields = value.split_ascii_whitespace();
    let Some(number) = fields.next() else {
        return Err(ParseError::MissingValue { line, key: key.to_owned() });
    };
    let kib = field_u64(line, key, number)?;
    match fields.next() {
        Some("kB") => kib.checked_mul(1024).ok_or_else(|| ParseError::Overflow { line, key: key.to_owned() }),
        // A value without its unit is a cut-off line, not a number we can trust.
        Some(unit) => Err(ParseError::Format(format!("line {line}: {key}: unknown unit {unit:?}"))),
        None => Err(ParseError::Format(format!("line {line}: {key}: no unit after {number:?}"))),
    }
}

/// `000001fffeffffff` -> mask.
fn parse_hex(line: usize, key: &str, value: &str) -> Result<u64, ParseError> {
    let digits = value.trim();
    if digits.is_empty() {
        return Err(ParseError::MissingValue { line, key: key.to_owned() });
    }
    if digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ParseError::NotANumber { line, key: key.to_owned(), value: digits.to_owned() });
    }
    u64::from_str_radix(digits, 16).map_err(|_| ParseError::NotANumber {
        line,
        key: key.to_owned(),
        value: digits.to_owned(),
    })
}

/// `0` or `1`.
fn parse_flag(line: usize, key: &str, value: &str) -> Result<bool, ParseError> {
    match value.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        "" => Err(ParseError::MissingValue { line, key: key.to_owned() }),
        other => Err(ParseError::NotANumber { line, key: key.to_owned(), value: other.to_owned() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPTURE: &str = include_str!("../../../tests/fixtures/captures/proc_self_status");

    /// `/proc/2/status` of this kernel (6.18): no Vm lines, `Kthread: 1`.
    const KTHREADD: &str = "Name:\tkthreadd\nUmask:\t0022\nState:\tS \
        (sleeping)\nTgid:\t2\nNgid:\t0\nPid:\t2\nPPid:\t0\nTracerPid:\t0\nUid:\t0\t0\t0\t0\n\
        Gid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t \nNStgid:\t2\nNSpid:\t2\nNSpgid:\t0\nNSsid:\t0\n\
        Kthread:\t1\nThreads:\t1\nSigQ:\t0/96365\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n\
        SigBlk:\t0000000000000000\nSigIgn:\tffffffffffffffff\nSigCgt:\t0000000000000000\n\
        CapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n\
        CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\nNoNewPrivs:\t0\n";

    #[test]
    fn parses_the_captured_status_of_a_root_cat() {
        let status = parse(CAPTURE).unwrap();
        assert_eq!(status.name, "cat");
        assert_eq!(status.kthread, Some(false));
        assert!(status.has_vm);
        assert_eq!(status.kernel_thread(), Some(false));
        assert_eq!(status.locked_bytes, Some(0));
        assert_eq!(status.pinned_bytes, Some(0));
        assert_eq!(status.cap_eff, Some(0x000001fffeffffff));
        assert_eq!(status.ipc_lock(), Some(true), "bit 14 is set in 000001fffeffffff");
        assert_eq!(status.uid, Some(0));
    }

    #[test]
    fn the_owner_is_the_real_uid_and_a_malformed_one_costs_only_that_field() {
        let text = "Name:\tpython3\nUid:\t65534\t0\t0\t0\nVmLck:\t    8192 kB\nVmPin:\t       0 kB\n";
        assert_eq!(parse(text).unwrap().uid, Some(65534), "real, not effective");
        let parsed = parse_fields("Name:\tx\nUid:\tx\t0\t0\t0\nVmLck:\t       4 kB\n").unwrap();
        assert_eq!((parsed.value.uid, parsed.value.locked_bytes), (None, Some(4096)));
        assert_eq!(parsed.field_errors.len(), 1);
    }

    #[test]
    fn kernel_threads_have_no_vm_lines() {
        let status = parse(KTHREADD).unwrap();
        assert_eq!(status.name, "kthreadd");
        assert!(!status.has_vm);
        assert_eq!(status.kernel_thread(), Some(true));
        assert_eq!(status.locked_bytes, None, "absent, not zero");
        assert_eq!(status.pinned_bytes, None);
        // Kernels without the Kthread line (6.1): the missing Vm block does not tell a kernel
        // thread from a process whose main thread exited.
        let old = KTHREADD.replace("Kthread:\t1\n", "");
        let status = parse(&old).unwrap();
        assert_eq!(status.kthread, None);
        assert_eq!(status.kernel_thread(), None);
    }

    /// The leader of a process that called pthread_exit() in main while a thread runs on, read
    /// on 6.18 while that thread held 4 MiB mlocked: a zombie leader without Vm lines, and
    /// `Kthread: 0`. Taken for a kernel thread, its locked memory would go unseen.
    #[test]
    fn an_exited_main_thread_is_not_a_kernel_thread() {
        let leader = "Name:\tleader_exit\nState:\tZ (zombie)\nTgid:\t23195\nNgid:\t0\nPid:\t23195\nPPid:\t1\n\
            TracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t0\nGroups:\t \nNStgid:\t23195\nNSpid:\t23195\n\
            NSpgid:\t23182\nNSsid:\t9644\nKthread:\t0\nThreads:\t2\nSigQ:\t0/96365\nSigPnd:\t0000000000000000\n\
            CapEff:\t000001ffffffffff\n";
        let status = parse(leader).unwrap();
        assert!(!status.has_vm);
        assert_eq!(status.kernel_thread(), Some(false));
        assert_eq!(status.locked_bytes, None);
    }

    #[test]
    fn gpu_worker_with_nine_gib_pinned_and_no_ipc_lock() {
        let text =
            "Name:\tpt_main_thread\nKthread:\t0\nVmPeak:\t123456789 kB\nVmSize:\t123456788 kB\nVmLck:\t       0 \
            kB\nVmPin:\t 9437184 kB\nVmHWM:\t 12000000 kB\nCapEff:\t0000000000000000\n";
        let status = parse(text).unwrap();
        assert_eq!(status.name, "pt_main_thread");
        assert_eq!(status.pinned_bytes, Some(9437184 * 1024));
        assert_eq!(status.locked_bytes, Some(0));
        assert_eq!(status.ipc_lock(), Some(false));
        assert_eq!(status.kernel_thread(), Some(false));
    }

    #[test]
    fn only_bit_14_decides_ipc_lock() {
        let with = |mask: &str| parse(&format!("Name:\tx\nVmLck:\t0 kB\nCapEff:\t{mask}\n")).unwrap().ipc_lock();
        assert_eq!(with("0000000000004000"), Some(true));
        assert_eq!(with("000001ffffffbfff"), Some(false));
        assert_eq!(parse("Name:\tx\nVmLck:\t0 kB\n").unwrap().ipc_lock(), None);
    }

    #[test]
    fn names_keep_spaces_colons_and_escapes() {
        let status = parse("Name:\t my: proc\\n \nVmLck:\t       0 kB\n").unwrap();
        assert_eq!(status.name, " my: proc\\n ");
        assert_eq!(parse("Name:\t\nVmLck:\t0 kB\n").unwrap().name, "");
    }

    #[test]
    fn wide_values_widen_the_field() {
        let status = parse("Name:\tbig\nVmLck:\t1073741824 kB\nVmPin:\t17179869184 kB\n").unwrap();
        assert_eq!(status.locked_bytes, Some(1 << 40));
        assert_eq!(status.pinned_bytes, Some(16 << 40));
    }

    #[test]
    fn malformed_wanted_values_are_errors_naming_the_line() {
        assert_eq!(
            parse("Name:\tx\nVmLck:\t   lots kB\n"),
            Err(ParseError::NotANumber { line: 2, key: "VmLck".into(), value: "lots".into() })
        );
        assert_eq!(parse("Name:\tx\nVmPin:\t"), Err(ParseError::MissingValue { line: 2, key: "VmPin".into() }));
        assert!(matches!(parse("Name:\tx\nVmPin:\t  12"), Err(ParseError::Format(_))), "cut before the unit");
        assert!(matches!(parse("Name:\tx\nVmPin:\t  12 MB\n"), Err(ParseError::Format(_))));
        assert!(matches!(parse("Name:\tx\nVmPin:\t-12 kB\n"), Err(ParseError::NotANumber { .. })));
        assert!(matches!(parse("Name:\tx\nVmLck:\t18446744073709551615 kB\n"), Err(ParseError::Overflow { .. })));
        assert!(matches!(parse("Name:\tx\nVmLck:\t99999999999999999999999 kB\n"), Err(ParseError::Overflow { .. })));
        assert!(matches!(parse("Name:\tx\nCapEff:\t00000zzzfeffffff\n"), Err(ParseError::NotANumber { .. })));
        assert!(matches!(parse("Name:\tx\nCapEff:\t0000000000000000000000\n"), Err(ParseError::NotANumber { .. })));
        assert!(matches!(parse("Name:\tx\nCapEff:\t+1\n"), Err(ParseError::NotANumber { .. })));
        assert!(matches!(parse("Name:\tx\nCapEff:\t\n"), Err(ParseError::MissingValue { .. })));
        assert!(matches!(parse("Name:\tx\nKthread:\t2\n"), Err(ParseError::NotANumber { .. })));
    }

    /// Names are unescaped once: the exposition escapes them again, and escaping on top of the
    /// kernel's escaping would show a name as it never was.
    #[test]
    fn the_kernels_escaping_of_names_is_undone_once() {
        assert_eq!(unescape_name("python3"), "python3");
        assert!(matches!(unescape_name("python3"), std::borrow::Cow::Borrowed(_)));
        // A comm "ev<newline>il\x" arrives as `ev\nil\\x`.
        assert_eq!(unescape_name("ev\\nil\\\\x"), "ev\nil\\x");
        assert_eq!(unescape_name("odd\\t"), "odd\\t", "not the kernel's: kept");
        assert_eq!(unescape_name("end\\"), "end\\");
        let status = parse("Name:\tev\\nil\nVmLck:\t0 kB\n").unwrap();
        assert_eq!(unescape_name(status.name), "ev\nil");
    }

    #[test]
    fn a_malformed_field_costs_only_that_field() {
        let parsed = parse_fields("Name:\tpython3\nVmLck:\t   lots kB\nVmPin:\t    4096 kB\nCapEff:\tzz\n").unwrap();
        let status = parsed.value;
        assert_eq!((status.name, status.locked_bytes, status.pinned_bytes), ("python3", None, Some(4 << 20)));
        assert_eq!(status.ipc_lock(), None, "CapEff unknown");
        assert_eq!(status.kernel_thread(), Some(false), "a Vm line was there, if broken");
        assert_eq!(parsed.field_errors.len(), 2, "{:?}", parsed.field_errors);
    }

    #[test]
    fn truncated_files_keep_what_was_complete() {
        // Cut inside the key of a line: that line is skipped, the rest stands.
        let cut = &CAPTURE[..CAPTURE.find("VmPin").unwrap() + 3];
        let status = parse(cut).unwrap();
        assert_eq!(status.locked_bytes, Some(0));
        assert_eq!(status.pinned_bytes, None);
        assert_eq!(status.cap_eff, None);
    }

    #[test]
    fn missing_name_empty_and_garbage_are_errors_not_panics() {
        assert_eq!(parse(""), Err(ParseError::Empty));
        assert_eq!(parse("\n\n\n"), Err(ParseError::Empty));
        assert!(matches!(parse("VmLck:\t0 kB\n"), Err(ParseError::Format(_))));
        let garbage: String = (0..2_000_000u32).map(|i| char::from(b'!' + (i % 90) as u8)).collect();
        assert_eq!(parse(&garbage), Err(ParseError::Empty));
        let lines: String = (0..200_000u32).map(|i| format!("K{i}:\t{i}\n")).collect();
        assert_eq!(parse(&lines), Err(ParseError::Empty));
        let binary = String::from_utf8_lossy(&[0xff, 0x00, b':', 0x80, b'\n', b'V', b'm', b':']).into_owned();
        assert!(parse(&binary).is_err());
    }
}
