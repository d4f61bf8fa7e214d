//! `/proc/PID/cgroup`: the cgroup that labels a process.
//!
//! Lines are `ID:CONTROLLERS:PATH`. On cgroup v1 and hybrid hosts the memory controller sits on
//! its own hierarchy (`4:memory:/path`); on v2 there is only `0::/path`. The process is labelled
//! with the memory hierarchy's path when there is one, else the unified one, so that its series
//! join the memory metrics of the same cgroup.

use super::ParseError;

/// Appended by the kernel to the v2 path of a cgroup that has been removed.
const DELETED_SUFFIX: &str = " (deleted)";

/// The kernel formats the path into a PATH_MAX buffer and fails the read with ENAMETOOLONG
/// when it does not fit (`proc_cgroup_show` in kernel/cgroup/cgroup.c, `cgroup_path_ns_locked`
/// into `kmalloc(PATH_MAX)`), so a path it prints is at most PATH_MAX - 1 bytes. A longer one
/// is not from a kernel, and is refused: from a procfs root someone else writes, huge paths
/// would be held in every label of each process.
const PATH_MAX: usize = 4096;

/// The path that labels the process: the v1 line listing the `memory` controller if present,
/// else the `0::` line, without a trailing ` (deleted)`. `Ok(None)` when the file is valid but
/// has neither (a v1 host without the memory controller). Malformed lines are skipped; a text
/// with no valid line at all is an error.
pub fn memory_path(text: &str) -> Result<Option<&str>, ParseError> {
    let mut unified = None;
    let mut valid_lines = 0usize;
    for line in text.split('\n') {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        // Paths are absolute within the reader's cgroup namespace ("/" or "/..." from a container).
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || !path.starts_with('/') {
            continue;
        }
        valid_lines += 1;
        let path = path.strip_suffix(DELETED_SUFFIX).unwrap_or(path);
        if controllers.split(',').any(|c| c == "memory") {
            return within_path_max(path).map(Some);
        }
        if id == "0" && controllers.is_empty() {
            unified = Some(path);
        }
    }
    if valid_lines == 0 {
        return Err(if text.trim().is_empty() {
            ParseError::Empty
        } else {
            ParseError::Format("no ID:CONTROLLERS:PATH line".into())
        });
    }
    unified.map(within_path_max).transpose()
}

fn within_path_max(path: &str) -> Result<&str, ParseError> {
    if path.len() >= PATH_MAX {
        return Err(ParseError::Format(format!(
            "a path of {} bytes: the kernel prints at most {}",
            path.len(),
            PATH_MAX - 1
        )));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPTURE: &str = include_str!("../../../tests/fixtures/captures/proc_self_cgroup_hybrid_v1");

    #[test]
    fn paths_longer_than_the_kernel_prints_are_refused() {
        let longest = format!("/{}", "d".repeat(PATH_MAX - 2));
        assert_eq!(memory_path(&format!("4:memory:{longest}\n")), Ok(Some(longest.as_str())));
        assert_eq!(memory_path(&format!("0::{longest} (deleted)\n")), Ok(Some(longest.as_str())));
        let over = format!("/{}", "d".repeat(PATH_MAX - 1));
        for text in [format!("4:memory:{over}\n"), format!("0::{over}\n"), format!("0::/\n4:memory:{over}\n")] {
            let err = memory_path(&text).unwrap_err().to_string();
            assert!(err.contains("4096 bytes") && err.contains("at most 4095"), "{err}");
        }
        // A long path of a hierarchy that does not label the process is not looked at.
        assert_eq!(memory_path(&format!("5:cpu:{over}\n0::/job\n")), Ok(Some("/job")));
        assert_eq!(memory_path(&format!("0::{over}\n4:memory:/job\n")), Ok(Some("/job")));
    }

    #[test]
    fn hybrid_hosts_use_the_memory_line() {
        assert_eq!(memory_path(CAPTURE), Ok(Some("/process_api/dd1899f89d55a02163c5f19a2de9845b")));
    }

    #[test]
    fn the_memory_line_wins_wherever_it_is() {
        // After the 0:: line, and in a co-mounted hierarchy.
        assert_eq!(
            memory_path("0::/user.slice\n7:memory:/slurm/uid_1000/job_1870/step_0\n"),
            Ok(Some("/slurm/uid_1000/job_1870/step_0"))
        );
        assert_eq!(memory_path("3:cpu,memory,blkio:/a\n0::/b\n"), Ok(Some("/a")));
        // "memory" must be a whole controller name.
        assert_eq!(memory_path("3:memory_x:/a\n0::/b\n"), Ok(Some("/b")));
    }

    #[test]
    fn pure_v2_uses_the_unified_line() {
        let kube = "0::/kubepods.slice/kubepods-burstable.slice\
            /kubepods-burstable-pod6b0e3b1a_2a43_4a3b_9c1e_2f1d0c7a9e11.slice\
            /cri-containerd-3f2b6c1d8e9a0b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c.scope\n";
        assert_eq!(memory_path(kube), Ok(Some(kube.trim_start_matches("0::").trim_end())));
        assert_eq!(memory_path("0::/\n"), Ok(Some("/")));
        assert_eq!(
            memory_path("0::/system.slice/slurmstepd.scope/job_1870/step_0/user/task_0"),
            Ok(Some("/system.slice/slurmstepd.scope/job_1870/step_0/user/task_0"))
        );
    }

    #[test]
    fn deleted_cgroups_and_paths_from_a_container() {
        assert_eq!(memory_path("0::/system.slice/gone.scope (deleted)\n"), Ok(Some("/system.slice/gone.scope")));
        assert_eq!(memory_path("0::/../../kubepods.slice/x.scope\n"), Ok(Some("/../../kubepods.slice/x.scope")));
        // Colons inside the path belong to the path.
        assert_eq!(memory_path("0::/a:b\n"), Ok(Some("/a:b")));
    }

    #[test]
    fn neither_line_is_none() {
        assert_eq!(memory_path("9:name=systemd:/\n8:pids:/\n"), Ok(None));
    }

    #[test]
    fn malformed_lines_are_skipped_and_nothing_valid_is_an_error() {
        // Cut inside the memory line: the 0:: line is not reached either.
        let cut = &CAPTURE[..CAPTURE.find("memory").unwrap() + 3];
        assert_eq!(memory_path(cut), Ok(None));
        assert_eq!(memory_path("x:memory:/a\n4:memory:relative\n4:memory\n0::/b\n"), Ok(Some("/b")));
        assert_eq!(memory_path(""), Err(ParseError::Empty));
        assert!(matches!(memory_path("4:memory"), Err(ParseError::Format(_))));
        let garbage: String = (0..2_000_000u32).map(|i| char::from(b'!' + (i % 90) as u8)).collect();
        assert!(matches!(memory_path(&garbage), Err(ParseError::Format(_))));
        let binary = String::from_utf8_lossy(&[0xff, b':', 0x00, b':', 0x80, b'\n']).into_owned();
        assert!(memory_path(&binary).is_err());
    }
}
