//! The NCCL release the model follows, and the rules that differ between the releases it covers
//! (2.18 to 2.30): how many p2p channels a network peer gets (src/graph/paths.cc
//! ncclTopoGetNchannels, ncclTopoComputeP2pChannels) and on which channels a node's senders reach
//! one peer (the p2p schedule's channel base per round).

use serde::Serialize;

/// A release, major and minor (the patch level changes nothing the model follows); `"2.30"` in
/// JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release {
    pub major: u32,
    pub minor: u32,
}

impl Release {
    /// The newest release the model was derived from (NVIDIA/nccl v2.30.7-1), the default when
    /// the job's release is not known.
    pub(crate) const NEWEST: Release = Release { major: 2, minor: 30 };
    /// The oldest release whose source the model was checked against (v2.18.6-1).
    #[cfg(test)]
    pub(crate) const OLDEST: Release = Release { major: 2, minor: 18 };

    /// `2.21.5+cuda12.4` (NCCL_DEBUG=INFO, the library's string), `v2.29.7-1` (a tag), `2.29`.
    pub fn parse(text: &str) -> Option<Release> {
        let t = text.trim().trim_start_matches('v');
        let mut parts = t.split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Release { major, minor })
    }

    pub(crate) fn at_least(self, major: u32, minor: u32) -> bool {
        self >= Release { major, minor }
    }
}

impl Serialize for Release {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// NCCL_MAX_DEV_WORK_P2P_PER_BATCH (src/include/device.h): p2p operations per batch.
pub(crate) const P2P_PER_BATCH: u64 = 8;
/// NCCL_P2P_PER_CHANNEL_NET_BW's default, GB/s (src/graph/paths.cc, 2.29 and later).
pub(crate) const P2P_PER_CHANNEL_NET_BW: u64 = 14;
/// A PCIe Gen5 x16 link as NCCL's topology rates it: 16 lanes x 240 (kvDictPciGen "32.0 GT/s
/// PCIe", in 100 Mb/s) / 80 = 48 GB/s (src/graph/topo.cc ncclTopoAddPci). The GPU-to-NIC path
/// of an sm90-class node is at most this.
pub(crate) const PCIE_GEN5_X16_GBS: u64 = 48;

/// What p2pnChannelsPerPeer is for a network peer, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PerPeer {
    pub channels: u64,
    pub why: String,
}

/// p2pnChannelsPerPeer when every peer but the network ones is an NVLink peer (whose own count,
/// 2 x NVLink bandwidth / one link's, is never the minimum on an NVSwitch node):
/// - 2.18, 2.19: NCCL_NCHANNELS_PER_NET_PEER, default 2 (ncclTopoGetNchannels);
/// - 2.20 to 2.28: max(NICs by bandwidth, 2 halved while 2 x nRanks > 4 x p2pnChannels), one NIC by
///   bandwidth on a rail-optimised node (src/graph/topo.cc getLocalNetCountByBw);
/// - 2.29 and later: max(NICs, ceil(GPU-to-NIC GB/s / NCCL_P2P_PER_CHANNEL_NET_BW 14)), the path's
///   bandwidth the lesser of the NIC's (speed / 8) and the PCIe link's, rounded up to a power of
///   two, then halved while it x ceil(nRanks / 8 per batch) exceeds p2pnChannels
///   (ncclTopoComputeP2pChannels): 4 for a 400 Gb/s NIC, 2 for 200 Gb/s, 1 for 100 Gb/s.
///
/// From 2.30 the halving counts comm->p2pMaxPeers instead of nRanks: NCCL_P2P_MAX_PEERS (or the
/// communicator's maxP2pPeers) when above 0, capped at nRanks (src/init.cc: the cap before
/// ncclTopoComputeP2pChannelsPerPeer; paths.cc ncclTopoComputeP2pChannels). A job that says it
/// talks to few peers keeps more channels for each.
///
/// `p2p_before_pow2` is min(nChannels, NCCL_MAX_P2P_NCHANNELS) raised to NCCL_MIN_P2P_NCHANNELS,
/// `p2p_channels` the power of two it becomes. A value set in NCCL_NCHANNELS_PER_NET_PEER
/// (`given`, above 0) replaces the default count and, from 2.29, the halving.
pub(crate) fn net_channels_per_peer(
    release: Release,
    nic_gbps: u64,
    nranks: u64,
    p2p_before_pow2: u64,
    p2p_channels: u64,
    given: Option<u64>,
    max_peers: Option<u64>,
) -> PerPeer {
    let p2p = p2p_channels.max(1);
    if let Some(v) = given.filter(|v| *v > 0) {
        let channels = v.next_power_of_two().min(p2p);
        return PerPeer { channels, why: format!("NCCL_NCHANNELS_PER_NET_PEER={v}: {channels}") };
    }
    if !release.at_least(2, 20) {
        let channels = 2.min(p2p);
        return PerPeer { channels, why: format!("NCCL {release}: NCCL_NCHANNELS_PER_NET_PEER's default 2") };
    }
    if !release.at_least(2, 29) {
        let mut max = 2u64;
        while max.saturating_mul(nranks) > p2p_before_pow2.saturating_mul(4) && max > 1 {
            max /= 2;
        }
        let channels = max.next_power_of_two().min(p2p);
        return PerPeer {
            channels,
            why: format!(
                "NCCL {release}: max(1 NIC, 2 halved while 2 x {nranks} ranks > 4 x {p2p_before_pow2} p2p channels) = \
                    {channels} (paths.cc ncclTopoGetNchannels)"
            ),
        };
    }
    // (int)netBw in NCCL: whole GB/s.
    let bw = (nic_gbps / 8).min(PCIE_GEN5_X16_GBS);
    let mut channels = bw.div_ceil(P2P_PER_CHANNEL_NET_BW).max(1).next_power_of_two();
    let (peers, what) = match max_peers.filter(|m| *m > 0 && release.at_least(2, 30)) {
        Some(m) => (m.min(nranks.max(1)), "NCCL_P2P_MAX_PEERS"),
        None => (nranks, "ranks"),
    };
    let batches = peers.div_ceil(P2P_PER_BATCH).max(1);
    while channels.saturating_mul(batches) > p2p && channels > 1 {
        channels /= 2;
    }
    PerPeer {
        channels,
        why: format!(
            "NCCL {release}: ceil(min({nic_gbps} Gb/s NIC, PCIe Gen5 x16) {bw} GB/s / {P2P_PER_CHANNEL_NET_BW} GB/s), \
                halved while x ceil({peers} {what} / {P2P_PER_BATCH}) > {p2p} p2p channels: {channels} \
                (paths.cc ncclTopoGetNchannels, ncclTopoComputeP2pChannels)"
        ),
    }
}

/// The p2p schedule's group size from 2.28 (src/init.cc ncclP2pSchedule:
/// NCCL_P2P_SCHEDULE_GROUP_SIZE, default NCCL_MAX_DEV_WORK_P2P_PER_BATCH 8, lowered to its gcd
/// with the ranks per node when they are not a multiple of it).
pub(crate) fn schedule_group(g: u64) -> u64 {
    let (mut a, mut b) = (P2P_PER_BATCH, g.max(1));
    if b % a == 0 {
        return a;
    }
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// On how many channels the `g` senders of a node together reach one remote peer, each on
/// `per_peer` of the `p2p_channels` channels from its round's base (src/include/device.h
/// ncclP2pChannelForPart: (base + part) & (p2pnChannels - 1)). The base differs by release:
/// - 2.18 to 2.21 (src/include/channel.h ncclChannelComputeBase): node delta + step / 8 (half of
///   NCCL_MAX_WORK_ELEMENTS_P2P 16), looked up in the bit-mirrored p2pChannels: ceil(g / 8)
///   bases whose channel sets may overlap, at most that many times per_peer;
/// - 2.22 to 2.27 (channel.h ncclP2pChannelBaseForRound): node ordinal x ceil(maxLocalRanks / 8)
///   + local ordinal / 8, not bit-reversed: ceil(g / 8) consecutive bases, per_peer + ceil(g / 8)
///   - 1 channels;
/// - 2.28 and later: the schedule groups (init.cc ncclP2pSchedule) take the group ordinal,
///   bit-reversed (reverseBits): one base per group, the groups' sets disjoint while the ordinals
///   stay below p2pnChannels / per_peer, at most groups x per_peer.
///
/// With at most 8 ranks per node every release gives one base: all senders of a node reach a
/// peer on the same per_peer channels.
pub(crate) fn peer_channels(release: Release, g: u64, p2p_channels: u64, per_peer: u64) -> u64 {
    let p2p = p2p_channels.max(per_peer).max(1);
    let bases = g.div_ceil(P2P_PER_BATCH).max(1);
    let union = if release.at_least(2, 28) {
        per_peer.saturating_mul(g.max(1) / schedule_group(g))
    } else if release.at_least(2, 22) {
        per_peer.saturating_add(bases - 1)
    } else {
        per_peer.saturating_mul(bases)
    };
    union.min(p2p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_from_what_nccl_and_its_tags_print() {
        assert_eq!(Release::parse("2.21.5+cuda12.4"), Some(Release { major: 2, minor: 21 }));
        assert_eq!(Release::parse("v2.29.7-1"), Some(Release { major: 2, minor: 29 }));
        assert_eq!(Release::parse("2.30"), Some(Release::NEWEST));
        assert_eq!(Release::parse("2"), None);
        assert_eq!(Release::parse("cuda"), None);
        assert_eq!(Release::NEWEST.to_string(), "2.30");
        assert_eq!(serde_json::to_string(&Release::NEWEST).ok().as_deref(), Some("\"2.30\""));
        assert!(Release::parse("2.9.9").is_some_and(|r| r < Release::OLDEST), "2.9 is older than 2.18");
    }

    #[test]
    fn channels_per_network_peer_by_release_and_nic_speed() {
        let at = |r: &str, gbps, nranks, p2p| {
            let release = Release::parse(r).unwrap_or(Release::NEWEST);
            net_channels_per_peer(release, gbps, nranks, p2p, p2p, None, None).channels
        };
        // 2.29 on 400 Gb/s NICs behind PCIe Gen5: ceil(48 / 14) = 4; 16 ranks, 2 batches of 8 fit 16.
        assert_eq!(at("2.29", 400, 16, 16), 4);
        assert_eq!(at("2.30", 200, 16, 16), 2);
        assert_eq!(at("2.30", 100, 16, 16), 1);
        assert_eq!(at("2.30", 800, 16, 16), 4, "the PCIe link caps it");
        // 128 ranks: 16 batches; 4 x 16 > 32, 2 x 16 fits.
        assert_eq!(at("2.30", 400, 128, 32), 2);
        // Before 2.29: 2, halved only for very large jobs.
        assert_eq!(at("2.28", 400, 16, 16), 2);
        assert_eq!(at("2.21", 400, 64, 16), 1, "2 x 64 > 4 x 16");
        assert_eq!(at("2.18", 400, 16, 16), 2);
        let given = net_channels_per_peer(Release::NEWEST, 400, 16, 16, 16, Some(3), None);
        assert_eq!(given.channels, 4, "a power of two");
    }

    #[test]
    fn from_2_30_the_halving_counts_the_peers_the_job_names() {
        let r = |minor| Release { major: 2, minor };
        // 128 ranks, 32 p2p channels: 4 x 16 batches > 32, halved to 2.
        assert_eq!(net_channels_per_peer(r(30), 400, 128, 32, 32, None, None).channels, 2);
        // NCCL_P2P_MAX_PEERS=16: 4 x 2 batches fit 32; 2.29 does not read it.
        let p = net_channels_per_peer(r(30), 400, 128, 32, 32, None, Some(16));
        assert_eq!(p.channels, 4, "{}", p.why);
        assert!(p.why.contains("16 NCCL_P2P_MAX_PEERS"), "{}", p.why);
        assert_eq!(net_channels_per_peer(r(29), 400, 128, 32, 32, None, Some(16)).channels, 2);
        // Above nRanks it is capped to it (init.cc); 0 or below is ignored.
        assert_eq!(net_channels_per_peer(r(30), 400, 128, 32, 32, None, Some(4096)).channels, 2);
        assert_eq!(net_channels_per_peer(r(30), 400, 128, 32, 32, None, Some(0)).channels, 2);
    }

    #[test]
    fn a_nodes_senders_reach_one_peer_on_channels_by_release() {
        let r = |minor| Release { major: 2, minor };
        // 8 ranks per node: one base in every release.
        for minor in [18, 21, 22, 27, 28, 30] {
            assert_eq!(peer_channels(r(minor), 8, 16, 4), 4, "2.{minor}");
        }
        // 16 ranks per node, 32 p2p channels, 4 per peer: two bases.
        assert_eq!(peer_channels(r(30), 16, 32, 4), 8, "two schedule groups, reversed bases");
        assert_eq!(peer_channels(r(27), 16, 32, 4), 5, "consecutive bases overlap");
        assert_eq!(peer_channels(r(21), 16, 32, 4), 8, "mirrored bases, at most");
        // 12 ranks: 2.28 groups of gcd(8, 12) = 4, three of them; 2.22 two bases.
        assert_eq!(peer_channels(r(28), 12, 32, 4), 12);
        assert_eq!(peer_channels(r(22), 12, 32, 4), 5);
        // Never more than the p2p channels.
        assert_eq!(peer_channels(r(30), 72, 16, 4), 16);
    }
}
