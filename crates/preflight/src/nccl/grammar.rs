//! The grammars of NCCL's text-valued variables, each ported from the NCCL function that parses
//! it (NVIDIA/nccl 5067397c; the function is named at each one and in docs/check.md). A verdict
//! says what NCCL does with the value: FAIL when NCCL aborts (communicator init or every
//! collective fails), WARN when it ignores the value or reads it otherwise than written, naming
//! what it does instead.

use std::path::Path;

use super::param::{show_bytes, strtoll, Severity, Strtoll};

/// What NCCL makes of a value that is not what it was meant to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub severity: Severity,
    /// What NCCL does with it, and where.
    pub measured: String,
    pub fix: String,
}

fn warn(measured: impl Into<String>, fix: impl Into<String>) -> Option<Verdict> {
    Some(Verdict { severity: Severity::Warn, measured: measured.into(), fix: fix.into() })
}

fn fail(measured: impl Into<String>, fix: impl Into<String>) -> Option<Verdict> {
    Some(Verdict { severity: Severity::Fail, measured: measured.into(), fix: fix.into() })
}

/// ncclFuncStr, ncclAlgoStr, ncclProtoStr (src/init.cc).
pub(crate) const FUNCTIONS: &[&str] = &["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"];
pub(crate) const ALGORITHMS: &[&str] = &["Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"];
pub(crate) const PROTOCOLS: &[&str] = &["LL", "LL128", "Simple"];

/// The NCCL_DEBUG_SUBSYS options (src/debug.cc ncclParamDebugSubsys).
pub(crate) const SUBSYSTEMS: &[&str] = &[
    "INIT",
    "COLL",
    "P2P",
    "SHM",
    "NET",
    "GRAPH",
    "TUNING",
    "ENV",
    "ALLOC",
    "ALLOC_HOST",
    "CALL",
    "PROXY",
    "NVLS",
    "BOOTSTRAP",
    "REG",
    "PROFILE",
    "RAS",
    "DESTROY",
    "ALL",
];
/// The NCCL_DEBUG_TIMESTAMP_LEVELS options (src/debug.cc ncclParamDebugTimestampLevel).
pub(crate) const TIMESTAMP_LEVELS: &[&str] = &["VERSION", "WARN", "INFO", "ABORT", "TRACE", "ALL"];

/// MAX_IB_DEVS (net_ib/common.h) and MAX_IFS (src/include/socket.h): list entries NCCL keeps.
const MAX_IB_ENTRIES: usize = 32;
const MAX_SOCKET_ENTRIES: usize = 16;
/// sizeof(struct netIf.prefix) (src/include/utils.h), NUL included.
const PREFIX_BYTES: usize = 64;

/// strtok_r's tokens: the pieces between delimiters, empty ones skipped, with where each starts.
fn strtok<'a>(s: &'a [u8], delimiters: &'a [u8]) -> impl Iterator<Item = (usize, &'a [u8])> + 'a {
    let mut start = 0;
    std::iter::from_fn(move || {
        while start < s.len() && delimiters.contains(&s[start]) {
            start += 1;
        }
        if start >= s.len() {
            return None;
        }
        let end = s[start..].iter().position(|b| delimiters.contains(b)).map_or(s.len(), |p| start + p);
        let token = (start, &s[start..end]);
        start = end;
        Some(token)
    })
}

/// parseList (src/graph/tuning.cc), as NCCL_ALGO and NCCL_PROTO are read in ncclTopoTuneModel:
/// `;`-separated entries `[function:]list`, the list `[^]name,name...`; names and functions
/// compared without case and without trimming. `Err` is NCCL's own error (ncclInvalidUsage, so
/// communicator init fails); `Ok` gives, per function, which elements end up enabled.
pub(crate) fn parse_list(value: &[u8], elems: &[&str]) -> Result<Vec<Vec<bool>>, String> {
    let mut enabled = vec![vec![true; elems.len()]; FUNCTIONS.len()];
    let text = |b: &[u8]| show_bytes(b);
    for (at, full) in strtok(value, b";") {
        let mut parts = strtok(full, b":").map(|(_, p)| p);
        // strtok_r on a token made only of ':' returns NULL for the prefix, and NCCL reads the
        // element list through that NULL pointer.
        let Some(first) = parts.next() else {
            if at != 0 {
                return Err(format!("\"{}\": every entry but the first needs a prefix", text(full)));
            }
            return Err(format!("\"{}\": no element list: NCCL dereferences a null pointer (a crash)", text(full)));
        };
        let (prefix, list) = match parts.next() {
            Some(list) => (Some(first), list),
            // fullToken != fullStr: an entry that does not start the value needs a prefix,
            // and so does the first one when the value starts with ';'.
            None if at != 0 => return Err(format!("\"{}\": every entry but the first needs a prefix", text(full))),
            None => (None, first),
        };
        let (set, list) = match list.strip_prefix(b"^") {
            Some(rest) => (false, rest),
            None => (true, list),
        };
        let mut found_prefix = false;
        for (f, func) in FUNCTIONS.iter().enumerate() {
            if prefix.is_some_and(|p| !p.eq_ignore_ascii_case(func.as_bytes())) {
                continue;
            }
            found_prefix = true;
            enabled[f] = vec![!set; elems.len()];
            for (_, elem) in strtok(list, b",") {
                match elems.iter().position(|e| elem.eq_ignore_ascii_case(e.as_bytes())) {
                    Some(e) => enabled[f][e] = set,
                    None => return Err(format!("unrecognized element \"{}\"", text(elem))),
                }
            }
        }
        if !found_prefix {
            return Err(format!("unrecognized prefix \"{}\"", text(prefix.unwrap_or_default())));
        }
    }
    Ok(enabled)
}

fn algo_proto(name: &str, value: &[u8], elems: &[&str], what: &str) -> Option<Verdict> {
    match parse_list(value, elems) {
        Err(why) => fail(
            format!(
                "{why}: ncclTopoTuneModel returns ncclInvalidUsage and communicator init fails \
                    (src/graph/tuning.cc parseList)"
            ),
            format!(
                "give {what} from {} (any case, no spaces), comma-separated, `^` to exclude, and per collective \
                    `function:list` entries separated by `;` (functions: {})",
                elems.join(", "),
                FUNCTIONS.join(", ")
            ),
        ),
        Ok(enabled) => {
            let none: Vec<&str> =
                FUNCTIONS.iter().zip(&enabled).filter(|(_, e)| e.iter().all(|x| !x)).map(|(f, _)| *f).collect();
            if none.is_empty() {
                return None;
            }
            fail(
                format!(
                    "{name} leaves no {what} for {}: each such collective fails with ncclInvalidUsage \
                        (src/enqueue.cc: \"No algorithm/protocol available\")",
                    none.join(", ")
                ),
                format!("name at least one {what} (`^` excludes the ones listed, everything else stays on)"),
            )
        }
    }
}

/// ncclParamBitsetOf (src/include/param/parser_bitset.h bitsetResolve): a leading `^` (the very
/// first byte) inverts, tokens split at `,`, trimmed, compared without case, empty ones skipped.
/// `Err` names the unknown token: NCCL then takes the whole variable as unset (param.h
/// loadValue: a failed parse gives the default).
pub(crate) fn bitset(value: &[u8], options: &[&str]) -> Result<(), String> {
    let body = value.strip_prefix(b"^").unwrap_or(value);
    for token in body.split(|b| *b == b',') {
        let token = trim(token);
        if !token.is_empty() && !options.iter().any(|o| token.eq_ignore_ascii_case(o.as_bytes())) {
            return Err(show_bytes(token));
        }
    }
    Ok(())
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().take_while(|b| b.is_ascii_whitespace() || **b == 0x0b).count();
    let v = &v[start..];
    &v[..v.len() - v.iter().rev().take_while(|b| b.is_ascii_whitespace() || **b == 0x0b).count()]
}

/// One entry of a device or interface list (struct netIf).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NetIf {
    pub prefix: Vec<u8>,
    /// -1: any port.
    pub port: i64,
}

/// A list as NCCL_IB_HCA and NCCL_SOCKET_IFNAME are read (net_ib/init.cc ncclIbInitDevices,
/// src/os/linux.cc ncclOsFindInterfaces): `^` first excludes, then `=` matches names exactly
/// instead of by prefix, then parseStringList (src/misc/utils.cc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IfList {
    pub exclude: bool,
    pub exact: bool,
    pub entries: Vec<NetIf>,
    /// Entries parseStringList skips (an empty name, as in `:1`) or drops past `max`.
    pub skipped: Vec<Vec<u8>>,
}

/// C's atoi: strtol base 10, 0 when there is no number.
fn atoi(s: &[u8]) -> i64 {
    match strtoll(s, 10) {
        Strtoll::Whole(v) | Strtoll::Prefix { value: v, .. } => i64::from(v as i32),
        _ => 0,
    }
}

/// parseStringList (src/misc/utils.cc): entries split at `,` (strtok_r: empty ones skipped), each
/// `prefix[:port[:rail[:plane]]]` split at `:` (strsep: empty fields kept), a field empty or
/// absent is -1, the prefix must not be empty and is cut to 63 bytes; at most `max` entries.
/// Nothing is trimmed.
pub(crate) fn parse_if_list(value: &[u8], max: usize) -> IfList {
    let mut rest = value;
    let exclude = rest.first() == Some(&b'^');
    if exclude {
        rest = &rest[1..];
    }
    let exact = rest.first() == Some(&b'=');
    if exact {
        rest = &rest[1..];
    }
    let mut list = IfList { exclude, exact, entries: Vec::new(), skipped: Vec::new() };
    for (_, entry) in strtok(rest, b",") {
        let mut fields = entry.split(|b| *b == b':');
        let prefix = fields.next().unwrap_or_default();
        if prefix.is_empty() || list.entries.len() >= max {
            list.skipped.push(entry.to_vec());
            continue;
        }
        let port = fields.next().filter(|f| !f.is_empty()).map_or(-1, atoi);
        list.entries.push(NetIf { prefix: prefix[..prefix.len().min(PREFIX_BYTES - 1)].to_vec(), port });
    }
    list
}

impl IfList {
    /// matchIfList (src/misc/utils.cc) XOR the exclusion, as ncclIbInitDevices tests a device's
    /// ACTIVE port: an empty list selects everything; a prefix entry matches names starting with
    /// it (`mlx5_1` also matches `mlx5_10`), an exact one the whole name; a port of -1 on either
    /// side matches any port.
    pub fn selects(&self, name: &str, port: i64) -> bool {
        // matchIfList is true for an empty list, so `^` with nothing after it selects nothing.
        let matched = self.entries.is_empty()
            || self.entries.iter().any(|e| {
                let name_ok =
                    if self.exact { e.prefix == name.as_bytes() } else { name.as_bytes().starts_with(&e.prefix) };
                name_ok && (port == -1 || e.port == -1 || port == e.port)
            });
        matched != self.exclude
    }
}

/// NCCL_IB_HCA and NCCL_SOCKET_IFNAME entries NCCL reads otherwise than meant: nothing is
/// trimmed, so an entry with spaces names no device; a port that is not a number is 0, which no
/// port has; entries past the maximum and entries without a name are dropped.
fn if_list(name: &str, value: &[u8], max: usize, ports: bool) -> Option<Verdict> {
    let list = parse_if_list(value, max);
    let mut notes: Vec<String> = Vec::new();
    for e in &list.entries {
        if e.prefix.iter().any(|b| b.is_ascii_whitespace()) {
            notes.push(format!("\"{}\" has spaces, which NCCL keeps: it names no device", show_bytes(&e.prefix)));
        }
        if ports && e.port == 0 {
            notes.push(format!("\"{}\"'s port reads as 0 (atoi), which no port has", show_bytes(&e.prefix)));
        }
    }
    if !list.skipped.is_empty() {
        let skipped: Vec<String> = list.skipped.iter().map(|s| format!("\"{}\"", show_bytes(s))).collect();
        notes.push(format!("NCCL skips {} (no name, or past {max} entries)", skipped.join(", ")));
    }
    if list.entries.is_empty() && !value.is_empty() {
        notes.push(format!(
            "no entry is left, so NCCL takes {}",
            if list.exclude { "no device at all (`^` of an empty list)" } else { "every device" }
        ));
    }
    if notes.is_empty() {
        return None;
    }
    warn(
        format!("{} (src/misc/utils.cc parseStringList)", notes.join("; ")),
        format!(
            "write {name} as `[^][=]name[:port],name[:port]` with no spaces (`^` excludes, `=` matches whole names \
                instead of prefixes)"
        ),
    )
}

/// The verdict on a variable whose grammar NCCL enforces in a function of its own; `None` for a
/// variable without one here (the caller applies the generic parsers), `Some(None)` for a value
/// NCCL reads as written. `root` is where the job's files are opened (its mount namespace).
pub fn judge(name: &str, value: &[u8], root: Option<&Path>) -> Option<Option<Verdict>> {
    judge_in(name, value, &Context { root, ib_addr_family: None })
}

/// What a verdict may depend on besides the value.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    /// Where the job's files are opened.
    pub root: Option<&'a Path>,
    /// NCCL_IB_ADDR_FAMILY, which decides how NCCL_IB_ADDR_RANGE is read.
    pub(crate) ib_addr_family: Option<&'a [u8]>,
}

/// [`judge`] with the rest of the environment.
pub(crate) fn judge_in(name: &str, value: &[u8], ctx: &Context) -> Option<Option<Verdict>> {
    let root = ctx.root;
    Some(match name {
        "NCCL_ALGO" => algo_proto(name, value, ALGORITHMS, "algorithm"),
        "NCCL_PROTO" => algo_proto(name, value, PROTOCOLS, "protocol"),
        "NCCL_DEBUG_SUBSYS" | "NCCL_DEBUG_TIMESTAMP_LEVELS" => {
            let (options, default) = if name == "NCCL_DEBUG_SUBSYS" {
                (SUBSYSTEMS, "INIT,BOOTSTRAP,ENV")
            } else {
                (TIMESTAMP_LEVELS, "WARN")
            };
            bitset(value, options).err().and_then(|token| {
                warn(
                    format!(
                        "unknown token \"{token}\": NCCL drops the whole value and uses its default {default} \
                            (src/include/param/parser_bitset.h bitsetResolve, param.h loadValue)"
                    ),
                    format!("give a comma-separated list of {} (`^` first to exclude)", options.join(", ")),
                )
            })
        }
        "NCCL_IB_HCA" => if_list(name, value, MAX_IB_ENTRIES, true),
        "NCCL_SOCKET_IFNAME" if value.len() <= 1 => warn(
            "one character or less: NCCL ignores it and picks the interface itself (ib* first; src/misc/socket.cc \
                ncclFindInterfaces: strlen(env) > 1)",
            "name the interface (a prefix of at least two characters, or =name)",
        ),
        "NCCL_SOCKET_IFNAME" => if_list(name, value, MAX_SOCKET_ENTRIES, false),
        "NCCL_P2P_DISABLE" => p2p_disable(value),
        "NCCL_LAUNCH_MODE" => {
            let ok = [&b"GROUP"[..], b"PARALLEL"].iter().any(|m| value.eq_ignore_ascii_case(m));
            (!ok && !value.is_empty()).then(|| Verdict {
                severity: Severity::Warn,
                measured: "not GROUP: NCCL launches in PARALLEL mode (src/init.cc: strcasecmp(str, \"GROUP\"))".into(),
                fix: "give GROUP or PARALLEL".into(),
            })
        }
        "NCCL_SOCKET_FAMILY" => (value != b"AF_INET" && value != b"AF_INET6").then(|| Verdict {
            severity: Severity::Warn,
            measured: "not AF_INET or AF_INET6 (exactly, upper case): NCCL does not force a family and takes each \
                interface's first address (src/misc/socket.cc ncclEnvSocketFamily)"
                .into(),
            fix: "give AF_INET or AF_INET6".into(),
        }),
        "NCCL_IB_ADDR_FAMILY" => (!value.is_empty() && value != b"AF_INET" && value != b"AF_INET6").then(|| Verdict {
            severity: Severity::Warn,
            measured: "not AF_INET or AF_INET6 (exactly, upper case): NCCL uses AF_INET for RoCE GIDs \
                (src/transport/net_ib/connect.cc envIbAddrFamily)"
                .into(),
            fix: "give AF_INET or AF_INET6".into(),
        }),
        "NCCL_NET" => {
            let internal = [&b"IB"[..], b"Socket"].iter().any(|n| value.eq_ignore_ascii_case(n));
            (!internal).then(|| Verdict {
                severity: Severity::Warn,
                measured: format!(
                    "not one of NCCL's own networks (IB, Socket; compared without case): communicator init fails \
                        (\"Failed to initialize any NET plugin\", src/plugin/net.cc ncclNetInit) unless a net plugin \
                        named \"{}\" is loaded",
                    show_bytes(value)
                ),
                fix: "give IB or Socket, or the name the plugin (NCCL_NET_PLUGIN) reports".into(),
            })
        }
        "NCCL_NETDEVS_POLICY" => netdevs_policy(value),
        "NCCL_COMM_ID" => comm_id(value),
        "NCCL_IB_ADDR_RANGE" => ib_addr_range(value, ctx.ib_addr_family),
        "NCCL_TOPO_FILE" => missing_file(value, root, |shown| {
            format!(
                "{shown} cannot be opened: NCCL ignores it and detects the topology itself (src/graph/xml.cc \
                    ncclTopoGetXmlFromFile logs it at INFO only)"
            )
        }),
        "NCCL_CONF_FILE" => missing_file(value, root, |shown| {
            format!(
                "{shown} cannot be opened: NCCL reads nothing from it and, because NCCL_CONF_FILE is set, skips \
                    ~/.nccl.conf too (src/misc/param.cc initEnvFunc, setEnvFile); /etc/nccl.conf is still read"
            )
        }),
        _ => return None,
    })
}

/// ncclSocketGetAddrFromString (src/misc/socket.cc), as bootstrapNetInit reads NCCL_COMM_ID:
/// `[ipv6]:port`, or the first entry of a parseStringList list as `host:port` (the host resolved
/// with getaddrinfo, not judged here). A value of one character or less, `[` without `]` or no
/// entry: ncclInvalidArgument, init fails. The port is read with atoi; without one NCCL takes -1,
/// which htons makes 65535.
fn comm_id(value: &[u8]) -> Option<Verdict> {
    let fix = "give <ipv4>:<port>, [<ipv6>]:<port> or <hostname>:<port> of the root rank";
    let aborts = |why: &str| {
        fail(
            format!("{why}: communicator init fails (\"Invalid NCCL_COMM_ID\", src/bootstrap.cc bootstrapNetInit)"),
            fix,
        )
    };
    if value.len() <= 1 {
        return aborts("one character or less");
    }
    let port = if value[0] == b'[' {
        let Some(close) = value.iter().position(|b| *b == b']') else {
            return aborts("`[` without `]`");
        };
        atoi(value.get(close + 2..).unwrap_or_default())
    } else {
        let list = parse_if_list(value, 1);
        let Some(first) = list.entries.first() else {
            return aborts("no host:port entry");
        };
        if list.entries.len() + list.skipped.len() > 1 || value.contains(&b',') {
            return warn(format!("NCCL reads only the first entry, {}:{}", show_bytes(&first.prefix), first.port), fix);
        }
        first.port
    };
    match port {
        -1 => warn("no port: NCCL takes -1, which becomes port 65535", fix),
        p if !(1..=65535).contains(&p) => warn(format!("port {p}: not a port NCCL can listen on"), fix),
        _ => None,
    }
}

/// getNetDevsPolicyOnce (src/graph/topo.cc): AUTO, ALL or MAX:n without case, n read with atoi
/// and above 0; anything else is AUTO.
fn netdevs_policy(value: &[u8]) -> Option<Verdict> {
    let ok = value.eq_ignore_ascii_case(b"AUTO")
        || value.eq_ignore_ascii_case(b"ALL")
        || (value.len() >= 4 && value[..4].eq_ignore_ascii_case(b"MAX:") && atoi(&value[4..]) > 0);
    (!ok).then(|| Verdict {
        severity: Severity::Warn,
        measured: "not AUTO, ALL or MAX:<n> with n above 0: NCCL uses AUTO (src/graph/topo.cc getNetDevsPolicyOnce)"
            .into(),
        fix: "give AUTO, ALL or MAX:<n>".into(),
    })
}

/// envIbAddrRange (src/transport/net_ib/connect.cc): `address/mask`, the address in the family
/// NCCL_IB_ADDR_FAMILY names (AF_INET unless exactly AF_INET6) as inet_pton reads it, the mask
/// with strtol base 10 and at most 32 (128); otherwise NCCL ignores the range.
fn ib_addr_range(value: &[u8], family: Option<&[u8]>) -> Option<Verdict> {
    if value.is_empty() {
        return None;
    }
    let v6 = family == Some(&b"AF_INET6"[..]);
    let text = String::from_utf8_lossy(&value[..value.len().min(127)]).into_owned();
    let why = match text.split_once('/') {
        None => Some("no /mask".to_owned()),
        Some((addr, mask)) => {
            let parsed = if v6 {
                addr.parse::<std::net::Ipv6Addr>().is_ok()
            } else {
                addr.parse::<std::net::Ipv4Addr>().is_ok()
            };
            let mask = match strtoll(mask.as_bytes(), 10) {
                Strtoll::Whole(m) | Strtoll::Prefix { value: m, .. } => m,
                _ => 0,
            };
            if !parsed {
                Some(format!("\"{addr}\" is not an {} address", if v6 { "AF_INET6" } else { "AF_INET" }))
            } else if mask > if v6 { 128 } else { 32 } {
                Some(format!("mask {mask} is too wide"))
            } else {
                None
            }
        }
    };
    why.map(|why| Verdict {
        severity: Severity::Warn,
        measured: format!(
            "{why}: NCCL ignores it and selects RoCE GIDs without an address range (src/transport/net_ib/\
                connect.cc envIbAddrRange)"
        ),
        fix: format!(
            "give address/mask in {} (NCCL_IB_ADDR_FAMILY), e.g. {}",
            if v6 { "AF_INET6" } else { "AF_INET" },
            if v6 { "fd00::/64" } else { "10.0.0.0/16" }
        ),
    })
}

/// ncclGetLevel (src/graph/paths.cc): `strtol(str, NULL, 0)` into an int, and only 1 disables.
fn p2p_disable(value: &[u8]) -> Option<Verdict> {
    let read = match strtoll(value, 0) {
        Strtoll::Whole(v) | Strtoll::Prefix { value: v, .. } => v as i32,
        Strtoll::NoDigits => 0,
        // strtol saturates at LONG_MIN/LONG_MAX; the int keeps the low 32 bits: -1 or 0.
        Strtoll::OutOfRange => {
            if value.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'-') {
                0
            } else {
                -1
            }
        }
    };
    let whole = matches!(strtoll(value, 0), Strtoll::Whole(0 | 1));
    if whole {
        return None;
    }
    let effect = if read == 1 { "P2P is disabled" } else { "P2P stays enabled (only 1 disables it)" };
    warn(
        format!("NCCL reads {read} (strtol(str, NULL, 0) into an int, src/graph/paths.cc ncclGetLevel): {effect}"),
        "give 1 to disable P2P, or unset it",
    )
}

fn missing_file(value: &[u8], root: Option<&Path>, what: impl Fn(&str) -> String) -> Option<Verdict> {
    use std::os::unix::ffi::OsStrExt;
    let root = root?;
    let path = Path::new(std::ffi::OsStr::from_bytes(value));
    // A relative path is opened from the job's working directory, which is not judged here.
    if value.is_empty() || !path.is_absolute() {
        return None;
    }
    let opened = root.join(path.strip_prefix("/").unwrap_or(path));
    match std::fs::File::open(&opened) {
        Ok(_) => None,
        Err(err) => warn(what(&format!("{} ({err})", path.display())), "point it at a readable file, or unset it"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn algo(v: &str) -> Result<Vec<Vec<bool>>, String> {
        parse_list(v.as_bytes(), ALGORITHMS)
    }

    fn proto(v: &str) -> Result<Vec<Vec<bool>>, String> {
        parse_list(v.as_bytes(), PROTOCOLS)
    }

    /// Each accepted form, with the enabled table NCCL's own parseList prints for it (compiled
    /// from src/graph/tuning.cc in /tmp and run on these values).
    #[test]
    fn algo_and_proto_forms_nccl_accepts() {
        let all = |v: [bool; 3]| vec![v.to_vec(); 5];
        assert_eq!(proto("LL,Simple"), Ok(all([true, false, true])));
        assert_eq!(proto("ll128"), Ok(all([false, true, false])), "any case");
        assert_eq!(proto("^LL128"), Ok(all([true, false, true])));
        assert_eq!(proto(""), Ok(all([true, true, true])), "empty: nothing changes");
        assert_eq!(proto(";;LL;;"), Err("\"LL\": every entry but the first needs a prefix".into()));
        let r = proto("^LL128;allreduce:LL128").unwrap();
        assert_eq!(r[4], vec![false, true, false]);
        assert_eq!(r[0], vec![true, false, true]);
        assert_eq!(proto("LL,,Simple"), Ok(all([true, false, true])), "empty elements are skipped");
        assert_eq!(proto("allreduce::LL").unwrap()[4], vec![true, false, false], "'::' is one delimiter");
        assert_eq!(proto("AllReduce:LL:Simple").unwrap()[4], vec![true, false, false], "a third field is ignored");
        let r = algo("Ring,Tree").unwrap();
        assert_eq!(r[0], vec![true, true, false, false, false, false, false]);
        // NCCL's table for it: Tree, Ring and PAT stay on.
        assert_eq!(
            algo("^NVLS,NVLSTree,CollNetDirect,CollNetChain").unwrap()[4],
            [true, true, false, false, false, false, true]
        );
        assert_eq!(algo("allgather:pat").unwrap()[2], vec![false, false, false, false, false, false, true]);
        for v in ["Ring", "^PAT", "reducescatter:Ring;allgather:Ring"] {
            assert_eq!(judge("NCCL_ALGO", v.as_bytes(), None), Some(None), "{v}");
        }
    }

    #[test]
    fn algo_and_proto_forms_that_abort_init() {
        assert_eq!(algo("Ring, Tree"), Err("unrecognized element \" Tree\"".into()), "no trimming");
        assert_eq!(algo("ring;tree"), Err("\"tree\": every entry but the first needs a prefix".into()));
        assert_eq!(algo(";Ring"), Err("\"Ring\": every entry but the first needs a prefix".into()));
        assert_eq!(algo("allredcue:Ring"), Err("unrecognized prefix \"allredcue\"".into()));
        assert_eq!(proto("LL128,simple,Simpel"), Err("unrecognized element \"Simpel\"".into()));
        assert!(proto(":").unwrap_err().contains("null pointer"));
        for v in ["Ring, Tree", "RING;TREE", "NVLS_TREE", "^Ring,Tree,CollNetDirect,CollNetChain,NVLS,NVLSTree,PAT"] {
            let verdict = judge("NCCL_ALGO", v.as_bytes(), None).flatten().unwrap();
            assert_eq!(verdict.severity, Severity::Fail, "{v}");
        }
        let v = judge("NCCL_PROTO", b"allreduce:^LL,LL128,Simple", None).flatten().unwrap();
        assert!(v.measured.contains("no protocol for AllReduce"), "{}", v.measured);
    }

    #[test]
    fn debug_subsys_is_a_bitset_that_falls_back_whole() {
        for ok in ["INIT,NET", "^COLL", "init , net", "ALL", "", ",", "ALLOC_HOST,DESTROY"] {
            assert_eq!(bitset(ok.as_bytes(), SUBSYSTEMS), Ok(()), "{ok}");
            assert_eq!(judge("NCCL_DEBUG_SUBSYS", ok.as_bytes(), None), Some(None), "{ok}");
        }
        assert_eq!(bitset(b"INIT,NETWORK", SUBSYSTEMS), Err("NETWORK".into()));
        assert_eq!(bitset(b" ^INIT", SUBSYSTEMS), Err("^INIT".into()), "`^` only as the very first byte");
        assert_eq!(bitset(b"INIT;NET", SUBSYSTEMS), Err("INIT;NET".into()), "commas only");
        let v = judge("NCCL_DEBUG_SUBSYS", b"INIT,GRPAH", None).flatten().unwrap();
        assert_eq!(v.severity, Severity::Warn);
        assert!(v.measured.contains("default INIT,BOOTSTRAP,ENV"), "{}", v.measured);
        assert!(judge("NCCL_DEBUG_TIMESTAMP_LEVELS", b"WARN,INFO", None).unwrap().is_none());
        assert!(judge("NCCL_DEBUG_TIMESTAMP_LEVELS", b"ERROR", None).unwrap().is_some());
    }

    #[test]
    fn device_lists_as_parse_string_list_reads_them() {
        let l = parse_if_list(b"^=mlx5_0:1,mlx5_3", 32);
        assert!(l.exclude && l.exact);
        assert_eq!(
            l.entries,
            [NetIf { prefix: b"mlx5_0".to_vec(), port: 1 }, NetIf { prefix: b"mlx5_3".to_vec(), port: -1 }]
        );
        let l = parse_if_list(b"=^mlx5_0", 32);
        assert!(l.exact && !l.exclude, "`=` then `^` is a name starting with ^");
        assert_eq!(l.entries[0].prefix, b"^mlx5_0");
        let l = parse_if_list(b",mlx5_0,,:1,mlx5_1::", 32);
        assert_eq!(l.entries.len(), 2);
        assert_eq!(l.skipped, [b":1".to_vec()]);
        assert_eq!(l.entries[1].port, -1, "an empty port field is any port");
        assert_eq!(parse_if_list(b"mlx5_0:x", 32).entries[0].port, 0);
        assert_eq!(parse_if_list(b"mlx5_0:2abc", 32).entries[0].port, 2, "atoi");
        // Matching, per port (matchIfList).
        let l = parse_if_list(b"mlx5_1", 32);
        assert!(l.selects("mlx5_1", 1) && l.selects("mlx5_10", 1), "a prefix");
        assert!(!l.selects("mlx5_2", 1));
        let l = parse_if_list(b"=mlx5_1:2", 32);
        assert!(l.selects("mlx5_1", 2) && !l.selects("mlx5_1", 1) && !l.selects("mlx5_10", 2));
        let l = parse_if_list(b"^mlx5_0:1", 32);
        assert!(!l.selects("mlx5_0", 1) && l.selects("mlx5_0", 2) && l.selects("mlx5_1", 1));
        assert!(parse_if_list(b"", 32).selects("anything", 1));
        assert!(!parse_if_list(b"^", 32).selects("anything", 1), "matchIfList(empty) ^ searchNot");
        // Verdicts.
        for ok in ["mlx5_0,mlx5_1:1", "^mlx5_2", "=mlx5_0:1", "mlx5"] {
            assert_eq!(judge("NCCL_IB_HCA", ok.as_bytes(), None), Some(None), "{ok}");
        }
        for (bad, says) in [
            ("mlx5_0, mlx5_1", "\" mlx5_1\" has spaces"),
            ("mlx5_0:one", "port reads as 0"),
            (":1", "no entry is left, so NCCL takes every device"),
            ("^", "no entry is left, so NCCL takes no device at all"),
        ] {
            let v = judge("NCCL_IB_HCA", bad.as_bytes(), None).flatten();
            let v = v.unwrap_or_else(|| panic!("{bad}"));
            assert_eq!(v.severity, Severity::Warn);
            assert!(v.measured.contains(says), "{bad}: {}", v.measured);
        }
        let many = (0..40).map(|k| format!("mlx5_{k}")).collect::<Vec<_>>().join(",");
        assert!(judge("NCCL_IB_HCA", many.as_bytes(), None).flatten().unwrap().measured.contains("past 32 entries"));
    }

    #[test]
    fn socket_ifname() {
        for ok in ["eth0", "^docker,lo", "=ens1f0", "ib"] {
            assert_eq!(judge("NCCL_SOCKET_IFNAME", ok.as_bytes(), None), Some(None), "{ok}");
        }
        assert!(judge("NCCL_SOCKET_IFNAME", b"e", None).flatten().unwrap().measured.contains("ignores it"));
        assert!(judge("NCCL_SOCKET_IFNAME", b"", None).flatten().is_some());
        assert!(judge("NCCL_SOCKET_IFNAME", b"eth0, eth1", None).flatten().unwrap().measured.contains("spaces"));
        assert_eq!(judge("NCCL_SOCKET_IFNAME", b"eth0:3", None), Some(None), "ports are not read for sockets");
    }

    #[test]
    fn p2p_disable_only_one_disables() {
        for ok in ["1", "0", "0x1", "01"] {
            assert_eq!(judge("NCCL_P2P_DISABLE", ok.as_bytes(), None), Some(None), "{ok}");
        }
        for (v, reads, disabled) in [
            ("true", 0, false),
            ("2", 2, false),
            ("yes", 0, false),
            ("1 ", 1, true),
            ("4294967297", 1, true),
            ("", 0, false),
        ] {
            let verdict = judge("NCCL_P2P_DISABLE", v.as_bytes(), None).flatten().unwrap();
            assert!(verdict.measured.starts_with(&format!("NCCL reads {reads} ")), "{v}: {}", verdict.measured);
            assert_eq!(verdict.measured.contains("P2P is disabled"), disabled, "{v}");
        }
    }

    #[test]
    fn launch_mode_families_and_net() {
        for ok in ["GROUP", "parallel", "Group"] {
            assert_eq!(judge("NCCL_LAUNCH_MODE", ok.as_bytes(), None), Some(None), "{ok}");
        }
        assert!(judge("NCCL_LAUNCH_MODE", b"GROUPED", None).flatten().unwrap().measured.contains("PARALLEL"));
        assert_eq!(judge("NCCL_SOCKET_FAMILY", b"AF_INET6", None), Some(None));
        for bad in ["af_inet", "AF_INET ", "IPv4", "inet6"] {
            assert!(judge("NCCL_SOCKET_FAMILY", bad.as_bytes(), None).flatten().is_some(), "{bad}");
            assert!(judge("NCCL_IB_ADDR_FAMILY", bad.as_bytes(), None).flatten().unwrap().measured.contains("AF_INET"));
        }
        assert_eq!(judge("NCCL_IB_ADDR_FAMILY", b"", None), Some(None), "empty: AF_INET, as unset");
        for ok in ["IB", "ib", "Socket", "SOCKET"] {
            assert_eq!(judge("NCCL_NET", ok.as_bytes(), None), Some(None), "{ok}");
        }
        let v = judge("NCCL_NET", b"AWS Libfabric", None).flatten().unwrap();
        assert_eq!(v.severity, Severity::Warn);
        assert!(v.measured.contains("unless a net plugin named \"AWS Libfabric\""), "{}", v.measured);
        assert_eq!(judge("NCCL_IB_TIMEOUT", b"x", None), None, "no grammar of its own here");
    }

    #[test]
    fn comm_id_forms() {
        for ok in ["10.0.0.1:5000", "node001:29500", "[fd00::1]:5000"] {
            assert_eq!(judge("NCCL_COMM_ID", ok.as_bytes(), None), Some(None), "{ok}");
        }
        for bad in ["x", "", "[fd00::1:5000", ":5000"] {
            assert_eq!(
                judge("NCCL_COMM_ID", bad.as_bytes(), None).flatten().unwrap().severity,
                Severity::Fail,
                "{bad}"
            );
        }
        for (odd, says) in [
            ("10.0.0.1", "becomes port 65535"),
            ("10.0.0.1:0", "port 0"),
            ("10.0.0.1:5000,10.0.0.2:5000", "only the first entry, 10.0.0.1:5000"),
        ] {
            let v = judge("NCCL_COMM_ID", odd.as_bytes(), None).flatten().unwrap();
            assert_eq!(v.severity, Severity::Warn, "{odd}");
            assert!(v.measured.contains(says), "{odd}: {}", v.measured);
        }
    }

    #[test]
    fn netdevs_policy_and_ib_addr_range() {
        for ok in ["AUTO", "all", "MAX:2", "max:1x"] {
            assert_eq!(judge("NCCL_NETDEVS_POLICY", ok.as_bytes(), None), Some(None), "{ok}");
        }
        for bad in ["MAX:0", "MAX:", "MAX2", "BEST"] {
            assert!(judge("NCCL_NETDEVS_POLICY", bad.as_bytes(), None).flatten().unwrap().measured.contains("AUTO"));
        }
        for ok in ["10.0.0.0/16", "192.168.1.0/24", ""] {
            assert_eq!(judge("NCCL_IB_ADDR_RANGE", ok.as_bytes(), None), Some(None), "{ok}");
        }
        for (bad, says) in [
            ("10.0.0.0", "no /mask"),
            ("10.0.0/16", "not an AF_INET address"),
            ("10.0.0.0/33", "mask 33 is too wide"),
            ("fd00::/64", "not an AF_INET address"),
        ] {
            let v = judge("NCCL_IB_ADDR_RANGE", bad.as_bytes(), None).flatten().unwrap();
            assert!(v.measured.contains(says), "{bad}: {}", v.measured);
        }
        let v6 = Context { root: None, ib_addr_family: Some(b"AF_INET6") };
        assert_eq!(judge_in("NCCL_IB_ADDR_RANGE", b"fd00::/64", &v6), Some(None));
        assert!(judge_in("NCCL_IB_ADDR_RANGE", b"fd00::/129", &v6).flatten().is_some());
    }

    #[test]
    fn topo_and_conf_files_are_opened_in_the_jobs_root() {
        let tmp = tempfile::Builder::new().prefix("memlock-grammar-").tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/topo.xml"), "<system/>").unwrap();
        assert_eq!(judge("NCCL_TOPO_FILE", b"/etc/topo.xml", Some(&root)), Some(None));
        let v = judge("NCCL_TOPO_FILE", b"/etc/missing.xml", Some(&root)).flatten().unwrap();
        assert_eq!(v.severity, Severity::Warn);
        assert!(v.measured.contains("detects the topology itself"), "{}", v.measured);
        let v = judge("NCCL_CONF_FILE", b"/etc/missing.conf", Some(&root)).flatten().unwrap();
        assert!(v.measured.contains("skips ~/.nccl.conf too"), "{}", v.measured);
        assert_eq!(judge("NCCL_CONF_FILE", b"relative.conf", Some(&root)), Some(None), "not judged");
        assert_eq!(judge("NCCL_TOPO_FILE", b"/etc/missing.xml", None), Some(None), "no root: not judged");
    }
}
