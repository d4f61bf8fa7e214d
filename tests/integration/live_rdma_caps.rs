//! The rdma_caps collector through the binary on this machine, which has no RDMA device and may
//! have no rdma-core: the collector succeeds, exports no caps, and
//! `memlock_rdma_device_caps_supported` says why, as the machine's state does. The real
//! ibv_query_device is exercised in the soft-RoCE guest (docs/vm.md).

use crate::util::{live_lock, Exporter};

/// What dlopen says of rdma-core's library here, asked as the collector asks.
fn libibverbs_loads() -> bool {
    let name = c"libibverbs.so.1";
    // SAFETY: dlopen of a NUL-terminated name; a handle it returns is closed at once.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return false;
    }
    // SAFETY: a handle dlopen returned, closed once.
    unsafe { libc::dlclose(handle) };
    true
}

#[test]
fn on_this_machine_no_caps_and_the_reason_never_an_error() {
    let _guard = live_lock();
    let exporter = Exporter::start(&["--collector.rdma_caps"]);
    let m = exporter.wait_metrics(std::time::Duration::from_secs(10), "the rdma_caps sample", |m| {
        !m.family("memlock_rdma_device_caps_supported").is_empty()
    });
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"rdma_caps\"}"), 1.0);
    let has_devices = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
    let supported = m.family("memlock_rdma_device_caps_supported");
    if !libibverbs_loads() {
        assert_eq!(supported, [("memlock_rdma_device_caps_supported{reason=\"library_not_found\"}", 0.0)]);
    } else if !has_devices {
        assert_eq!(supported, [("memlock_rdma_device_caps_supported{reason=\"no_devices\"}", 0.0)]);
    }
    if supported.iter().all(|(_, v)| *v == 0.0) {
        assert!(m.family("memlock_rdma_device_max_mr").is_empty(), "{}", m.text);
        assert!(m.family("memlock_rdma_device_max_mr_size_bytes").is_empty(), "{}", m.text);
    }
}
