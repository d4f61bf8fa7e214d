//! Attribution of a cgroup path to the workload that owns it (Kubernetes pod and container,
//! Slurm job and step, Docker container, systemd unit).
//!
//! The `cgroup` label value is the path relative to the memory hierarchy's root, starting with
//! `/`, exactly as in the memory line of `/proc/PID/cgroup` (the `0::` line on cgroup v2), so
//! process series and cgroup series join on it.
//!
//! Recognised shapes (linux-interfaces.md §5.4), each only from the hierarchy's root (or, for
//! a path read from inside a container's cgroup namespace, `/../../kubepods-...slice/...`,
//! from the first segment after the `..`), level by level, and nothing below a container or a
//! step (see [`attribute`]: names below those are the workload's to choose):
//! - Kubernetes, systemd driver: `/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/
//!   {cri-containerd,crio,docker}-<64hex>.scope` (Guaranteed pods: `/kubepods.slice/kubepods-pod<uid_>.slice`).
//! - Kubernetes, cgroupfs driver: `/kubepods/<qos>/pod<uid>/<64hex>` (Guaranteed: `/kubepods/pod<uid>/…`).
//! - Slurm: `/<slice>/[<node>_]slurmstepd.scope/job_<id>/step_<step>/…` (cgroup/v2) and
//!   `/slurm[_<node>]/uid_<uid>/job_<id>/step_<step>` (cgroup/v1).
//! - Docker: `/system.slice/docker-<64hex>.scope` (systemd driver) and `/docker/<64hex>` (cgroupfs).
//! - systemd: the innermost `.service` or `.scope` unit that is not a container scope (named by
//!   whoever owns the subtree it is in; the path says where).
//!
//! Anything else keeps only the `cgroup` label: guessing wrong would join a series to the wrong
//! workload, which is worse than not joining it.

/// What a path says about its owner. Every field is optional; an unknown shape has none.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Attribution {
    /// Kubernetes pod UID in the dashed form of `kube_pod_info{uid}`.
    pub pod_uid: Option<String>,
    /// 64 lowercase hex digits, without a runtime prefix.
    pub container_id: Option<String>,
    /// `guaranteed`, `burstable` or `besteffort`.
    pub qos_class: Option<&'static str>,
    pub slurm_job: Option<String>,
    pub slurm_step: Option<String>,
    pub systemd_unit: Option<String>,
}

/// The labels of a cgroup, in a fixed order: `cgroup` first, then whichever attribution labels
/// the path carries (`pod_uid`, `container_id`, `qos_class`, `slurm_job`, `slurm_step`,
/// `systemd_unit`).
pub fn labels(path: &str) -> Vec<(&'static str, String)> {
    let a = attribute(path);
    let mut out = Vec::with_capacity(4);
    out.push(("cgroup", path.to_owned()));
    let optional = [
        ("pod_uid", a.pod_uid),
        ("container_id", a.container_id),
        ("qos_class", a.qos_class.map(str::to_owned)),
        ("slurm_job", a.slurm_job),
        ("slurm_step", a.slurm_step),
        ("systemd_unit", a.systemd_unit),
    ];
    out.extend(optional.into_iter().filter_map(|(name, value)| Some((name, value?))));
    out
}

/// Reads the workload attribution out of a cgroup path.
///
/// Pods, containers and Slurm jobs are read only where the kubelet, the container runtime and
/// Slurm create them: from the first segment of the path (the hierarchy's root, or the first
/// segment after the `..` that left the reader's cgroup namespace), level by level, and never
/// below the container or the step. Below those the subtree is delegated to the workload
/// (a container's runtime, on cgroup v1 the job's user: Slurm creates `step_<n>` owned by the
/// user), and a user may name directories there as they like: `.../step_0/x/slurm/uid_0/job_9`
/// or `.../kubepods.slice/kubepods-pod<someone else's uid>.slice` made in a delegated subtree
/// would otherwise be read as another user's job or pod. The systemd unit is the
/// innermost `.service` or `.scope` that is not a container scope.
pub fn attribute(path: &str) -> Attribution {
    // A v2 path of a removed cgroup carries this suffix; the owner is the same.
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let climbed = segments.iter().take_while(|s| **s == "..").count();
    let rest = &segments[climbed..];
    let mut attr = Attribution::default();
    if !kubernetes(rest, climbed > 0, &mut attr) && !docker(rest, &mut attr) {
        slurm(rest, &mut attr);
    }
    attr.systemd_unit = rest
        .iter()
        .rev()
        .find(|text| runtime_scope(text).is_none() && unit_name(text).is_some())
        .map(|text| (*text).to_owned());
    attr
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Driver {
    Systemd,
    Cgroupfs,
    /// A path from inside a cgroup namespace may start below the kubepods root.
    Either,
}

/// The kubelet's layout (`pkg/kubelet/cm`: `defaultNodeAllocatableCgroupName = "kubepods"`
/// below `--cgroup-root`, `/` by default, in `node_container_manager_linux.go`; a QoS cgroup
/// for burstable and besteffort pods in `qos_container_manager_linux.go`; `pod<uid>` from
/// `podCgroupNamePrefix` in `pod_container_manager_linux.go`; `CgroupName.ToSystemd` in
/// `cgroup_manager_linux.go` turning the levels into nested slice names) and the runtime's
/// container cgroup inside the pod (`cri-containerd-`, `crio-` or `docker-<id>.scope`; a bare
/// `<id>` with cgroupfs). Whether the path starts with it (true: nothing else is read from it).
fn kubernetes(seg: &[&str], relative: bool, attr: &mut Attribution) -> bool {
    let (mut driver, mut i) = match seg.first() {
        Some(&"kubepods.slice") => (Driver::Systemd, 1),
        Some(&"kubepods") => (Driver::Cgroupfs, 1),
        Some(_) if relative => (Driver::Either, 0),
        _ => return false,
    };
    let below_root = i == 1;
    let mut qos_slice = None;
    if let Some(text) = seg.get(i) {
        if let (Driver::Systemd | Driver::Either, Some(Segment::QosSlice(qos))) = (driver, kubepods_slice(text)) {
            (qos_slice, driver, i) = (Some(qos), Driver::Systemd, i + 1);
        } else if let (Driver::Cgroupfs, Some(qos)) = (driver, qos_name(text)) {
            (qos_slice, i) = (Some(qos), i + 1);
        }
    }
    let pod = seg.get(i).and_then(|text| match (driver, kubepods_slice(text)) {
        (Driver::Systemd | Driver::Either, Some(Segment::Pod { uid, qos })) => {
            // A pod's slice names its QoS class: it must be the slice it is in.
            let fits = match (qos_slice, below_root) {
                (Some(slice), _) => qos == Some(slice),
                (None, true) => qos == Some("guaranteed"),
                (None, false) => true,
            };
            fits.then_some((uid, qos, Driver::Systemd))
        }
        (Driver::Cgroupfs | Driver::Either, _) => {
            let uid = text.strip_prefix("pod").and_then(pod_uid)?;
            let qos = qos_slice.or(below_root.then_some("guaranteed"));
            Some((uid, qos, Driver::Cgroupfs))
        }
        _ => None,
    });
    attr.qos_class = qos_slice;
    if let Some((uid, qos, pod_driver)) = pod {
        (attr.pod_uid, attr.qos_class, driver, i) = (Some(uid), qos, pod_driver, i + 1);
    } else if i > 0 || !relative {
        // The kubepods root or a QoS cgroup, and nothing of the kubelet's below.
        return i > 0;
    }
    if let Some(text) = seg.get(i) {
        attr.container_id = match (driver, runtime_scope(text)) {
            (Driver::Systemd | Driver::Either, Some(id)) => id,
            (Driver::Cgroupfs | Driver::Either, None) => container_id(text),
            _ => None,
        };
    }
    i > 0 || attr.container_id.is_some()
}

/// Docker outside Kubernetes: `docker-<id>.scope` in `system.slice` (systemd driver, docker's
/// default cgroup parent) or `docker/<id>` (cgroupfs), at the root.
fn docker(seg: &[&str], attr: &mut Attribution) -> bool {
    let id = match seg {
        ["system.slice", scope, ..] => runtime_scope(scope).flatten().filter(|_| scope.starts_with("docker-")),
        ["docker", id, ..] => container_id(id),
        _ => None,
    };
    attr.container_id = id;
    attr.container_id.is_some()
}

/// Slurm's layouts, at the root: cgroup/v2 (`src/plugins/cgroup/v2/cgroup_v2.c`,
/// `_set_int_cg_ns`: `<CgroupSlice, system.slice by default>/[<node>_]slurmstepd.scope`, then
/// `job_<id>/step_<step>` from `cgroup_p_step_create`) and cgroup/v1 (`xcgroup.c`,
/// `xcgroup_create_hierarchy`: `<CgroupPrepend, /slurm or /slurm_<node>>/uid_<uid>/job_<id>/
/// step_<step>`).
fn slurm(seg: &[&str], attr: &mut Attribution) {
    let (job, step) = match seg {
        [slice, scope, job, rest @ ..]
            if slice.ends_with(".slice") && matches!(classify(scope), Segment::SlurmScope(Some(_))) =>
        {
            (*job, rest.first())
        }
        [root, uid, job, rest @ ..]
            if matches!(classify(root), Segment::SlurmScope(None))
                && uid.strip_prefix("uid_").is_some_and(all_digits) =>
        {
            (*job, rest.first())
        }
        _ => return,
    };
    let Some(job) = job.strip_prefix("job_").filter(|j| all_digits(j)) else { return };
    attr.slurm_job = Some(job.to_owned());
    attr.slurm_step = step.and_then(|s| s.strip_prefix("step_")).filter(|s| is_word(s)).map(str::to_owned);
}

/// What a single segment names on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment<'a> {
    /// `kubepods-burstable.slice`.
    QosSlice(&'static str),
    Pod {
        uid: String,
        qos: Option<&'static str>,
    },
    /// `slurmstepd.scope`, `<node>_slurmstepd.scope` (also a systemd unit), `slurm`, `slurm_<node>`.
    SlurmScope(Option<&'a str>),
    Other,
}

fn classify(text: &str) -> Segment<'_> {
    if text == "slurmstepd.scope" || text.strip_suffix("_slurmstepd.scope").is_some_and(|node| !node.is_empty()) {
        return Segment::SlurmScope(unit_name(text));
    }
    if text == "slurm" || text.strip_prefix("slurm_").is_some_and(|node| !node.is_empty() && !node.contains('.')) {
        return Segment::SlurmScope(None);
    }
    Segment::Other
}

/// `kubepods-<qos>.slice`, `kubepods-<qos>-pod<uid_>.slice` or `kubepods-pod<uid_>.slice`.
fn kubepods_slice(text: &str) -> Option<Segment<'static>> {
    let inner = text.strip_prefix("kubepods-")?.strip_suffix(".slice")?;
    if let Some(qos) = qos_name(inner) {
        return Some(Segment::QosSlice(qos));
    }
    let (qos, pod) = match inner.split_once('-') {
        Some((qos, pod)) => (Some(qos_name(qos)?), pod),
        None => (Some("guaranteed"), inner),
    };
    let uid = pod_uid(pod.strip_prefix("pod")?)?;
    Some(Segment::Pod { uid, qos })
}

fn qos_name(text: &str) -> Option<&'static str> {
    match text {
        "burstable" => Some("burstable"),
        "besteffort" => Some("besteffort"),
        _ => None,
    }
}

/// `cri-containerd-<id>.scope`, `crio-<id>.scope` or `docker-<id>.scope`: `Some(Some(id))`
/// for a 64-hex id, `Some(None)` for a runtime scope with any other id. CRI-O's
/// `crio-conmon-<id>.scope` holds the monitor, not the container, and is not matched.
fn runtime_scope(text: &str) -> Option<Option<String>> {
    let name = text.strip_suffix(".scope")?;
    if name.starts_with("crio-conmon-") {
        return None;
    }
    let id = ["cri-containerd-", "crio-", "docker-"].iter().find_map(|prefix| name.strip_prefix(prefix))?;
    Some(container_id(id))
}

/// 64 hex digits, lowercased.
fn container_id(text: &str) -> Option<String> {
    (text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())).then(|| text.to_ascii_lowercase())
}

/// A pod UID of 8-4-4-4-12 hex digits separated by `-` (cgroupfs driver) or `_` (systemd
/// driver, which reserves `-` for nesting), returned lowercased with dashes.
fn pod_uid(text: &str) -> Option<String> {
    const SEPARATORS: [usize; 4] = [8, 13, 18, 23];
    if text.len() != 36 {
        return None;
    }
    let mut uid = String::with_capacity(36);
    for (i, b) in text.bytes().enumerate() {
        if SEPARATORS.contains(&i) {
            if b != b'-' && b != b'_' {
                return None;
            }
            uid.push('-');
        } else if b.is_ascii_hexdigit() {
            uid.push(char::from(b.to_ascii_lowercase()));
        } else {
            return None;
        }
    }
    Some(uid)
}

/// A systemd `.service` or `.scope` unit name, checked against systemd's character set and
/// length limit so that arbitrary directory names do not become unit labels.
fn unit_name(text: &str) -> Option<&str> {
    const UNIT_NAME_MAX: usize = 255;
    let stem = text.strip_suffix(".service").or_else(|| text.strip_suffix(".scope"))?;
    let valid = !stem.is_empty()
        && text.len() <= UNIT_NAME_MAX
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b":-_.\\@".contains(&b));
    valid.then_some(text)
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.len() <= 20 && text.bytes().all(|b| b.is_ascii_digit())
}

/// A Slurm step name: a number, `batch`, `extern`, `interactive`, or a het-job `<n>_<m>`.
fn is_word(text: &str) -> bool {
    !text.is_empty() && text.len() <= 64 && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "3f2b6c1d8e9a0b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c";
    const UID: &str = "6b0e3b1a-2a43-4a3b-9c1e-2f1d0c7a9e11";
    const UID_: &str = "6b0e3b1a_2a43_4a3b_9c1e_2f1d0c7a9e11";

    /// The expected labels after `cgroup`, as `name=value` pairs.
    fn check(path: &str, expected: &[(&str, &str)]) {
        let got = labels(path);
        assert_eq!(got[0], ("cgroup", path.to_owned()), "the raw path is always the first label");
        let rest: Vec<(&str, &str)> = got[1..].iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(rest, expected, "path {path:?}");
    }

    #[test]
    fn kubernetes_systemd_driver() {
        let pod = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice");
        let cases: Vec<(String, Vec<(&str, &str)>)> = vec![
            ("/kubepods.slice".into(), vec![]),
            ("/kubepods.slice/kubepods-burstable.slice".into(), vec![("qos_class", "burstable")]),
            ("/kubepods.slice/kubepods-besteffort.slice".into(), vec![("qos_class", "besteffort")]),
            (pod.clone(), vec![("pod_uid", UID), ("qos_class", "burstable")]),
            // The §3.3 example.
            (
                format!("{pod}/cri-containerd-{HEX}.scope"),
                vec![("pod_uid", UID), ("container_id", HEX), ("qos_class", "burstable")],
            ),
            (
                format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{HEX}.scope"
                ),
                vec![("pod_uid", UID), ("container_id", HEX), ("qos_class", "besteffort")],
            ),
            (
                format!("/kubepods.slice/kubepods-pod{UID_}.slice/docker-{HEX}.scope"),
                vec![("pod_uid", UID), ("container_id", HEX), ("qos_class", "guaranteed")],
            ),
            (format!("/kubepods.slice/kubepods-pod{UID_}.slice"), vec![("pod_uid", UID), ("qos_class", "guaranteed")]),
        ];
        for (path, expected) in cases {
            check(&path, &expected);
        }
        // CRI-O's monitor scope is a unit of the pod, not the container.
        let conmon = format!("crio-conmon-{HEX}.scope");
        check(
            &format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/{conmon}"),
            &[("pod_uid", UID), ("qos_class", "burstable"), ("systemd_unit", &conmon)],
        );
    }

    #[test]
    fn kubernetes_cgroupfs_driver() {
        check(
            &format!("/kubepods/burstable/pod{UID}/{HEX}"),
            &[("pod_uid", UID), ("container_id", HEX), ("qos_class", "burstable")],
        );
        check(&format!("/kubepods/besteffort/pod{UID}"), &[("pod_uid", UID), ("qos_class", "besteffort")]);
        check(
            &format!("/kubepods/pod{UID}/{HEX}"),
            &[("pod_uid", UID), ("container_id", HEX), ("qos_class", "guaranteed")],
        );
        check("/kubepods/burstable", &[("qos_class", "burstable")]);
        check("/kubepods", &[]);
        // `burstable` means nothing outside kubepods.
        check("/burstable", &[]);
        // An underscore-separated UID below the cgroupfs root is still that UID.
        check(&format!("/kubepods/pod{UID_}"), &[("pod_uid", UID), ("qos_class", "guaranteed")]);
    }

    #[test]
    fn paths_from_inside_a_container_namespace() {
        // A process in another pod, read from a pod's own cgroup namespace.
        check(
            &format!("/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{HEX}.scope"),
            &[("pod_uid", UID), ("container_id", HEX), ("qos_class", "besteffort")],
        );
        // A sibling container of the same pod (cgroupfs driver).
        check(&format!("/../{HEX}"), &[("container_id", HEX)]);
        check(&format!("/../pod{UID}/{HEX}"), &[("pod_uid", UID), ("container_id", HEX)]);
        check("/..", &[]);
        check("/../../system.slice/sshd.service", &[("systemd_unit", "sshd.service")]);
    }

    #[test]
    fn slurm() {
        // The §3.3 examples.
        check(
            "/system.slice/slurmstepd.scope/job_1870/step_0/user/task_0",
            &[("slurm_job", "1870"), ("slurm_step", "0"), ("systemd_unit", "slurmstepd.scope")],
        );
        check("/slurm/uid_1000/job_1870/step_0", &[("slurm_job", "1870"), ("slurm_step", "0")]);
        check(
            "/system.slice/node07_slurmstepd.scope/job_42/step_batch/slurm",
            &[("slurm_job", "42"), ("slurm_step", "batch"), ("systemd_unit", "node07_slurmstepd.scope")],
        );
        check(
            "/system.slice/slurmstepd.scope/job_42/step_extern",
            &[("slurm_job", "42"), ("slurm_step", "extern"), ("systemd_unit", "slurmstepd.scope")],
        );
        check("/slurm/uid_1000/job_7", &[("slurm_job", "7")]);
        check("/slurm_node3/uid_0/job_7/step_interactive", &[("slurm_job", "7"), ("slurm_step", "interactive")]);
        check("/slurm", &[]);
        // job_ and step_ outside Slurm, or malformed, are not Slurm.
        check("/job_1870/step_0", &[]);
        check("/slurm/uid_1000/job_18x/step_0", &[]);
        check("/slurm/uid_1000/job_1870/step_", &[("slurm_job", "1870")]);
        check("/slurm/uid_1000/step_0", &[]);
        check("/system.slice/slurmd.service", &[("systemd_unit", "slurmd.service")]);
    }

    #[test]
    fn docker_and_systemd() {
        // The §3.3 example: a container scope is not a systemd_unit.
        check(&format!("/system.slice/docker-{HEX}.scope"), &[("container_id", HEX)]);
        check(&format!("/docker/{HEX}"), &[("container_id", HEX)]);
        // Docker in docker: the inner daemon's cgroups are made inside the outer container, which
        // may name them as it likes; the container is the one the host's runtime made.
        check(&format!("/docker/{HEX}/docker/{}", "a".repeat(64)), &[("container_id", HEX)]);
        check("/system.slice/containerd.service", &[("systemd_unit", "containerd.service")]);
        check("/user.slice/user-1000.slice/session-3.scope", &[("systemd_unit", "session-3.scope")]);
        check(
            "/user.slice/user-1000.slice/user@1000.service/app.slice/app-foo@autostart.service",
            &[("systemd_unit", "app-foo@autostart.service")],
        );
        check("/user.slice/user-1000.slice/user@1000.service", &[("systemd_unit", "user@1000.service")]);
        check("/init.scope", &[("systemd_unit", "init.scope")]);
        check("/system.slice", &[]);
        // A unit inside a container.
        check(
            &format!("/system.slice/docker-{HEX}.scope/system.slice/nginx.service"),
            &[("container_id", HEX), ("systemd_unit", "nginx.service")],
        );
    }

    #[test]
    fn unknown_shapes_keep_only_the_path() {
        // The captured hybrid v1 memory path: 32 hex digits are not a container id.
        check("/process_api/dd1899f89d55a02163c5f19a2de9845b", &[]);
        check("/", &[]);
        check("", &[]);
        check("/mygroup/sub", &[]);
        // A 64-hex name is a container id only where runtimes put one.
        check(&format!("/batch/{HEX}"), &[]);
        check(&format!("/{HEX}"), &[]);
    }

    #[test]
    fn removed_cgroups_are_attributed_like_live_ones() {
        let path = format!("/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{HEX}.scope (deleted)");
        check(&path, &[("pod_uid", UID), ("container_id", HEX), ("qos_class", "guaranteed")]);
    }

    #[test]
    fn uppercase_ids_are_normalised() {
        let upper_uid = UID_.to_ascii_uppercase();
        let upper_hex = HEX.to_ascii_uppercase();
        check(
            &format!("/kubepods.slice/kubepods-pod{upper_uid}.slice/cri-containerd-{upper_hex}.scope"),
            &[("pod_uid", UID), ("container_id", HEX), ("qos_class", "guaranteed")],
        );
    }

    #[test]
    fn hostile_strings() {
        let near_misses = [
            // Wrong lengths and characters.
            format!("/kubepods.slice/kubepods-pod{}.slice", &UID_[..35]),
            format!("/kubepods.slice/kubepods-pod{UID_}0.slice"),
            format!("/kubepods.slice/kubepods-pod{}.slice", UID_.replace('_', ".")),
            format!("/kubepods.slice/kubepods-pod{}.slice", UID_.replacen('6', "g", 1)),
            format!("/kubepods.slice/kubepods-guaranteed-pod{UID_}.slice"),
            "/kubepods.slice/kubepods-burstable-pod.slice".into(),
            format!("/system.slice/docker-{}.scope", &HEX[..63]),
            format!("/system.slice/docker-{HEX}0.scope"),
            format!("/system.slice/docker-{}.scope", HEX.replacen('3', "z", 1)),
            format!("/system.slice/podman-{HEX}.scope").replace(".scope", ".slice"),
            // Multi-byte characters where ASCII is expected must not split a char boundary.
            format!("/kubepods.slice/kubepods-pod{}é.slice", &UID_[..34]),
            format!("/docker/{}ü", &HEX[..62]),
            "/pod".into(),
            "/kubepods-.slice".into(),
            "/kubepods-pod.slice".into(),
            ".service".into(),
            "/.scope".into(),
            "/sys\ntem.service".into(),
            "/a\"b.service".into(),
            format!("/{}.service", "x".repeat(300)),
            "/slurm/uid_/job_1/step_0".into(),
            format!("/slurm/uid_1/job_{}/step_0", "9".repeat(30)),
            "\0/\0\0".into(),
            "//////".into(),
            "/ (deleted)".into(),
        ];
        for path in &near_misses {
            check(path, &[]);
        }
        // Long and deep paths are handled without trouble.
        let deep = "/a".repeat(10_000);
        check(&deep, &[]);
    }

    #[test]
    fn labels_come_in_the_fixed_order() {
        let path = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{HEX}.scope\
             /system.slice/nginx.service"
        );
        let names: Vec<&str> = labels(&path).iter().map(|(k, _)| *k).collect();
        assert_eq!(names, ["cgroup", "pod_uid", "container_id", "qos_class", "systemd_unit"]);
        let names: Vec<&str> = labels("/system.slice/slurmstepd.scope/job_5/step_1").iter().map(|(k, _)| *k).collect();
        assert_eq!(names, ["cgroup", "slurm_job", "slurm_step", "systemd_unit"]);
    }

    /// A user with a delegated subtree may name directories so that they read as another user's
    /// pod or job. Only the layouts the kubelet, the runtimes and Slurm make from the root are
    /// read, and nothing below a container or a step.
    #[test]
    fn names_made_in_a_delegated_subtree_are_not_attribution() {
        let forged_pod = format!("kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{HEX}.scope");
        let forged_job = "system.slice/slurmstepd.scope/job_4242/step_0";
        let forged_v1 = "slurm/uid_0/job_4242/step_0";
        for delegated in [
            "/user.slice/user-1000.slice/user@1000.service/app.slice",
            "/memlock-delegated",
            "/slurm/uid_1000/job_7/step_0/task_0",
            "/system.slice/slurmstepd.scope/job_7/step_0/user/task_0",
        ] {
            for forged in [forged_pod.as_str(), forged_job, forged_v1] {
                let a = attribute(&format!("{delegated}/{forged}"));
                assert!(
                    a.pod_uid.is_none() && a.container_id.is_none() && a.slurm_job.as_deref() != Some("4242"),
                    "{delegated}/{forged}: {a:?}"
                );
            }
        }
        // Inside a real job the job and step stay, whatever is made below them.
        check(&format!("/slurm/uid_1000/job_7/step_0/task_0/{forged_v1}"), &[("slurm_job", "7"), ("slurm_step", "0")]);
        // Inside a real container: its pod and id stay, nothing below counts.
        let other = "b".repeat(64);
        check(
            &format!(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{HEX}.scope\
                 /kubepods.slice/kubepods-pod{}.slice/crio-{other}.scope",
                UID_.replace('6', "7")
            ),
            &[("pod_uid", UID), ("container_id", HEX), ("qos_class", "besteffort")],
        );
        // A pod slice whose QoS class is not the slice it is in is no kubelet's.
        check(
            &format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-burstable-pod{UID_}.slice"),
            &[("qos_class", "besteffort")],
        );
        check(&format!("/kubepods.slice/kubepods-burstable-pod{UID_}.slice"), &[]);
        // Slurm's levels in order, from the root.
        check("/system.slice/job_5/step_0", &[]);
        check("/slurm/job_5/step_0", &[]);
        check("/x/slurm/uid_0/job_5", &[]);
        check(&format!("/x/docker/{HEX}"), &[]);
        check(&format!("/user.slice/docker-{HEX}.scope"), &[]);
    }
}
