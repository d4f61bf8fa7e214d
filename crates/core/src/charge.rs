//! The one definition of a quantity charged against a limit: how much is used, the limit, the
//! headroom left and the usage ratio. The exported ratios, the trend analysis, the fast path and
//! `check` all compute them here, so a process over its limit reads the same everywhere (ratio
//! 2.0 is "200 %, 0 B left", not "100 %").

/// `used_bytes` of a scope against its `limit_bytes`.
///
/// - Process: VmPin or VmLck against the soft RLIMIT_MEMLOCK, each counter on its own, as the
///   kernel checks them (`ib_umem_get` in drivers/infiniband/core/umem.c compares
///   `mm->pinned_vm`, `mlock_fixup`/`do_mlock` in mm/mlock.c compare `mm->locked_vm`).
///   `enforced` is false for a holder of CAP_IPC_LOCK in the initial user namespace.
/// - Cgroup: the working set against the effective memory limit.
/// - Node: memory not available (MemTotal − MemAvailable) against MemTotal minus the floor, so
///   the headroom is what MemAvailable still has above the floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    pub used_bytes: u64,
    /// `None`: no limit (unlimited, or unknown).
    pub limit_bytes: Option<u64>,
    /// Whether exceeding the limit is refused. An exempt scope keeps its ratio (it is still
    /// exported) but has no headroom to run out of.
    pub enforced: bool,
    /// Of `used_bytes`, what is the scope's own: a process's locked pages counted once among the
    /// processes that lock them (its proportional share, `kernel::smaps_rollup`). It ranks
    /// ([`Charge::urgency`]) and is never compared with the limit, which the kernel checks
    /// against the whole. `None`: all of it.
    pub(crate) own_bytes: Option<u64>,
}

/// A charge holding less than this is not a job's: one NCCL communicator registers tens of MiB
/// (docs/check.md).
pub(crate) const SMALL_BYTES: u64 = 1 << 20;

impl Charge {
    /// How urgent the charge is, for every ranking (top_n, the series budget, the fast path's
    /// bound, the trend cap, the cgroup aggregates): its enforced usage ratio up to 1. A counter
    /// at or over its limit cannot grow (the kernel refuses the next byte, and growing never takes
    /// a counter past its limit: only lowering the limit does, which any user may do to their own
    /// processes), so no ratio above 1 is more urgent than 1. A charge holding less than
    /// [`SMALL_BYTES`] is least urgent (0), whatever its ratio: a ratio is free to buy with a
    /// limit a user lowered themselves, and a crowd of processes each mlocking a few KiB above,
    /// or just under, a soft limit they set would otherwise outrank a job ramping to its limit.
    /// Shared pages are not free urgency either: the ratio and the size are those of the scope's
    /// own bytes ([`Charge::own_bytes`]), so a crowd locking one memfd ranks by its share of it.
    /// Ties rank by bytes. `None` where the limit is not enforced.
    pub(crate) fn urgency(&self) -> Option<f64> {
        let own = self.own_bytes.map_or(self.used_bytes, |own| own.min(self.used_bytes));
        let own = Charge { used_bytes: own, own_bytes: None, ..*self };
        let ratio = own.enforced_ratio()?;
        Some(match ratio {
            _ if own.used_bytes < SMALL_BYTES => 0.0,
            r if r < 1.0 => r,
            _ => 1.0,
        })
    }

    pub fn enforced(used_bytes: u64, limit_bytes: Option<u64>) -> Self {
        Self { used_bytes, limit_bytes, enforced: true, own_bytes: None }
    }

    /// Bytes left before the limit, 0 when at or over it; `None` without an enforced limit.
    pub fn headroom_bytes(&self) -> Option<u64> {
        self.limit_bytes.filter(|_| self.enforced).map(|limit| limit.saturating_sub(self.used_bytes))
    }

    /// `used / limit`, above 1 when over the limit; `None` without a limit or when it is 0 (a
    /// soft memlock limit of 0 refuses every lock with EPERM: no ratio describes that).
    pub fn ratio(&self) -> Option<f64> {
        let limit = self.limit_bytes.filter(|&limit| limit > 0)?;
        Some(self.used_bytes as f64 / limit as f64)
    }

    /// The ratio where the limit is enforced: what alerts compare with their thresholds.
    pub(crate) fn enforced_ratio(&self) -> Option<f64> {
        self.ratio().filter(|_| self.enforced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn over_the_limit_the_ratio_passes_one_and_the_headroom_stops_at_zero() {
        let over = Charge::enforced(16 * MIB, Some(8 * MIB));
        assert_eq!(over.ratio(), Some(2.0));
        assert_eq!(over.headroom_bytes(), Some(0));
        let under = Charge::enforced(6 * MIB, Some(8 * MIB));
        assert_eq!(under.ratio(), Some(0.75));
        assert_eq!(under.headroom_bytes(), Some(2 * MIB));
    }

    #[test]
    fn urgency_is_the_ratio_up_to_one_and_nothing_for_a_charge_too_small_to_be_a_job() {
        let urgency = |used, limit| Charge::enforced(used, Some(limit)).urgency();
        assert_eq!(urgency(6 * MIB, 8 * MIB), Some(0.75));
        assert_eq!(urgency(16 * MIB, 8 * MIB), Some(1.0), "over a limit: cannot grow");
        assert_eq!(urgency(MIB, 2 * MIB), Some(0.5), "from SMALL_BYTES on");
        assert_eq!(urgency(60 << 10, 64 << 10), Some(0.0), "0.94 of a limit its owner lowered");
        assert_eq!(urgency(64 << 10, 4 << 10), Some(0.0), "16 times a limit its owner lowered");
        assert_eq!(urgency(0, 8 * MIB), Some(0.0));
        assert_eq!(Charge { enforced: false, ..Charge::enforced(6 * MIB, Some(8 * MIB)) }.urgency(), None);
    }

    #[test]
    fn shared_pages_rank_by_the_share_and_the_limit_still_sees_the_whole() {
        // One of 40 processes locking the same 8 MiB memfd, its limit lowered to 8 MiB.
        let crowd = Charge { own_bytes: Some(8 * MIB / 40), ..Charge::enforced(8 * MIB, Some(8 * MIB)) };
        assert_eq!(crowd.urgency(), Some(0.0), "205 KiB of its own: not a job's");
        assert_eq!((crowd.ratio(), crowd.headroom_bytes()), (Some(1.0), Some(0)), "the kernel checks VmLck");
        let half = Charge { own_bytes: Some(3 * MIB), ..Charge::enforced(6 * MIB, Some(8 * MIB)) };
        assert_eq!(half.urgency(), Some(0.375));
        let unshared = Charge { own_bytes: Some(7 * MIB), ..Charge::enforced(6 * MIB, Some(8 * MIB)) };
        assert_eq!(unshared.urgency(), Some(0.75), "never more than the whole");
    }

    #[test]
    fn no_limit_a_zero_limit_and_an_exemption() {
        assert_eq!(Charge::enforced(MIB, None).ratio(), None);
        assert_eq!(Charge::enforced(MIB, None).headroom_bytes(), None);
        let zero = Charge::enforced(0, Some(0));
        assert_eq!((zero.ratio(), zero.headroom_bytes()), (None, Some(0)));
        let exempt = Charge { used_bytes: 16 * MIB, limit_bytes: Some(8 * MIB), enforced: false, own_bytes: None };
        assert_eq!(exempt.ratio(), Some(2.0), "still exported");
        assert_eq!((exempt.enforced_ratio(), exempt.headroom_bytes()), (None, None));
    }
}
