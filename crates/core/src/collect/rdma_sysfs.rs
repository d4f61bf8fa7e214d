//! RDMA devices from sysfs: `<sysfs>/class/infiniband/<device>/` (a symlink to the device
//! directory, followed like any path), its ports, their PMA counters and the driver's
//! `hw_counters`, at device and port level.
//!
//! Everything below a device is optional: drivers differ in which files they provide, and some
//! fail reads of counters they cannot report (`EINVAL`, `EOPNOTSUPP`). Those are absent, not
//! errors. A device that disappears mid-scan (hot unplug, driver reload) is skipped.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::budget::{self, Claim, Grants, Tier};
use crate::exposition::{Exposition, Kind};
use memlock_kernel::fsroot::{self, Roots, SourceError};
use memlock_kernel::rdma_sysfs::{self as parse, Numbered};
use memlock_kernel::{parse_u64, ParseError};

use super::rdma_filter::{RawRdmaCollector, RdmaConfig};
use super::settings::{Configured, Context, Invalid};
use super::{optional, Collector, Data};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RdmaSysfsStats {
    pub devices: Vec<SysfsDevice>,
    /// The series budget's order of `devices`, made by the first render.
    ranking: budget::Ranked<budget::Order>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SysfsDevice {
    pub name: String,
    pub node_type: Option<Numbered>,
    pub node_guid: Option<String>,
    pub fw_ver: Option<String>,
    pub hca_type: Option<String>,
    pub board_id: Option<String>,
    /// mlx5 `reg_pages` in bytes: the pages of every live user memory registration on the device
    /// (host memory and dma-buf GPU memory; ODP registrations are not counted). Other drivers
    /// have no such file.
    pub registered_bytes: Option<u64>,
    /// Device-level driver counters (EFA `reg_mr_err`, ...).
    pub hw_counters: Vec<HwCounter>,
    pub ports: Vec<SysfsPort>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SysfsPort {
    pub number: u32,
    pub state: Option<Numbered>,
    pub phys_state: Option<Numbered>,
    pub rate_bytes_per_second: Option<u64>,
    pub link_layer: Option<String>,
    /// `counters/`: `(counter label, value)`, data counters already in bytes.
    pub counters: Vec<(String, u64)>,
    pub hw_counters: Vec<HwCounter>,
}

/// One file of a `hw_counters/` directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwCounter {
    pub name: String,
    pub value: u64,
    /// A level (bnxt_re `active_*`, `watermark_*`), exported as a gauge.
    pub gauge: bool,
}

pub struct RdmaSysfsCollector {
    roots: Roots,
    config: RdmaConfig,
    text: String,
    page_size: u64,
}

impl RdmaSysfsCollector {
    pub fn new(roots: Roots, config: RdmaConfig) -> Self {
        Self { roots, config, text: String::new(), page_size: procfs::page_size() }
    }

    pub fn read(&mut self, errors: &mut Vec<SourceError>) -> Option<RdmaSysfsStats> {
        let class = self.roots.sys("class/infiniband");
        // No InfiniBand support, or no RDMA device: nothing to report, and nothing wrong.
        let names = match optional(fsroot::list_dir(&class)) {
            Ok(names) => names.unwrap_or_default(),
            Err(e) => {
                errors.push(e);
                return None;
            }
        };
        let mut stats = RdmaSysfsStats::default();
        let wanted: Vec<String> = names.into_iter().filter(|n| self.config.wants(n)).collect();
        for name in wanted {
            let dir = class.join(&name);
            if let Some(device) = self.read_device(&dir, name, errors) {
                stats.devices.push(device);
            }
        }
        Some(stats)
    }

    fn read_device(&mut self, dir: &Path, name: String, errors: &mut Vec<SourceError>) -> Option<SysfsDevice> {
        match fsroot::list_dir(dir) {
            Ok(_) => {}
            Err(e) if e.is_not_found() => return None,
            Err(e) => {
                errors.push(e);
                return None;
            }
        }
        let mut device = SysfsDevice {
            node_type: self.value(&dir.join("node_type"), parse::parse_numbered, errors),
            node_guid: self.label(&dir.join("node_guid"), errors),
            fw_ver: self.label(&dir.join("fw_ver"), errors),
            hca_type: self.label(&dir.join("hca_type"), errors),
            board_id: self.label(&dir.join("board_id"), errors),
            // drivers/infiniband/hw/mlx5/main.c reg_pages_show prints priv.reg_pages ("%d\n"),
            // which mr.c raises by ib_umem_num_pages() (PAGE_SIZE pages) at every user and dma-buf
            // registration and lowers at deregistration.
            registered_bytes: self
                .value(&dir.join("reg_pages"), parse_u64, errors)
                .map(|pages| pages.saturating_mul(self.page_size)),
            hw_counters: self.hw_counters(&dir.join("hw_counters"), errors),
            ports: Vec::new(),
            name,
        };
        let ports_dir = dir.join("ports");
        let mut numbers: Vec<u32> = match absent_ok(fsroot::list_dir(&ports_dir)) {
            // Only the names the kernel gives ports ("%u"): `01` or `+1` beside `1` would be a
            // second port 1, a duplicate of every one of its series.
            Ok(names) => names.unwrap_or_default().iter().filter_map(|n| memlock_kernel::name_number(n)).collect(),
            Err(e) => {
                errors.push(e);
                Vec::new()
            }
        };
        numbers.sort_unstable();
        for number in numbers {
            let port = ports_dir.join(number.to_string());
            device.ports.push(SysfsPort {
                number,
                state: self.value(&port.join("state"), parse::parse_numbered, errors),
                phys_state: self.value(&port.join("phys_state"), parse::parse_numbered, errors),
                rate_bytes_per_second: self.value(&port.join("rate"), parse::parse_rate, errors),
                link_layer: self.label(&port.join("link_layer"), errors),
                counters: self.port_counters(&port.join("counters"), errors),
                hw_counters: self.hw_counters(&port.join("hw_counters"), errors),
            });
        }
        Some(device)
    }

    /// Reads and parses one optional file; an absent or unreadable-by-design file is `None`,
    /// anything else is recorded in `errors`.
    fn value<T>(
        &mut self,
        path: &Path,
        parse: impl FnOnce(&str) -> Result<T, ParseError>,
        errors: &mut Vec<SourceError>,
    ) -> Option<T> {
        match absent_ok(fsroot::read_into(path, &mut self.text)) {
            Ok(Some(())) => match parse(&self.text) {
                Ok(value) => Some(value),
                Err(source) => {
                    errors.push(SourceError::Parse { path: path.to_owned(), source });
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                errors.push(e);
                None
            }
        }
    }

    fn label(&mut self, path: &Path, errors: &mut Vec<SourceError>) -> Option<String> {
        self.value(path, |text| Ok(parse::label_value(text)), errors)
    }

    fn counter_files(&mut self, dir: &Path, errors: &mut Vec<SourceError>) -> Vec<(String, u64)> {
        let names = match absent_ok(fsroot::list_dir(dir)) {
            Ok(names) => names.unwrap_or_default(),
            Err(e) => {
                errors.push(e);
                return Vec::new();
            }
        };
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            if parse::hw_counter_is_setting(&name) {
                continue;
            }
            // `N/A (no PMA)` parses to None: absent, like a file the driver refuses to read.
            if let Some(Some(value)) = self.value(&dir.join(&name), parse::parse_counter, errors) {
                out.push((name, value));
            }
        }
        out
    }

    fn port_counters(&mut self, dir: &Path, errors: &mut Vec<SourceError>) -> Vec<(String, u64)> {
        self.counter_files(dir, errors)
            .into_iter()
            .map(|(file, value)| {
                let counter = parse::port_counter(&file);
                // PMA counters saturate instead of wrapping; so does the conversion to bytes.
                (counter.name.into_owned(), value.saturating_mul(counter.scale))
            })
            .collect()
    }

    fn hw_counters(&mut self, dir: &Path, errors: &mut Vec<SourceError>) -> Vec<HwCounter> {
        self.counter_files(dir, errors)
            .into_iter()
            .map(|(name, value)| HwCounter { gauge: parse::hw_counter_is_gauge(&name), name, value })
            .collect()
    }
}

/// Like [`optional`], and also treats the errors drivers return for counters they cannot
/// report (`EINVAL`, `EOPNOTSUPP`, `ENODATA`) as absent.
fn absent_ok<T>(result: Result<T, SourceError>) -> Result<Option<T>, SourceError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() || driver_declined(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

fn driver_declined(error: &SourceError) -> bool {
    matches!(error, SourceError::Io { source, .. } if is_declined(source))
}

fn is_declined(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP | libc::ENODATA))
}

impl Collector for RdmaSysfsCollector {
    fn name(&self) -> &'static str {
        "rdma_sysfs"
    }

    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data> {
        self.read(errors).map(|s| Arc::new(s) as Data)
    }
}

/// Budget classes ([`crate::budget`]): a device with its port states and device-level driver
/// counters (EFA's reg_mr_err); a port's error counters; a port's other counters.
pub(crate) const DEVICES: &str = "rdma_device";
pub(crate) const PORT_ERRORS: &str = "rdma_port_errors";
pub(crate) const PORT_COUNTERS: &str = "rdma_port_counters";

/// Whether a port or driver counter counts errors, drops or retries (IBTA PMA `symbol_error`,
/// `link_downed`, `port_xmit_discards`, `VL15_dropped`...; mlx5 `out_of_buffer`,
/// `local_ack_timeout_err`, `rnr_nak_retry_err`...) rather than traffic.
pub(crate) fn is_error_counter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["err", "discard", "drop", "downed", "out_of_", "duplicate", "timeout", "retry", "integrity", "overrun"]
        .iter()
        .any(|word| name.contains(word))
}

impl SysfsDevice {
    fn series(&self) -> usize {
        let ports: usize = self
            .ports
            .iter()
            .map(|p| {
                [p.state.is_some(), p.phys_state.is_some(), p.rate_bytes_per_second.is_some(), p.link_layer.is_some()]
                    .iter()
                    .filter(|&&b| b)
                    .count()
            })
            .sum();
        1 + usize::from(self.registered_bytes.is_some()) + self.hw_counters.len() + ports
    }

    /// A device with a port that is not ACTIVE comes first.
    fn budget_score(&self) -> f64 {
        if self.ports.iter().any(|p| p.state.as_ref().is_some_and(|s| s.value != 4)) {
            f64::INFINITY
        } else {
            f64::MAX
        }
    }
}

impl SysfsPort {
    fn error_series(&self) -> usize {
        let counters = self.counters.iter().filter(|(name, _)| is_error_counter(name)).count();
        counters + self.hw_counters.iter().filter(|c| !c.gauge && is_error_counter(&c.name)).count()
    }

    fn other_series(&self) -> usize {
        self.counters.len() + self.hw_counters.len() - self.error_series()
    }
}

impl RdmaSysfsStats {
    /// Every device, port and counter.
    pub fn render(&self, out: &mut Exposition) {
        self.render_granted(out, &Grants::all())
    }

    fn device_order(&self) -> &budget::Order {
        let d = &self.devices;
        self.ranking.get_or_rank(|| budget::ranked(d.len(), |i| d[i].series(), |i| d[i].budget_score()))
    }

    fn ports(&self) -> Vec<&SysfsPort> {
        self.devices.iter().flat_map(|d| &d.ports).collect()
    }

    pub fn claims(&self) -> Vec<Claim> {
        let ports = self.ports();
        let errors = ports.iter().map(|p| (p.error_series(), 1.0)).collect();
        let others = ports.iter().map(|p| (p.other_series(), 0.0)).collect();
        vec![
            Claim {
                class: DEVICES,
                tier: Tier::Page,
                floor: 0,
                cap: usize::MAX,
                entities: self.device_order().1.clone(),
            },
            Claim { class: PORT_ERRORS, tier: Tier::Explain, floor: 0, cap: usize::MAX, entities: errors },
            Claim { class: PORT_COUNTERS, tier: Tier::Detail, floor: 0, cap: usize::MAX, entities: others },
        ]
    }

    pub(crate) fn render_granted(&self, out: &mut Exposition, grants: &Grants) {
        let device_mask = grants.mask(DEVICES, &self.device_order().0, self.devices.len());
        let devices: Vec<&SysfsDevice> =
            self.devices.iter().zip(&device_mask).filter_map(|(d, &shown)| shown.then_some(d)).collect();
        // Per port, in device and port order: its error counters and its other counters granted.
        let (errors, others) = (grants.get(PORT_ERRORS), grants.get(PORT_COUNTERS));
        let mut index = 0;
        let mut counters_of: Vec<(bool, bool)> = Vec::new();
        for d in &self.devices {
            for _ in &d.ports {
                counters_of.push((index < errors, index < others));
                index += 1;
            }
        }
        let granted = |device: usize, port: usize, name: &str| {
            if !device_mask.get(device).copied().unwrap_or(false) {
                return false;
            }
            let flat = self.devices[..device].iter().map(|d| d.ports.len()).sum::<usize>() + port;
            let (errors, others) = counters_of.get(flat).copied().unwrap_or((false, false));
            if is_error_counter(name) {
                errors
            } else {
                others
            }
        };
        out.family(
            "memlock_rdma_device_info",
            "Always 1; labels describe the RDMA device from /sys/class/infiniband.",
            Kind::Gauge,
        );
        for d in &devices {
            let node_type = d.node_type.as_ref().map(|n| n.name.as_str()).unwrap_or("");
            out.sample(
                &[
                    ("device", &d.name),
                    ("fw_ver", d.fw_ver.as_deref().unwrap_or("")),
                    ("hca_type", d.hca_type.as_deref().unwrap_or("")),
                    ("board_id", d.board_id.as_deref().unwrap_or("")),
                    ("node_type", node_type),
                    ("node_guid", d.node_guid.as_deref().unwrap_or("")),
                ],
                1u64,
            );
        }

        out.family(
            "memlock_rdma_device_registered_bytes",
            "Memory registered on the device by user space (mlx5 reg_pages times page size).",
            Kind::Gauge,
        );
        for d in &devices {
            out.maybe(&[("device", &d.name)], d.registered_bytes);
        }

        let ports: Vec<(&SysfsDevice, &SysfsPort, String)> =
            devices.iter().flat_map(|d| d.ports.iter().map(move |p| (*d, p, p.number.to_string()))).collect();
        type Field = fn(&SysfsPort) -> Option<u64>;
        let gauges: [(&'static str, &'static str, Field); 3] = [
            ("memlock_rdma_port_state", "Port state, the kernel's enum value (4 is ACTIVE).", |p| {
                p.state.as_ref().map(|s| u64::from(s.value))
            }),
            ("memlock_rdma_port_phys_state", "Physical port state, the kernel's enum value (5 is LinkUp).", |p| {
                p.phys_state.as_ref().map(|s| u64::from(s.value))
            }),
            ("memlock_rdma_port_rate_bytes_per_second", "Port rate in bytes per second.", |p| p.rate_bytes_per_second),
        ];
        for (name, help, field) in gauges {
            out.family(name, help, Kind::Gauge);
            for (d, p, port) in &ports {
                out.maybe(&[("device", &d.name), ("port", port)], field(p));
            }
        }
        out.family(
            "memlock_rdma_port_info",
            "Always 1; link_layer is InfiniBand, Ethernet (RoCE) or Unknown (EFA).",
            Kind::Gauge,
        );
        for (d, p, port) in &ports {
            if let Some(link_layer) = &p.link_layer {
                out.sample(&[("device", &d.name), ("port", port), ("link_layer", link_layer)], 1u64);
            }
        }
        out.family("memlock_rdma_port_stat_total", "Port counters (IBTA PMA), data counters in bytes.", Kind::Counter);
        for (device, d) in self.devices.iter().enumerate() {
            for (index, p) in d.ports.iter().enumerate() {
                let port = p.number.to_string();
                for (counter, value) in p.counters.iter().filter(|(name, _)| granted(device, index, name)) {
                    out.sample(&[("device", &d.name), ("port", &port), ("counter", counter)], *value);
                }
            }
        }
        self.render_hw(out, false, &device_mask, &granted);
        self.render_hw(out, true, &device_mask, &granted);
    }

    /// Driver counters, device-level ones with `port=""` first; `gauges` selects the levels.
    /// Device-level ones come with their device; a port's levels are among its other counters.
    fn render_hw(
        &self,
        out: &mut Exposition,
        gauges: bool,
        devices: &[bool],
        granted: &dyn Fn(usize, usize, &str) -> bool,
    ) {
        if gauges {
            out.family(
                "memlock_rdma_hw_objects",
                "Driver hw_counters that are levels, not counts (bnxt_re active_* and watermark_*).",
                Kind::Gauge,
            );
        } else {
            out.family(
                "memlock_rdma_hw_stat_total",
                "Driver counters from hw_counters/ by file name (EFA reg_mr_err among them).",
                Kind::Counter,
            );
        }
        for (device, d) in self.devices.iter().enumerate() {
            if devices.get(device).copied().unwrap_or(false) {
                for c in d.hw_counters.iter().filter(|c| c.gauge == gauges) {
                    out.sample(&[("device", &d.name), ("port", ""), ("counter", &c.name)], c.value);
                }
            }
            for (index, p) in d.ports.iter().enumerate() {
                let port = p.number.to_string();
                // A level is never an error count.
                let shown =
                    |c: &&HwCounter| c.gauge == gauges && granted(device, index, if gauges { "" } else { &c.name });
                for c in p.hw_counters.iter().filter(shown) {
                    out.sample(&[("device", &d.name), ("port", &port), ("counter", &c.name)], c.value);
                }
            }
        }
    }
}

impl super::Stats for RdmaSysfsStats {
    fn render(&self, out: &mut Exposition, grants: &Grants) {
        self.render_granted(out, grants)
    }

    fn claims(&self) -> Vec<Claim> {
        RdmaSysfsStats::claims(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Configured for RdmaSysfsCollector {
    type Raw = RawRdmaCollector;
    type Settings = RdmaConfig;

    fn key_template() -> RawRdmaCollector {
        RawRdmaCollector::key_template()
    }

    fn validate(raw: RawRdmaCollector) -> Result<RdmaConfig, Invalid> {
        raw.validate()
    }

    fn build(context: &Context, settings: &RdmaConfig) -> Self {
        RdmaSysfsCollector::new(context.roots.clone(), settings.clone())
    }
}

/// This collector's entry in the registry ([`crate::collect::REGISTRY`]): its name, flags,
/// default interval and settings.
pub(crate) const REGISTRATION: super::Registration = super::Registration {
    name: "rdma_sysfs",
    reads: "/sys/class/infiniband devices, ports, counters",
    default_interval: "5s",
    default_enabled: true,
    settings: super::settings::of::<RdmaSysfsCollector>(),
};

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;
    use std::path::PathBuf;

    fn fixture_roots() -> Roots {
        let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        Roots { procfs: base.join("proc"), sysfs: base.join("sys") }
    }

    fn collect(config: RdmaConfig) -> (RdmaSysfsStats, Vec<SourceError>) {
        let mut errors = Vec::new();
        let stats = RdmaSysfsCollector::new(fixture_roots(), config).read(&mut errors).unwrap();
        (stats, errors)
    }

    fn device<'a>(stats: &'a RdmaSysfsStats, name: &str) -> &'a SysfsDevice {
        stats.devices.iter().find(|d| d.name == name).unwrap_or_else(|| panic!("{name} missing"))
    }

    fn counter(counters: &[(String, u64)], name: &str) -> Option<u64> {
        counters.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// Port directories `01` and `+1` beside `1` (in a sysfs root someone else writes; the
    /// kernel names ports "%u") must not make every series of port 1 three times.
    #[test]
    fn port_directories_the_kernel_would_not_name_are_not_ports() {
        let tmp = tempfile::Builder::new().prefix("memlock-rdma-ports-").tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        std::fs::create_dir_all(&root).unwrap();
        // cp -a keeps the class symlinks of the fixture, as sysfs has them.
        let copied = std::process::Command::new("cp").arg("-a").arg(fixture_roots().sysfs).arg(&root).status();
        assert!(copied.unwrap().success());
        let ports = root.join("sys/class/infiniband/mlx5_0/ports");
        for alias in ["01", "+1", "1 "] {
            let status =
                std::process::Command::new("cp").arg("-a").arg(ports.join("1")).arg(ports.join(alias)).status();
            assert!(status.unwrap().success());
        }
        let roots = Roots { procfs: fixture_roots().procfs, sysfs: root.join("sys") };
        let mut errors = Vec::new();
        let stats = RdmaSysfsCollector::new(roots, RdmaConfig::default()).read(&mut errors).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        let numbers: Vec<u32> = device(&stats, "mlx5_0").ports.iter().map(|p| p.number).collect();
        assert_eq!(numbers, [1]);
        let mut out = Exposition::new();
        stats.render(&mut out);
        let text = out.finish();
        let series: Vec<&str> =
            text.lines().filter(|l| l.starts_with("memlock_rdma_port_state{device=\"mlx5_0\"")).collect();
        assert_eq!(series.len(), 1, "{text}");
        let mut seen = std::collections::BTreeSet::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let key = line.rsplit_once(' ').unwrap().0;
            assert!(seen.insert(key), "duplicate series {key}");
        }
    }

    #[test]
    fn reads_the_fixture_devices_through_their_symlinks() {
        let (stats, errors) = collect(RdmaConfig::default());
        assert!(errors.is_empty(), "{errors:?}");
        let names: Vec<&str> = stats.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["bnxt_re0", "efa_0", "mlx5_0", "mlx5_1"]);
        assert!(
            std::fs::symlink_metadata(fixture_roots().sysfs.join("class/infiniband/mlx5_0"))
                .unwrap()
                .file_type()
                .is_symlink(),
            "the fixture models sysfs: class entries are symlinks"
        );

        let ib = device(&stats, "mlx5_0");
        assert_eq!(ib.fw_ver.as_deref(), Some("28.39.1002"));
        assert_eq!(ib.hca_type.as_deref(), Some("MT4129"));
        assert_eq!(ib.node_type, Some(Numbered { value: 1, name: "CA".into() }));
        // reg_pages in PAGE_SIZE pages: 2359296 pages are 9 GiB with 4 KiB pages.
        assert_eq!(ib.registered_bytes, Some(2359296 * procfs::page_size()));
        assert_eq!(device(&stats, "mlx5_1").registered_bytes, Some(0));
        assert_eq!(device(&stats, "efa_0").registered_bytes, None, "only mlx5 has reg_pages");
        let port = &ib.ports[0];
        assert_eq!(port.number, 1);
        assert_eq!(port.state.as_ref().map(|s| s.value), Some(4));
        assert_eq!(port.phys_state.as_ref().map(|s| s.value), Some(5));
        assert_eq!(port.rate_bytes_per_second, Some(50_000_000_000));
        assert_eq!(port.link_layer.as_deref(), Some("InfiniBand"));
        // 4-byte words in the file, bytes in the export.
        let words: u64 = std::fs::read_to_string(
            fixture_roots().sysfs.join("class/infiniband/mlx5_0/ports/1/counters/port_xmit_data"),
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap();
        assert_eq!(counter(&port.counters, "port_xmit_data_bytes"), Some(words * 4));
        assert_eq!(counter(&port.counters, "port_xmit_data"), None);
        // "N/A (no PMA)" is absent, not an error and not zero.
        assert_eq!(counter(&port.counters, "port_xmit_constraint_errors"), None);
        assert!(counter(&port.counters, "symbol_error").is_some());
        assert!(port.hw_counters.iter().any(|c| c.name == "out_of_buffer" && !c.gauge));
        assert!(!port.hw_counters.iter().any(|c| c.name == "lifespan"), "lifespan is a setting");

        assert_eq!(device(&stats, "mlx5_1").ports[0].link_layer.as_deref(), Some("Ethernet"));

        let efa = device(&stats, "efa_0");
        assert!(efa.hw_counters.iter().any(|c| c.name == "reg_mr_err" && c.value == 3 && !c.gauge));
        assert!(efa.ports[0].hw_counters.iter().any(|c| c.name == "rdma_read_bytes"));
        assert_eq!(efa.hca_type, None, "EFA provides no hca_type: absent, not empty");

        let bnxt = device(&stats, "bnxt_re0");
        let active = bnxt.ports[0].hw_counters.iter().find(|c| c.name == "active_mrs").unwrap();
        assert!(active.gauge);
    }

    #[test]
    fn include_and_exclude_patterns_select_devices() {
        let config =
            RdmaConfig { include: vec![Regex::new("^mlx5_").unwrap()], exclude: vec![Regex::new("_1$").unwrap()] };
        let (stats, _) = collect(config);
        assert_eq!(stats.devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["mlx5_0"]);
    }

    #[test]
    fn no_infiniband_class_is_no_devices_not_an_error() {
        let mut errors = Vec::new();
        let roots = Roots { procfs: "/nonexistent".into(), sysfs: std::env::temp_dir().join("memlock-no-such-sysfs") };
        let stats = RdmaSysfsCollector::new(roots, RdmaConfig::default()).read(&mut errors);
        assert_eq!(stats, Some(RdmaSysfsStats::default()));
        assert!(errors.is_empty());
    }

    #[test]
    fn broken_files_are_errors_but_the_rest_is_kept() {
        let tmp = tempfile::Builder::new().prefix("memlock-rdma-sysfs-").tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let port = root.join("class/infiniband/mlx5_9/ports/1");
        std::fs::create_dir_all(port.join("counters")).unwrap();
        std::fs::write(root.join("class/infiniband/mlx5_9/fw_ver"), "1.2.3\n").unwrap();
        std::fs::write(port.join("state"), "ACTIVE\n").unwrap();
        std::fs::write(port.join("rate"), "400 Gb/sec (4X NDR)\n").unwrap();
        std::fs::write(port.join("counters/port_rcv_data"), "lots\n").unwrap();
        std::fs::write(port.join("counters/port_rcv_packets"), "12\n").unwrap();
        let mut errors = Vec::new();
        let stats = RdmaSysfsCollector::new(Roots { procfs: root.clone(), sysfs: root.clone() }, RdmaConfig::default())
            .read(&mut errors)
            .unwrap();
        let paths: Vec<String> = errors.iter().map(|e| e.path().display().to_string()).collect();
        assert_eq!(errors.len(), 2, "{paths:?}");
        assert!(paths[0].ends_with("ports/1/state") && paths[1].ends_with("counters/port_rcv_data"), "{paths:?}");
        let port = &stats.devices[0].ports[0];
        assert_eq!(port.state, None);
        assert_eq!(port.rate_bytes_per_second, Some(50_000_000_000));
        assert_eq!(port.counters, [("port_rcv_packets".to_owned(), 12)]);
        assert_eq!(stats.devices[0].fw_ver.as_deref(), Some("1.2.3"));
    }

    #[test]
    fn declined_reads_are_absent() {
        assert!(is_declined(&io::Error::from_raw_os_error(libc::EINVAL)));
        assert!(is_declined(&io::Error::from_raw_os_error(libc::EOPNOTSUPP)));
        assert!(!is_declined(&io::Error::from_raw_os_error(libc::EACCES)));
    }

    #[test]
    fn renders_contiguous_families_with_bytes_and_device_level_counters() {
        let (stats, _) = collect(RdmaConfig::default());
        let mut out = Exposition::new();
        stats.render(&mut out);
        let text = out.finish();
        assert!(
            text.contains("memlock_rdma_port_rate_bytes_per_second{device=\"mlx5_0\",port=\"1\"} 50000000000\n"),
            "{text}"
        );
        assert!(
            text.contains("memlock_rdma_hw_stat_total{device=\"efa_0\",port=\"\",counter=\"reg_mr_err\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("memlock_rdma_hw_objects{device=\"bnxt_re0\",port=\"1\",counter=\"active_mrs\"}"),
            "{text}"
        );
        assert!(
            !text.contains("memlock_rdma_hw_stat_total{device=\"bnxt_re0\",port=\"1\",counter=\"active_mrs\"}"),
            "levels are not counters"
        );
        assert!(
            text.contains("memlock_rdma_port_info{device=\"mlx5_1\",port=\"1\",link_layer=\"Ethernet\"} 1\n"),
            "{text}"
        );
        // Each family's header appears once, so its samples are contiguous.
        for line in text.lines().filter(|l| l.starts_with("# TYPE")) {
            assert_eq!(text.matches(&format!("{line}\n")).count(), 1, "{line}");
        }
    }
}
