//! Lines in the formats NCCL prints, each from the format string named beside it (NVIDIA/nccl,
//! the tag given), filled in as printf would.

use super::*;

fn event(line: &str) -> Option<Event> {
    parse(line.as_bytes()).and_then(|l| l.event)
}

fn net(line: &str) -> NetConn {
    match event(line) {
        Some(Event::Net(c)) => c,
        other => panic!("{line}: {other:?}"),
    }
}

#[test]
fn the_prefix_is_nccl_debug_logs_wherever_a_launcher_puts_it() {
    // debug.cc ncclDebugLog (v2.7.8-1 .. v2.30.7-1): "%s:%d:%d [%d] NCCL INFO ".
    let want = Prefix { host: "gpu-node-07".into(), pid: 21337, tid: 21901, cuda_dev: Some(3) };
    for line in [
        "gpu-node-07:21337:21901 [3] NCCL INFO Using network IB",
        "[1,3]<stdout>:gpu-node-07:21337:21901 [3] NCCL INFO Using network IB",
        "gpu-node-07: gpu-node-07:21337:21901 [3] NCCL INFO Using network IB",
        "[rank3]:gpu-node-07:21337:21901 [3] NCCL INFO Using network IB",
        "3: gpu-node-07:21337:21901 [3] NCCL INFO Using network IB",
        // NCCL_DEBUG_TIMESTAMP_LEVELS=INFO with the default "[%F %T] " format.
        "[2026-12-06 23:59:01] gpu-node-07:21337:21901 [3] NCCL INFO Using network IB\r",
    ] {
        let l = parse(line.as_bytes()).unwrap_or_else(|| panic!("{line}"));
        assert_eq!(l.prefix.as_ref(), Some(&want), "{line}");
        assert_eq!(l.level, Level::Info);
    }
    // WARN: "[%d] %s:%d NCCL WARN " (file:line), and "[%d] %s:%d (%s) NCCL WARN " from 2.30.7.
    for line in [
        "gpu-node-07:21337:21901 [3] misc/ibvwrap.cc:203 NCCL WARN Call to ibv_reg_mr_iova2 failed with error \
            Cannot allocate memory",
        "gpu-node-07:21337:21901 [3] misc/ibvwrap.cc:203 (wrap_ibv_reg_mr_iova2) NCCL WARN Call to ibv_reg_mr_iova2 \
            failed with error Cannot allocate memory",
    ] {
        let l = parse(line.as_bytes()).unwrap_or_else(|| panic!("{line}"));
        assert_eq!(l.prefix.as_ref(), Some(&want), "{line}");
        assert_eq!(l.level, Level::Warn);
        let Some(Event::Failure(f)) = l.event else { panic!("{line}") };
        assert_eq!(
            (f.call.as_str(), f.error.as_deref(), f.errno),
            ("ibv_reg_mr_iova2", Some("Cannot allocate memory"), Some(12))
        );
    }
    // CALL: "%s:%d:%d NCCL CALL " (no device).
    let l = parse(b"gpu-node-07:21337:21337 NCCL CALL ncclCommInitRank(0x7ffd,8,0x11,3)").unwrap();
    assert_eq!(l.prefix.map(|p| (p.pid, p.cuda_dev)), Some((21337, None)));
    // Not NCCL's: no marker, a marker without ids, a device that is not a number.
    for line in [
        "Traceback (most recent call last):",
        "NCCL INFO Using network IB",
        "gpu-node-07:21337 [3] NCCL INFO Using network IB",
        "gpu-node-07:21337:21901 [x] NCCL INFO Using network IB",
        "gpu-node-07:21337:21901 [3] NCCL WARN no file:line",
    ] {
        assert_eq!(parse(line.as_bytes()), None, "{line}");
    }
}

#[test]
fn a_log_whose_host_names_were_cut_out_still_reads() {
    // autoscriptlabs/nccl-mesh-plugin issue 56, as posted: ncclDebugLog's "%s:%d:%d [%d] NCCL INFO "
    // with the host names removed by the reporter; the pid still tells the processes apart.
    let text = "\
:22901:22901 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/4
:22901:22901 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/5
:22901:22916 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.
";
    let l = read(text.as_bytes()).unwrap();
    let r = &l.ranks[0];
    assert_eq!(
        (r.host.as_str(), r.pid, r.connections.net_send, r.connections.net_recv, r.gdr),
        ("", 22901, 2, 0, Some(false))
    );
    assert_eq!(l.env.get("NCCL_IB_GID_INDEX").map(String::as_str), Some("3"));
}

#[test]
fn records_pasted_onto_one_line_each_count() {
    // deepseek-ai/DeepEP issue 106, as posted: net.cc recvSetup's "Channel %02d/%d : %d[%d] ->
    // %d[%d] [receive] via NET/%s/%d%s%s" records run together on one line, space-separated; the
    // last one cut inside its marker by the terminal's wrap is garbled and not taken.
    let pad = " ".repeat(55);
    let text = format!(
        "              VM-17-82-centos:11979:12555 [1] NCCL INFO Channel 08/0 : 9[1] -> 1[1] [receive] via \
            NET/IBext/1/GDRDMA{pad}VM-17-82-centos:11981:12552 [3] NCCL INFO Channel 07/0 : 11[3] -> 3[3] [receive] \
            via NET/IBext/3/GDRDMA{pad}VM-17-82-centos:11985:12554 [7] NCCL I\n"
    );
    let l = read(text.as_bytes()).unwrap();
    let got: Vec<_> = l.ranks.iter().map(|r| (r.pid, r.cuda_dev, r.connections.net_recv, r.gdr)).collect();
    assert_eq!(got, vec![(11979, Some(1), 1, Some(true)), (11981, Some(3), 1, Some(true))]);
    assert_eq!((l.lines, l.nccl_lines), (1, 1));
    // A message that quotes a marker keeps it: no prefix before the quoted one.
    let lines = parse_all(b"h:1:2 [0] NCCL INFO NET/Plugin : NCCL INFO is on");
    assert_eq!(lines.len(), 1);
    // Markers with nothing NCCL's before them cost their length and give nothing.
    let noise = " NCCL INFO ".repeat(MAX_LINE / 11);
    let started = std::time::Instant::now();
    assert!(parse_all(noise.as_bytes()).is_empty());
    let line = format!("h:1:2 [0] NCCL INFO Using network IB{noise}");
    assert_eq!(parse_all(line.as_bytes()).len(), 1);
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
}

#[test]
fn the_version_line_at_every_level_nccl_prints_it() {
    // init.cc showVersion: VERSION_STRING "NCCL version %d.%d.%d%s+cuda%d.%d", INFO at INFO, bare
    // (printf, or the VERSION level with no prefix) at VERSION and WARN.
    let v = |l: &str| match event(l) {
        Some(Event::Version(v)) => Some(v),
        _ => None,
    };
    assert_eq!(
        v("gpu-node-07:21337:21337 [0] NCCL INFO NCCL version 2.18.6+cuda12.1").as_deref(),
        Some("2.18.6+cuda12.1")
    );
    assert_eq!(v("[1,0]<stdout>:NCCL version 2.30.7+cuda12.9").as_deref(), Some("2.30.7+cuda12.9"));
    assert_eq!(v("NCCL version 2.4.8+cuda10.1").as_deref(), Some("2.4.8+cuda10.1"));
    assert_eq!(v("NCCL version 2.21.5a0+cuda12.4").as_deref(), Some("2.21.5a0+cuda12.4"), "NCCL_SUFFIX");
    // dev_runtime.cc's WARN quotes another version: not this library's.
    assert_eq!(
        v("h:1:1 [0] dev_runtime.cc:1428 NCCL WARN NCCL library is too old. This application was compiled with NCCL \
            version 2.30.7+cuda12.9, but is running with NCCL 2.29.2"),
        None
    );
    assert_eq!(v("NCCL version 2.18+cuda12.1"), None, "three numbers");
    assert_eq!(v("NCCL version 2.18.6"), None, "no +cuda: not VERSION_STRING");
}

#[test]
fn network_connections_in_every_format_since_2_4() {
    // v2.18.6-1 .. v2.30.7-1 src/transport/net.cc sendSetup:
    // "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s" (the (PCI) %s from 2.27).
    let c = net("h:1:2 [3] NCCL INFO Channel 03/1 : 11[3] -> 2[3] [send] via NET/IB/3/GDRDMA");
    assert_eq!(
        c,
        NetConn {
            channel: 3,
            conn_index: 1,
            from: 11,
            to: 2,
            direction: Direction::Send,
            net: "IB".into(),
            dev: 3,
            proxy: None,
            gdr: true,
            shared: false
        }
    );
    assert_eq!((c.me(), c.peer()), (11, 2));
    // recvSetup: "... -> %d[%d] [receive] via NET/%s/%d%s%s%s", peer first.
    let c = net("h:1:2 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA(PCI)/Shared");
    assert_eq!((c.direction, c.me(), c.peer(), c.gdr, c.shared), (Direction::Recv, 0, 8, true, true));
    // 2.32.3's recvSetup: "... [receive] via NET/%s/%d%s%s%s%s%s", `/flush=` and the GPUDirect
    // flush mode after the rest (the arguments in that release's libnccl.so).
    let c = net("h:1:2 [0] NCCL INFO Channel 00/1 : 8[0] -> 0[0] [receive] via NET/IB/2/GDRDMA/Shared/flush=C2c");
    assert_eq!((c.direction, c.dev, c.gdr, c.shared), (Direction::Recv, 2, true, true));
    // PXN: "... [send] via NET/%s/%d(%d)%s%s%s", the proxy's rank in parentheses.
    let c = net("h:1:2 [2] NCCL INFO Channel 01/0 : 2[2] -> 10[2] [send] via NET/IB/0(0)/GDRDMA");
    assert_eq!((c.dev, c.proxy, c.gdr), (0, Some(0), true));
    // A plugin's name with a space (aws-ofi-nccl), and one with a version (nccl-rdma-sharp-plugins).
    let c = net("ip-10-0-0-1:718888:719046 [3] NCCL INFO Channel 00/0 : 11[201d0] -> 2[201c0] [send] via NET/AWS \
        Libfabric/0/GDRDMA");
    assert_eq!((c.net.as_str(), c.dev, c.gdr), ("AWS Libfabric", 0, true));
    let c = net("h:1:2 [0] NCCL INFO Channel 05/0 : 1[0] -> 0[0] [receive] via NET/IBext_v8/5");
    assert_eq!((c.net.as_str(), c.dev, c.gdr, c.channel), ("IBext_v8", 5, false, 5));
    // v2.7.8-1 .. v2.11: "Channel %02d : %d[%lx] -> %d[%lx] [send] via NET/%s/%d%s", bus ids in hex.
    let c = net("h:1:2 [1] NCCL INFO Channel 00 : 0[1000] -> 1[2000] [receive] via NET/IB/0");
    assert_eq!((c.channel, c.conn_index, c.from, c.to, c.direction), (0, 0, 0, 1, Direction::Recv));
    // v2.4.8-1: "Ring %02d : %d -> %d [send] via NET/%s/%d%s".
    let c = net("h:1:2 [1] NCCL INFO Ring 01 : 1 -> 2 [send] via NET/Socket/0");
    assert_eq!((c.channel, c.from, c.to, c.net.as_str()), (1, 1, 2, "Socket"));
    // Not network connections: P2P and SHM (p2p.cc, shm.cc), a cut line, a missing direction.
    for line in [
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
        "h:1:2 [0] NCCL INFO Channel 03/1 : 11[3] -> 2[3] [se",
        "h:1:2 [0] NCCL INFO Channel 03/1 : 11[3] -> 2[3] [send] via NET/IB/",
        "h:1:2 [0] NCCL INFO Channel 03/1 : 11[3] -> 2[3] via NET/IB/3",
        "h:1:2 [0] NCCL INFO Channel 03/1 : 11[3 -> 2[3] [send] via NET/IB/3",
        "h:1:2 [0] NCCL INFO Channel xx/1 : 11[3] -> 2[3] [send] via NET/IB/3",
        "h:1:2 [0] NCCL INFO Channel 03/1 : 11[3] -> 2[3] [send] via NET//3",
    ] {
        assert!(!matches!(event(line), Some(Event::Net(_))), "{line}");
    }
}

#[test]
fn environment_nics_communicators() {
    // misc/param.cc ncclLoadParam: "%s set by environment to %lld." (the full stop is NCCL's).
    assert_eq!(
        event("h:1:1 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22."),
        Some(Event::Env { name: "NCCL_IB_TIMEOUT".into(), value: "22".into() })
    );
    // misc/socket.cc: "NCCL_SOCKET_IFNAME set by environment to %s".
    assert_eq!(
        event("h:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to =eth0."),
        Some(Event::Env { name: "NCCL_SOCKET_IFNAME".into(), value: "=eth0.".into() }),
        "only a number loses its full stop"
    );
    // net_ib ncclIbInitDevices: "NET/IB : Using%s %s; OOB %s:%s", each device " [%d]%s:%d/%s".
    assert_eq!(
        event("h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>"),
        Some(Event::Nics { transport: "IB".into(), devices: vec!["mlx5_0:1".into(), "mlx5_1:1".into()] })
    );
    // 2.24+: a rail id after the port (" [%d]%s:%d:%d/%s").
    assert_eq!(
        event("h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1:0/IB ; OOB ib0:10.0.0.1<0>"),
        Some(Event::Nics { transport: "IB".into(), devices: vec!["mlx5_0:1:0".into()] })
    );
    assert_eq!(
        event("h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0>"),
        Some(Event::Nics { transport: "Socket".into(), devices: vec!["eth0:10.0.0.5".into()] })
    );
    // init.cc: v2.23.4-1 .. v2.30.7-1 "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId
    // 0x%llx - Init COMPLETE"; v2.18.6-1 without the function; v2.7.8-1 without nvmlDev and commId.
    let Some(Event::Comm(c)) = event(
        "h:1:1 [3] NCCL INFO ncclCommInitRankConfig comm 0x5581a2c0 rank 11 nranks 16 cudaDev 3 nvmlDev 3 busId \
            3b000 commId 0x9f2c61b54ad0a1e3 - Init COMPLETE",
    ) else {
        panic!()
    };
    assert_eq!(
        (c.rank, c.nranks, c.cuda_dev, c.comm_id.as_deref(), c.complete),
        (Some(11), Some(16), Some(3), Some("0x9f2c61b54ad0a1e3"), true)
    );
    let Some(Event::Comm(c)) =
        event("h:1:1 [1] NCCL INFO comm 0x7f3c50002e10 rank 1 nranks 2 cudaDev 1 busId 2000 - Init COMPLETE")
    else {
        panic!()
    };
    assert_eq!((c.comm.as_str(), c.rank, c.comm_id), ("0x7f3c50002e10", Some(1), None));
    // The 2.30 START line leads with "[Rank %d]": the keys still read.
    let Some(Event::Comm(c)) = event(
        "h:1:1 [1] NCCL INFO [Rank 1] ncclCommInitRank comm 0x1 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2000 \
            commId 0x1f - Init START",
    ) else {
        panic!()
    };
    assert!(!c.complete);
}

#[test]
fn variables_in_every_form_nccl_says_it_read_them() {
    let env = |line: &str| match event(line) {
        Some(Event::Env { name, value }) => Some((name, value)),
        _ => None,
    };
    let pair = |n: &str, v: &str| Some((n.to_owned(), v.to_owned()));
    // net_ib.cc and socket.cc (v2.12 .. v2.32.3 libraries): "NCCL_IB_HCA set to %s",
    // "NCCL_SOCKET_IFNAME set to %s", as NVIDIA/nccl issue 1038 (2.18.3) and nccl-tests issue 228 show.
    assert_eq!(env("host-2:38610:38610 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0"), pair("NCCL_IB_HCA", "mlx5_0"));
    assert_eq!(
        env("user:5183:5236 [4] NCCL INFO NCCL_IB_HCA set to mlx5_2:1,mlx5_0:1"),
        pair("NCCL_IB_HCA", "mlx5_2:1,mlx5_0:1")
    );
    // 2.32.3's net_ib: "NET/IB: NCCL_IB_RAIL_POLICY set by environment to %s"; 2.21.5's tuner
    // plugin: "TUNER/Plugin: NCCL_TUNER_PLUGIN set to %s".
    assert_eq!(
        env("h:1:1 [0] NCCL INFO NET/IB: NCCL_IB_RAIL_POLICY set by environment to RAIL"),
        pair("NCCL_IB_RAIL_POLICY", "RAIL")
    );
    assert_eq!(
        env("h:1:1 [0] NCCL INFO TUNER/Plugin: NCCL_TUNER_PLUGIN set to libtuner.so"),
        pair("NCCL_TUNER_PLUGIN", "libtuner.so")
    );
    // 2.32.3's "NCCL_COLLNET_ENABLE set by environment to %d.".
    assert_eq!(
        env("h:1:1 [0] NCCL INFO NCCL_COLLNET_ENABLE set by environment to 1."),
        pair("NCCL_COLLNET_ENABLE", "1")
    );
    // Not a variable's value: a remark after it (2.32.3 "NCCL_SYM_KERNEL set to %s. At largest
    // grouped work size %zu Bytes, ..."), settings that are no variables ("P2P Chunksize set to
    // %d", "Comm config Blocking set to %d"), a name that is not NCCL's.
    for line in [
        "h:1:1 [0] NCCL INFO NCCL_SYM_KERNEL set to 1. At largest grouped work size 65536 Bytes, kernel will not \
            exercise TMA paths.",
        "h:1:1 [0] NCCL INFO P2P Chunksize set to 131072",
        "h:1:1 [0] NCCL INFO Comm config Blocking set to 1",
        "h:1:1 [0] NCCL INFO CUDA_VISIBLE_DEVICES set by environment to 0",
        "h:1:1 [0] NCCL INFO the NCCL_IB_HCA set to mlx5_0",
    ] {
        assert_eq!(env(line), None, "{line}");
    }
}

#[test]
fn other_transports_are_counted_apart_from_the_network() {
    let local = |line: &str| match event(line) {
        Some(Event::Local(c)) => c,
        other => panic!("{line}: {other:?}"),
    };
    // p2p.cc p2pSendSetup (v2.12 on): "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s".
    let c = local("h:1:2 [2] NCCL INFO Channel 04/0 : 0[0] -> 7[7] via P2P/CUMEM");
    assert_eq!((c.transport, c.channel, c.me, c.peer, c.direction), (Transport::P2p, 4, 0, Some(7), Direction::Send));
    // v2.7 .. v2.11: "Channel %02d : %d[%lx] -> %d[%lx] via P2P/IPC/read"; "P2P/direct pointer%s".
    let c = local("h:1:2 [2] NCCL INFO Channel 00 : 10[201c0] -> 15[a01d0] via P2P/IPC/read");
    assert_eq!((c.transport, c.conn_index, c.me, c.peer), (Transport::P2p, 0, 10, Some(15)));
    let c = local("h:1:2 [1] NCCL INFO Channel 01 : 9[16000] -> 10[49000] via P2P/direct pointer/read");
    assert_eq!((c.me, c.peer), (9, Some(10)));
    // shm.cc: "Channel %02d : %d[%d] -> %d[%d] via SHM/%s/%s" ("via SHM/direct" in 2.32.3).
    let c = local("h:1:2 [7] NCCL INFO Channel 00 : 15[7] -> 14[6] via SHM/direct/direct");
    assert_eq!((c.transport, c.me, c.peer), (Transport::Shm, 15, Some(14)));
    // coll_net.cc: "CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s" (and a %s more in 2.32.3).
    let c = local("h:1:2 [0] NCCL INFO CollNet 01/1 : 3 [receive] via COLLNET/SHARP/0/GDRDMA");
    assert_eq!((c.transport, c.channel, c.conn_index, c.me, c.peer), (Transport::CollNet, 1, 1, 3, None));
    assert_eq!(c.direction, Direction::Recv);
    // nvls.cc (2.23.4): "NVLS comm %p headRank %d nHeads %d buffSize %zu nvlsPerRankSize %zu
    // nvlsTotalSize %zu".
    assert_eq!(
        event(
            "h:1:2 [0] NCCL INFO NVLS comm 0x55d0 headRank 0 nHeads 8 buffSize 1048576 nvlsPerRankSize 201326592 \
            nvlsTotalSize 1610612736"
        ),
        Some(Event::Nvls { comm: "0x55d0".into() })
    );
    let l = log("\
h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM
h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 2[2] via SHM/direct/direct
h:1:2 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0
h:1:2 [0] NCCL INFO NVLS comm 0x55d0 headRank 0 nHeads 8 buffSize 1048576 nvlsPerRankSize 2 nvlsTotalSize 16
h:1:2 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0
");
    let r = &l.ranks[0];
    let c = &r.connections;
    assert_eq!((c.p2p, c.shm, c.collnet_send, c.collnet_recv, c.nvls), (2, 1, 1, 0, 1));
    assert_eq!((c.net_send, c.net_recv, r.repeated), (0, 1, 1), "only the NET line is the NIC's");
}

#[test]
fn connections_belong_to_the_communicator_being_initialised() {
    // init.cc (v2.23.4): "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx
    // - Init START", then the connections, then "... - Init COMPLETE". Two communicators in one
    // process, rank 0 in both and the same channels and peer: each registers its own buffers.
    let l = log("\
h:1:2 [0] NCCL INFO ncclCommInitRank comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x11 - Init START
h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
h:1:2 [0] NCCL INFO ncclCommInitRank comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x11 - Init COMPLETE
h:1:2 [0] NCCL INFO ncclCommSplit comm 0xb rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0x22 - Init START
h:1:2 [0] NCCL INFO comm 0xb rank 0 nRanks 4 nNodes 4 localRanks 1 localRank 0 MNNVL 0
h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
h:1:2 [0] NCCL INFO Channel 00/0 : 3[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
h:1:2 [0] NCCL INFO ncclCommSplit comm 0xb rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1000 parent 0xa color 1 key 0 \
- Init COMPLETE
h:3:4 [0] NCCL INFO ncclCommInitRank comm 0xc rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x11 - Init COMPLETE
");
    assert_eq!(l.communicators, 2);
    let r = &l.ranks[0];
    assert_eq!((r.connections.net_send, r.connections.net_recv, r.repeated, r.unattributed), (2, 2, 0, 0));
    assert_eq!(r.communicators, vec!["0x11".to_owned(), "0x22".to_owned()]);
    let c: Vec<_> = l
        .per_communicator
        .iter()
        .map(|c| (c.key.as_str(), c.nranks, c.members.len(), c.connections.net_send, c.connections.net_recv))
        .collect();
    assert_eq!(c, vec![("0x11", Some(2), 2, 1, 1), ("0x22", Some(4), 1, 1, 1)]);
    assert!(l.per_communicator[1].members[0].complete, "the split's COMPLETE has no commId: found by address");

    // v2.7.8-1 .. v2.17: the connections come first, then "comm %p rank %d nranks %d cudaDev %d
    // busId %lx - Init COMPLETE" names their communicator (no commId: one per process).
    let l = log("\
h:1:2 [0] NCCL INFO Channel 00 : 1[1000] -> 0[1000] [receive] via NET/IB/0
h:1:2 [0] NCCL INFO Channel 00 : 0[1000] -> 1[1000] [send] via NET/IB/0
h:1:2 [0] NCCL INFO comm 0x7f3c50002e10 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE
");
    let c = &l.per_communicator[0];
    assert_eq!((c.key.as_str(), c.connections.net_send, c.connections.net_recv), ("h:1:0x7f3c50002e10", 1, 1));
    assert_eq!(l.ranks[0].unattributed, 0);
    // A call that fails while a communicator is set up is that communicator's (its commId from
    // the START line), even with no COMPLETE to follow.
    let l = log("\
h:1:2 [0] NCCL INFO ncclCommInitRank comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x11 - Init COMPLETE
h:1:2 [0] NCCL INFO ncclCommSplit comm 0xb rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0x22 - Init START
h:1:2 [0] misc/ibvwrap.cc:203 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory
");
    assert_eq!(l.failures[0].communicator.as_deref(), Some("0x22"));
    // No communicator line at all: the connections are counted, and said to be unattributed.
    let l = log("h:1:2 [0] NCCL INFO Channel 00 : 0[1000] -> 1[1000] [send] via NET/IB/0\n");
    assert_eq!((l.ranks[0].connections.net_send, l.ranks[0].unattributed, l.per_communicator.len()), (1, 1, 0));
}

#[test]
fn failures_as_ibvwrap_checks_and_aws_ofi_nccl_print_them() {
    let f = |line: &str| match event(line) {
        Some(Event::Failure(f)) => (f.call, f.error, f.errno),
        other => panic!("{line}: {other:?}"),
    };
    // IBV_PTR_CHECK_ERRNO (v2.18.6-1 .. v2.30.7-1): "Call to " name " failed with error %s".
    assert_eq!(
        f("h:1:2 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed with error Cannot allocate memory"),
        ("ibv_create_cq".into(), Some("Cannot allocate memory".into()), Some(12))
    );
    // IBV_INT_CHECK_RET_ERRNO (v2.21.5-1+): "... failed with error %s errno %d".
    assert_eq!(
        f("h:1:2 [0] misc/ibvwrap.cc:60 NCCL WARN Call to ibv_modify_qp failed with error Invalid argument errno 22"),
        ("ibv_modify_qp".into(), Some("Invalid argument".into()), Some(22))
    );
    // wrap_ibv_modify_qp in 2.32.3's library: "Call to ibv_modify_qp failed with %d %s, %s".
    assert_eq!(
        f("h:1:2 [0] misc/ibvwrap.cc:376 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, \
            INIT to RTR"),
        ("ibv_modify_qp".into(), Some("Connection timed out".into()), Some(110))
    );
    // IBV_PTR_CHECK (v2.7.8-1): "Call to " name " failed", no errno.
    assert_eq!(
        f("h:1:2 [0] misc/ibvwrap.cc:252 NCCL WARN Call to ibv_reg_mr failed"),
        ("ibv_reg_mr".into(), None, None)
    );
    // checks.h SYSCHECK: "Call to " name " failed: %s" (" : " before 2.23).
    assert_eq!(
        f("h:1:2 [0] misc/shmutils.cc:48 NCCL WARN Call to posix_fallocate failed : No space left on device"),
        ("posix_fallocate".into(), Some("No space left on device".into()), None)
    );
    // aws-ofi-nccl register_mr_buffers.
    assert_eq!(
        f("ip-10-0-87-143:149:298 [5] register_mr_buffers:465 NCCL WARN NET/OFI Unable to register memory (type = 1) \
            for device 0. RC: 12, Error: Cannot allocate memory"),
        ("fi_mr_regattr".into(), Some("Cannot allocate memory".into()), Some(12))
    );
    // aws/aws-ofi-nccl issue 70, as posted: register_mr_buffers' "Unable to register memory (type =
    // %d) for device %d. RC: %d, Error: %s" with an RC that is no errno and no error text.
    assert_eq!(
        f("ip-10-0-78-113:3234:3425 [5] register_mr_buffers:469 NCCL WARN NET/OFI Unable to register memory (type = \
            1) for device 0. RC: -736476143, Error:"),
        ("fi_mr_regattr".into(), None, None)
    );
    // At INFO it is no failure: an optional call, or a WARN NCCL turned down while it retries.
    let l = parse(b"h:1:2 [0] NCCL INFO Call to ibv_reg_dmabuf_mr not supported").unwrap();
    assert_eq!(l.event, None);
}

fn log(text: &str) -> NcclLog {
    read(text.as_bytes()).unwrap()
}

#[test]
fn interleaved_ranks_count_each_connection_once() {
    let text = "\
[1,0]<stdout>:a:100:100 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
[1,0]<stdout>:a:100:101 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0
[1,1]<stdout>:b:200:201 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0/GDRDMA
[1,0]<stdout>:a:100:101 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
[1,0]<stdout>:a:100:101 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
[1,0]<stdout>:a:100:101 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
[1,1]<stdout>:b:200:201 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/IB/0
[1,1]<stdout>:b:200:201 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [send] via NET/IB/1
[1,1]<stdout>:b:200:201 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [se[1,0]<stdout>:a:100:101 [0] NCCL INFO Channel \
01/0 : 1[0] -> 0[0] [receive] via NET/IB/1/GDRDMA
[1,0]<stdout>:a:100:100 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId \
0xabc - Init COMPLETE
[1,1]<stdout>:b:200:200 [0] NCCL INFO ncclCommInitRank comm 0x2 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId \
0xabc - Init COMPLETE
\x00\x01garbage\u{fffd}
";
    let l = log(text);
    assert_eq!(l.nccl_version.as_deref(), Some("2.21.5+cuda12.4"));
    assert_eq!(l.env.get("NCCL_IB_HCA").map(String::as_str), Some("mlx5_0"));
    assert_eq!(l.communicators, 1, "one commId in both ranks");
    let got: Vec<_> = l
        .ranks
        .iter()
        .map(|r| (r.host.as_str(), r.pid, r.rank, r.connections.net_send, r.connections.net_recv, r.gdr))
        .collect();
    assert_eq!(got, vec![("a", 100, Some(0), 1, 2, Some(true)), ("b", 200, Some(1), 2, 1, Some(false))]);
    assert_eq!(l.ranks[0].repeated, 1, "the send printed twice");
    assert_eq!(l.ranks[1].nics, vec![0, 1]);
    assert!(l.exact);
    assert_eq!(l.lines, 12);
}

#[test]
fn not_an_nccl_log_has_no_nccl_lines() {
    let l = log("Epoch 1/10\nloss: 0.31\n\n");
    assert_eq!((l.nccl_lines, l.lines, l.ranks.len()), (0, 3, 0));
    assert_eq!(log("").lines, 0);
}

#[test]
fn lines_are_cut_at_max_line_and_not_parsed() {
    let mut text = vec![b'x'; MAX_LINE * 3 + 5];
    text.extend_from_slice(b" h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0\n");
    text.extend_from_slice(b"h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0");
    let mut reader = LineReader::new(io::BufReader::with_capacity(7, &text[..]));
    let mut buf = Vec::new();
    assert_eq!(reader.next_line(&mut buf).unwrap(), Some(true));
    assert_eq!(buf.len(), MAX_LINE);
    assert_eq!(reader.next_line(&mut buf).unwrap(), Some(false), "the last line has no newline");
    assert!(buf.starts_with(b"h:1:2"));
    assert_eq!(reader.next_line(&mut buf).unwrap(), None);
    let l = read(&text[..]).unwrap();
    assert_eq!((l.lines, l.cut_lines, l.ranks[0].connections.net_send), (2, 1, 1));
}

#[test]
fn state_is_bounded_however_many_processes_and_connections() {
    let mut s = Summary::default();
    for pid in 0..(MAX_PROCESSES as u32 + 10) {
        s.feed(format!("h:{pid}:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0").as_bytes(), false);
    }
    let l = s.finish();
    assert_eq!(l.ranks.len(), MAX_PROCESSES);
    assert_eq!(l.dropped.processes, 10);
    assert!(!l.exact);
    let mut s = Summary::default();
    for i in 0..(MAX_FAILURES + 3) {
        s.feed(
            format!("h:1:{i} [0] f.cc:1 NCCL WARN Call to ibv_reg_mr failed with error Bad address").as_bytes(),
            false,
        );
    }
    let l = s.finish();
    assert_eq!((l.failures.len(), l.dropped.failures), (MAX_FAILURES, 3));
    assert_eq!(l.failures[0].errno, Some(14));
}

fn fixture(name: &str) -> NcclLog {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/nccl-logs").join(name);
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    read(io::BufReader::new(file)).unwrap()
}

/// (host, pid, cuda_dev, net_send, net_recv, gdr)
/// Its network sends and receives.
fn net_counts(r: &Rank) -> (u64, u64) {
    (r.connections.net_send, r.connections.net_recv)
}

type Row<'a> = (&'a str, u32, Option<i32>, u64, u64, Option<bool>);

fn rows(l: &NcclLog) -> Vec<Row<'_>> {
    l.ranks
        .iter()
        .map(|r| (r.host.as_str(), r.pid, r.cuda_dev, r.connections.net_send, r.connections.net_recv, r.gdr))
        .collect()
}

/// The written logs (scripts/nccl_log_fixtures.py, from NCCL's rules) and the model agree on
/// every rank's network connections: 2 nodes x 8 GPUs x 8 NICs, 16 channels, ring and tree.
#[test]
fn written_logs_of_reference_layouts_agree_with_the_model() {
    use crate::nccl::model::{estimate, Inputs};
    let l = fixture("2x8x8-ring-tree-v2.21.log");
    assert_eq!(l.nccl_version.as_deref(), Some("2.21.5+cuda12.4"));
    assert_eq!((l.communicators, l.ranks.len(), l.failures.len()), (1, 16, 0));
    assert_eq!(l.nics.len(), 8);
    assert_eq!(l.env.get("NCCL_IB_HCA").map(String::as_str), Some("mlx5"));
    let model = estimate(&Inputs::new(2, 8, 8));
    assert_eq!(model.inputs.channels.count, 16);
    for r in &l.ranks {
        let Some(dev) = r.cuda_dev else { panic!("{r:?}") };
        let m = &model.ranks[dev as usize];
        let (sends, receives) = (m.ring.sends + m.tree.sends, m.ring.receives + m.tree.receives);
        assert_eq!(net_counts(r), (sends, receives), "{r:?} against the model's {m:?}");
        assert_eq!((r.connections.net_send, r.connections.net_recv, r.gdr, r.repeated), (4, 4, Some(false), 0));
        assert_eq!(r.rank, Some(u32::from(r.host == "gpu-a02") * 8 + dev as u32));
    }
    // The same job stopped by rank 13's first registration: its ring connectors were set up
    // (the log prints them at setup, the proxy registers at connect), the tree's never were.
    let l = fixture("2x8x8-enomem-v2.21.log");
    assert_eq!(l.failures.len(), 1);
    let f = &l.failures[0];
    assert_eq!(
        (f.host.as_str(), f.pid, f.cuda_dev, f.call.as_str(), f.error.as_deref(), f.errno),
        ("gpu-a02", 41105, Some(5), "ibv_reg_mr_iova2", Some("Cannot allocate memory"), Some(12))
    );
    for r in &l.ranks {
        let m = &model.ranks[r.cuda_dev.unwrap_or_default() as usize];
        assert_eq!(net_counts(r), (m.ring.sends, m.ring.receives), "{r:?}");
    }
    assert_eq!(l.communicators, 0, "no Init COMPLETE");
    // One NIC for 8 GPUs, 4 channels: the ring enters at GPU 0 and leaves from GPU 7, the tree
    // joins the GPU 0s; the other GPUs have no network connection.
    let l = fixture("2x8x1-ring-tree-v2.21.log");
    let model = estimate(&Inputs::new(2, 8, 1));
    assert_eq!((model.inputs.channels.count, l.ranks.len()), (4, 16));
    for r in &l.ranks {
        let dev = r.cuda_dev.unwrap_or_default() as usize;
        let m = &model.ranks[dev];
        let (sends, receives) = (m.ring.sends + m.tree.sends, m.ring.receives + m.tree.receives);
        assert_eq!(net_counts(r), (sends, receives), "{r:?} against the model's {m:?}");
        let want = match dev {
            0 => (4, 8),
            7 => (4, 0),
            _ => (0, 0),
        };
        assert_eq!(net_counts(r), want, "{r:?}");
    }
}

#[test]
fn public_logs_parse_exactly() {
    // NVIDIA/nccl issue 707: one process, four GPUs, each its own (host, pid, device).
    let l = fixture("public-nccl-707-a100-gdrdma.log");
    let h = "10-90-43-152";
    assert_eq!(
        rows(&l),
        vec![
            (h, 120890, Some(0), 2, 2, Some(true)),
            (h, 120890, Some(1), 0, 1, Some(true)),
            (h, 120890, Some(2), 2, 2, Some(true)),
            (h, 120890, Some(3), 2, 1, Some(true)),
        ]
    );
    assert_eq!(l.ranks[0].nics, vec![4, 5]);
    assert_eq!(l.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), vec![Some(0), Some(1), Some(2), Some(3)]);
    assert_eq!((l.nccl_version.as_deref(), l.nccl_lines, l.lines), (None, 12, 14));

    // NVIDIA/nccl issue 563: pdsh's tag twice, aws-ofi-nccl's registration failure.
    let l = fixture("public-nccl-563-ofi-enomem.log");
    assert_eq!(l.failures.len(), 1);
    let f = &l.failures[0];
    assert_eq!(
        (f.host.as_str(), f.pid, f.cuda_dev, f.call.as_str(), f.error.as_deref(), f.errno),
        ("ip-10-0-87-143", 149, Some(5), "fi_mr_regattr", Some("Cannot allocate memory"), Some(12))
    );
    assert_eq!(rows(&l), vec![("ip-10-0-87-143", 149, Some(5), 0, 0, None)]);

    // deepseek-ai/DeepEP issue 143: two ranks' ibv_create_cq ENOMEM; the proxy's WARNs are no calls.
    let l = fixture("public-deepep-143-create-cq.log");
    let got: Vec<_> = l.failures.iter().map(|f| (f.pid, f.cuda_dev, f.call.as_str(), f.errno)).collect();
    assert_eq!(got, vec![(4016, Some(7), "ibv_create_cq", Some(12)), (4009, Some(0), "ibv_create_cq", Some(12))]);

    // aws/aws-ofi-nccl issue 141: a plugin name with a space; P2P lines are not network ones,
    // their processes are counted with no network connection and their P2P sends apart.
    let l = fixture("public-aws-ofi-nccl-141-libfabric.log");
    let h = "ip-10-216-179-87";
    assert_eq!(
        rows(&l),
        vec![
            (h, 718885, Some(0), 0, 0, None),
            (h, 718887, Some(2), 0, 0, None),
            (h, 718888, Some(3), 2, 0, Some(true)),
            (h, 718889, Some(4), 0, 0, None),
            (h, 718890, Some(5), 1, 0, Some(true)),
        ]
    );
    assert_eq!(l.ranks.iter().map(|r| r.connections.p2p).collect::<Vec<_>>(), vec![6, 2, 0, 2, 0]);
    assert_eq!(l.networks, vec!["AWS Libfabric".to_owned()]);

    // NVIDIA/nccl issue 1814: Init COMPLETE of one communicator in four processes.
    let l = fixture("public-nccl-1814-init-complete.log");
    assert_eq!(l.communicators, 1);
    let got: Vec<_> = l.ranks.iter().map(|r| (r.pid, r.rank, r.gdr)).collect();
    assert_eq!(got, vec![(980, Some(32), None), (982, Some(34), None), (983, Some(35), None), (984, Some(36), None)]);
}

#[test]
fn a_ten_megabyte_line_and_binary_noise_are_skipped_whole() {
    let mut text = b"h:1:2 [0] NCCL INFO NCCL version 2.27.7+cuda12.9\n".to_vec();
    text.extend(std::iter::repeat_n(b'\xfe', 10 << 20));
    text.extend_from_slice(b" NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0\n");
    text.extend((0..=255u8).cycle().take(1 << 16));
    text.extend_from_slice(b"\nh:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/1\n");
    let l = read(&text[..]).unwrap();
    assert_eq!(l.nccl_version.as_deref(), Some("2.27.7+cuda12.9"));
    assert_eq!(l.cut_lines, 1, "the 10 MiB line, not its tail");
    assert_eq!(l.ranks.len(), 1);
    assert_eq!(l.ranks[0].connections.net_send, 1, "only the whole line after the noise");
}

#[test]
fn a_marker_repeated_back_to_back_is_one_record() {
    // Found by libFuzzer: the second marker shares the first's trailing space, so the message
    // between them was an inverted range.
    let line = b"[1,0]<stdout>:gpu-a01:41000:41017 [0] NCCL INFO NCCL INFO NCCL version 2.21.5+cuda12.4";
    let records = parse_all(line);
    assert_eq!(records.len(), 1, "{records:?}");
    // NCCL never prints the marker twice: the record is kept, its garbled message not read.
    let l = read(&line[..]).expect("read");
    assert_eq!((l.lines, l.nccl_lines), (1, 1));
}
