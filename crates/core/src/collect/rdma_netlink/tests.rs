use super::*;
use memlock_kernel::nldev::MrEntry;

fn mr(length: u64, pid: Option<u32>, kern_name: Option<&str>) -> MrEntry {
    MrEntry { length: Some(length), pid, kern_name: kern_name.map(str::to_owned), ..MrEntry::default() }
}

#[test]
fn tally_sums_per_owner_with_kernel_and_unknown_buckets() {
    let mut tally = MrTally::default();
    for entry in [
        mr(9_633_792, Some(4242), None),
        mr(4096, Some(4242), None),
        mr(1 << 30, Some(17), None),
        mr(8192, None, Some("nvme_rdma")),
        mr(4096, None, None),
        mr(4096, None, None),
        MrEntry { pid: Some(17), ..MrEntry::default() },
    ] {
        tally.add(&entry);
    }
    let usage = tally.finish(10, |pid| if pid == 4242 { "python".into() } else { String::new() });
    assert_eq!(usage.registered_bytes, 9_633_792 + 4096 + (1 << 30) + 8192 + 8192);
    let rows: Vec<(&str, &str, u64, u64)> =
        usage.owners.iter().map(|o| (o.pid.as_str(), o.comm.as_str(), o.mrs, o.bytes)).collect();
    assert_eq!(
        rows,
        [
            ("17", "", 2, 1 << 30),
            ("4242", "python", 2, 9_633_792 + 4096),
            ("", "[nvme_rdma]", 1, 8192),
            ("unknown", "", 2, 8192),
        ]
    );
}

#[test]
fn owners_past_the_limit_are_folded_into_other() {
    let mut tally = MrTally::default();
    for pid in 1..=10u32 {
        tally.add(&mr(u64::from(pid) * 1000, Some(pid), None));
    }
    let usage = tally.finish(3, |_| "w".into());
    let pids: Vec<&str> = usage.owners.iter().map(|o| o.pid.as_str()).collect();
    assert_eq!(pids, ["8", "9", "10", "other"], "the largest owners keep their own series");
    let other = usage.owners.last().unwrap();
    assert_eq!((other.mrs, other.bytes), (7, (1..=7).sum::<u64>() * 1000));
    assert_eq!(usage.registered_bytes, (1..=10).sum::<u64>() * 1000);
}

#[test]
fn byte_sums_saturate() {
    // 2^64 - 1 itself is an implicit ODP MR (below): the largest lengths that are not.
    let mut tally = MrTally::default();
    tally.add(&mr(u64::MAX - 1, Some(1), None));
    tally.add(&mr(u64::MAX - 1, Some(1), None));
    let usage = tally.finish(10, |_| String::new());
    assert_eq!(usage.registered_bytes, u64::MAX);
    assert_eq!(usage.owners[0].bytes, u64::MAX);
}

/// UCX's implicit ODP MR reports MRLEN 2^64 - 1, so summed in, the device's and the owner's
/// byte sums would saturate at 2^64 - 1 as soon as one existed. Decoded from a reply part in
/// the captures' byte format, it is counted apart and left out of the sums.
#[test]
fn implicit_odp_mrs_are_counted_apart_and_left_out_of_the_byte_sums() {
    use memlock_kernel::nldev::testing::{hex_dump, IMPLICIT_ODP_PART};
    let bytes = hex_dump(IMPLICIT_ODP_PART);
    let Some(Ok(nldev::Message::Reply { attrs: body, .. })) = nldev::messages(&bytes).next() else {
        panic!("a reply part")
    };
    let part = nldev::decode_mr_part(body).unwrap();
    let mut tally = MrTally::default();
    for entry in &part.entries {
        tally.add(entry);
    }
    tally.add(&mr(4096, None, Some("nvme_rdma")));
    let usage = tally.finish(10, |pid| if pid == 4243 { "ucx_perftest".into() } else { String::new() });
    assert_eq!((usage.registered_bytes, usage.implicit_odp_mrs), ((2 << 20) + 4096, 1));
    let ucx = &usage.owners[0];
    assert_eq!((ucx.pid.as_str(), ucx.mrs, ucx.bytes), ("4243", 2, 2 << 20), "both MRs, one's bytes");
    let stats = RdmaNetlinkStats {
        supported: true,
        devices: vec![NetlinkDevice { name: part.dev_name, index: 0, resources: Vec::new(), mrs: Some(usage) }],
        ..Default::default()
    };
    let mut out = Exposition::new();
    stats.render(&mut out);
    let text = out.finish();
    for line in [
        "memlock_rdma_mr_registered_bytes{device=\"mlx5_0\"} 2101248",
        "memlock_rdma_mr_implicit_odp{device=\"mlx5_0\"} 1",
        "memlock_rdma_process_mr_bytes{pid=\"4243\",comm=\"ucx_perftest\",device=\"mlx5_0\"} 2097152",
    ] {
        assert!(text.contains(&format!("{line}\n")), "{line} missing from:\n{text}");
    }
}

#[test]
fn no_rdma_in_this_kernel_is_reported_as_unsupported_not_as_a_failure() {
    // This machine's kernel has no InfiniBand: socket(NETLINK_RDMA) fails with
    // EPROTONOSUPPORT. On a kernel with RDMA the same call must succeed instead.
    let rdma_in_kernel = NetlinkSocket::open()
        .map(|_| true)
        .or_else(|e| if e.raw_os_error() == Some(libc::EPROTONOSUPPORT) { Ok(false) } else { Err(e) })
        .unwrap();
    let procfs = PathBuf::from("/proc");
    let mut collector =
        RdmaNetlinkCollector::new(Roots { procfs: procfs.clone(), sysfs: "/sys".into() }, RdmaConfig::default());
    let mut errors = Vec::new();
    let stats = collector.read(&mut errors).expect("data either way");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(stats.supported, rdma_in_kernel);
    if !rdma_in_kernel {
        assert!(stats.devices.is_empty());
        let mut out = Exposition::new();
        stats.render(&mut out);
        let text = out.finish();
        assert!(text.contains("\nmemlock_rdma_netlink_supported 0\n"), "{text}");
        assert!(!text.contains("memlock_rdma_resources{"), "{text}");
    }
}

/// The socket, sequence and multi-datagram code against a real kernel: a NETLINK_ROUTE link
/// dump (RTM_GETLINK) has the same framing as an nldev dump, plus a family header.
#[test]
fn a_real_netlink_dump_is_read_to_done() {
    const RTM_NEWLINK: u16 = 16;
    const RTM_GETLINK: u16 = 18;
    let mut socket = NetlinkSocket::open_protocol(libc::NETLINK_ROUTE).unwrap();
    let mut buffer = vec![0; RECV_BUFFER_BYTES];
    let mut names = Vec::new();
    // A request for lo alone (ifindex 1) whose reply and ACK are left unread: the dump that
    // follows must skip them by sequence number.
    let mut stale = Vec::new();
    nldev::Header { len: 32, kind: RTM_GETLINK, flags: nldev::flags::REQUEST | nldev::flags::ACK, seq: 41, port: 0 }
        .write(&mut stale);
    stale.extend_from_slice(&[0; 4]);
    stale.extend_from_slice(&1i32.to_ne_bytes());
    stale.extend_from_slice(&[0; 8]);
    socket.send(&stale).unwrap();
    {
        let seq = 42;
        let mut request = Vec::new();
        nldev::Header { len: 20, kind: RTM_GETLINK, flags: nldev::flags::REQUEST | nldev::flags::DUMP, seq, port: 0 }
            .write(&mut request);
        request.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
        exchange(&mut socket, &mut buffer, &request, RTM_NEWLINK, seq, |body| {
            // struct ifinfomsg (16 bytes), then the link's attributes; IFLA_IFNAME is 3.
            let attrs = body.get(16..).ok_or(DecodeError::TruncatedPayload { what: "ifinfomsg", len: body.len() })?;
            for a in nldev::attrs(attrs) {
                let a = a?;
                if a.kind == 3 {
                    names.push(a.string());
                }
            }
            Ok(())
        })
        .unwrap();
    }
    // Every link of this network namespace, once: the stale reply was not counted and its
    // ACK did not end the dump early.
    let mut expected: Vec<String> =
        std::fs::read_dir("/sys/class/net").unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    expected.sort();
    names.sort();
    assert_eq!(names, expected);
    assert!(names.iter().any(|n| n == "lo"), "{names:?}");

    // Netlink runs one dump at a time per socket: a dump abandoned half-read makes the next
    // request fail with EBUSY, which is why the collector reopens its socket after a failure.
    let mut socket = NetlinkSocket::open_protocol(libc::NETLINK_ROUTE).unwrap();
    let mut abandoned = Vec::new();
    nldev::Header { len: 20, kind: RTM_GETLINK, flags: nldev::flags::REQUEST | nldev::flags::DUMP, seq: 50, port: 0 }
        .write(&mut abandoned);
    abandoned.extend_from_slice(&[0; 4]);
    socket.send(&abandoned).unwrap();
    let mut again = abandoned.clone();
    again[8..12].copy_from_slice(&51u32.to_ne_bytes());
    let result = exchange(&mut socket, &mut buffer, &again, RTM_NEWLINK, 51, |_| Ok(()));
    assert!(
        matches!(result, Err(ExchangeError::Reply(ReplyError::Kernel { error })) if error == -libc::EBUSY),
        "{result:?}"
    );
}

/// Stands in for a kernel with two wanted RDMA devices and one excluded one, answering the
/// requests with messages built from the uapi constants.
/// The requests a [`ReplayKernel`] received: (op, DEV_INDEX).
type RequestLog = Arc<std::sync::Mutex<Vec<(u16, Option<u32>)>>>;

struct ReplayKernel {
    queue: std::collections::VecDeque<Vec<u8>>,
    requests: RequestLog,
}

const GHOST_PID: u32 = 4_000_000_000;

impl Transport for ReplayKernel {
    fn send(&mut self, request: &[u8]) -> io::Result<()> {
        use memlock_kernel::nldev::testing::*;
        use memlock_kernel::nldev::{attr, attrs, split_type, Header};
        let header = Header::parse(request).unwrap();
        let (_, op) = split_type(header.kind);
        let dev_index = attrs(&request[nldev::HEADER_LEN..])
            .flatten()
            .find(|a| a.kind == attr::DEV_INDEX)
            .map(|a| a.u32().unwrap());
        self.requests.lock().unwrap().push((op, dev_index));
        let seq = header.seq;
        let u64_attr = |kind, v: u64| attribute(kind, &v.to_ne_bytes());
        let u32_attr = |kind, v: u32| attribute(kind, &v.to_ne_bytes());
        match (op, dev_index) {
            (cmd::RES_GET, None) => {
                self.queue.push_back(
                    [
                        summary_part(seq, (0, "mlx5_0"), &[("pd", 4), ("mr", 5)]),
                        summary_part(seq, (1, "mlx5_1"), &[("mr", 0)]),
                    ]
                    .concat(),
                );
                self.queue.push_back([summary_part(seq, (2, "efa_0"), &[("mr", 9)]), done(seq, 0)].concat());
            }
            (cmd::RES_MR_GET, Some(0)) => {
                let own = std::process::id();
                self.queue.push_back(mr_part(
                    seq,
                    (0, "mlx5_0"),
                    &[
                        mr_entry(&[u64_attr(attr::RES_MRLEN, 1 << 20), u32_attr(attr::RES_PID, own)]),
                        mr_entry(&[u64_attr(attr::RES_MRLEN, 4096), u32_attr(attr::RES_PID, own)]),
                        mr_entry(&[u64_attr(attr::RES_MRLEN, 2 << 20), u32_attr(attr::RES_PID, GHOST_PID)]),
                    ],
                ));
                let kernel = mr_entry(&[u64_attr(attr::RES_MRLEN, 8192), string(attr::RES_KERN_NAME, "nvme_rdma")]);
                let foreign = mr_entry(&[u64_attr(attr::RES_MRLEN, 4096), u32_attr(attr::RES_PDN, 7)]);
                self.queue.push_back([mr_part(seq, (0, "mlx5_0"), &[kernel, foreign]), done(seq, 0)].concat());
            }
            // The device went away between the summary and the MR dump.
            (cmd::RES_MR_GET, Some(1)) => self.queue.push_back(done(seq, -libc::EINVAL)),
            other => panic!("unexpected request {other:?}"),
        }
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let datagram = self.queue.pop_front().ok_or_else(|| io::Error::from(io::ErrorKind::TimedOut))?;
        buf[..datagram.len()].copy_from_slice(&datagram);
        Ok(datagram.len())
    }
}

#[test]
fn a_collection_against_a_replayed_kernel_sums_mrs_per_owner_and_survives_a_failed_device() {
    let requests = RequestLog::default();
    let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (log, count) = (requests.clone(), opened.clone());
    let connect: Connect = Box::new(move || {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Box::new(ReplayKernel { queue: Default::default(), requests: log.clone() }) as Box<dyn Transport>)
    });
    let config = RdmaConfig { include: Vec::new(), exclude: vec![regex::Regex::new("^efa").unwrap()] };
    let mut collector =
        RdmaNetlinkCollector::with_transport(Roots { procfs: "/proc".into(), sysfs: "/sys".into() }, config, connect);
    let mut errors = Vec::new();
    let stats = collector.read(&mut errors).unwrap();

    assert_eq!(
        *requests.lock().unwrap(),
        [(cmd::RES_GET, None), (cmd::RES_MR_GET, Some(0)), (cmd::RES_MR_GET, Some(1))],
        "efa_0 is excluded"
    );
    assert_eq!(opened.load(std::sync::atomic::Ordering::SeqCst), 2, "a fresh socket after the failed dump");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path(), std::path::Path::new("netlink:NETLINK_RDMA/RES_MR_GET/mlx5_1"));

    assert!(stats.supported);
    let names: Vec<&str> = stats.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1"]);
    let mlx5_0 = &stats.devices[0];
    assert_eq!(mlx5_0.resources, [("pd".to_owned(), 4), ("mr".to_owned(), 5)]);
    let mrs = mlx5_0.mrs.as_ref().unwrap();
    assert_eq!(mrs.registered_bytes, (1 << 20) + 4096 + (2 << 20) + 8192 + 4096);
    // Our own process's comm, read from the real /proc.
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", std::process::id())).unwrap().trim().to_owned();
    let own = std::process::id().to_string();
    let ghost = GHOST_PID.to_string();
    let rows: Vec<(&str, &str, u64, u64)> =
        mrs.owners.iter().map(|o| (o.pid.as_str(), o.comm.as_str(), o.mrs, o.bytes)).collect();
    assert_eq!(
        rows,
        [
            (own.as_str(), comm.as_str(), 2, (1 << 20) + 4096),
            (ghost.as_str(), "", 1, 2 << 20),
            ("", "[nvme_rdma]", 1, 8192),
            ("unknown", "", 1, 4096),
        ]
    );
    assert_eq!(stats.devices[1].mrs, None, "the failed dump is absent, not zero");
    assert_eq!(stats.devices[1].resources, [("mr".to_owned(), 0)]);

    let mut out = Exposition::new();
    stats.render(&mut out);
    let text = out.finish();
    assert!(text.contains("memlock_rdma_process_mrs{pid=\"unknown\",comm=\"\",device=\"mlx5_0\"} 1\n"), "{text}");
    assert!(!text.contains("memlock_rdma_mr_registered_bytes{device=\"mlx5_1\"}"), "{text}");
}

#[test]
fn a_socket_that_cannot_be_opened_is_an_error() {
    let connect: Connect = Box::new(|| Err(io::Error::from_raw_os_error(libc::EACCES)));
    let mut collector = RdmaNetlinkCollector::with_transport(
        Roots { procfs: "/proc".into(), sysfs: "/sys".into() },
        RdmaConfig::default(),
        connect,
    );
    let mut errors = Vec::new();
    assert_eq!(collector.read(&mut errors), None);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].kind(), "permission");
    let connect: Connect = Box::new(|| Err(io::Error::from_raw_os_error(libc::EPROTONOSUPPORT)));
    let mut collector = RdmaNetlinkCollector::with_transport(
        Roots { procfs: "/proc".into(), sysfs: "/sys".into() },
        RdmaConfig::default(),
        connect,
    );
    assert_eq!(collector.read(&mut errors), Some(RdmaNetlinkStats { supported: false, ..Default::default() }));
    assert_eq!(errors.len(), 1, "unsupported is not an error");
}

#[test]
fn errors_name_the_request_and_keep_the_errno() {
    let e = into_source_error(ExchangeError::Reply(ReplyError::Kernel { error: -22 }), "RES_MR_GET", Some("mlx5_0"));
    assert_eq!(e.path(), std::path::Path::new("netlink:NETLINK_RDMA/RES_MR_GET/mlx5_0"));
    assert_eq!(e.kind(), "io");
    assert!(e.to_string().contains("Invalid argument"), "{e}");
    let e = into_source_error(
        ExchangeError::Reply(ReplyError::Decode(DecodeError::TruncatedHeader { have: 3 })),
        "RES_GET",
        None,
    );
    assert_eq!(e.kind(), "parse");
    assert!(e.to_string().starts_with("netlink:NETLINK_RDMA/RES_GET: "), "{e}");
}

#[test]
fn renders_per_process_series_and_device_totals() {
    let stats = RdmaNetlinkStats {
        supported: true,
        devices: vec![NetlinkDevice {
            name: "mlx5_0".into(),
            index: 0,
            resources: vec![("pd".into(), 4), ("mr".into(), 37)],
            mrs: Some(MrUsage {
                registered_bytes: 9_637_888,
                implicit_odp_mrs: 0,
                owners: vec![OwnerMrs { pid: "4242".into(), comm: "python".into(), mrs: 2, bytes: 9_637_888 }],
            }),
        }],
        ..Default::default()
    };
    let mut out = Exposition::new();
    stats.render(&mut out);
    let text = out.finish();
    for line in [
        "memlock_rdma_netlink_supported 1",
        "memlock_rdma_resources{device=\"mlx5_0\",type=\"mr\"} 37",
        "memlock_rdma_mr_registered_bytes{device=\"mlx5_0\"} 9637888",
        "memlock_rdma_process_mrs{pid=\"4242\",comm=\"python\",device=\"mlx5_0\"} 2",
        "memlock_rdma_process_mr_bytes{pid=\"4242\",comm=\"python\",device=\"mlx5_0\"} 9637888",
    ] {
        assert!(text.contains(&format!("{line}\n")), "{line} missing from:\n{text}");
    }
}

/// The budget keeps the largest owners of any device, rendered in device order whatever their
/// rank (the order is made once per stats, the granted owners taken through the mask).
#[test]
fn a_budget_keeps_the_largest_owners_in_device_order() {
    let owner = |pid: &str, bytes| OwnerMrs { pid: pid.into(), comm: String::new(), mrs: 1, bytes };
    let device = |name: &str, owners| NetlinkDevice {
        name: name.into(),
        index: 0,
        resources: Vec::new(),
        mrs: Some(MrUsage { registered_bytes: 0, implicit_odp_mrs: 0, owners }),
    };
    let stats = RdmaNetlinkStats {
        supported: true,
        devices: vec![
            device("mlx5_0", vec![owner("10", 10), owner("11", 200)]),
            device("mlx5_1", vec![owner("12", 300), owner("13", 5)]),
        ],
        ..Default::default()
    };
    // Both devices (two series each), then the two largest owners (two series each).
    let allocation = crate::budget::allocate(&stats.claims(), 8);
    assert_eq!(allocation.dropped, vec![(DEVICES, 0), (OWNERS, 2)]);
    let mut out = Exposition::new();
    stats.render_granted(&mut out, &allocation.grants);
    let text = out.finish();
    let shown: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("memlock_rdma_process_mr_bytes{"))
        .map(|l| l.split('"').nth(1).unwrap_or_default())
        .collect();
    assert_eq!(shown, vec!["11", "12"], "{text}");
}
