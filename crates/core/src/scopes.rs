//! The trend scopes, one row each: what the scope's trend follows and what it runs into (the HELP
//! of `memlock_trend_rise_bytes_per_second` and `memlock_trend_exhaustion_seconds`), the level from
//! which the fast path pages on a predicted exhaustion, its alert names and the words of their
//! texts. The snapshot's HELP texts, the fast path's alerts and the "Trend scopes" table of
//! docs/metrics.md are made from [`SCOPES`] (a test fails when the committed table is not what
//! [`doc_table`] writes: `UPDATE_GOLDEN=1 cargo test --lib scopes` rewrites it).

use std::sync::LazyLock;

use crate::trend::Scope;

/// What an alert of the scope says it watched, what that runs into, and what happens there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wording {
    pub(crate) quantity: &'static str,
    pub limit: &'static str,
    pub(crate) consequence: &'static str,
}

/// One trend scope.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScopeDef {
    pub scope: Scope,
    /// What the trend follows, in the HELP of `memlock_trend_rise_bytes_per_second`.
    pub follows: &'static str,
    /// The limit it is predicted against, in the HELP of `memlock_trend_exhaustion_seconds`.
    pub(crate) runs_into: &'static str,
    /// The alert words, per value of the `counter` label (the process scope's two counters and,
    /// for a point without the label, the words for both); one entry keyed `None` otherwise.
    pub(crate) wording: &'static [(Option<&'static str>, Wording)],
    /// The fast path's critical alert: the limit reached within `alerting.exhaustion_critical_seconds`.
    pub(crate) exhaustion_alert: &'static str,
    /// The fast path's warning at `alerting.usage_ratio_warning` of the limit; `None`: the scope
    /// has none (the node's limit is a floor the exporter sets, not one the kernel enforces).
    pub(crate) near_limit_alert: Option<&'static str>,
    /// The scope's floor for a page: a predicted exhaustion pages from this share of the limit
    /// (or with fewer than [`EXHAUSTION_HEADROOM_STEPS`] of its newest steps left), so that one
    /// step far below the limit does not page.
    pub page_min_ratio: f64,
}

/// A critical page needs fewer than this many of its scope's newest steps of headroom left, when
/// the scope is below [`ScopeDef::page_min_ratio`] (a large limit approached in large steps).
pub(crate) const EXHAUSTION_HEADROOM_STEPS: f64 = 3.0;

const SOFT_LIMIT: &str = "its soft memlock limit";

/// Every scope, in the order of [`Scope`].
pub const SCOPES: [ScopeDef; 3] = [
    ScopeDef {
        scope: Scope::Node,
        // Not Mlocked + pinned: pinning memory already allocated does not lower MemAvailable, and
        // mlocked and pinned pages can be the same pages (see NodeStats::observation).
        follows: "memory in use, MemTotal - MemAvailable",
        runs_into: "MemAvailable falling to memlock_node_memory_available_floor_bytes",
        wording: &[(
            None,
            Wording {
                quantity: "memory in use (MemTotal - MemAvailable)",
                limit: "the MemAvailable floor",
                consequence: "allocations then fail or the OOM killer runs, and registrations that fault pages in \
                    fail",
            },
        )],
        exhaustion_alert: "MemlockNodeMemoryExhaustionImminent",
        near_limit_alert: None,
        page_min_ratio: 0.5,
    },
    ScopeDef {
        scope: Scope::Cgroup,
        // The working set (see CgroupStats::observations): the alert says so, or its figure will
        // not match memory.current when someone checks.
        follows: "working set, usage where memory.stat is unreadable",
        runs_into: "its effective limit",
        wording: &[(
            None,
            Wording {
                quantity: "working set (usage minus inactive page cache)",
                limit: "its memory limit",
                consequence: "the cgroup then reclaims and OOM-kills, or fails registrations with ENOMEM when nothing \
                    can be reclaimed or killed",
            },
        )],
        exhaustion_alert: "MemlockCgroupMemoryExhaustionImminent",
        near_limit_alert: Some("MemlockCgroupNearMemoryLimitFast"),
        page_min_ratio: 0.5,
    },
    ScopeDef {
        scope: Scope::Process,
        follows: "VmPin or VmLck, by counter",
        runs_into: "its soft memlock limit, for each counter",
        wording: &[
            (
                Some("pinned"),
                Wording {
                    quantity: "VmPin",
                    limit: SOFT_LIMIT,
                    consequence: "the next RDMA registration (ibv_reg_mr) that would pass it fails with ENOMEM",
                },
            ),
            (
                Some("locked"),
                Wording {
                    quantity: "VmLck",
                    limit: SOFT_LIMIT,
                    consequence: "the next mlock that would pass it fails with ENOMEM",
                },
            ),
            (
                None,
                Wording {
                    quantity: "locked or pinned memory",
                    limit: SOFT_LIMIT,
                    consequence: "the next ibv_reg_mr or mlock beyond it fails with ENOMEM",
                },
            ),
        ],
        exhaustion_alert: "MemlockProcessLimitExhaustionImminent",
        near_limit_alert: Some("MemlockProcessNearLimitFast"),
        page_min_ratio: 0.5,
    },
];

impl Scope {
    /// The scope's row of [`SCOPES`].
    pub fn def(self) -> &'static ScopeDef {
        match self {
            Scope::Node => &SCOPES[0],
            Scope::Cgroup => &SCOPES[1],
            Scope::Process => &SCOPES[2],
        }
    }
}

impl ScopeDef {
    /// The words for a point with this `counter` label (or none); the scope's words for a
    /// point without the label, or with a value it does not know.
    pub(crate) fn wording(&self, counter: Option<&str>) -> Wording {
        let find = |key: Option<&str>| self.wording.iter().find(|(k, _)| *k == key).map(|(_, w)| *w);
        find(counter).or_else(|| find(None)).unwrap_or(self.wording[0].1)
    }
}

/// `(node: ...; cgroup: ...; process: ...)` of a field of every scope.
fn per_scope(field: fn(&ScopeDef) -> &'static str) -> String {
    let parts: Vec<String> = SCOPES.iter().map(|d| format!("{}: {}", d.scope.as_str(), field(d))).collect();
    format!("({})", parts.join("; "))
}

/// The HELP of `memlock_trend_rise_bytes_per_second`.
pub(crate) static RISE_HELP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "How fast the scope's watched memory rises, by least squares over the trend window of 1 s samples {}.",
        per_scope(|d| d.follows)
    )
});

/// The HELP of `memlock_trend_exhaustion_seconds`.
pub(crate) static EXHAUSTION_HELP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "At the current rise, seconds until the scope's limit is reached {}. Absent when not rising significantly or \
            without a limit.",
        per_scope(|d| d.runs_into)
    )
});

/// The lines around the table in docs/metrics.md.
#[cfg(test)]
pub(crate) const DOC_BEGIN: &str =
    "<!-- scopes: generated from crates/core/src/scopes.rs; UPDATE_GOLDEN=1 cargo test -p memlock-core scopes -->";
#[cfg(test)]
pub(crate) const DOC_END: &str = "<!-- end of scopes -->";

/// The "Trend scopes" table of docs/metrics.md, markers included.
#[cfg(test)]
pub(crate) fn doc_table() -> String {
    let mut out = format!("{DOC_BEGIN}\n");
    out.push_str(
        "| `scope` | the trend follows | against | at the limit | fast path: critical \
         (`alerting.exhaustion_critical_seconds`) | pages from | fast path: warning (`alerting.usage_ratio_warning`) \
         |\n|---|---|---|---|---|---|---|\n",
    );
    for d in &SCOPES {
        let at_limit: Vec<String> = d
            .wording
            .iter()
            .filter(|(counter, _)| counter.is_some() || d.wording.len() == 1)
            .map(|(counter, w)| match counter {
                Some(counter) => format!("{} (`counter=\"{counter}\"`): {}", w.quantity, w.consequence),
                None => format!("{}: {}", w.quantity, w.consequence),
            })
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | `{}` | {:.0} % of the limit, or fewer than {:.0} of its newest steps from it \
             | {} |\n",
            d.scope.as_str(),
            d.follows,
            d.runs_into,
            at_limit.join("; "),
            d.exhaustion_alert,
            d.page_min_ratio * 100.0,
            EXHAUSTION_HEADROOM_STEPS,
            d.near_limit_alert.map_or("none".to_owned(), |a| format!("`{a}`")),
        ));
    }
    out.push_str(DOC_END);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_in_scope_order_and_name_their_counters() {
        for (i, d) in SCOPES.iter().enumerate() {
            assert_eq!(d.scope.def(), d, "row {i}");
            assert!(d.wording.iter().any(|(counter, _)| counter.is_none()), "{:?}: words without a counter", d.scope);
            assert!(d.page_min_ratio > 0.0 && d.page_min_ratio < 1.0);
        }
        let labels: Vec<&str> = crate::collect::process::Counter::ALL.iter().map(|c| c.as_str()).collect();
        let worded: Vec<&str> = Scope::Process.def().wording.iter().filter_map(|(c, _)| *c).collect();
        assert_eq!(worded, labels, "the process scope words each counter the collector labels");
        assert_eq!(Scope::Process.def().wording(Some("pinned")).quantity, "VmPin");
        assert_eq!(Scope::Process.def().wording(Some("other")).quantity, "locked or pinned memory");
        assert_eq!(Scope::Cgroup.def().wording(Some("pinned")).limit, "its memory limit");
    }

    /// The HELP texts are what they were before the table (the golden output holds them too).
    #[test]
    fn help_texts_list_every_scope() {
        assert_eq!(
            RISE_HELP.as_str(),
            "How fast the scope's watched memory rises, by least squares over the trend window of 1 s samples (node: \
                memory in use, MemTotal - MemAvailable; cgroup: working set, usage where memory.stat is unreadable; \
                process: VmPin or VmLck, by counter)."
        );
        assert!(EXHAUSTION_HELP.contains("(node: MemAvailable falling to memlock_node_memory_available_floor_bytes; "));
    }

    #[test]
    fn the_table_in_docs_metrics_md_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let (Some(begin), Some(end)) = (doc.find(DOC_BEGIN), doc.find(DOC_END)) else {
            panic!("{path} has no `{DOC_BEGIN}` ... `{DOC_END}` block")
        };
        let committed = &doc[begin..end + DOC_END.len() + 1];
        let table = doc_table();
        if committed != table && std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(path, doc.replacen(committed, &table, 1)).unwrap();
            return;
        }
        assert_eq!(committed, table, "{path} is not what scopes.rs says (UPDATE_GOLDEN=1 to rewrite it)");
    }
}
