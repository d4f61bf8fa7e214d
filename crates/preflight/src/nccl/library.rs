//! The NCCL a checked process runs (`check --pid`, `estimate --pid`): its version and where the
//! version came from ([`memlock_core::collect::nccl_version`], the same reading the daemon exports).

use serde::Serialize;

use crate::findings::{Finding, Status};
use memlock_core::collect::nccl_version::{self, NcclVersion, Source};

/// What the preflight found of the process's NCCL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mapped {
    /// The library and its version; `None` when no `libnccl.so*` is mapped.
    pub library: Option<NcclVersion>,
    /// Why maps could not be read (another user's process without ptrace access).
    pub error: Option<String>,
}

/// Reads the NCCL process `pid` maps.
pub fn of_process(procfs: &std::path::Path, pid: u32) -> Mapped {
    match nccl_version::of_process(procfs, pid) {
        Ok(library) => Mapped { library, error: None },
        Err(err) => Mapped { library: None, error: Some(err.to_string()) },
    }
}

/// One line on the version and its source: `2.23.4 (from the library) in /venv/.../libnccl.so.2;
/// the library says NCCL version 2.23.4+cuda12.6, its dist-info /venv/.../METADATA says 2.23.4`,
/// then the reasons when something could not be read.
pub fn describe(m: &Mapped) -> String {
    if let Some(err) = &m.error {
        return format!("unknown: maps not readable ({err})");
    }
    let Some(v) = &m.library else {
        return "no libnccl.so mapped (not loaded yet, linked statically, or not used)".into();
    };
    let mut sources = Vec::new();
    if let Some(text) = &v.library_string {
        sources.push(format!("the library says NCCL version {text}"));
    }
    if let Some(d) = &v.dist_info {
        sources.push(format!("its dist-info {} says {}", d.path, d.version));
    }
    let version = match (&v.version, v.source) {
        (Some(version), Some(Source::FileName)) => format!("{version} (from the file name)"),
        (Some(version), Some(Source::Library)) => format!("{version} (from the library)"),
        (Some(version), Some(Source::DistInfo)) => format!("{version} (from the wheel's dist-info)"),
        _ => "unknown".into(),
    };
    let mut out = format!("{version} in {}", v.path);
    if !sources.is_empty() {
        out.push_str(&format!("; {}", sources.join(", ")));
    }
    if !v.reasons.is_empty() {
        out.push_str(&format!("; {}", v.reasons.join("; ")));
    }
    out
}

/// `check`'s finding: PASS stating the version and its source, WARN when the wheel's record
/// and the library disagree (the library is what runs, so the model follows it) or maps could
/// not be read.
pub fn finding(m: &Mapped) -> Finding {
    let measured = describe(m);
    if m.error.is_some() {
        return Finding::new("nccl.version", Status::Warn, measured, "run the check as the job's user (or root)");
    }
    match m.library.as_ref().and_then(|v| v.disagreement()) {
        Some((library, recorded)) => Finding::new(
            "nccl.version",
            Status::Warn,
            format!("the library is {library}, its wheel's dist-info says {recorded}: {measured}"),
            "pip's record does not describe the file the job runs (a library copied over an install): reinstall \
                the wheel, or remove the stray library",
        ),
        None => Finding::new("nccl.version", Status::Pass, measured, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlock_core::collect::nccl_version::DistInfo;

    fn wheel(library: Option<&str>, recorded: Option<&str>) -> Mapped {
        let mut v = NcclVersion {
            path: "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2".into(),
            version: None,
            source: None,
            library_string: library.map(str::to_owned),
            dist_info: recorded.map(|r| DistInfo {
                path: format!("/venv/site-packages/nvidia_nccl_cu12-{r}.dist-info/METADATA"),
                version: r.into(),
            }),
            reasons: Vec::new(),
        };
        if let Some(text) = library {
            v.version = memlock_kernel::nccl_library::release(text).map(str::to_owned);
            v.source = Some(Source::Library);
        } else if let Some(r) = recorded {
            v.version = Some(r.into());
            v.source = Some(Source::DistInfo);
        }
        Mapped { library: Some(v), error: None }
    }

    #[test]
    fn the_version_and_its_source_are_stated() {
        let f = finding(&wheel(Some("2.23.4+cuda12.6"), Some("2.23.4")));
        assert_eq!(f.status, Status::Pass);
        assert_eq!(
            f.measured,
            "2.23.4 (from the library) in /venv/site-packages/nvidia/nccl/lib/libnccl.so.2; the library says NCCL \
                version 2.23.4+cuda12.6, its dist-info /venv/site-packages/nvidia_nccl_cu12-2.23.4.dist-info/METADATA \
                says 2.23.4"
        );
        let f = finding(&wheel(None, Some("2.21.5")));
        assert!(f.measured.starts_with("2.21.5 (from the wheel's dist-info)"), "{}", f.measured);
        let none = Mapped { library: None, error: None };
        assert_eq!(finding(&none).status, Status::Pass);
        assert!(finding(&none).measured.starts_with("no libnccl.so mapped"));
        let refused = Mapped { library: None, error: Some("/proc/7/maps: Permission denied".into()) };
        assert_eq!(finding(&refused).status, Status::Warn);
        assert!(finding(&refused).measured.contains("/proc/7/maps: Permission denied"));
    }

    #[test]
    fn a_lying_dist_info_warns_and_says_both() {
        let f = finding(&wheel(Some("2.21.5+cuda12.4"), Some("2.26.2")));
        assert_eq!(f.status, Status::Warn);
        assert!(f
            .measured
            .starts_with("the library is 2.21.5, its wheel's dist-info says 2.26.2: 2.21.5 (from the library)"));
        assert!(f.measured.contains("NCCL version 2.21.5+cuda12.4") && f.measured.contains("says 2.26.2"));
    }
}
