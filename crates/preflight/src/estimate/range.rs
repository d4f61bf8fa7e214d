//! The estimate's low and high ends where it rests on assumptions: the GPUDirect mode when no
//! `--gdr` was given (off, dma-buf and nvidia-peermem charge VmPin differently), the channel
//! count when neither `--channels` nor `--search-channels` was (ncclTopoDupChannels doubles the
//! search's channels only above a bandwidth the model assumes: src/graph/search.cc), and with
//! all-to-all the p2p channels per network peer when the release or the NIC speed was assumed
//! (src/graph/paths.cc ncclTopoGetNchannels: 2 before 2.29, by NIC speed from it). PXN for p2p is
//! not varied: on the NVSwitch nodes the model assumes NCCL always uses it, and `--no-p2p-pxn`
//! gives the figure of a node without NVLink. Each
//! alternative is derived and estimated as the assumed inputs are; `check` and the verdict judge
//! the high end.

use serde::Serialize;

use crate::nccl::env::Environment;
use crate::nccl::model::{self, Estimate};
use memlock_core::collect::rdma_sysfs::SysfsDevice;
use memlock_core::gdr::GdrMode;
use memlock_kernel::fsroot::Roots;

use super::{derive, Derived, ModelArgs};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Range {
    pub(crate) per_rank_low_bytes: u64,
    pub(crate) per_rank_high_bytes: u64,
    pub(crate) per_node_low_bytes: u64,
    pub(crate) per_node_high_bytes: u64,
    pub(crate) per_node_host_high_bytes: u64,
    /// The alternatives taken, each as the flags that give it.
    pub(crate) alternatives: Vec<String>,
}

/// The flags of each alternative to what was assumed: every GPUDirect mode but the assumed one,
/// S not doubled when the topology rule doubled it (bwIntra < 25), and, where it did not double
/// them, the channels copied once more as sm90 does (src/graph/connect.cc ncclTopoPostset: "4
/// compute channels per search channel" when bwIntra > 45 with fewer than 16 channels on more
/// than one node). Never both: ncclTopoDupChannels (src/graph/search.cc) divides bwIntra by the
/// copies it makes, so doubled search channels run at 24 GB/s or less and are not copied again.
fn alternatives(args: &ModelArgs, d: &Derived) -> Vec<(String, ModelArgs)> {
    let mut gdr: Vec<Option<&str>> = vec![None];
    if args.gdr.is_none() {
        for mode in [GdrMode::Off, GdrMode::Dmabuf, GdrMode::Peermem] {
            if mode != d.inputs.gdr {
                gdr.push(Some(mode.as_str()));
            }
        }
    }
    // (flag, value) of the channel alternatives.
    let mut search: Vec<Option<(&str, u64)>> = vec![None];
    let (s, doubled) = model::search_channels(d.inputs.nics);
    if args.channels.is_none() && args.search_channels.is_none() {
        if doubled {
            search.push(Some(("--search-channels", (s / 2).max(1))));
        }
        // Only where no cap or floor changed the count: NCCL copies before it applies those.
        let ch = &d.inputs.channels;
        if !doubled && d.inputs.nodes > 1 && ch.count < 16 && ch.count == 2 * ch.search && ch.capped == ch.count {
            search.push(Some(("--channels", 2 * ch.count)));
        }
    }
    // The p2p channels per network peer: the release before 2.29 (2 per peer), or a slower NIC.
    let mut p2p: Vec<Option<(&str, String)>> = vec![None];
    if args.p2p_net {
        if args.nccl_version.is_none() && d.inputs.nccl_version.at_least(2, 29) {
            p2p.push(Some(("--nccl-version", "2.28".to_owned())));
        }
        if args.nic_speed.is_none() && d.assumed.iter().any(|a| a.contains("--nic-speed")) {
            p2p.push(Some(("--nic-speed", "200".to_owned())));
        }
    }
    let mut out = Vec::new();
    let mut combos = Vec::new();
    for g in &gdr {
        for s in &search {
            combos.extend(p2p.iter().map(|p| (g, s, p)));
        }
    }
    for (g, s, p) in combos {
        if g.is_none() && s.is_none() && p.is_none() {
            continue;
        }
        let mut a = args.clone();
        let mut flags = Vec::new();
        if let Some(g) = g {
            a.gdr = Some((*g).to_owned());
            flags.push(format!("--gdr {g}"));
        }
        match s {
            Some(("--channels", c)) => a.channels = Some(*c),
            Some((_, s)) => a.search_channels = Some(*s),
            None => {}
        }
        if let Some((flag, v)) = s {
            flags.push(format!("{flag} {v}"));
        }
        match p {
            Some(("--nccl-version", v)) => a.nccl_version = Some(v.clone()),
            Some((_, v)) => a.nic_speed = v.parse().ok(),
            None => {}
        }
        if let Some((flag, v)) = p {
            flags.push(format!("{flag} {v}"));
        }
        out.push((flags.join(" "), a));
    }
    out
}

/// The range over the alternatives, the assumed inputs' estimate `e` included.
pub fn range(
    args: &ModelArgs,
    env: &Environment,
    roots: &Roots,
    devices: &[SysfsDevice],
    d: &Derived,
    e: &Estimate,
) -> Range {
    let mut r = Range {
        per_rank_low_bytes: e.per_rank_max_bytes,
        per_rank_high_bytes: e.per_rank_max_bytes,
        per_node_low_bytes: e.per_node_bytes,
        per_node_high_bytes: e.per_node_bytes,
        per_node_host_high_bytes: e.per_node_host_bytes,
        alternatives: Vec::new(),
    };
    for (flags, a) in alternatives(args, d) {
        // The flags were validated for the assumed inputs; an alternative derive cannot fail on
        // its own two flags, and one that did is left out rather than guessed.
        let Ok(alt) = derive(&a, env, roots, devices) else { continue };
        let x = model::estimate(&alt.inputs);
        r.per_rank_low_bytes = r.per_rank_low_bytes.min(x.per_rank_max_bytes);
        r.per_rank_high_bytes = r.per_rank_high_bytes.max(x.per_rank_max_bytes);
        r.per_node_low_bytes = r.per_node_low_bytes.min(x.per_node_bytes);
        r.per_node_high_bytes = r.per_node_high_bytes.max(x.per_node_bytes);
        r.per_node_host_high_bytes = r.per_node_host_high_bytes.max(x.per_node_host_bytes);
        r.alternatives.push(flags);
    }
    r
}

/// The estimate judged at the high end: `per_rank_max_bytes` and the per-node figures become the
/// range's high end (the scenarios and the per-rank detail stay those of the assumed inputs).
pub(crate) fn judge_high(e: &mut Estimate, r: &Range) {
    e.per_rank_max_bytes = r.per_rank_high_bytes;
    e.per_node_bytes = r.per_node_high_bytes;
    e.per_node_host_bytes = r.per_node_host_high_bytes;
}

/// Adds `range` to a JSON report: into its `estimate` object when it has one, else at the top.
pub(crate) fn with_range(json: &str, r: &Range) -> Result<String, serde_json::Error> {
    let mut value: serde_json::Value = serde_json::from_str(json)?;
    let range = serde_json::to_value(r)?;
    match value.get_mut("estimate").and_then(serde_json::Value::as_object_mut) {
        Some(estimate) => {
            estimate.insert("range".into(), range);
        }
        None => {
            if let serde_json::Value::Object(map) = &mut value {
                map.insert("range".into(), range);
            }
        }
    }
    serde_json::to_string_pretty(&value).map(|t| t + "\n")
}

pub(crate) fn render_text(r: &Range) -> String {
    if r.alternatives.is_empty() {
        return String::new();
    }
    let h = |b: u64| memlock_core::units::bytes(b as f64);
    format!(
        "\nrange over what was assumed ({}): busiest rank {} to {}, per node {} to {}; judged at the high end\n",
        r.alternatives.join("; "),
        h(r.per_rank_low_bytes),
        h(r.per_rank_high_bytes),
        h(r.per_node_low_bytes),
        h(r.per_node_high_bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlock_core::gdr::GdrMode;

    fn roots() -> Roots {
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        Roots { procfs: fixtures.join("proc"), sysfs: fixtures.join("sys") }
    }

    fn run(flags: &[&str]) -> (Estimate, Range) {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            model: ModelArgs,
        }
        let args = Cli::try_parse_from(std::iter::once("x").chain(flags.iter().copied())).unwrap().model;
        let env = Environment::default();
        let d = derive(&args, &env, &roots(), &[]).unwrap();
        let e = model::estimate(&d.inputs);
        let r = range(&args, &env, &roots(), &[], &d, &e);
        (e, r)
    }

    #[test]
    fn given_inputs_have_no_range() {
        let (e, r) = run(&["--nics", "8", "--gdr", "off", "--channels", "16", "--search-channels", "8"]);
        assert!(r.alternatives.is_empty());
        assert_eq!((r.per_rank_low_bytes, r.per_rank_high_bytes), (e.per_rank_max_bytes, e.per_rank_max_bytes));
        assert_eq!(render_text(&r), "");
    }

    #[test]
    fn an_assumed_gpudirect_mode_and_doubling_span_low_to_high() {
        // 2 NICs: S = 2 doubled to 4 by the rule; GPUDirect not given.
        let (e, r) = run(&["--nics", "2"]);
        // The fixture node's GPUDirect mode as detected, the two others, each with S doubled and
        // not (doubled search channels are not copied again): 3 x 2 - 1.
        assert_eq!(r.alternatives.len(), 5, "{:?}", r.alternatives);
        assert!(r.alternatives.contains(&"--search-channels 2".to_owned()), "{:?}", r.alternatives);
        for mode in [GdrMode::Off, GdrMode::Dmabuf, GdrMode::Peermem].into_iter().filter(|m| *m != e.inputs.gdr) {
            assert!(r.alternatives.contains(&format!("--gdr {} --search-channels 2", mode.as_str())), "{r:?}");
        }
        // dma-buf keeps GPU buffers off VmPin and half the channels halve the connections: the low
        // end is below the assumed inputs' figure, which is never above the high end.
        assert!(r.per_rank_low_bytes < e.per_rank_max_bytes, "{r:?}");
        assert!(r.per_rank_high_bytes >= e.per_rank_max_bytes, "{r:?}");
        assert!(r.per_node_low_bytes < r.per_node_high_bytes);
        let mut judged = e.clone();
        judge_high(&mut judged, &r);
        assert_eq!(judged.per_rank_max_bytes, r.per_rank_high_bytes);
        assert!(render_text(&r).contains("judged at the high end"));
        // Search channels doubled: not copied again, so the assumed figure is the high end.
        let (given_gdr, r) = run(&["--nics", "2", "--gdr", "off"]);
        assert_eq!(r.alternatives, ["--search-channels 2"], "{r:?}");
        assert_eq!(r.per_rank_high_bytes, given_gdr.per_rank_max_bytes, "{r:?}");
        // One GPU and one NIC per node (PAT): 4 channels, never 8.
        let (pat, r) = run(&["--ranks-per-node", "1", "--nics", "1", "--nodes", "4", "--gdr", "off"]);
        assert_eq!(pat.inputs.channels.count, 4);
        assert_eq!(r.alternatives, ["--search-channels 1"], "{r:?}");
        assert_eq!(r.per_rank_high_bytes, pat.per_rank_max_bytes, "{r:?}");
        // Six NICs, six search channels not doubled: the copies double the connections, and the
        // high end is above the assumed figure.
        let (given_gdr, r) = run(&["--nics", "6", "--gdr", "off"]);
        assert_eq!(r.alternatives, ["--channels 24"], "{r:?}");
        assert!(r.per_rank_high_bytes > given_gdr.per_rank_max_bytes, "{r:?}");
        // 8 NICs run 16 channels: no copy; a cap from the environment: none either.
        let (_, r) = run(&["--nics", "8", "--gdr", "off"]);
        assert!(r.alternatives.is_empty(), "{r:?}");
        // Channels given: only the GPUDirect modes vary.
        let (_, r) = run(&["--nics", "2", "--channels", "4"]);
        assert_eq!(r.alternatives.len(), 2, "{:?}", r.alternatives);
        assert!(r.alternatives.iter().all(|a| a.starts_with("--gdr ")), "{:?}", r.alternatives);
    }

    #[test]
    fn an_assumed_release_or_nic_speed_spans_the_p2p_channels_per_peer() {
        // All-to-all, everything else given: the newest release and 400 Gb/s were assumed (4
        // channels per peer); 2.28 and 200 Gb/s give 2.
        let given = ["--p2p-net", "--nics", "4", "--gdr", "dmabuf", "--channels", "16", "--search-channels", "8"];
        let (e, r) = run(&given);
        assert_eq!(e.inputs.p2p.as_ref().map(|p| p.channels_per_peer), Some(4));
        assert_eq!(r.alternatives, ["--nccl-version 2.28", "--nic-speed 200"], "{r:?}");
        assert!(r.per_rank_low_bytes < e.per_rank_max_bytes, "fewer channels, fewer connections: {r:?}");
        assert_eq!(r.per_rank_high_bytes, e.per_rank_max_bytes);
        // Both given: no range.
        let (_, r) = run(&[&given[..], &["--nccl-version", "2.29", "--nic-speed", "400"]].concat());
        assert!(r.alternatives.is_empty(), "{r:?}");
        // Without all-to-all neither matters.
        let (_, r) = run(&given[1..]);
        assert!(r.alternatives.is_empty(), "{r:?}");
    }

    #[test]
    fn pxn_for_p2p_is_not_varied_and_the_flag_gives_the_figure_without_it() {
        // Case K (2.29, 400 Gb/s, peermem) on an NVSwitch node: PXN is what NCCL does there, and
        // varying it would judge every such node by a placement it never has (dma-buf, case L:
        // 31490048 B without PXN, 2.8 times the 11296768 B NCCL registers).
        let k = ["--p2p-net", "--nics", "4", "--gdr", "peermem", "--channels", "16", "--search-channels", "8"];
        let given = [&k[..], &["--nccl-version", "2.29", "--nic-speed", "400"]].concat();
        let (e, r) = run(&given);
        assert!(r.alternatives.is_empty(), "{r:?}");
        assert_eq!(e.per_rank_max_bytes, 426_795_008);
        // Without NVLink to the proxy GPU (--no-p2p-pxn): GPU 2k holds its ring and tree
        // connections, 32 p2p sends and 32 receives and 2 pools: 4 x 9949184 + 8 x 10084352 +
        // 32 x 77 x 4096 + 32 x 110 x 4096 + 2 x 33554432 + 4 x 4096 = 212107264 B.
        let (e, r) = run(&[&given[..], &["--no-p2p-pxn"]].concat());
        assert!(r.alternatives.is_empty(), "{r:?}");
        assert_eq!(e.per_rank_max_bytes, 212_107_264);
    }
}
