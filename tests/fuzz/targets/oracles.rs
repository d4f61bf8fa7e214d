//! The oracles: per target, what a parser's output must be beyond not panicking.

use std::time::Duration;

use memlock_core::config::{self, ConfigError, Sources};
use memlock_core::exposition::{Exposition, Kind};
use memlock_kernel as kernel;
use memlock_kernel::nldev::{self, cmd, nldev_type, ReplyReader};
use memlock_kernel::{
    cgroup_path, memcg, meminfo, pid_cgroup, pid_limits, pid_status, proc_cgroups, rdma_cgroup, rdma_sysfs, sysvm,
    uid_map, vmstat,
};

use super::{scratch_file, text, unchanged_by, verdict, Verdict};

pub(super) fn check_nvidia_version(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_kernel::versions;
    let text = text(bytes);
    let module = versions::module_version(&text);
    if module.len() > versions::MAX_VERSION_BYTES || module.contains('\n') || module != module.trim() {
        return Err(format!("module version {module:?} is not one bounded, trimmed line"));
    }
    let Some(driver) = versions::nvidia_driver(&text) else { return Ok(Verdict::Rejected) };
    let v = &driver.version;
    let numbers = v.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !(numbers && v.contains('.') && text.contains(v.as_str())) {
        return Err(format!("driver version {v:?} is not a dotted number of the input"));
    }
    Ok(Verdict::Accepted)
}

pub(super) fn check_trace_pipe(bytes: &[u8]) -> Result<Verdict, String> {
    use kernel::trace_pipe::{parse_line, Line, Value};
    let parsed = parse_line(bytes);
    let identifier = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    match &parsed {
        Ok(_) if bytes.last() != Some(&b'\n') => return Err("a line without its newline accepted".into()),
        Ok(Line::Event(e)) => {
            if e.comm.len() > 16 || e.comm.first() == Some(&b' ') || !identifier(e.name) {
                return Err(format!("header {e:?}"));
            }
            for (index, (name, value)) in e.args.iter().enumerate() {
                let last = index + 1 == e.args.len();
                if !identifier(name) || (matches!(value, Value::Str(_)) && !last) {
                    return Err(format!("argument {name:?} of {e:?}"));
                }
                if let Value::Str(s) = value {
                    if s.contains(&b'\n') {
                        return Err(format!("a newline inside a string of {e:?}"));
                    }
                }
            }
        }
        Ok(Line::Lost { .. }) => {
            if !bytes.starts_with(b"CPU:") {
                return Err("a lost-events marker from another line".into());
            }
        }
        Err(_) => {}
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_maps_nccl(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_kernel::versions;
    let text = text(bytes);
    let Some(found) = text.lines().find_map(versions::nccl_mapping) else { return Ok(Verdict::Rejected) };
    if !found.library.starts_with("libnccl.so") || found.library.len() > versions::MAX_VERSION_BYTES {
        return Err(format!("library {:?}", found.library));
    }
    if let Some(v) = &found.version {
        let numbers = v.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if !(numbers && v.split('.').count() >= 3 && found.library.ends_with(v.as_str())) {
            return Err(format!("version {v:?} of {:?}", found.library));
        }
    }
    Ok(Verdict::Accepted)
}

pub(super) fn check_maps_registrants(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_kernel::{registrants, versions};
    let text = text(bytes);
    let mut found = Vec::new();
    for line in text.lines() {
        let Some(library) = registrants::rdma_library(line) else { continue };
        if !registrants::FAMILIES.contains(&library.library) {
            return Err(format!("family {:?}", library.library));
        }
        // The file label is the start of the line's last path component, bounded.
        let name = line.rsplit('/').next().unwrap_or("").trim_start();
        if library.file.is_empty()
            || library.file.len() > versions::MAX_VERSION_BYTES
            || !name.starts_with(&library.file)
        {
            return Err(format!("file {:?} of {line:?}", library.file));
        }
        registrants::add(&mut found, library);
    }
    let families: Vec<&str> = found.iter().map(|l| l.library).collect();
    let mut sorted = families.clone();
    sorted.sort_by_key(|f| registrants::FAMILIES.iter().position(|k| k == f));
    sorted.dedup();
    if sorted != families {
        return Err(format!("families {families:?} not one each in order"));
    }
    Ok(if found.is_empty() { Verdict::Rejected } else { Verdict::Accepted })
}

pub(super) fn check_nccl_library(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_kernel::nccl_library::{self as lib, library_version, release};
    let size = bytes.len() as u64;
    let (mut total, mut beyond) = (0u64, None);
    let largest = (lib::CHUNK as u64).max(lib::MAX_SECTION_NAMES).max(u64::from(lib::MAX_SECTIONS) * 64);
    let found = library_version(size, |offset, len| {
        total += len;
        if len > largest || offset.checked_add(len).is_none_or(|end| end > size) {
            beyond = Some((offset, len));
        }
        bytes.get(offset as usize..(offset + len) as usize).map(<[u8]>::to_vec).ok_or_else(|| "beyond".into())
    });
    if let Some((offset, len)) = beyond {
        return Err(format!("read {len} bytes at {offset} of a {size}-byte file"));
    }
    let bound = 64 + u64::from(lib::MAX_SECTIONS) * 64 + lib::MAX_SECTION_NAMES + lib::MAX_RODATA_SCAN;
    if total > bound {
        return Err(format!("read {total} bytes, more than {bound}"));
    }
    match found {
        Ok(text) => {
            if text.len() > lib::MAX_VERSION_TEXT || !text.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
                return Err(format!("version text {text:?}"));
            }
            if !text.starts_with(|c: char| c.is_ascii_digit()) || release(&text).is_some_and(|r| !text.starts_with(r)) {
                return Err(format!("release of {text:?}"));
            }
            Ok(Verdict::Accepted)
        }
        Err(why) if why.is_empty() => Err("an empty reason".into()),
        Err(_) => Ok(Verdict::Rejected),
    }
}

pub(super) fn check_meminfo(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = meminfo::parse(&text);
    if parsed.is_ok() {
        unchanged_by(meminfo::parse, &text, "Zzz_NotAKey:    7 kB")?;
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_vmstat(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = vmstat::parse(&text);
    if let Ok(stat) = &parsed {
        if let (Some(pinned), Some(acquired)) = (stat.pinned_pages(), stat.nr_foll_pin_acquired) {
            if pinned > acquired {
                return Err(format!("{pinned} pinned pages out of {acquired} acquired"));
            }
        }
        unchanged_by(vmstat::parse, &text, "zzz_not_a_counter 7")?;
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_single_numbers(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let unsigned = kernel::parse_u64(&text);
    let signed = kernel::parse_i64(&text);
    if let (Ok(u), Ok(i)) = (&unsigned, &signed) {
        if u64::try_from(*i).ok() != Some(*u) {
            return Err(format!("u64 {u} and i64 {i} of the same text differ"));
        }
    }
    Ok(verdict(&unsigned))
}

pub(super) fn check_pid_status(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = pid_status::parse(&text);
    if let Ok(status) = &parsed {
        if status.locked_bytes.is_some_and(|b| b % 1024 != 0) || status.pinned_bytes.is_some_and(|b| b % 1024 != 0) {
            return Err(format!("kB values must come out as whole KiB: {status:?}"));
        }
        if status.name.contains('\n') {
            return Err(format!("the command name spans lines: {:?}", status.name));
        }
        unchanged_by(|t| pid_status::parse(t).map(|s| format!("{s:?}")), &text, "Zzz:\tnot a key")?;
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_pid_limits(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = pid_limits::parse(&text);
    if parsed.is_ok() {
        unchanged_by(
            pid_limits::parse,
            &text,
            "Max zzz                   1                    1                    zzz       ",
        )?;
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_uid_map(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = uid_map::is_initial(&text);
    // Only one extent of every uid onto itself is the initial namespace.
    let numbers: Vec<Option<u64>> = text.split_ascii_whitespace().map(|n| n.parse().ok()).collect();
    if parsed == Ok(true) && numbers != [Some(0), Some(0), Some(u64::from(u32::MAX))] {
        return Err(format!("called the initial namespace: {text:?}"));
    }
    // A second extent makes any map a user namespace's.
    if parsed.is_ok() && !text.trim().is_empty() {
        let extended = format!("{}\n1 1 1\n", text.trim_end_matches('\n'));
        if uid_map::is_initial(&extended) != Ok(false) {
            return Err(format!("{extended:?} is not a user namespace's map: {:?}", uid_map::is_initial(&extended)));
        }
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_pid_cgroup(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = pid_cgroup::memory_path(&text);
    if let Ok(path) = &parsed {
        if path.is_some_and(|p| !p.starts_with('/') || p.contains('\n')) {
            return Err(format!("the path {path:?} is not one absolute path"));
        }
        unchanged_by(|t| pid_cgroup::memory_path(t).map(|p| p.map(str::to_owned)), &text, "12:zzz:/elsewhere")?;
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_proc_cgroups(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = proc_cgroups::parse(&text);
    if let Ok(controllers) = &parsed {
        if controllers.is_empty()
            || controllers.iter().any(|c| c.name.is_empty() || c.name.bytes().any(|b| b.is_ascii_whitespace()))
        {
            return Err(format!("controllers must be non-empty names: {controllers:?}"));
        }
        unchanged_by(proc_cgroups::parse, &text, "#subsys_name\thierarchy\tnum_cgroups\tenabled")?;
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_rdma_cgroup(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = rdma_cgroup::parse(&text);
    if let Ok(devices) = &parsed {
        if devices.iter().any(|d| d.device.is_empty() || d.device.bytes().any(|b| b.is_ascii_whitespace() || b == b'='))
        {
            return Err(format!("device names must be single words: {devices:?}"));
        }
        unchanged_by(rdma_cgroup::parse, &text, "")?;
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_memcg_v1_limit(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = memcg::parse_v1_limit(&text(bytes));
    if let Ok(memcg::Limit::Bytes(bytes)) = parsed {
        if bytes >= memcg::V1_UNLIMITED_FROM {
            return Err(format!("{bytes} is the unlimited sentinel, not a limit"));
        }
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_memcg_v2_limit(bytes: &[u8]) -> Result<Verdict, String> {
    Ok(verdict(&memcg::parse_v2_limit(&text(bytes))))
}

pub(super) fn check_memcg_v1_stat(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = memcg::parse_v1_stat(&text);
    if let Ok(stat) = &parsed {
        for limit in [stat.hierarchical_memory_limit, stat.hierarchical_memsw_limit].into_iter().flatten() {
            if limit.bytes().is_some_and(|b| b >= memcg::V1_UNLIMITED_FROM) {
                return Err(format!("{limit:?} is the unlimited sentinel, not a limit"));
            }
        }
        unchanged_by(memcg::parse_v1_stat, &text, "zzz_not_a_key 7")?;
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_memcg_v2_stat(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = memcg::parse_v2_stat(&text);
    if parsed.is_ok() {
        unchanged_by(memcg::parse_v2_stat, &text, "zzz_not_a_key 7")?;
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_memcg_oom_control(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = memcg::parse_oom_control(&text);
    if parsed.is_ok() {
        unchanged_by(memcg::parse_oom_control, &text, "zzz_not_a_key 7")?;
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_memcg_events(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = memcg::parse_v2_events(&text);
    if parsed.is_ok() {
        unchanged_by(memcg::parse_v2_events, &text, "zzz_not_a_key 7")?;
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_rdma_sysfs_numbered(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = rdma_sysfs::parse_numbered(&text(bytes));
    if let Ok(n) = &parsed {
        if n.name.contains('\n') || n.name != n.name.trim() {
            return Err(format!("label {:?} is not one trimmed line", n.name));
        }
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_rdma_sysfs_rate(bytes: &[u8]) -> Result<Verdict, String> {
    Ok(verdict(&rdma_sysfs::parse_rate(&text(bytes))))
}

pub(super) fn check_rdma_sysfs_counter(bytes: &[u8]) -> Result<Verdict, String> {
    Ok(verdict(&rdma_sysfs::parse_counter(&text(bytes))))
}

pub(super) fn check_rdma_sysfs_label(bytes: &[u8]) -> Result<Verdict, String> {
    let label = rdma_sysfs::label_value(&text(bytes));
    if label.contains('\n') || label != label.trim() {
        return Err(format!("label {label:?} is not one trimmed line"));
    }
    let exported = memlock_core::exposition::label_value(&label);
    if exported.len() > memlock_core::exposition::MAX_LABEL_VALUE_BYTES || exported.chars().any(char::is_control) {
        return Err(format!("label {label:?} is exported as {exported:?}: too long or with control characters"));
    }
    let counter = rdma_sysfs::port_counter(&label);
    if counter.scale != 1 && counter.scale != 4 {
        return Err(format!("scale {}", counter.scale));
    }
    Ok(Verdict::Accepted)
}

pub(super) fn check_thp_choice(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = sysvm::parse_choice(&text(bytes));
    if let Ok(choice) = &parsed {
        if !choice.options.contains(&choice.active) {
            return Err(format!("the active choice is not an option: {choice:?}"));
        }
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_hugepage_dir_name(bytes: &[u8]) -> Result<Verdict, String> {
    let size = sysvm::parse_hugepage_dir_name(&text(bytes));
    if size.is_some_and(|s| s % 1024 != 0) {
        return Err(format!("{size:?} is not whole KiB"));
    }
    Ok(if size.is_some() { Verdict::Accepted } else { Verdict::Rejected })
}

pub(super) fn check_cgroup_path(bytes: &[u8]) -> Result<Verdict, String> {
    let path = text(bytes);
    let labels = cgroup_path::labels(&path);
    if labels.first() != Some(&("cgroup", path.to_string())) {
        return Err(format!("the first label is not the path: {labels:?}"));
    }
    let mut keys: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.len() != labels.len() {
        return Err(format!("a label name repeats: {labels:?}"));
    }
    for (key, value) in &labels[1..] {
        let ok = match *key {
            "container_id" => {
                value.len() == 64 && value.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            }
            "pod_uid" => {
                value.len() == 36
                    && value.bytes().all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            }
            "qos_class" => ["guaranteed", "burstable", "besteffort"].contains(&value.as_str()),
            "slurm_job" => !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()),
            "slurm_step" | "systemd_unit" => !value.is_empty() && path.contains(value.as_str()),
            _ => false,
        };
        if !ok {
            return Err(format!("label {key}={value:?} is not well formed"));
        }
    }
    Ok(Verdict::Accepted)
}

pub(super) fn check_nldev(bytes: &[u8]) -> Result<Verdict, String> {
    let mut items = 0usize;
    let mut any_ok = false;
    let mut longest_string = 0usize;
    for kind in [cmd::RES_GET, cmd::RES_MR_GET, cmd::GET, cmd::RES_MR_GET_RAW] {
        let seq = nldev::Header::parse(bytes).map(|h| h.seq).unwrap_or(0);
        let mut reader = ReplyReader::new(nldev_type(kind), seq, 64);
        let fed = reader.feed(bytes, |_, body| {
            items += nldev::decode_mr_part(body).map(|p| p.entries.len()).unwrap_or(0);
            items += nldev::decode_res_summary(body).map(|s| s.entries.len()).unwrap_or(0);
            items += nldev::decode_device(body).map(|_| 1).unwrap_or(0);
            for a in nldev::attrs(body).flatten() {
                longest_string = longest_string.max(a.string().len());
                let _ = (a.u8(), a.u32(), a.u64());
                items += a.nested().flatten().count();
            }
            Ok(())
        });
        // A kernel error reply (EPERM, a failed dump) is a valid message too.
        any_ok |= !matches!(fed, Err(nldev::ReplyError::Decode(_)));
    }
    if longest_string > nldev::MAX_STRING_BYTES {
        return Err(format!("a string attribute of {longest_string} bytes (bound {})", nldev::MAX_STRING_BYTES));
    }
    // Every decoded item needs its own 4-byte attribute header: four request kinds, four views
    // of each body.
    if items > 16 * (bytes.len() / 4 + 1) {
        return Err(format!("{items} items out of {} bytes", bytes.len()));
    }
    Ok(if any_ok { Verdict::Accepted } else { Verdict::Rejected })
}

/// Through a real file, as the daemon reads it; an error must name the file or the key.
pub(super) fn check_config_file(bytes: &[u8]) -> Result<Verdict, String> {
    let path = scratch_file("config_file");
    std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
    let shown = path.display().to_string();
    let sources = Sources { file: Some(path), env: Some(Default::default()), flags: Vec::new() };
    match config::load(&sources) {
        Ok(cfg) => {
            let bad_interval = cfg
                .collectors
                .iter()
                .find(|c| c.interval < Duration::from_millis(100) || c.interval > Duration::from_secs(3600));
            if let Some(c) = bad_interval {
                return Err(format!("collector {} accepted with interval {:?}", c.name, c.interval));
            }
            let no_top_n = cfg.settings::<config::ProcessConfig>("process").is_none_or(|p| p.top_n == 0);
            if !cfg.telemetry_path.starts_with('/') || no_top_n {
                return Err(format!("accepted an invalid configuration: {cfg:?}"));
            }
            Ok(Verdict::Accepted)
        }
        Err(err) => {
            let message = err.to_string();
            let clear = match &err {
                ConfigError::File { .. } | ConfigError::Other(_) => message.contains(&shown),
                ConfigError::UnknownKey { key, .. } | ConfigError::Invalid { key, .. } => {
                    !key.is_empty() && message.contains(key.as_str())
                }
            };
            if !clear {
                return Err(format!("the error does not name the file or the key: {message}"));
            }
            Ok(Verdict::Rejected)
        }
    }
}

pub(super) fn check_web_config_file(bytes: &[u8]) -> Result<Verdict, String> {
    let path = scratch_file("web_config_file");
    std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
    match memlock_http::webconfig::load(Some(&path)) {
        Ok(_) => Ok(Verdict::Accepted),
        Err(err) if err.to_string().contains(&path.display().to_string()) => Ok(Verdict::Rejected),
        Err(err) => Err(format!("the error does not name the file: {err}")),
    }
}

pub(super) fn check_nccl_environment(bytes: &[u8]) -> Result<Verdict, String> {
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

pub(super) fn check_duration(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = config::parse_duration(&text(bytes));
    if let Ok(d) = parsed {
        if d.as_secs_f64().is_nan() {
            return Err(format!("{d:?}"));
        }
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_listen_address(bytes: &[u8]) -> Result<Verdict, String> {
    Ok(verdict(&config::split_listen_address(&text(bytes))))
}

pub(super) fn check_alertmanager_url(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = config::Endpoint::parse(&text(bytes));
    if let Ok(endpoint) = &parsed {
        let authority = endpoint.base.strip_prefix("http://").and_then(|rest| rest.split('/').next()).unwrap_or("");
        if authority.is_empty() || authority.contains('@') || !endpoint.alerts_url().ends_with("/api/v2/alerts") {
            return Err(format!("accepted {endpoint:?}"));
        }
    }
    Ok(verdict(&parsed))
}

pub(super) fn check_basic_authorization(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = memlock_http::webconfig::parse_basic_authorization(bytes);
    if let Some((user, _)) = &parsed {
        if user.contains(':') {
            return Err(format!("user {user:?} contains the separator"));
        }
    }
    Ok(if parsed.is_some() { Verdict::Accepted } else { Verdict::Rejected })
}

/// Label values come from the host: command names, cgroup directory names, sysfs strings.
/// Whatever they hold, the sample stays on one line and its values round-trip as
/// [`memlock_core::exposition::label_value`] bounds them: at most its bound, without control characters.
pub(super) fn check_exposition_labels(bytes: &[u8]) -> Result<Verdict, String> {
    let value = text(bytes).into_owned();
    let mut out = Exposition::new();
    out.family("memlock_fuzz_bytes", "A\nhelp \\ text.", Kind::Gauge)
        .sample(&[("comm", value.as_str()), ("cgroup", "/")], 1u64);
    let rendered = out.finish();
    let lines: Vec<&str> = rendered.lines().collect();
    if lines.len() != 3
        || !lines[0].starts_with("# HELP memlock_fuzz_bytes ")
        || lines[1] != "# TYPE memlock_fuzz_bytes gauge"
    {
        return Err(format!("not three lines: {rendered:?}"));
    }
    let values = parse_sample(lines[2])?;
    let bounded = memlock_core::exposition::label_value(&value);
    if values != [bounded.as_ref(), "/"] {
        return Err(format!("label values do not round-trip: {values:?} from {value:?}"));
    }
    if bounded.len() > memlock_core::exposition::MAX_LABEL_VALUE_BYTES || bounded.chars().any(char::is_control) {
        return Err(format!("{value:?} is exported as {bounded:?}: too long or with control characters"));
    }
    Ok(Verdict::Accepted)
}

/// One sample line of the text format: `name{k="v",...} value`, with every label value closed
/// and escaped. Returns the label values unescaped.
pub(super) fn parse_sample(line: &str) -> Result<Vec<String>, String> {
    let Some(open) = line.find('{') else { return Err(format!("no labels in {line:?}")) };
    let mut values = Vec::new();
    let mut rest = &line[open + 1..];
    loop {
        let eq = rest.find("=\"").ok_or_else(|| format!("no =\" in {line:?}"))?;
        rest = &rest[eq + 2..];
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => return Err(format!("bad escape {other:?} in {line:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, '\n')) => return Err(format!("raw newline in {line:?}")),
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated label value in {line:?}")),
            }
        };
        values.push(value);
        rest = &rest[end + 1..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if let Some(after) = rest.strip_prefix("} ") {
            after.parse::<f64>().map_err(|e| format!("value {after:?}: {e}"))?;
            return Ok(values);
        } else {
            return Err(format!("junk after a label value in {line:?}"));
        }
    }
}

pub(super) fn check_nccl_log(bytes: &[u8]) -> Result<Verdict, String> {
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
    let counted: u64 = l
        .ranks
        .iter()
        .map(|r| r.net_send + r.net_recv + r.p2p + r.shm + r.collnet_send + r.collnet_recv + r.nvls)
        .sum();
    let placed: u64 = l
        .per_communicator
        .iter()
        .map(|c| {
            let k = &c.connections;
            k.net_send + k.net_recv + k.p2p + k.shm + k.collnet_send + k.collnet_recv + k.nvls
        })
        .sum::<u64>()
        + l.ranks.iter().map(|r| r.unattributed).sum::<u64>();
    if counted != placed {
        return Err(format!("{counted} connections counted, {placed} in communicators or unattributed: {l:?}"));
    }
    if l.per_communicator.iter().map(|c| c.members.len()).sum::<usize>() > log::MAX_PROCESS_COMMUNICATORS {
        return Err("a cap was exceeded".into());
    }
    for r in &l.ranks {
        // An empty host is a log whose host names were cut out, still NCCL's.
        if r.host.len() > log::MAX_TEXT || r.gdr_connections > r.net_send + r.net_recv {
            return Err(format!("{r:?}"));
        }
        if r.gdr != (r.net_send + r.net_recv > 0).then_some(r.gdr_connections == r.net_send + r.net_recv) {
            return Err(format!("gdr does not follow the counts: {r:?}"));
        }
    }
    Ok(if l.nccl_lines > 0 { Verdict::Accepted } else { Verdict::Rejected })
}
