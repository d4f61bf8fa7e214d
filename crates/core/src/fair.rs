//! Places shared fairly among owners: whatever ranks processes for a bounded set (the process
//! collector's `top_n`, the fast path's watched set, the series budget's process claim and its
//! per-cgroup aggregates) orders them so that each owner's most urgent comes before anyone's
//! second.
//!
//! An owner is a uid, and within a uid a cgroup: a user who starts 8,300 processes, or 40 in 40
//! cgroups, holding memory near limits they lowered themselves, takes the places of their own
//! processes only; another user's job keeps its place whatever the crowd's ratios. Round `k`
//! holds every owner's `k`-th most urgent entry, most urgent first; within a uid, its cgroups
//! take turns the same way, so one job's cgroup is not pushed out by the same user's other jobs.

use std::collections::HashMap;
use std::hash::Hash;

/// The fair order of `0..len`, entries given most urgent first. Turns are taken within a tier
/// (`tier(i)`, lower first): the urgent (a share of a limit held; `true` first) are ordered by
/// the round of their uid (`uid(i)`: their place among that uid's urgent entries once its
/// cgroups, `group(i)`, take turns), then by the given order; then the rest the same way. So an
/// idle owner's process never comes before another's urgent one, and one owner's urgent crowd
/// only before other owners' later entries. Stable: one owner alone keeps the given order.
pub fn order<T: Ord + Copy + Hash, U: Hash + Eq, G: Hash + Eq>(
    len: usize,
    tier: impl Fn(usize) -> T,
    uid: impl Fn(usize) -> U,
    group: impl Fn(usize) -> G,
) -> Vec<usize> {
    // Each key once: the sorts below would otherwise compute them O(n log n) times (a process's
    // tier is its urgency, over both counters).
    let tiers: Vec<T> = (0..len).map(&tier).collect();
    let uids: Vec<U> = (0..len).map(&uid).collect();
    // The place of each entry among its (tier, uid, cgroup)'s.
    let mut seen: HashMap<(T, &U, G), usize> = HashMap::new();
    let within_group: Vec<usize> = (0..len)
        .map(|i| {
            let n = seen.entry((tiers[i], &uids[i], group(i))).or_insert(0);
            *n += 1;
            *n - 1
        })
        .collect();
    // Within a uid, its cgroups take turns: ordered by (place in cgroup, given order).
    let mut by_uid: Vec<usize> = (0..len).collect();
    by_uid.sort_by_key(|&i| within_group[i]);
    let mut rounds: HashMap<(T, &U), usize> = HashMap::new();
    let mut round = vec![0usize; len];
    for i in by_uid {
        let n = rounds.entry((tiers[i], &uids[i])).or_insert(0);
        round[i] = *n;
        *n += 1;
    }
    let mut out: Vec<usize> = (0..len).collect();
    out.sort_by_key(|&i| (tiers[i], round[i]));
    out
}

/// Scores along a fair order for the series budget ([`crate::budget::allocate`] takes each
/// class's entities as a prefix, scores not increasing): each entry's score capped by those
/// before it, so an owner's second entry competes only after every owner's first.
pub(crate) fn capped_scores(scores: impl IntoIterator<Item = f64>) -> Vec<f64> {
    let mut cap = f64::INFINITY;
    scores
        .into_iter()
        .map(|s| {
            cap = cap.min(s);
            cap
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (uid, cgroup) of urgent entries given most urgent first.
    fn fair(entries: &[(u32, &str)]) -> Vec<usize> {
        order(entries.len(), |_| 0, |i| entries[i].0, |i| entries[i].1)
    }

    #[test]
    fn a_crowd_of_one_user_leaves_every_other_owner_their_first_places() {
        // 8 crowd processes of uid 1000 rank above the job of uid 2000 and a daemon of uid 0.
        let mut entries = vec![(1000, "/crowd"); 8];
        entries.push((2000, "/slurm/uid_2000/job_7"));
        entries.push((0, "/system.slice/opensm.service"));
        let order = fair(&entries);
        assert_eq!(&order[..3], &[0, 8, 9], "each owner's most urgent first");
        assert_eq!(&order[3..], &[1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn one_users_cgroups_share_that_users_places_only() {
        // 40 processes of one uid in 40 cgroups, then the job of another uid.
        let groups: Vec<String> = (0..40).map(|i| format!("/crowd/{i}")).collect();
        let mut entries: Vec<(u32, &str)> = groups.iter().map(|g| (1000, g.as_str())).collect();
        entries.push((2000, "/job"));
        let order = fair(&entries);
        assert_eq!(&order[..2], &[0, 40], "the crowd's cgroups are one owner against the job");
        // Within the uid, cgroups take turns: two jobs of one user keep one place each.
        let entries = [(7, "/a"), (7, "/a"), (7, "/a"), (7, "/b")];
        assert_eq!(fair(&entries), vec![0, 3, 1, 2]);
    }

    #[test]
    fn an_idle_owner_never_comes_before_another_owners_urgent_process() {
        // The job's two ranks (urgent), then 30 idle processes of 30 other users.
        let urgent = |i: usize| i >= 2;
        let order = order(32, urgent, |i| if i < 2 { 1000 } else { i as u32 }, |_| "/");
        assert_eq!(&order[..3], &[0, 1, 2]);
    }

    #[test]
    fn one_owner_keeps_the_given_order_and_scores_never_rise() {
        assert_eq!(fair(&[(1, "/"), (1, "/"), (1, "/")]), vec![0, 1, 2]);
        assert_eq!(capped_scores([1.0, 0.93, 1.0, 0.5, 0.9]), vec![1.0, 0.93, 0.93, 0.5, 0.5]);
        assert!(fair(&[]).is_empty());
    }
}
