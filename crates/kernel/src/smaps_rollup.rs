//! `/proc/PID/smaps_rollup`: the process's proportional share of the pages in its locked areas
//! (`mss->pss_locked`), which the kernel prints under the key `Locked:`.
//!
//! `VmLck` (`mm->locked_vm`) counts a page once per process that locks it: 40 processes that
//! mlock the same 8 MiB memfd show 8 MiB each, while the host holds 8 MiB. `show_smaps_rollup`
//! (fs/proc/task_mmu.c) walks every area of the mm once; `smaps_account` adds each page's size
//! divided by its map count to `pss_locked` (in `PSS_SHIFT` fixed point) for the areas with
//! `VM_LOCKED`, and `__show_smap` prints it as `Locked:` in kB (4.14 on, when smaps_rollup and
//! `pss_locked` came in; there is no `Pss_Locked:` key). Summed over the processes that share
//! them, those shares count each page once. Processes that share one mm (`clone(CLONE_VM)`)
//! each map a page once, so each shows the whole of it: this does not divide what they share.
//!
//! Reading the file walks the page tables of every area, so the collector reads it only for
//! processes with `VmLck` above 0.

use super::pid_status::parse_kb;
use super::ParseError;

/// The locked pages' proportional share, in bytes; `None` when the kernel printed no `Locked:`
/// (before 4.14 there is no file; a task without an mm gives an empty one).
pub fn pss_locked(text: &str) -> Result<Option<u64>, ParseError> {
    for (index, line) in text.split('\n').enumerate() {
        let Some(value) = line.strip_prefix("Locked:") else { continue };
        return parse_kb(index + 1, "Locked", value.trim_start()).map(Some);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/PID/smaps_rollup` of one of 4 processes mlocking the same 8 MiB memfd (6.18):
    /// `VmLck` is 8 MiB in each one's status, `Locked:` here a quarter of it.
    const SHARED: &str = "00400000-7ffc5a2e7000 ---p 00000000 00:00 0                              [rollup]\n\
        Rss:               15068 kB\nPss:                3551 kB\nPss_Dirty:           958 kB\n\
        Pss_Anon:            958 kB\nPss_File:            545 kB\nPss_Shmem:          2048 kB\n\
        Shared_Clean:      11972 kB\nShared_Dirty:       2680 kB\nPrivate_Clean:         0 kB\n\
        Private_Dirty:       416 kB\nReferenced:        12612 kB\nAnonymous:          3096 kB\n\
        KSM:                   0 kB\nLazyFree:              0 kB\nAnonHugePages:         0 kB\n\
        ShmemPmdMapped:        0 kB\nFilePmdMapped:         0 kB\nShared_Hugetlb:        0 kB\n\
        Private_Hugetlb:       0 kB\nSwap:                  0 kB\nSwapPss:               0 kB\n\
        Locked:             2048 kB\n";

    #[test]
    fn the_locked_share_counts_a_page_shared_by_four_a_quarter() {
        assert_eq!(pss_locked(SHARED), Ok(Some(2048 << 10)));
    }

    #[test]
    fn absent_when_not_printed() {
        assert_eq!(pss_locked("Rss:  4 kB\nPss:  4 kB\n"), Ok(None));
        assert_eq!(pss_locked(""), Ok(None));
    }

    #[test]
    fn a_malformed_value_is_an_error_naming_the_field() {
        let err = pss_locked("Locked:   12x kB\n").unwrap_err();
        assert!(err.to_string().contains("Locked"), "{err}");
        assert!(pss_locked("Locked:   12\n").is_err(), "a value cut short of its unit");
    }
}
