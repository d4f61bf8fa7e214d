//! `/proc/PID/status`: who a process is and what it may do: `PPid`, the real `Uid`, and the
//! five capability sets (`CapInh`, `CapPrm`, `CapEff`, `CapBnd`, `CapAmb`, written by
//! `render_cap_t()` in fs/proc/array.c as 16 hex digits).
//!
//! Only the effective set counts for RLIMIT_MEMLOCK: mlock (`can_do_mlock()` and the limit test
//! in `do_mlock()`, mm/mlock.c) and RDMA registration (`ib_umem_get()`,
//! drivers/infiniband/core/umem.c: `new_pinned > lock_limit && !capable(CAP_IPC_LOCK)`) ask
//! `capable()`, which is `ns_capable(&init_user_ns, ...)` (kernel/capability.c) on the effective
//! set. Permitted may be raised into effective by the process itself; bounding and ambient are
//! only what an exec may grant.

use super::ParseError;

/// CAP_IPC_LOCK's bit (include/uapi/linux/capability.h).
pub const CAP_IPC_LOCK: u32 = 14;

/// One capability in each of a process's sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CapHeld {
    pub effective: bool,
    pub permitted: bool,
    pub bounding: bool,
    pub ambient: bool,
}

/// The fields of `/proc/PID/status` read here. `None`: the kernel did not print it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Creds {
    pub ppid: Option<u32>,
    /// The real uid: the first of the `Uid:` line's four (real, effective, saved, filesystem).
    pub uid: Option<u32>,
    pub(crate) cap_inh: Option<u64>,
    pub(crate) cap_prm: Option<u64>,
    pub cap_eff: Option<u64>,
    pub cap_bnd: Option<u64>,
    pub(crate) cap_amb: Option<u64>,
}

impl Creds {
    /// Where `cap` is held; `None` without `CapEff` (the only set that decides).
    pub fn holds(&self, cap: u32) -> Option<CapHeld> {
        let bit = |mask: Option<u64>| mask.is_some_and(|m| cap < 64 && m & (1 << cap) != 0);
        self.cap_eff?;
        Some(CapHeld {
            effective: bit(self.cap_eff),
            permitted: bit(self.cap_prm),
            bounding: bit(self.cap_bnd),
            ambient: bit(self.cap_amb),
        })
    }
}

/// Parses the text of `/proc/PID/status`. A malformed value of a wanted key is an error naming
/// its line; text with none of them is [`ParseError::Empty`].
pub fn parse(text: &str) -> Result<Creds, ParseError> {
    let mut creds = Creds::default();
    let mut recognised = false;
    for (index, line) in text.split('\n').enumerate() {
        let Some((key, raw)) = line.split_once(':') else { continue };
        let value = raw.trim();
        let line_no = index + 1;
        let slot = match key {
            "PPid" => {
                creds.ppid = Some(number(line_no, key, value)?);
                recognised = true;
                continue;
            }
            "Uid" => {
                let real = value.split_ascii_whitespace().next().unwrap_or("");
                creds.uid = Some(number(line_no, key, real)?);
                recognised = true;
                continue;
            }
            "CapInh" => &mut creds.cap_inh,
            "CapPrm" => &mut creds.cap_prm,
            "CapEff" => &mut creds.cap_eff,
            "CapBnd" => &mut creds.cap_bnd,
            "CapAmb" => &mut creds.cap_amb,
            _ => continue,
        };
        if value.is_empty() {
            return Err(ParseError::MissingValue { line: line_no, key: key.to_owned() });
        }
        if value.len() > 16 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ParseError::NotANumber { line: line_no, key: key.to_owned(), value: value.to_owned() });
        }
        *slot = u64::from_str_radix(value, 16).ok();
        recognised = true;
    }
    if recognised {
        Ok(creds)
    } else {
        Err(ParseError::Empty)
    }
}

fn number(line: usize, key: &str, value: &str) -> Result<u32, ParseError> {
    if value.is_empty() {
        return Err(ParseError::MissingValue { line, key: key.to_owned() });
    }
    super::decimal::<u32>(value).filter(|_| !value.starts_with('-')).ok_or_else(|| ParseError::NotANumber {
        line,
        key: key.to_owned(),
        value: value.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A non-root container given IPC_LOCK (`docker run --user 1000 --cap-add IPC_LOCK`, or a
    /// pod's `securityContext.capabilities.add`): the kernel clears permitted and effective at
    /// the exec of a non-root uid without file capabilities (`cap_bprm_creds_from_file()`,
    /// security/commoncap.c), leaving it in bounding.
    const NON_ROOT_WITH_IPC_LOCK: &str = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4100\n\
        Ngid:\t0\nPid:\t4100\nPPid:\t4090\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n\
        CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n\
        CapBnd:\t00000000a80465fb\nCapAmb:\t0000000000000000\nNoNewPrivs:\t0\n";

    #[test]
    fn ipc_lock_in_bounding_only_is_not_effective() {
        let creds = parse(NON_ROOT_WITH_IPC_LOCK).unwrap();
        assert_eq!((creds.ppid, creds.uid), (Some(4090), Some(1000)));
        assert_eq!(
            creds.holds(CAP_IPC_LOCK),
            Some(CapHeld { effective: false, permitted: false, bounding: true, ambient: false })
        );
        let root = NON_ROOT_WITH_IPC_LOCK
            .replace("CapPrm:\t0000000000000000", "CapPrm:\t000001ffffffffff")
            .replace("CapEff:\t0000000000000000", "CapEff:\t000001ffffffffff")
            .replace("Uid:\t1000", "Uid:\t0");
        let creds = parse(&root).unwrap();
        assert_eq!(creds.uid, Some(0));
        assert!(creds.holds(CAP_IPC_LOCK).is_some_and(|c| c.effective && c.permitted));
    }

    #[test]
    fn malformed_values_are_errors_naming_the_line() {
        assert_eq!(
            parse("Name:\tx\nCapEff:\tzz\n"),
            Err(ParseError::NotANumber { line: 2, key: "CapEff".into(), value: "zz".into() })
        );
        assert_eq!(parse("CapBnd:\t\n"), Err(ParseError::MissingValue { line: 1, key: "CapBnd".into() }));
        assert!(matches!(parse("PPid:\t-1\n"), Err(ParseError::NotANumber { line: 1, .. })));
        assert!(matches!(parse("Uid:\t99999999999\t0\t0\t0\n"), Err(ParseError::NotANumber { .. })));
        assert!(matches!(parse("CapEff:\t00000000000000000001\n"), Err(ParseError::NotANumber { .. })));
        assert_eq!(parse(""), Err(ParseError::Empty));
        assert_eq!(parse("garbage\n\0\u{fffd}"), Err(ParseError::Empty));
        // Without CapEff nothing can be said about a capability.
        assert_eq!(parse("PPid:\t1\n").unwrap().holds(CAP_IPC_LOCK), None);
    }
}
