//! `--nccl-log FILE|-` for `estimate` and `check`: the job's own NCCL_DEBUG=INFO log
//! ([`crate::nccl::log`]), each process's network connections charged as the model
//! charges a connection, instead of the connections the model places.

use std::collections::BTreeMap;
use std::io::{self, BufReader};

use serde::Serialize;

use crate::nccl::log::{self, Communicator, NcclLog};
use crate::nccl::model::{self, Counts, Estimate, Inputs};
use crate::nccl::param::{strtoll, Strtoll};
use memlock_core::gdr::GdrMode;
use memlock_core::units::bytes as human;

use super::Verdict;

/// Reads FILE, or standard input for `-`. `Err` is the message of an exit 2, naming the file.
pub fn load(path: &str) -> Result<NcclLog, String> {
    let (name, read) = if path == "-" {
        ("standard input".to_owned(), log::read(io::stdin().lock()))
    } else {
        let file = std::fs::File::open(path).map_err(|e| format!("--nccl-log {path}: {e}"))?;
        (path.to_owned(), log::read(BufReader::new(file)))
    };
    let l = read.map_err(|e| format!("--nccl-log {name}: {e}"))?;
    if l.nccl_lines == 0 {
        return Err(format!(
            "--nccl-log {name}: not an NCCL log: none of its {} line(s) has NCCL's `host:pid:tid [dev] NCCL INFO` \
                prefix or an `NCCL version` line (run the job with NCCL_DEBUG=INFO)",
            l.lines
        ));
    }
    Ok(l)
}

/// One process of the log, with what it registers.
#[derive(Debug, Clone, Serialize)]
pub struct LogRank {
    pub host: String,
    pub pid: u32,
    pub cuda_dev: Option<i32>,
    pub rank: Option<u32>,
    pub net_send: u64,
    pub net_recv: u64,
    /// Sends whose buffers another rank's proxy registers (PXN, src/transport/net.cc sendSetup:
    /// the proxy's process registers them): charged to the process of that rank on the same
    /// host when the log names it (its first communicator's rank), else to the sender.
    pub(crate) net_send_proxied: u64,
    /// Of the sends charged here, those the process proxies for other ranks.
    pub(crate) net_send_for_others: u64,
    pub gdr: Option<bool>,
    /// Its connections of the transports no NIC registers, counted apart from the network's: P2P
    /// and SHM sends, CollNet sends and receives (through the CollNet plugin, not charged here),
    /// NVLS set-ups.
    pub p2p: u64,
    pub shm: u64,
    pub collnet_send: u64,
    pub collnet_recv: u64,
    pub nvls: u64,
    /// The communicators it logged (keys of `per_communicator`).
    pub communicators: Vec<String>,
    pub nics: Vec<u32>,
    /// Charged to VmPin for its connections.
    pub memlock_bytes: u64,
    pub(crate) host_bytes: u64,
}

/// A failed call of the log, with what the rest of the log tells of it.
#[derive(Debug, Clone, Serialize)]
pub struct LogFailure {
    #[serde(flatten)]
    pub at: log::FailureAt,
    /// The failing process's rank, when its lines name one.
    pub rank: Option<u32>,
    /// ENOMEM, EPERM...: the errno's name.
    pub errno_name: Option<&'static str>,
}

/// The `nccl_log` key of `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct LogReport {
    pub nccl_version: Option<String>,
    pub(crate) other_versions: Vec<String>,
    pub lines: u64,
    pub nccl_lines: u64,
    pub cut_lines: u64,
    /// false when a cap of the reader was hit: counts are lower bounds.
    pub exact: bool,
    pub communicators: u64,
    /// Each communicator: its commId, processes and their ranks, and the connections set up in it.
    pub per_communicator: Vec<Communicator>,
    pub nics: Vec<String>,
    pub(crate) networks: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub ranks: Vec<LogRank>,
    pub failures: Vec<LogFailure>,
    /// The busiest process of the log, and the busiest host's processes together.
    pub per_rank_max_bytes: u64,
    pub per_node_bytes: u64,
    /// The model's busiest rank for the same inputs.
    pub(crate) model_per_rank_max_bytes: u64,
    /// For a log that stops at a failure: what the model says the busiest rank needs beyond what
    /// the log shows set up (0 when the log shows as much).
    pub(crate) remaining_by_model_bytes: Option<u64>,
    /// The log's busiest process under the memlock limit the verdict compares with.
    pub fits_memlock_limit: bool,
    /// Inputs the log does not give, and what was taken.
    pub assumed: Vec<String>,
}

pub fn errno_name(errno: i32) -> Option<&'static str> {
    log::line::ERRNOS.iter().find(|(n, _, _)| *n == errno).map(|(_, name, _)| *name)
}

/// Buffer sizes the log says were set (ncclLoadParam prints them), within what NCCL can use.
fn logged_size(l: &NcclLog, name: &str) -> Option<u64> {
    let value = l.env.get(name)?;
    match strtoll(value.as_bytes(), 0) {
        Strtoll::Whole(v) if (1..=i64::from(i32::MAX)).contains(&v) => u64::try_from(v).ok(),
        _ => None,
    }
}

/// A process's connections as charged: counts, (NIC, connections) pairs, sends for others.
type Charged = (Counts, Vec<(u32, u64)>, u64);

pub fn report(inputs: &Inputs, e: &Estimate, l: &NcclLog, v: &Verdict) -> LogReport {
    let mut i = inputs.clone();
    let mut assumed = Vec::new();
    // The log lists every communicator's connections itself.
    i.communicators = 1;
    for (name, slot) in [
        ("NCCL_BUFFSIZE", &mut i.buffsize_simple),
        ("NCCL_LL_BUFFSIZE", &mut i.buffsize_ll),
        ("NCCL_LL128_BUFFSIZE", &mut i.buffsize_ll128),
    ] {
        if let Some(size) = logged_size(l, name) {
            *slot = size;
        }
    }
    let any_gdr = l.ranks.iter().any(|r| r.gdr_connections > 0);
    if any_gdr && i.gdr == GdrMode::Off {
        // The log proves GPUDirect; whether nvidia-peermem or dma-buf registers the GPU buffers
        // it does not say, and peermem charges them to VmPin: the high end.
        i.gdr = GdrMode::Peermem;
        assumed.push(
            "GPUDirect (/GDRDMA in the log) charged as nvidia-peermem, the high end: pass --gdr dmabuf if the \
                job's nodes register through dma-buf"
                .to_owned(),
        );
    }
    // p2p lines on shared buffers (`/Shared`) are charged by network connection and pool, the
    // pools p2pnChannels x NCCL_SHARED_STEPS x chunk (net.cc sharedNetBuffersInit).
    if i.p2p.is_none() && l.ranks.iter().any(|r| r.shared_send + r.shared_recv > 0) {
        let channels = i.channels.count.next_power_of_two().min(model::MAX_CHANNELS);
        let chunk = model::DEFAULT_P2P_CHUNKSIZE.min(i.buffsize_simple / model::STEPS);
        i.p2p = Some(model::P2p::nccl_defaults(channels, 1, chunk));
        assumed.push(format!(
            "p2p pools of {channels} p2p channels (the channel count rounded up to a power of two) x 16 steps x \
                {chunk} B: pass --p2p-net and --p2p-channels"
        ));
    }
    // Per process: its counts (the shared p2p lines apart), then PXN sends moved to the proxy's
    // process.
    let mut counts: Vec<Charged> = l
        .ranks
        .iter()
        .map(|r| {
            let net = &r.connections;
            let (send, send_gdr) =
                (net.net_send.saturating_sub(r.shared_send), net.net_send_gdr.saturating_sub(r.shared_send_gdr));
            let (recv, recv_gdr) =
                (net.net_recv.saturating_sub(r.shared_recv), net.net_recv_gdr.saturating_sub(r.shared_recv_gdr));
            let c = Counts {
                sends: send.saturating_sub(send_gdr),
                sends_gdr: send_gdr,
                receives: recv.saturating_sub(recv_gdr),
                receives_gdr: recv_gdr,
            };
            (c, r.nics.iter().copied().zip(r.nic_connections.iter().copied()).collect(), 0)
        })
        .collect();
    for (from, r) in l.ranks.iter().enumerate() {
        for (proxy, n, gdr, dev) in &r.proxied_to {
            let Some(to) = l.ranks.iter().position(|k| k.host == r.host && k.rank == Some(*proxy)) else { continue };
            let (plain, gdr) = (n.saturating_sub(*gdr), *gdr.min(n));
            let c = &mut counts[from];
            (c.0.sends, c.0.sends_gdr) = (c.0.sends.saturating_sub(plain), c.0.sends_gdr.saturating_sub(gdr));
            if let Some(slot) = c.1.iter_mut().find(|(d, _)| d == dev) {
                slot.1 = slot.1.saturating_sub(*n);
            }
            let c = &mut counts[to];
            (c.0.sends, c.0.sends_gdr, c.2) =
                (c.0.sends.saturating_add(plain), c.0.sends_gdr.saturating_add(gdr), c.2.saturating_add(*n));
            match c.1.iter_mut().find(|(d, _)| d == dev) {
                Some(slot) => slot.1 = slot.1.saturating_add(*n),
                None => c.1.push((*dev, *n)),
            }
        }
    }
    let ranks: Vec<LogRank> = l
        .ranks
        .iter()
        .zip(&counts)
        .map(|(r, (c, nics, for_others))| {
            let mut devs: Vec<u32> = nics.iter().map(|(d, _)| *d).collect();
            for (d, _) in &r.shared_p2p.nic_connections {
                if !devs.contains(d) {
                    devs.push(*d);
                }
            }
            let on = |list: &[(u32, u64)], d: &u32| list.iter().find(|(x, _)| x == d).map_or(0, |(_, n)| *n);
            let per_nic: Vec<u64> = devs.iter().map(|d| on(nics, d)).collect();
            let p = &r.shared_p2p;
            let p2p = model::LoggedP2p {
                counts: Counts {
                    sends: p.sends.saturating_sub(p.sends_gdr),
                    sends_gdr: p.sends_gdr,
                    receives: p.receives.saturating_sub(p.receives_gdr),
                    receives_gdr: p.receives_gdr,
                },
                send_pools: p.send_pools,
                receive_pools: p.receive_pools,
                per_nic: devs.iter().map(|d| on(&p.nic_connections, d)).collect(),
            };
            let need = model::logged_need_with_p2p(&i, *c, &per_nic, &p2p);
            LogRank {
                host: r.host.clone(),
                pid: r.pid,
                cuda_dev: r.cuda_dev,
                rank: r.rank,
                net_send: r.connections.net_send,
                net_recv: r.connections.net_recv,
                net_send_proxied: r.net_send_proxied,
                net_send_for_others: *for_others,
                gdr: r.gdr,
                p2p: r.connections.p2p,
                shm: r.connections.shm,
                collnet_send: r.connections.collnet_send,
                collnet_recv: r.connections.collnet_recv,
                nvls: r.connections.nvls,
                communicators: r.communicators.clone(),
                nics: r.nics.clone(),
                memlock_bytes: need.memlock,
                host_bytes: need.host,
            }
        })
        .collect();
    let per_rank_max_bytes = ranks.iter().map(|r| r.memlock_bytes).max().unwrap_or(0);
    let mut per_host: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &ranks {
        let sum = per_host.entry(&r.host).or_default();
        *sum = sum.saturating_add(r.memlock_bytes);
    }
    let per_node_bytes = per_host.values().copied().max().unwrap_or(0);
    // Its rank in the communicator it failed in, else in its first one.
    let rank_of = |f: &log::FailureAt| {
        let member = f.communicator.as_ref().and_then(|key| {
            let c = l.per_communicator.iter().find(|c| &c.key == key)?;
            c.members.iter().find(|m| m.host == f.host && m.pid == f.pid && m.cuda_dev == f.cuda_dev)?.rank
        });
        member.or_else(|| {
            l.ranks.iter().find(|r| r.host == f.host && r.pid == f.pid && r.cuda_dev == f.cuda_dev).and_then(|r| r.rank)
        })
    };
    let failures: Vec<LogFailure> = l
        .failures
        .iter()
        .map(|f| LogFailure { at: f.clone(), rank: rank_of(f), errno_name: f.errno.and_then(errno_name) })
        .collect();
    let fits_memlock_limit = v.cap_ipc_lock_exempt
        || v.soft_limit_unlimited
        || v.soft_limit_bytes.is_none_or(|limit| per_rank_max_bytes <= limit);
    LogReport {
        nccl_version: l.nccl_version.clone(),
        other_versions: l.other_versions.clone(),
        lines: l.lines,
        nccl_lines: l.nccl_lines,
        cut_lines: l.cut_lines,
        exact: l.exact,
        communicators: l.communicators,
        per_communicator: l.per_communicator.clone(),
        nics: l.nics.clone(),
        networks: l.networks.clone(),
        env: l.env.clone(),
        remaining_by_model_bytes: (!failures.is_empty())
            .then(|| e.per_rank_max_bytes.saturating_sub(per_rank_max_bytes)),
        ranks,
        failures,
        per_rank_max_bytes,
        per_node_bytes,
        model_per_rank_max_bytes: e.per_rank_max_bytes,
        fits_memlock_limit,
        assumed,
    }
}

/// Adds the `nccl_log` key to a JSON report.
pub(crate) fn with_log(json: &str, r: &LogReport) -> Result<String, serde_json::Error> {
    let mut value: serde_json::Value = serde_json::from_str(json)?;
    if let serde_json::Value::Object(map) = &mut value {
        map.insert("nccl_log".into(), serde_json::to_value(r)?);
    }
    serde_json::to_string_pretty(&value).map(|t| t + "\n")
}

pub(crate) fn render_text(r: &LogReport) -> String {
    let mut out = format!(
        "\nfrom the NCCL log (NCCL {}, {} NCCL line(s) of {}, {} communicator(s){}):\n",
        r.nccl_version.as_deref().unwrap_or("version not logged"),
        r.nccl_lines,
        r.lines,
        r.communicators,
        if r.exact { "" } else { "; a reader cap was hit, counts are lower bounds" }
    );
    out += &format!(
        "  busiest process {} (the model: {}), busiest host {}{}\n",
        human(r.per_rank_max_bytes as f64),
        human(r.model_per_rank_max_bytes as f64),
        human(r.per_node_bytes as f64),
        if r.fits_memlock_limit { "" } else { ": above the memlock limit" }
    );
    for a in &r.assumed {
        out += &format!("  assumed: {a}\n");
    }
    for k in &r.ranks {
        let dev = k.cuda_dev.map_or("-".to_owned(), |d| d.to_string());
        let rank = k.rank.map_or("-".to_owned(), |d| d.to_string());
        let gdr = match k.gdr {
            Some(true) => "GDR",
            Some(false) => "no GDR",
            None => "no network",
        };
        let mut other = String::new();
        for (n, what) in
            [(k.p2p, "P2P"), (k.shm, "SHM"), (k.collnet_send + k.collnet_recv, "CollNet"), (k.nvls, "NVLS")]
        {
            if n > 0 {
                other += &format!(", {n} {what}");
            }
        }
        out += &format!(
            "  {}:{} GPU {dev} rank {rank}: {} send(s), {} receive(s), {gdr}, {}{}\n",
            k.host,
            k.pid,
            k.net_send,
            k.net_recv,
            human(k.memlock_bytes as f64),
            if other.is_empty() { String::new() } else { format!(" (not the NIC's:{})", &other[1..]) }
        );
    }
    for LogFailure { at: f, .. } in &r.failures {
        out += &format!(
            "  FAILED {}:{} GPU {}: {} {} (log line {})\n",
            f.host,
            f.pid,
            f.cuda_dev.map_or("-".to_owned(), |d| d.to_string()),
            f.call,
            f.error.as_deref().unwrap_or("(no error text)"),
            f.line
        );
    }
    if let Some(rest) = r.remaining_by_model_bytes {
        out += &format!(
            "  the log stops at a failure: the model's busiest rank needs {} more than the log shows set up\n",
            human(rest as f64)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        format!("{}/../../tests/fixtures/nccl-logs/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    fn verdict(limit: Option<u64>) -> Verdict {
        Verdict {
            pid: "self".into(),
            soft_limit_bytes: limit,
            soft_limit_unlimited: limit.is_none(),
            cap_ipc_lock_exempt: false,
            fits_memlock_limit: true,
            memory_available_bytes: None,
            fits_memory_available: None,
            nccl: None,
        }
    }

    #[test]
    fn the_log_charges_what_the_model_charges_for_the_same_connections() {
        let l = load(&fixture("2x8x8-ring-tree-v2.21.log")).unwrap();
        let i = Inputs::new(2, 8, 8);
        let e = model::estimate(&i);
        let r = report(&i, &e, &l, &verdict(Some(8 << 20)));
        assert_eq!(r.ranks.len(), 16);
        // Same connections, same charges: the log's busiest process is the model's busiest rank.
        assert_eq!(r.per_rank_max_bytes, e.per_rank_max_bytes);
        assert_eq!(r.per_node_bytes, e.per_node_bytes);
        assert!(!r.fits_memlock_limit, "{} over 8 MiB", r.per_rank_max_bytes);
        assert_eq!(r.remaining_by_model_bytes, None, "no failure");
        assert!(r.assumed.is_empty());
        let l = load(&fixture("2x8x1-ring-tree-v2.21.log")).unwrap();
        let i = Inputs::new(2, 8, 1);
        let e = model::estimate(&i);
        let r = report(&i, &e, &l, &verdict(None));
        assert_eq!((r.per_rank_max_bytes, r.per_node_bytes), (e.per_rank_max_bytes, e.per_node_bytes));
    }

    /// All-to-all with PXN and shared comms (scripts/nccl_log_fixtures.py, NCCL 2.29's format
    /// strings and rules): the log path, deduplicating the `/Shared` lines into the network
    /// connections and pools each process registers, and the model agree rank by rank.
    #[test]
    fn the_log_and_the_model_agree_on_pxn_all_to_all() {
        let l = load(&fixture("2x8x4-alltoall-pxn-v2.29.log")).unwrap();
        assert_eq!(l.nccl_version.as_deref(), Some("2.29.7+cuda12.9"));
        let mut i = Inputs::new(2, 8, 4);
        i.gdr = GdrMode::Peermem;
        i.nccl_version = model::Release { major: 2, minor: 29 };
        i.p2p = Some(model::P2p::nccl_defaults(16, 4, model::DEFAULT_P2P_CHUNKSIZE));
        let e = model::estimate(&i);
        let r = report(&i, &e, &l, &verdict(None));
        assert_eq!(r.ranks.len(), 16);
        assert!(r.assumed.is_empty(), "{:?}", r.assumed);
        for (lr, raw) in r.ranks.iter().zip(&l.ranks) {
            let Some(dev) = lr.cuda_dev else { panic!("{lr:?}") };
            let m = &e.ranks[dev as usize];
            // 8 remote peers x 4 channels each way, as the log prints them.
            assert_eq!((raw.shared_send, raw.shared_recv), (32, 32), "{raw:?}");
            assert_eq!(
                (raw.shared_p2p.sends, raw.shared_p2p.receives),
                (m.p2p.sends_gdr, m.p2p.receives_gdr),
                "{raw:?}"
            );
            assert_eq!(lr.memlock_bytes, m.memlock_bytes, "GPU {dev}: {raw:?}");
        }
        assert_eq!(r.per_rank_max_bytes, 426_795_008, "case K of docs/check.md");
        assert_eq!((r.per_rank_max_bytes, r.per_node_bytes), (e.per_rank_max_bytes, e.per_node_bytes));
        // Without --p2p-net the log still shows the pools: their size from the channel count.
        let mut plain = i.clone();
        plain.p2p = None;
        let r = report(&plain, &model::estimate(&plain), &l, &verdict(None));
        assert_eq!(r.per_rank_max_bytes, 426_795_008);
        assert!(r.assumed.iter().any(|a| a.contains("--p2p-channels")), "{:?}", r.assumed);
    }

    /// H100-class nodes with one GPU per NIC switch, 4 nodes, dma-buf (the log written from NCCL
    /// 2.29's format strings and the simpler tree): the log path and the model agree, 7.4 MiB.
    #[test]
    fn the_log_and_the_model_agree_on_the_simpler_tree() {
        let l = load(&fixture("4x8x8-simple-tree-v2.29.log")).unwrap();
        assert_eq!((l.ranks.len(), l.communicators), (32, 1));
        let mut i = Inputs::new(4, 8, 8);
        i.gdr = GdrMode::Dmabuf;
        let e = model::estimate(&i);
        let r = report(&i, &e, &l, &verdict(Some(8 << 20)));
        assert_eq!(r.per_rank_max_bytes, 7_745_536, "case J of docs/check.md");
        assert_eq!((r.per_rank_max_bytes, r.per_node_bytes), (e.per_rank_max_bytes, e.per_node_bytes));
        assert!(r.fits_memlock_limit, "under 8 MiB");
        // Every process of the busiest node as the model places it.
        let busiest = format!("gpu-a0{}", e.busiest_node + 1);
        for lr in r.ranks.iter().filter(|lr| lr.host == busiest) {
            let m = &e.ranks[lr.cuda_dev.unwrap_or_default() as usize];
            assert_eq!(lr.memlock_bytes, m.memlock_bytes, "{lr:?}");
        }
    }

    #[test]
    fn a_log_that_stops_at_the_failure_says_what_the_rest_adds() {
        let l = load(&fixture("2x8x8-enomem-v2.21.log")).unwrap();
        let i = Inputs::new(2, 8, 8);
        let e = model::estimate(&i);
        let r = report(&i, &e, &l, &verdict(Some(8 << 20)));
        let f = &r.failures[0];
        assert_eq!((f.rank, f.at.call.as_str(), f.errno_name), (Some(13), "ibv_reg_mr_iova2", Some("ENOMEM")));
        // Ring only: 2 of the 4 sends and receives; the model's tree adds the rest.
        assert!(r.per_rank_max_bytes > 0 && r.per_rank_max_bytes < e.per_rank_max_bytes);
        assert_eq!(r.remaining_by_model_bytes, Some(e.per_rank_max_bytes - r.per_rank_max_bytes));
        assert!(render_text(&r).contains("FAILED gpu-a02:41105 GPU 5: ibv_reg_mr_iova2 Cannot allocate memory"));
    }

    #[test]
    fn gpudirect_in_the_log_is_charged_at_the_high_end_when_the_node_shows_none() {
        let l = load(&fixture("public-nccl-707-a100-gdrdma.log")).unwrap();
        let i = Inputs::new(2, 8, 8);
        let r = report(&i, &model::estimate(&i), &l, &verdict(None));
        assert_eq!(r.assumed.len(), 1, "{:?}", r.assumed);
        assert!(r.fits_memlock_limit, "unlimited");
        let mut dmabuf = i.clone();
        dmabuf.gdr = GdrMode::Dmabuf;
        let low = report(&dmabuf, &model::estimate(&dmabuf), &l, &verdict(None));
        assert!(low.per_rank_max_bytes < r.per_rank_max_bytes, "{} {}", low.per_rank_max_bytes, r.per_rank_max_bytes);
    }

    #[test]
    fn pxn_sends_are_charged_to_the_proxys_process() {
        // src/transport/net.cc sendSetup: "%d(%d)" is the NIC and the proxy's rank. Rank 1 sends
        // on NIC 0 through rank 0's proxy, which registers the buffers.
        let text = "\
h:10:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0/GDRDMA
h:10:1 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
h:11:1 [1] NCCL INFO Channel 00/0 : 1[1] -> 3[1] [send] via NET/IB/0(0)/GDRDMA
h:11:1 [1] NCCL INFO Channel 00/0 : 3[1] -> 1[1] [receive] via NET/IB/1/GDRDMA
";
        let l = log::read(text.as_bytes()).unwrap();
        assert_eq!(l.ranks[1].proxied_to, vec![(0, 1, 1, 0)]);
        let mut i = Inputs::new(2, 2, 2);
        i.gdr = GdrMode::Peermem;
        let r = report(&i, &model::estimate(&i), &l, &verdict(None));
        assert_eq!((r.ranks[0].net_send_for_others, r.ranks[1].net_send_proxied), (1, 1));
        let one = model::logged_need(&i, Counts { sends_gdr: 1, receives_gdr: 1, ..Default::default() }, &[2]);
        assert!(r.ranks[0].memlock_bytes > one.memlock, "rank 0 registers rank 1's send too");
        assert!(r.ranks[1].memlock_bytes < one.memlock, "rank 1 registers its receive only");
        assert_eq!(r.per_node_bytes, r.ranks[0].memlock_bytes + r.ranks[1].memlock_bytes);
    }

    #[test]
    fn a_failure_names_the_communicator_and_rank_it_happened_in() {
        // init.cc's "%s comm %p rank %d nranks %d ... commId 0x%llx - Init START" (2.23.4): the
        // process is rank 0 of its first communicator and rank 3 of the one it fails in.
        let text = "\
h:1:2 [0] NCCL INFO ncclCommInitRank comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x11 - Init COMPLETE
h:1:2 [0] NCCL INFO ncclCommSplit comm 0xb rank 3 nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0x22 - Init START
h:1:2 [0] misc/ibvwrap.cc:203 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory
";
        let l = log::read(text.as_bytes()).unwrap();
        let i = Inputs::new(2, 2, 1);
        let r = report(&i, &model::estimate(&i), &l, &verdict(None));
        let f = &r.failures[0];
        assert_eq!((f.rank, f.at.communicator.as_deref()), (Some(3), Some("0x22")));
    }

    #[test]
    fn files_that_are_not_nccl_logs_say_so() {
        let tmp = tempfile::Builder::new().prefix("memlock-nccl-log-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let path = dir.join("train.out");
        std::fs::write(&path, "epoch 1 loss 0.3\n").unwrap();
        let err = load(path.to_str().unwrap()).unwrap_err();
        assert!(err.contains("train.out: not an NCCL log: none of its 1 line(s)"), "{err}");
        let err = load(dir.join("missing").to_str().unwrap()).unwrap_err();
        assert!(err.contains("missing: No such file"), "{err}");
        let err = load(dir.to_str().unwrap()).unwrap_err();
        assert!(err.starts_with(&format!("--nccl-log {}", dir.display())), "{err}");
    }
}
