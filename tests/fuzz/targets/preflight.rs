//! The preflight crate's fuzz targets: an NCCL configuration as NCCL reads it, and a job's NCCL
//! log. They use memlock-preflight alone, the one dependency of the cargo-fuzz crate in
//! fuzz/preflight.

use super::common::{corpus, strings, Expect, Target, Verdict};

/// In the order of docs/reliability.md's table.
pub const TARGETS: &[Target] = &[
    // An NCCL configuration file as NCCL parses it (one NAME=value a line), each variable judged
    // as NCCL reads it: `check` runs on whatever the job's environment and /etc/nccl.conf hold.
    Target {
        name: "nccl_environment",
        expect: Expect::BothPaths,
        seeds: || {
            strings(&[
                "NCCL_DEBUG=INFO\nNCCL_IB_GID_INDEX=-1\n",
                "# comment\nNCCL_BUFFSIZE=0x400000\r\nNCCL_IB_HCA=^mlx5_2\n",
                "NCCL_MIN_NRINGS=4\nNCCL_P2P_LEVEL=NVL\nHOME=/root\n",
            ])
        },
        check: check_nccl_environment,
    },
    // A job's NCCL_DEBUG=INFO log as `estimate --nccl-log` and `check --nccl-log` read it: the
    // written and public logs of tests/fixtures/nccl-logs, and hostile prefixes, cut lines and
    // interleaved writers.
    Target {
        name: "nccl_log",
        expect: Expect::BothPaths,
        seeds: || {
            let mut seeds = corpus(|n| n.ends_with(".log"));
            seeds.extend(strings(&[
                "[1,3]<stdout>:h:1:2 [3] NCCL INFO Channel 03/1 : 11[3] -> 2[3] [send] via \
                 NET/IB/3(1)/GDRDMA(PCI)/Shared\n",
                "3: h:1:2 [0] NCCL INFO Channel 00 : 0[1000] -> 1[2000] [receive] via NET/AWS Libfabric/0\r\n",
                "[rank3]:h:1:2 [0] x.cc:1 (f) NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot \
                 allocate memory\n",
                "h: h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [seh:3:4 [1] NCCL INFO NCCL version \
                 2.30.7+cuda12.9",
            ]));
            seeds
        },
        check: check_nccl_log,
    },
];

fn check_nccl_environment(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_preflight::nccl::env::{self, Environment};
    use memlock_preflight::nccl::param::{strtoll, Parse, Strtoll};
    let env = Environment::from_pairs(env::conf_lines(bytes));
    let problems = env::problems(&env);
    for p in &problems {
        // Every problem is about an NCCL variable of the input, and says what it is.
        if !p.name.starts_with("NCCL_") || env.effective().all(|e| e.name_lossy() != p.name) || p.fix.is_empty() {
            return Err(format!("{p:?}"));
        }
    }
    // What NCCL accepts is never reported: a whole number for an NCCL_PARAM variable outside the
    // few whose values are range-checked.
    for e in env.effective() {
        let Some(var) = std::str::from_utf8(&e.name).ok().and_then(env::variable) else { continue };
        let checked = [
            "NCCL_IB_QPS_PER_CONNECTION",
            "NCCL_BUFFSIZE",
            "NCCL_LL_BUFFSIZE",
            "NCCL_LL128_BUFFSIZE",
            "NCCL_CROSS_NIC",
        ];
        if var.parse == Parse::Strtoll
            && !checked.contains(&var.name)
            && matches!(strtoll(&e.value, 0), Strtoll::Whole(_))
            && problems.iter().any(|p| p.name == var.name)
        {
            return Err(format!("{} flagged for a value NCCL accepts: {:?}", var.name, e.value_shown()));
        }
    }
    Ok(if problems.is_empty() { Verdict::Accepted } else { Verdict::Rejected })
}

fn check_nccl_log(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_preflight::nccl::log;
    let l = log::read(bytes).map_err(|e| e.to_string())?;
    // Every line counted once, whatever its length: the newlines, and a last line without one.
    let lines = bytes.iter().filter(|b| **b == b'\n').count() + usize::from(bytes.last().is_some_and(|b| *b != b'\n'));
    if l.lines != lines as u64 || l.cut_lines > l.lines || l.nccl_lines + l.cut_lines > l.lines {
        return Err(format!("{} lines read, {lines} in the input: {l:?}", l.lines));
    }
    let long = bytes.split(|b| *b == b'\n').filter(|line| line.len() > log::MAX_LINE).count();
    if l.cut_lines != long as u64 {
        return Err(format!("{} cut, {long} longer than {}", l.cut_lines, log::MAX_LINE));
    }
    // Nothing is taken from a file without NCCL's lines; what is taken is bounded.
    if l.nccl_lines == 0 && (!l.ranks.is_empty() || !l.failures.is_empty() || l.nccl_version.is_some()) {
        return Err(format!("no NCCL line, yet {l:?}"));
    }
    if l.ranks.len() > log::MAX_PROCESSES || l.failures.len() > log::MAX_FAILURES || l.env.len() > log::MAX_ENV {
        return Err("a cap was exceeded".into());
    }
    // Every connection counted is in one communicator or said to be in none.
    let total =
        |k: &log::Connections| k.net_send + k.net_recv + k.p2p + k.shm + k.collnet_send + k.collnet_recv + k.nvls;
    let counted: u64 = l.ranks.iter().map(|r| total(&r.connections)).sum();
    let placed: u64 = l.per_communicator.iter().map(|c| total(&c.connections)).sum::<u64>()
        + l.ranks.iter().map(|r| r.unattributed).sum::<u64>();
    if counted != placed {
        return Err(format!("{counted} connections counted, {placed} in communicators or unattributed: {l:?}"));
    }
    if l.per_communicator.iter().map(|c| c.members.len()).sum::<usize>() > log::MAX_PROCESS_COMMUNICATORS {
        return Err("a cap was exceeded".into());
    }
    for r in &l.ranks {
        let net = r.connections.net_send + r.connections.net_recv;
        // An empty host is a log whose host names were cut out, still NCCL's.
        if r.host.len() > log::MAX_TEXT || r.gdr_connections > net {
            return Err(format!("{r:?}"));
        }
        if r.gdr != (net > 0).then_some(r.gdr_connections == net) {
            return Err(format!("gdr does not follow the counts: {r:?}"));
        }
    }
    Ok(if l.nccl_lines > 0 { Verdict::Accepted } else { Verdict::Rejected })
}
