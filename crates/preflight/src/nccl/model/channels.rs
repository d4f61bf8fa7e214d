//! How many channels NCCL runs and which tree and NIC each one uses (src/graph/search.cc,
//! src/graph/connect.cc, src/init.cc).

use serde::Serialize;

use super::MAX_CHANNELS;

/// How many channels, and which tree and NIC each one uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Channels {
    /// C: the channels NCCL runs, as NCCL_DEBUG=INFO prints them ("C coll channels", src/init.cc
    /// initTransportsRank).
    pub count: u64,
    /// S: the ring graph's channels after ncclTopoDupChannels, comm->nChannels when
    /// ncclTopoPreset runs (src/init.cc: min of the ring and tree graphs), printed as
    /// "Pattern 4, crossNic ., nChannels S" (search.cc ncclTopoPrintGraph). ncclTopoPostset
    /// (connect.cc) makes 2S of them: channel c < S follows tree 0, c + S tree 1.
    pub search: u64,
    /// The channels after the caps, before copies up to a floor: the ones the copies repeat.
    pub capped: u64,
    /// S and C were not given: both come from the topology rule below.
    pub assumed: bool,
    pub why: String,
}

/// What ncclTopoCompute gives on a node whose NICs each carry one search channel (the rail-
/// optimised layout): one channel per NIC, which ncclTopoDupChannels (src/graph/search.cc)
/// doubles only when bwIntra >= 25 and, on sm90 and later (ccMin > 80), bwIntra >= 50 or at
/// most 4 channels. Assumed here: an sm90-class GPU (H100, H200, B200) whose NVLink bandwidth per
/// channel is what the NIC gives (one 400 Gb/s NIC: bwIntra = bwInter < 50, >= 25), so the
/// search's channels are doubled when there are at most 4 of them (up to the ring graph's
/// maxChannels, MAXCHANNELS/2, src/init.cc). ncclTopoPostset (src/graph/connect.cc) then doubles
/// S into C = 2S (at most MAXCHANNELS): 16 for 8 NICs, as an H100 log prints ("Channel 00/16").
pub fn search_channels(nics: u64) -> (u64, bool) {
    let s = nics.clamp(1, MAX_CHANNELS / 2);
    if s <= 4 {
        ((2 * s).min(MAX_CHANNELS / 2), true)
    } else {
        (s, false)
    }
}

/// The channels NCCL runs from the topology (no caps, no floors): S from [`search_channels`] or
/// given (`--search-channels`), doubled by ncclTopoPostset.
pub(crate) fn topology_channels(nics: u64) -> Channels {
    let (search, dup) = search_channels(nics);
    let count = (2 * search).min(MAX_CHANNELS);
    let n = nics.clamp(1, MAX_CHANNELS / 2);
    Channels {
        count,
        search,
        capped: count,
        assumed: true,
        why: format!(
            "assumed from the topology: {n} search channel(s), one per NIC, {} by ncclTopoDupChannels (sm90-class GPU, \
                25 <= bwIntra < 50 assumed), S = {search}, doubled by ncclTopoPostset: C = {count}",
            if dup { "doubled" } else { "not doubled" }
        ),
    }
}

/// The channels from S as given (`--search-channels`, the ring graph line NCCL_DEBUG=INFO
/// prints), doubled by ncclTopoPostset.
pub(crate) fn searched_channels(search: u64) -> Channels {
    let search = search.clamp(1, MAX_CHANNELS / 2);
    let count = 2 * search;
    Channels {
        count,
        search,
        capped: count,
        assumed: false,
        why: format!("--search-channels {search}, doubled by ncclTopoPostset: C = {count}"),
    }
}

/// NCCL's channel caps and floors over the topology's count (src/graph/connect.cc
/// ncclTopoPostset, ncclMinNchannels, ncclMaxNchannels; src/init.cc for the CTA variables):
/// min(topology, max channels, max CTAs), then copies of the first channels up to
/// max(min channels, min CTAs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ChannelLimits {
    /// ncclMaxNchannels(): NCCL_MAX_NCHANNELS, else NCCL_MAX_NRINGS; below 1 is 1; above 64 is 64.
    pub(crate) max_nchannels: Option<i64>,
    /// ncclMinNchannels(): NCCL_MIN_NCHANNELS, else NCCL_MIN_NRINGS; negative is 0.
    pub(crate) min_nchannels: Option<i64>,
    /// NCCL_MAX_CTAS; ignored when 0 or less.
    pub(crate) max_ctas: Option<i64>,
    /// NCCL_MIN_CTAS; ignored when 0 or less.
    pub(crate) min_ctas: Option<i64>,
}

impl ChannelLimits {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The channels NCCL runs, from the topology's count.
    pub fn apply(&self, topology: &Channels) -> Channels {
        let max = MAX_CHANNELS as i64;
        let max_n = self.max_nchannels.map_or(max, |m| m.clamp(1, max));
        let min_n = self.min_nchannels.map_or(0, |m| m.clamp(0, max));
        // init.cc: a CTA variable at 0 or below is left unset; both are capped at MAXCHANNELS,
        // and a min above the max is lowered to it.
        let max_ctas = self.max_ctas.filter(|v| *v > 0).map_or(max, |v| v.min(max));
        let min_ctas = self.min_ctas.filter(|v| *v > 0).map_or(1, |v| v.min(max)).min(max_ctas);
        let capped = (topology.count as i64).min(max_n).min(max_ctas);
        let count = capped.max(min_n).max(min_ctas).clamp(1, max) as u64;
        if self.is_empty() {
            return topology.clone();
        }
        Channels {
            count,
            search: topology.search,
            capped: capped.clamp(1, max) as u64,
            assumed: topology.assumed,
            why: format!(
                "{}; caps and floors from the environment: min({}, max channels {max_n}, max CTAs {max_ctas}) = \
                    {capped}, raised to max(min channels {min_n}, min CTAs {min_ctas}): {count}",
                topology.why, topology.count
            ),
        }
    }
}

impl Channels {
    /// C given (`--channels`, what NCCL_DEBUG=INFO prints), with S given or from the topology. A C
    /// below 2S is a cap (the first C channels), one above it copies (connect.cc copyChannels).
    pub fn given(count: u64, search: u64) -> Self {
        let search = search.max(1);
        Channels {
            count,
            search,
            capped: count.min(2 * search),
            assumed: false,
            why: format!("--channels {count}, S = {search}"),
        }
    }

    /// Which double-binary tree channel `c` follows: ncclTopoPostset (connect.cc) puts channel
    /// j < S on tree 0 and its copy j + S on tree 1 (connectTrees: channel0, channel1 =
    /// channel0 + nChannels); copies made past 2S or to reach a floor repeat the first channels
    /// (copyChannels), and a cap at or below S leaves every channel on tree 0.
    pub(super) fn tree_of(&self, c: u64) -> usize {
        let s = self.search.max(1);
        let j = c % self.capped.max(1) % (2 * s);
        usize::from(j >= s)
    }

    /// The NIC of channel `c`: the search starts channel k at NET k mod nics (ncclTopoSearchRecNet),
    /// and every duplication (ncclTopoDupChannels, ncclTopoPostset, copyChannels) keeps each
    /// channel's NIC.
    pub(super) fn nic_of(&self, c: u64, nics: u64) -> u64 {
        let s = self.search.max(1);
        (c % self.capped.max(1) % s) % nics.max(1)
    }
}
