//! Attribution of a cgroup path to the workload that owns it (Kubernetes pod and container,
//! Slurm job and step, Docker container, systemd unit).
//!
//! The `cgroup` label value is the path relative to the memory hierarchy's root, starting with
//! `/`, exactly as in the memory line of `/proc/PID/cgroup` (the `0::` line on cgroup v2), so
//! process series and cgroup series join on it.
//!
//! Recognised shapes (linux-interfaces.md §5.4), matched segment by segment so that a path read
//! from inside a container's cgroup namespace (`/../../kubepods-...slice/...`) is attributed
//! like the host's absolute path:
//! - Kubernetes, systemd driver: `kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/
//!   {cri-containerd,crio,docker}-<64hex>.scope` (Guaranteed pods: `kubepods-pod<uid_>.slice`).
//! - Kubernetes, cgroupfs driver: `kubepods/<qos>/pod<uid>/<64hex>` (Guaranteed: `kubepods/pod<uid>/…`).
//! - Slurm: `[<node>_]slurmstepd.scope/job_<id>/step_<step>/…` (cgroup/v2) and
//!   `slurm[_<node>]/uid_<uid>/job_<id>/step_<step>` (cgroup/v1).
//! - Docker: `docker-<64hex>.scope` (systemd driver) and `docker/<64hex>` (cgroupfs driver).
//! - systemd: the innermost `.service` or `.scope` unit that is not a container scope.
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

/// Reads the workload attribution out of a cgroup path. Where shapes nest (a container inside
/// a pod, a unit inside a container), the innermost one wins.
pub fn attribute(path: &str) -> Attribution {
    // A v2 path of a removed cgroup carries this suffix; the owner is the same.
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let mut attr = Attribution::default();
    let mut previous = Segment::Other;
    for text in path.split('/').filter(|s| !s.is_empty()) {
        let segment = classify(text, &previous);
        match &segment {
            Segment::Pod { uid, qos } => {
                attr.pod_uid = Some(uid.clone());
                attr.qos_class = *qos;
                // A container found before this pod belonged to something outside it.
                attr.container_id = None;
            }
            Segment::QosSlice(qos) => attr.qos_class = Some(qos),
            Segment::Container(id) => attr.container_id = Some(id.clone()),
            Segment::Job(job) => {
                attr.slurm_job = Some((*job).to_owned());
                attr.slurm_step = None;
            }
            Segment::Step(step) => attr.slurm_step = Some((*step).to_owned()),
            Segment::Unit(unit) => attr.systemd_unit = Some((*unit).to_owned()),
            Segment::SlurmScope(unit) => {
                if let Some(unit) = unit {
                    attr.systemd_unit = Some((*unit).to_owned());
                }
            }
            Segment::KubepodsRoot | Segment::DockerRoot | Segment::SlurmUid | Segment::Parent | Segment::Other => {}
        }
        previous = segment;
    }
    attr
}

/// One path segment, classified with the help of the segment before it (a bare 64-hex name is
/// a container only below a pod, `docker` or `..`; a `job_` only below Slurm).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment<'a> {
    /// `kubepods.slice` or `kubepods`.
    KubepodsRoot,
    /// `kubepods-burstable.slice`, or `burstable` / `besteffort` below `kubepods`.
    QosSlice(&'static str),
    Pod {
        uid: String,
        qos: Option<&'static str>,
    },
    Container(String),
    /// `docker` (cgroupfs driver).
    DockerRoot,
    /// `slurmstepd.scope`, `<node>_slurmstepd.scope` (also a systemd unit), `slurm`, `slurm_<node>`.
    SlurmScope(Option<&'a str>),
    /// `uid_<uid>` below a v1 Slurm root.
    SlurmUid,
    Job(&'a str),
    Step(&'a str),
    Unit(&'a str),
    /// `..`: the path left the reader's cgroup namespace.
    Parent,
    Other,
}

fn classify<'a>(text: &'a str, previous: &Segment<'_>) -> Segment<'a> {
    if text == ".." {
        return Segment::Parent;
    }
    if text == "kubepods.slice" || text == "kubepods" {
        return Segment::KubepodsRoot;
    }
    if text == "docker" {
        return Segment::DockerRoot;
    }
    if let Some(segment) = kubepods_slice(text) {
        return segment;
    }
    if let Some(id) = runtime_scope(text) {
        // A runtime's scope with a malformed id is still a container, not a systemd unit.
        return id.map_or(Segment::Other, Segment::Container);
    }
    if matches!(previous, Segment::KubepodsRoot) {
        if let Some(qos) = qos_name(text) {
            return Segment::QosSlice(qos);
        }
    }
    if let Some(uid) = text.strip_prefix("pod").and_then(pod_uid) {
        let qos = match previous {
            Segment::KubepodsRoot => Some("guaranteed"),
            Segment::QosSlice(qos) => Some(*qos),
            _ => None,
        };
        return Segment::Pod { uid, qos };
    }
    if matches!(previous, Segment::Pod { .. } | Segment::DockerRoot | Segment::Parent) {
        if let Some(id) = container_id(text) {
            return Segment::Container(id);
        }
    }
    if text == "slurmstepd.scope" || text.strip_suffix("_slurmstepd.scope").is_some_and(|node| !node.is_empty()) {
        return Segment::SlurmScope(unit_name(text));
    }
    if text == "slurm" || text.strip_prefix("slurm_").is_some_and(|node| !node.is_empty() && !node.contains('.')) {
        return Segment::SlurmScope(None);
    }
    if matches!(previous, Segment::SlurmScope(_)) && text.strip_prefix("uid_").is_some_and(all_digits) {
        return Segment::SlurmUid;
    }
    if matches!(previous, Segment::SlurmScope(_) | Segment::SlurmUid) {
        if let Some(job) = text.strip_prefix("job_").filter(|j| all_digits(j)) {
            return Segment::Job(job);
        }
    }
    if matches!(previous, Segment::Job(_)) {
        if let Some(step) = text.strip_prefix("step_").filter(|s| is_word(s)) {
            return Segment::Step(step);
        }
    }
    if let Some(unit) = unit_name(text) {
        return Segment::Unit(unit);
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
        check(&format!("/docker/{HEX}/docker/{}", "a".repeat(64)), &[("container_id", &"a".repeat(64))]);
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
        // Every label at once: a Slurm job inside a pod container running a unit.
        let path = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{HEX}.scope\
             /system.slice/slurmstepd.scope/job_5/step_1"
        );
        let names: Vec<&str> = labels(&path).iter().map(|(k, _)| *k).collect();
        assert_eq!(
            names,
            ["cgroup", "pod_uid", "container_id", "qos_class", "slurm_job", "slurm_step", "systemd_unit"]
        );
    }
}
