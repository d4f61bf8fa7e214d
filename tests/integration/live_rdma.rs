//! The RDMA collectors through the binary: on this machine's real /sys and kernel (which has no
//! RDMA: the collectors must report success with no device series, and the exporter stays
//! healthy), and on the fixture sysfs tree (mlx5 InfiniBand and RoCE, EFA, bnxt_re).

use std::path::Path;

use crate::util::{fixtures, live_lock, Exporter};

/// Whether this kernel answers RDMA netlink, asked the same way the collector does.
fn kernel_has_rdma_netlink() -> bool {
    // SAFETY: socket(2) with constant arguments; a valid descriptor is closed right away.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 20) };
    if fd >= 0 {
        // SAFETY: `fd` is ours and open.
        unsafe { libc::close(fd) };
        return true;
    }
    let err = std::io::Error::last_os_error();
    assert_eq!(err.raw_os_error(), Some(libc::EPROTONOSUPPORT), "socket(NETLINK_RDMA) failed otherwise: {err}");
    false
}

fn infiniband_devices(sysfs: &Path) -> Vec<String> {
    match std::fs::read_dir(sysfs.join("class/infiniband")) {
        Ok(entries) => entries.map(|e| e.unwrap().file_name().into_string().unwrap()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("/sys/class/infiniband: {e}"),
    }
}

#[test]
fn on_this_machine_the_rdma_collectors_succeed_and_the_exporter_stays_ready() {
    let _guard = live_lock();
    let exporter = Exporter::start(&["--collector.rdma_sysfs", "--collector.rdma_netlink"]);
    let (status, _) = exporter.get("/-/ready");
    assert_eq!(status, 200);
    let m = exporter.metrics();
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"rdma_sysfs\"}"), 1.0);
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"rdma_netlink\"}"), 1.0);

    let devices = infiniband_devices(Path::new("/sys"));
    let info = m.family("memlock_rdma_device_info");
    assert_eq!(info.len(), devices.len(), "one info series per /sys/class/infiniband entry: {info:?}");

    let supported = kernel_has_rdma_netlink();
    assert_eq!(m.value("memlock_rdma_netlink_supported"), if supported { 1.0 } else { 0.0 });
    if !supported {
        // No RDMA in this kernel (the case on the project's machines): no device series at all,
        // and the reason is in the debug log, not in a warning.
        assert!(devices.is_empty(), "sysfs has RDMA devices but the kernel has no RDMA netlink");
        for family in [
            "memlock_rdma_resources",
            "memlock_rdma_mr_registered_bytes",
            "memlock_rdma_process_mrs",
            "memlock_rdma_port_state",
        ] {
            assert!(m.family(family).is_empty(), "{family}: {:?}", m.family(family));
        }
        let log = exporter.log_text();
        assert!(log.contains("EPROTONOSUPPORT"), "the debug log says why there is no RDMA data:\n{log}");
        assert!(!log.lines().any(|l| l.contains("collector failed") && l.contains("rdma")), "{log}");
    }
    // Still healthy and serving after a few more netlink rounds.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(exporter.get("/-/healthy").0, 200);
    assert_eq!(exporter.metrics().value("memlock_scrape_collector_success{collector=\"rdma_netlink\"}"), 1.0);
}

fn read_u64(path: &Path) -> f64 {
    std::fs::read_to_string(path).unwrap().trim().parse::<u64>().unwrap() as f64
}

#[test]
fn fixture_sysfs_values_match_the_files() {
    let sysfs = fixtures().join("sys");
    let exporter = Exporter::start(&[
        "--path.sysfs",
        sysfs.to_str().unwrap(),
        "--no-collector.rdma_netlink",
        "--no-collector.process",
    ]);
    let m = exporter.metrics();
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"rdma_sysfs\"}"), 1.0);
    let ib = sysfs.join("class/infiniband");

    assert_eq!(
        m.value(
            "memlock_rdma_device_info{device=\"mlx5_0\",fw_ver=\"28.39.1002\",hca_type=\"MT4129\",\
             board_id=\"MT_0000000838\",node_type=\"CA\",node_guid=\"b859:9f03:00d4:5a2e\"}"
        ),
        1.0
    );
    assert_eq!(m.value("memlock_rdma_port_state{device=\"mlx5_0\",port=\"1\"}"), 4.0);
    assert_eq!(m.value("memlock_rdma_port_phys_state{device=\"mlx5_0\",port=\"1\"}"), 5.0);
    assert_eq!(m.value("memlock_rdma_port_rate_bytes_per_second{device=\"mlx5_0\",port=\"1\"}"), 50e9);
    assert_eq!(m.value("memlock_rdma_port_rate_bytes_per_second{device=\"mlx5_1\",port=\"1\"}"), 25e9);
    assert_eq!(m.value("memlock_rdma_port_info{device=\"mlx5_1\",port=\"1\",link_layer=\"Ethernet\"}"), 1.0);
    assert_eq!(m.value("memlock_rdma_port_info{device=\"efa_0\",port=\"1\",link_layer=\"Unknown\"}"), 1.0);

    // Data counters: 4-byte words in the file, bytes in the export.
    let words = read_u64(&ib.join("mlx5_0/ports/1/counters/port_rcv_data"));
    assert_eq!(
        m.value("memlock_rdma_port_stat_total{device=\"mlx5_0\",port=\"1\",counter=\"port_rcv_data_bytes\"}"),
        words * 4.0
    );
    let packets = read_u64(&ib.join("mlx5_0/ports/1/counters/port_rcv_packets"));
    assert_eq!(
        m.value("memlock_rdma_port_stat_total{device=\"mlx5_0\",port=\"1\",counter=\"port_rcv_packets\"}"),
        packets
    );
    // "N/A (no PMA)" is absent, not zero.
    assert!(m
        .get("memlock_rdma_port_stat_total{device=\"mlx5_0\",port=\"1\",counter=\"port_xmit_constraint_errors\"}")
        .is_none());
    assert_eq!(
        m.value("memlock_rdma_port_stat_total{device=\"mlx5_1\",port=\"1\",counter=\"port_xmit_constraint_errors\"}"),
        0.0
    );

    // Driver counters by name, device-level ones with an empty port.
    assert_eq!(
        m.value("memlock_rdma_hw_stat_total{device=\"efa_0\",port=\"\",counter=\"reg_mr_err\"}"),
        read_u64(&ib.join("efa_0/hw_counters/reg_mr_err"))
    );
    assert_eq!(
        m.value("memlock_rdma_hw_stat_total{device=\"efa_0\",port=\"1\",counter=\"rdma_read_bytes\"}"),
        read_u64(&ib.join("efa_0/ports/1/hw_counters/rdma_read_bytes"))
    );
    assert!(m.family("memlock_rdma_hw_stat_total").iter().all(|(k, _)| !k.contains("lifespan")));
    assert_eq!(
        m.value("memlock_rdma_hw_objects{device=\"bnxt_re0\",port=\"1\",counter=\"active_mrs\"}"),
        read_u64(&ib.join("bnxt_re0/ports/1/hw_counters/active_mrs"))
    );
    assert_eq!(m.value("memlock_rdma_hw_objects{device=\"bnxt_re0\",port=\"1\",counter=\"watermark_mrs\"}"), 512.0);
}

#[test]
fn device_patterns_from_the_config_file_select_devices() {
    let sysfs = fixtures().join("sys");
    let tmp = tempfile::Builder::new().prefix("memlock-rdma-config-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let config = dir.join("config.toml");
    std::fs::write(&config, "[collector.rdma_sysfs]\ninclude = [\"^mlx5_\", \"^efa\"]\nexclude = [\"^mlx5_1$\"]\n")
        .unwrap();
    let exporter = Exporter::start(&[
        "--config.file",
        config.to_str().unwrap(),
        "--path.sysfs",
        sysfs.to_str().unwrap(),
        "--no-collector.rdma_netlink",
        "--no-collector.process",
    ]);
    let m = exporter.metrics();
    let mut devices: Vec<String> = m
        .family("memlock_rdma_device_info")
        .iter()
        .map(|(k, _)| k.split("device=\"").nth(1).unwrap().split('"').next().unwrap().to_owned())
        .collect();
    devices.sort();
    assert_eq!(devices, ["efa_0", "mlx5_0"]);
    assert!(m.family("memlock_rdma_port_state").iter().all(|(k, _)| !k.contains("mlx5_1") && !k.contains("bnxt_re0")));
}
