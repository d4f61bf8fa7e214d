//! Attribution of a cgroup path to the workload that owns it (Kubernetes pod and container,
//! Slurm job and step, Docker container, systemd unit).
//!
//! The `cgroup` label value is the path relative to the memory hierarchy's root, starting with
//! `/`, exactly as in the memory line of `/proc/PID/cgroup` (the `0::` line on cgroup v2), so
//! process series and cgroup series join on it.

/// The labels of a cgroup, in a fixed order: `cgroup` first, then whichever attribution labels
/// the path carries (`pod_uid`, `container_id`, `qos_class`, `slurm_job`, `slurm_step`,
/// `systemd_unit`).
pub fn labels(path: &str) -> Vec<(&'static str, String)> {
    // Placeholder until the path shapes are recognised: the raw path only.
    vec![("cgroup", path.to_owned())]
}
