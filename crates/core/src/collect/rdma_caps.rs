//! The NIC's own caps on registration: per device the most MRs it holds (`max_mr`), the largest
//! one (`max_mr_size`) and the most protection domains (`max_pd`), read with `ibv_query_device`
//! through rdma-core's libibverbs, loaded at run time with dlopen(3) as `drill --mode rdma` loads
//! it: the binary links nothing, and a node without rdma-core exports
//! `memlock_rdma_device_caps_supported 0` with the reason, never an error.
//!
//! The struct is rdma-core's `struct ibv_device_attr` (libibverbs/verbs.h), filled by
//! `ibv_query_device` (IBVERBS_1.1, libibverbs/libibverbs.map.in) from the kernel's answer to
//! IB_USER_VERBS_CMD_QUERY_DEVICE: `ib_uverbs_query_device` copies `ib_device->attrs`
//! (`copy_query_dev_fields`, drivers/infiniband/core/uverbs_cmd.c) as each driver's query_device
//! set them. EFA has no total cap on registered pages in it: its cap on pages per MR
//! (`max_mr_pages` of the device attributes) reaches user space as `max_mr_size`
//! (drivers/infiniband/hw/efa/efa_verbs.c `efa_query_device`). MRs in use come from RDMA netlink
//! (`memlock_rdma_resources{type="mr"}`); the rule MemlockRdmaMrsNearDeviceCap compares them.
//!
//! Caps do not change while a device exists: each device is opened and queried once (an open
//! allocates a user context in the driver), and again only when the device list changes.

use std::any::Any;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use crate::budget::Grants;
use crate::collect::{Collector, Data, Stats};
use crate::exposition::{Exposition, Kind};
use crate::verbs::{Library, LoadError};
use memlock_kernel::fsroot::SourceError;

pub use crate::verbs::LIBIBVERBS;

/// rdma-core's `struct ibv_device_attr` (libibverbs/verbs.h), field for field; `ibv_query_device`
/// writes all of it.
#[repr(C)]
#[derive(Clone, Copy)]
// Fields not read are there for the C layout.
#[allow(dead_code)]
struct IbvDeviceAttr {
    fw_ver: [c_char; 64],
    node_guid: u64,
    sys_image_guid: u64,
    max_mr_size: u64,
    page_size_cap: u64,
    vendor_id: u32,
    vendor_part_id: u32,
    hw_ver: u32,
    max_qp: c_int,
    max_qp_wr: c_int,
    device_cap_flags: u32,
    max_sge: c_int,
    max_sge_rd: c_int,
    max_cq: c_int,
    max_cqe: c_int,
    max_mr: c_int,
    max_pd: c_int,
    /// max_qp_rd_atom through max_srq_sge: 19 ints and the `enum ibv_atomic_cap`.
    rest: [c_int; 20],
    max_pkeys: u16,
    local_ca_ack_delay: u8,
    phys_port_cnt: u8,
}

type QueryDevice = unsafe extern "C" fn(*mut c_void, *mut IbvDeviceAttr) -> c_int;

/// libibverbs with the one call this collector adds.
struct Verbs {
    library: Library,
    query_device: QueryDevice,
}

/// Why the caps are not exported, as the `reason` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsupported {
    /// dlopen failed: rdma-core's libibverbs is not installed.
    LibraryNotFound,
    /// The library lacks a verbs symbol (not rdma-core's).
    SymbolMissing,
    /// libibverbs lists no device (no verbs driver, or no ib_uverbs).
    NoDevices,
    /// No device could be opened or queried (no access to /dev/infiniband/uverbs*).
    OpenFailed,
}

impl Unsupported {
    pub fn as_str(self) -> &'static str {
        match self {
            Unsupported::LibraryNotFound => "library_not_found",
            Unsupported::SymbolMissing => "symbol_missing",
            Unsupported::NoDevices => "no_devices",
            Unsupported::OpenFailed => "open_failed",
        }
    }
}

impl Verbs {
    fn load(name: &str) -> Result<Verbs, (Unsupported, String)> {
        let unsupported = |err: LoadError| match err {
            LoadError::Library { .. } => (Unsupported::LibraryNotFound, err.to_string()),
            LoadError::Symbol { .. } => (Unsupported::SymbolMissing, err.to_string()),
        };
        let library = Library::load(name).map_err(unsupported)?;
        let query_device = library.symbol("ibv_query_device").map_err(unsupported)?;
        // SAFETY: the address is rdma-core's ibv_query_device, whose prototype (verbs.h) the fn
        // type mirrors.
        let query_device = unsafe { std::mem::transmute::<*mut c_void, QueryDevice>(query_device) };
        Ok(Verbs { library, query_device })
    }

    /// The names of the devices libibverbs lists, and the caps of those in `wanted` (opened and
    /// queried; a device that cannot be is left out).
    fn query(&self, wanted: impl Fn(&str) -> bool) -> (Vec<String>, BTreeMap<String, DeviceCaps>) {
        let listed = self.library.devices(|devices| {
            let mut caps = BTreeMap::new();
            for device in devices.iter().filter(|device| wanted(device.name)) {
                let Ok(context) = self.library.open(*device) else { continue };
                // SAFETY: all-zero is a valid value of this plain C struct.
                let mut attr: IbvDeviceAttr = unsafe { std::mem::zeroed() };
                // SAFETY: an open context and a struct of the size ibv_query_device writes.
                if unsafe { (self.query_device)(context.as_ptr(), &mut attr) } == 0 {
                    caps.insert(
                        device.name.to_owned(),
                        DeviceCaps {
                            max_mr: u64::try_from(attr.max_mr).unwrap_or(0),
                            max_mr_size: attr.max_mr_size,
                            max_pd: u64::try_from(attr.max_pd).unwrap_or(0),
                        },
                    );
                }
            }
            (devices.iter().map(|device| device.name.to_owned()).collect(), caps)
        });
        listed.unwrap_or_default()
    }
}

/// A per-device family: its name, its help and its value.
type Family = (&'static str, &'static str, fn(&DeviceCaps) -> u64);

/// One device's caps, as its driver reported them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    pub max_mr: u64,
    pub max_mr_size: u64,
    pub max_pd: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RdmaCapsStats {
    /// `None`: supported, with the caps of `devices`.
    pub unsupported: Option<Unsupported>,
    pub devices: BTreeMap<String, DeviceCaps>,
}

pub struct RdmaCapsCollector {
    library: String,
    verbs: Option<Result<Verbs, Unsupported>>,
    /// The caps of the device list last seen.
    known: BTreeMap<String, DeviceCaps>,
    known_names: Vec<String>,
}

impl RdmaCapsCollector {
    /// Loads `library` (normally [`LIBIBVERBS`]) at the first collection.
    pub fn new(library: impl Into<String>) -> Self {
        Self { library: library.into(), verbs: None, known: BTreeMap::new(), known_names: Vec::new() }
    }

    pub fn read(&mut self) -> RdmaCapsStats {
        let library = self.library.clone();
        let verbs = self.verbs.get_or_insert_with(|| {
            Verbs::load(&library).map_err(|(why, detail)| {
                tracing::info!(library = %library, reason = why.as_str(), "RDMA device caps not exported: {detail}");
                why
            })
        });
        let verbs = match verbs {
            Ok(verbs) => verbs,
            Err(why) => return RdmaCapsStats { unsupported: Some(*why), devices: BTreeMap::new() },
        };
        // Open only devices not queried yet: the list is cheap (sysfs), an open is not.
        let known = &self.known;
        let (names, fresh) = verbs.query(|name| !known.contains_key(name));
        if names != self.known_names {
            self.known.retain(|name, _| names.contains(name));
            self.known_names = names.clone();
        }
        self.known.extend(fresh);
        let unsupported = if names.is_empty() {
            Some(Unsupported::NoDevices)
        } else if self.known.is_empty() {
            Some(Unsupported::OpenFailed)
        } else {
            None
        };
        RdmaCapsStats { unsupported, devices: self.known.clone() }
    }
}

impl Collector for RdmaCapsCollector {
    fn name(&self) -> &'static str {
        "rdma_caps"
    }

    fn collect(&mut self, _errors: &mut Vec<SourceError>) -> Option<Data> {
        Some(Arc::new(self.read()))
    }
}

impl Stats for RdmaCapsStats {
    fn render(&self, out: &mut Exposition, _grants: &Grants) {
        out.family(
            "memlock_rdma_device_caps_supported",
            "1 when the RDMA devices' caps could be read with ibv_query_device through rdma-core's libibverbs, \
                loaded at run time; 0 with the reason otherwise: library_not_found (rdma-core not installed), \
                symbol_missing, no_devices (libibverbs lists none), open_failed (no device could be opened: \
                /dev/infiniband access).",
            Kind::Gauge,
        );
        let reason = self.unsupported.map_or("", Unsupported::as_str);
        out.sample(&[("reason", reason)], self.unsupported.is_none());
        let families: [Family; 3] = [
            (
                "memlock_rdma_device_max_mr",
                "The most memory regions the device holds (ibv_query_device max_mr).",
                |c| c.max_mr,
            ),
            (
                "memlock_rdma_device_max_mr_size_bytes",
                "The largest memory region the device registers (ibv_query_device max_mr_size).",
                |c| c.max_mr_size,
            ),
            (
                "memlock_rdma_device_max_pd",
                "The most protection domains the device holds (ibv_query_device max_pd).",
                |c| c.max_pd,
            ),
        ];
        for (name, help, value) in families {
            out.family(name, help, Kind::Gauge);
            for (device, caps) in &self.devices {
                out.sample(&[("device", device.as_str())], value(caps));
            }
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// This collector's entry in the registry ([`crate::collect::REGISTRY`]): its name, flags,
/// default interval and settings.
pub(crate) const REGISTRATION: super::Registration = super::Registration {
    name: "rdma_caps",
    reads: "RDMA device caps (max_mr, max_mr_size) with ibv_query_device, libibverbs loaded at run time",
    default_interval: "60s",
    default_enabled: true,
    settings: &super::settings::Plain(|_| Box::new(RdmaCapsCollector::new(LIBIBVERBS))),
};

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(stats: &RdmaCapsStats) -> String {
        let mut out = Exposition::new();
        stats.render(&mut out, &Grants::default());
        out.finish()
    }

    #[test]
    fn the_struct_has_rdma_cores_layout() {
        // verbs.h: 64 bytes of fw_ver, four u64, three u32, 29 ints, u16, two u8, padded to 8.
        assert_eq!(std::mem::size_of::<IbvDeviceAttr>(), 232);
        assert_eq!(std::mem::offset_of!(IbvDeviceAttr, max_mr_size), 80);
        assert_eq!(std::mem::offset_of!(IbvDeviceAttr, max_mr), 136);
        assert_eq!(std::mem::offset_of!(IbvDeviceAttr, max_pd), 140);
        assert_eq!(std::mem::offset_of!(IbvDeviceAttr, max_pkeys), 224);
    }

    #[test]
    fn without_rdma_core_the_series_are_absent_and_the_gauge_says_why() {
        let mut collector = RdmaCapsCollector::new("libibverbs-not-installed.so.1");
        let mut errors = Vec::new();
        let stats = collector.collect(&mut errors).unwrap();
        assert!(errors.is_empty(), "never an error: {errors:?}");
        let stats = stats.as_any().downcast_ref::<RdmaCapsStats>().unwrap();
        assert_eq!(stats.unsupported, Some(Unsupported::LibraryNotFound));
        let text = rendered(stats);
        assert!(text.contains("memlock_rdma_device_caps_supported{reason=\"library_not_found\"} 0\n"), "{text}");
        assert!(!text.lines().any(|l| l.starts_with("memlock_rdma_device_max")), "{text}");
        // The next run does not retry the load (nor log again).
        assert_eq!(collector.read().unsupported, Some(Unsupported::LibraryNotFound));
        // A library without the verbs (libc is in every process) is not rdma-core's.
        assert_eq!(RdmaCapsCollector::new("libc.so.6").read().unsupported, Some(Unsupported::SymbolMissing));
    }

    #[test]
    fn caps_render_per_device() {
        let mut devices = BTreeMap::new();
        devices.insert("mlx5_0".to_owned(), DeviceCaps { max_mr: 16777216, max_mr_size: u64::MAX, max_pd: 16777216 });
        devices.insert("efa_0".to_owned(), DeviceCaps { max_mr: 262144, max_mr_size: 103079215104, max_pd: 256 });
        let text = rendered(&RdmaCapsStats { unsupported: None, devices });
        assert!(text.contains("memlock_rdma_device_caps_supported{reason=\"\"} 1\n"), "{text}");
        assert!(text.contains("memlock_rdma_device_max_mr{device=\"efa_0\"} 262144\n"), "{text}");
        assert!(text.contains("memlock_rdma_device_max_mr_size_bytes{device=\"efa_0\"} 103079215104\n"), "{text}");
        assert!(text.contains("memlock_rdma_device_max_mr_size_bytes{device=\"mlx5_0\"} 18446744073709551615\n"));
        assert!(text.contains("memlock_rdma_device_max_pd{device=\"mlx5_0\"} 16777216\n"), "{text}");
    }
}
