//! The NIC's own cap on memory regions: past `max_mr` every `ibv_reg_mr` on the device fails,
//! whatever the memlock limit. Judged as the rule MemlockRdmaMrsNearDeviceCap judges it, on the
//! same ratio (policy.rs), from the same two sources the daemon exports: the caps from
//! `ibv_query_device` and the MRs in use from RDMA netlink.

use memlock_core::collect::rdma_caps::Unsupported;

use super::for_job::ALERT_MRS_NEAR_CAP;
use super::percent;
use crate::findings::{Finding, Status};
use crate::machine::NicCaps;
use crate::policy;

const FIX: &str =
    "free MRs: bound the registration cache of the library that holds them (UCX: UCX_RCACHE_MAX_REGIONS; \
    libfabric: FI_MR_CACHE_MAX_COUNT) or restart the holder; `rdma resource show mr` names the owners \
    (docs/runbooks.md#memlockrdmamrsneardevicecap)";

/// Findings for the devices on this node: nothing without RDMA devices or when the caps were
/// not read from the live node (`caps` is `None` for a fixture tree).
pub fn findings(caps: Option<&NicCaps>, has_devices: bool) -> Vec<Finding> {
    let (Some(nic), true) = (caps, has_devices) else { return Vec::new() };
    if let Some(why) = nic.caps.unsupported {
        let measured = match why {
            Unsupported::LibraryNotFound => "not read: rdma-core's libibverbs.so.1 is not installed",
            Unsupported::SymbolMissing => "not read: libibverbs.so.1 lacks ibv_query_device (not rdma-core's)",
            Unsupported::NoDevices => "not read: libibverbs lists no device (no verbs driver or ib_uverbs)",
            Unsupported::OpenFailed => "not read: no device could be opened (access to /dev/infiniband)",
        };
        return vec![Finding::new("rdma.mr_cap", Status::Pass, measured, "")];
    }
    let mut out = Vec::new();
    for (device, caps) in &nic.caps.devices {
        let id = format!("rdma.mr_cap.{device}");
        let Some(&in_use) = nic.mrs_in_use.get(device) else {
            let measured = format!("{device}: max_mr {}; MRs in use not counted (no RDMA netlink)", caps.max_mr);
            out.push(Finding::new(id, Status::Pass, measured, ""));
            continue;
        };
        let mut measured = format!("{device}: {in_use} of max_mr {} memory regions in use", caps.max_mr);
        let ratio = if caps.max_mr > 0 { in_use as f64 / caps.max_mr as f64 } else { 0.0 };
        let near = caps.max_mr > 0 && ratio >= policy::RDMA_MR_NEAR_CAP_RATIO;
        if near {
            measured.push_str(&format!(
                ", at or above {} of the cap: {ALERT_MRS_NEAR_CAP}",
                percent(policy::RDMA_MR_NEAR_CAP_RATIO)
            ));
        }
        out.push(if caps.max_mr > 0 && in_use >= caps.max_mr {
            Finding::new(id, Status::Fail, format!("{measured}; every ibv_reg_mr on it fails"), FIX)
        } else if near {
            Finding::new(id, Status::Warn, measured, FIX)
        } else {
            Finding::new(id, Status::Pass, measured, "")
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlock_core::collect::rdma_caps::{DeviceCaps, RdmaCapsStats};
    use std::collections::BTreeMap;

    fn nic(max_mr: u64, in_use: Option<u64>) -> NicCaps {
        let mut caps = RdmaCapsStats::default();
        caps.devices.insert("mlx5_0".to_owned(), DeviceCaps { max_mr, max_mr_size: u64::MAX, max_pd: 1 << 24 });
        let mrs_in_use = in_use.map(|n| BTreeMap::from([("mlx5_0".to_owned(), n)])).unwrap_or_default();
        NicCaps { caps, mrs_in_use }
    }

    fn status(max_mr: u64, in_use: u64) -> Status {
        let out = findings(Some(&nic(max_mr, Some(in_use))), true);
        assert_eq!(out.len(), 1, "{out:?}");
        out[0].status
    }

    #[test]
    fn mrs_are_judged_on_the_rules_ratio() {
        // rxe's max_mr as ibv_devinfo printed it in the soft-RoCE VM.
        let cap = 524_287;
        let at = (cap as f64 * policy::RDMA_MR_NEAR_CAP_RATIO).ceil() as u64;
        assert_eq!(status(cap, 10), Status::Pass);
        assert_eq!(status(cap, at - 1), Status::Pass);
        assert_eq!(status(cap, at), Status::Warn);
        assert_eq!(status(cap, cap - 1), Status::Warn);
        assert_eq!(status(cap, cap), Status::Fail);
        let out = findings(Some(&nic(cap, Some(cap))), true);
        assert!(out[0].measured.contains("every ibv_reg_mr on it fails"), "{out:?}");
        assert!(out[0].fix.contains("UCX_RCACHE_MAX_REGIONS"), "{out:?}");
        let warn = findings(Some(&nic(cap, Some(at))), true);
        assert!(warn[0].measured.contains("MemlockRdmaMrsNearDeviceCap"), "{warn:?}");
    }

    #[test]
    fn what_was_not_read_is_said_and_passes() {
        assert!(findings(None, true).is_empty(), "a fixture tree: nothing");
        assert!(findings(Some(&nic(100, Some(100))), false).is_empty(), "no RDMA devices: nothing");
        let uncounted = findings(Some(&nic(100, None)), true);
        assert_eq!(uncounted[0].status, Status::Pass);
        assert!(uncounted[0].measured.contains("not counted"), "{uncounted:?}");
        let missing = NicCaps {
            caps: RdmaCapsStats { unsupported: Some(Unsupported::LibraryNotFound), ..Default::default() },
            ..Default::default()
        };
        let out = findings(Some(&missing), true);
        assert_eq!((out[0].id.as_str(), out[0].status), ("rdma.mr_cap", Status::Pass));
        assert!(out[0].measured.contains("libibverbs.so.1 is not installed"), "{out:?}");
    }
}
