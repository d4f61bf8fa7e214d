//! The series budget: at most `series.limit` series per node (default 500), whatever the size of
//! the host, chosen the way an SRE running thousands of nodes wants them.
//!
//! Node-level series, the exporter's own and every collector's summaries are fixed and always
//! exported. What grows with the host (processes, cgroups, RDMA devices and ports, NUMA nodes,
//! RDMA owners) is claimed entity by entity: each collector lists, per kind of entity (a
//! [`Claim`]'s class), what each entity costs in series and how urgent it is (its score), most
//! urgent first. [`allocate`] grants them tier by tier:
//! 1. [`Tier::Page`]: what pages and what a page needs: RDMA devices with their port states and
//!    device-level registration error counters; processes nearest their memlock limit; cgroups
//!    nearest their memory limit (those with OOM events first); the per-cgroup memlock
//!    aggregates with the worst usage ratio (processes and aggregates in turns by owner,
//!    [`crate::fair`]). Each class first gets its `floor` (round robin), then
//!    the rest goes to the most urgent entity of any class, up to the class's `cap`, as long as it
//!    is urgent (a score of [`URGENT`], half of its limit used, or more).
//! 2. [`Tier::Explain`]: port error counters, NUMA nodes, RDMA registrations per device and per
//!    owner, the rdma cgroup controller.
//! 3. [`Tier::Detail`]: every other port and driver counter, and the processes and cgroups
//!    beyond the caps or below [`URGENT`], by score.
//!
//! A class's grants are a prefix of its list: once an entity does not fit, the class gets no
//! more (its remaining entities are counted as dropped). The trend series of a process or cgroup
//! are part of its cost and exported with it; the fast path to Alertmanager still watches every
//! scope, exported or not.

/// How much room the budget leaves for what it does not see when the snapshot is rendered: the
/// exporter's own registry series are counted at render time; this is for the error counters
/// (one series per collector and error kind) that may appear before the next snapshot.
pub(crate) const HEADROOM: usize = 8;

/// Past its floor, an entity is in the page tier only from this score: half of a limit used.
pub(crate) const URGENT: f64 = 0.5;

/// The default `series.limit`.
pub(crate) const DEFAULT_LIMIT: u64 = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Tier {
    Page,
    Explain,
    Detail,
}

/// One kind of entity a collector exports, in the order it should be granted.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The `class` label of `memlock_exporter_series_dropped_entities`; unique across collectors.
    pub class: &'static str,
    pub(crate) tier: Tier,
    /// Entities granted before the tier's entities compete on score, if they fit.
    pub floor: usize,
    /// At most this many entities in its own tier; the rest compete in [`Tier::Detail`] (the
    /// processes past the first 16, which the cgroup aggregates cover for the alerts, come after
    /// the port errors and NUMA nodes that explain a page).
    pub cap: usize,
    /// Per entity: (series it costs, score), most urgent first (scores do not increase).
    pub entities: Vec<(usize, f64)>,
}

/// How many entities of each class are exported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    everything: bool,
    granted: Vec<(&'static str, usize)>,
}

impl Grants {
    /// No budget: every entity.
    pub fn all() -> Self {
        Self { everything: true, granted: Vec::new() }
    }

    /// Only the fixed series.
    pub fn none() -> Self {
        Self::default()
    }

    /// The number of entities of `class` to export (the first ones of its claim's order).
    pub fn get(&self, class: &str) -> usize {
        if self.everything {
            return usize::MAX;
        }
        self.granted.iter().find(|(c, _)| *c == class).map_or(0, |(_, n)| *n)
    }

    /// `granted[i]`: whether the entity at index `i` of the collector's own list is exported,
    /// given `order`, the indices in the order of the claim.
    pub fn mask(&self, class: &str, order: &[usize], len: usize) -> Vec<bool> {
        let mut mask = vec![false; len];
        for &i in order.iter().take(self.get(class)) {
            if let Some(slot) = mask.get_mut(i) {
                *slot = true;
            }
        }
        mask
    }
}

/// The grants and, per class, the entities left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allocation {
    pub grants: Grants,
    pub dropped: Vec<(&'static str, usize)>,
    /// Series granted to claims (not counting the fixed ones).
    pub(crate) granted_series: usize,
}

/// Grants entities of `claims` within `available` series.
pub fn allocate(claims: &[Claim], available: usize) -> Allocation {
    let n = claims.len();
    let mut granted = vec![0usize; n];
    let mut closed = vec![false; n];
    let mut left = available;
    let mut take = |i: usize, granted: &mut [usize], closed: &mut [bool]| {
        let cost = claims[i].entities[granted[i]].0;
        if cost <= left {
            left -= cost;
            granted[i] += 1;
        } else {
            closed[i] = true;
        }
    };
    for tier in [Tier::Page, Tier::Explain, Tier::Detail] {
        // The detail tier also takes what the caps held back in the tiers above.
        let members: Vec<usize> =
            (0..n).filter(|&i| claims[i].tier == tier || (tier == Tier::Detail && claims[i].tier < tier)).collect();
        let cap = |i: usize| if claims[i].tier == tier { claims[i].cap } else { usize::MAX };
        let open = |i: usize, granted: &[usize], closed: &[bool]| {
            !closed[i] && granted[i] < claims[i].entities.len() && granted[i] < cap(i)
        };
        // Past the floors, the page tier takes only what is urgent; the rest waits for the detail tier.
        let urgent = |i: usize, granted: &[usize]| tier != Tier::Page || claims[i].entities[granted[i]].1 >= URGENT;
        loop {
            let mut progress = false;
            for &i in &members {
                if open(i, &granted, &closed) && granted[i] < claims[i].floor {
                    take(i, &mut granted, &mut closed);
                    progress = true;
                }
            }
            if !progress {
                break;
            }
        }
        loop {
            let eligible = |&i: &usize| open(i, &granted, &closed) && urgent(i, &granted);
            let best = members.iter().copied().filter(eligible).fold(None, |best, i| {
                let score = claims[i].entities[granted[i]].1;
                match best {
                    Some((_, s)) if s >= score => best,
                    _ => Some((i, score)),
                }
            });
            let Some((i, _)) = best else { break };
            take(i, &mut granted, &mut closed);
        }
    }
    Allocation {
        grants: Grants {
            everything: false,
            granted: claims.iter().zip(&granted).map(|(c, &g)| (c.class, g)).collect(),
        },
        dropped: claims.iter().zip(&granted).map(|(c, &g)| (c.class, c.entities.len() - g)).collect(),
        granted_series: available - left,
    }
}

/// A claim's order: the indices of the collector's list, most urgent first, and the claim's
/// entities in that order.
pub type Order = (Vec<usize>, Vec<(usize, f64)>);

/// Sorts indices `0..len` by score, highest first, keeping the given order among equals, and
/// returns them with the claim's entities in that order.
pub fn ranked(len: usize, cost: impl Fn(usize) -> usize, score: impl Fn(usize) -> f64) -> Order {
    let mut order: Vec<usize> = (0..len).collect();
    order.sort_by(|&a, &b| score(b).total_cmp(&score(a)));
    let entities = order.iter().map(|&i| (cost(i), score(i))).collect();
    (order, entities)
}

/// A collector's order of its entities, ranked once per stats, on first use: the claims, both
/// renders of a snapshot (the fixed series counted, then the granted) and the exported trend ids
/// read the same one. A cache of what the stats hold, so stats with the same content are equal
/// whether or not they were ranked.
#[derive(Debug, Clone)]
pub struct Ranked<T>(std::sync::OnceLock<T>);

impl<T> Ranked<T> {
    pub(crate) fn get_or_rank(&self, rank: impl FnOnce() -> T) -> &T {
        self.0.get_or_init(rank)
    }
}

impl<T> Default for Ranked<T> {
    fn default() -> Self {
        Self(std::sync::OnceLock::new())
    }
}

impl<T> PartialEq for Ranked<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Eq for Ranked<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(class: &'static str, tier: Tier, floor: usize, entities: &[(usize, f64)]) -> Claim {
        Claim { class, tier, floor, cap: usize::MAX, entities: entities.to_vec() }
    }

    #[test]
    fn tiers_floors_then_scores() {
        let claims = [
            claim("detail", Tier::Detail, 0, &[(1, 9.0); 10]),
            claim("process", Tier::Page, 2, &[(10, 1.5), (10, 1.4), (10, 1.3), (10, 0.2)]),
            claim("cgroup", Tier::Page, 1, &[(5, 0.99), (5, 0.98), (5, 0.1)]),
            claim("device", Tier::Page, 0, &[(3, f64::INFINITY)]),
        ];
        // Floors: 2 processes (20), 1 cgroup (5); then by score: device (3), process 1.3 (10),
        // cgroup .98 (5); the rest is not urgent: in the detail tier by score, the detail claim
        // (9.0), then process .2 (10), which does not fit in the 7 left, and cgroup .1 (5), which does.
        let a = allocate(&claims, 60);
        assert_eq!(
            (a.grants.get("process"), a.grants.get("cgroup"), a.grants.get("device"), a.grants.get("detail")),
            (3, 3, 1, 10)
        );
        assert_eq!(a.granted_series, 58);
        assert_eq!(a.dropped, vec![("detail", 0), ("process", 1), ("cgroup", 0), ("device", 0)]);
        // Tight: the floors come first, then the most urgent.
        let a = allocate(&claims, 28);
        assert_eq!((a.grants.get("process"), a.grants.get("cgroup"), a.grants.get("device")), (2, 1, 1));
        assert_eq!(a.granted_series, 28);
        // A class stops at its first entity that does not fit (prefix), others go on.
        let a = allocate(&claims, 24);
        assert_eq!((a.grants.get("process"), a.grants.get("cgroup"), a.grants.get("device")), (1, 2, 1));
        assert_eq!((a.grants.get("detail"), a.granted_series), (1, 24), "the last series goes to the next tier");
        assert_eq!(allocate(&claims, 0).granted_series, 0);
        assert_eq!(Grants::all().get("anything"), usize::MAX);
        assert_eq!(Grants::none().get("process"), 0);
    }

    #[test]
    fn past_its_cap_a_class_waits_for_the_detail_tier() {
        let claims = [
            Claim { cap: 2, ..claim("process", Tier::Page, 1, &[(1, 5.0); 5]) },
            claim("numa", Tier::Explain, 0, &[(1, 0.5); 2]),
            claim("detail", Tier::Detail, 0, &[(1, 0.0); 3]),
        ];
        // 2 processes, both NUMA nodes, then by score: the processes (5.0) before the counters.
        let a = allocate(&claims, 7);
        assert_eq!((a.grants.get("process"), a.grants.get("numa"), a.grants.get("detail")), (5, 2, 0));
        let a = allocate(&claims, 5);
        assert_eq!((a.grants.get("process"), a.grants.get("numa"), a.grants.get("detail")), (3, 2, 0));
    }

    #[test]
    fn masks_follow_the_claim_order() {
        let (order, entities) = ranked(4, |i| i + 1, |i| [0.1, 0.9, -1.0, 0.9][i]);
        assert_eq!(order, vec![1, 3, 0, 2], "stable among equal scores");
        assert_eq!(entities[0], (2, 0.9));
        let a = allocate(&[claim("c", Tier::Page, 0, &entities)], 6);
        assert_eq!(a.grants.mask("c", &order, 4), vec![false, true, false, true]);
        assert_eq!(Grants::all().mask("c", &order, 4), vec![true; 4]);
    }

    #[test]
    fn an_order_is_ranked_once_and_is_no_part_of_equality() {
        let ranks = std::cell::Cell::new(0);
        let rank = || {
            ranks.set(ranks.get() + 1);
            ranked(3, |_| 1, |i| i as f64)
        };
        let (used, fresh) = (Ranked::default(), Ranked::default());
        let first = used.get_or_rank(rank).clone();
        assert_eq!(used.get_or_rank(rank), &first);
        assert_eq!((ranks.get(), first.0), (1, vec![2, 1, 0]));
        // Stats that were rendered equal the same stats not rendered yet.
        assert_eq!(used, fresh);
    }
}
