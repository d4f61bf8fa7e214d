//! One line of NCCL_DEBUG output, parsed: pure, bytes in, a typed line out.
//!
//! The prefix is ncclDebugLog's (src/debug.cc): `host:pid:tid [dev] NCCL INFO msg` for INFO,
//! `host:pid:tid [dev] file:line [(func)] NCCL WARN msg` for WARN (the function since 2.30.7), a
//! newline before each WARN, `host:pid:tid NCCL CALL msg`, `host:pid:tid [dev] %f func:line NCCL
//! TRACE msg`, and with NCCL_DEBUG_TIMESTAMP_LEVELS a strftime stamp (default `[%F %T] `) first.
//! The same layout from NVIDIA/nccl v2.7.8-1 to 2.30 (ncclDebugLog's snprintf calls). Launchers
//! put their own tag before it: mpirun's `[1,3]<stdout>:` (no space), pdsh's `host: `, torchrun's
//! `[rank3]:`, srun --label's `3: `; so the prefix is found by its shape, right to left from the
//! level marker, not at the start of the line.

/// What a line says, once its prefix is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `NCCL version 2.18.6+cuda12.1` (src/init.cc showVersion, VERSION_STRING): the part after
    /// "NCCL version ".
    Version(String),
    Net(NetConn),
    /// `NAME set by environment to VALUE` (src/misc/param.cc ncclLoadParam adds a `.` after a
    /// number; the string-valued readers, e.g. src/misc/socket.cc, print the value as is).
    Env {
        name: String,
        value: String,
    },
    /// `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>` (net_ib.cc, since
    /// 2.24 net_ib/init.cc ncclIbInitDevices) and `NET/Socket : Using [0]eth0:10.0.0.5<0>`
    /// (net_socket.cc): the devices as listed, link layer and address cut off.
    Nics {
        transport: String,
        devices: Vec<String>,
    },
    /// `[name] comm 0x.. rank R nranks N cudaDev D ... commId 0x.. - Init COMPLETE` (src/init.cc
    /// ncclCommInitRankFunc; no commId before 2.18, the function name first since 2.21, none
    /// for a split's COMPLETE in 2.23 to 2.27).
    Comm(Comm),
    /// A call NCCL or a network plugin reports as failed.
    Failure(Failure),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    Send,
    Recv,
}

/// One network connection, as src/transport/net.cc sendSetup / recvSetup print it:
/// `Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s` (2.18 to 2.30: channel,
/// connIndex, rank[nvmlDev] -> rank[nvmlDev], the plugin's name, the NIC, `/GDRDMA`, `(PCI)` since
/// 2.27, `/Shared`; 2.32's receive, `%d%s%s%s%s%s`, adds `/flush=None|Always|C2c|Unknown` with
/// GPUDirect), with `%d(%d)` for a send another rank's proxy sets up (PXN: sendSetup's
/// proxyRank != myInfo->rank); `%d[%lx]`, the bus id in hex, from 2.12 to 2.17;
/// `Channel %02d : %d[%lx] -> %d[%lx] [send] via NET/%s/%d%s%s` from 2.7 to 2.11 (no connIndex);
/// `Ring %02d : %d -> %d [send] via NET/%s/%d%s` in 2.4.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetConn {
    pub channel: u32,
    /// 0 when the line has none (before 2.12).
    pub conn_index: u32,
    /// The sending rank and the receiving rank, as printed (`from -> to`).
    pub from: u32,
    pub to: u32,
    pub direction: Direction,
    /// The network plugin's name (`IB`, `Socket`, `AWS Libfabric`, `IBext_v8`...).
    pub net: String,
    pub dev: u32,
    /// The rank whose proxy registers a send's buffers, when not the sender's own.
    pub proxy: Option<u32>,
    pub gdr: bool,
    pub shared: bool,
}

impl NetConn {
    /// The other end: the receiver of a send, the sender of a receive.
    pub fn peer(&self) -> u32 {
        match self.direction {
            Direction::Send => self.to,
            Direction::Recv => self.from,
        }
    }

    /// This process's own rank in the communicator.
    pub fn me(&self) -> u32 {
        match self.direction {
            Direction::Send => self.from,
            Direction::Recv => self.to,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comm {
    /// The communicator's address as printed (`0x55d0c1c0a2b0`).
    pub comm: String,
    pub rank: Option<u32>,
    pub nranks: Option<u32>,
    pub cuda_dev: Option<i32>,
    /// hashUniqueId of the unique id (`commId 0x%llx`), the same in every rank of it.
    pub comm_id: Option<String>,
    pub complete: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The call, as named (`ibv_reg_mr_iova2`, `ibv_create_cq`, `fi_mr_regattr`).
    pub call: String,
    /// strerror's text, when printed.
    pub error: Option<String>,
    pub errno: Option<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Trace,
    Call,
    /// No prefix: the version line at NCCL_DEBUG=VERSION or WARN (showVersion's VERSION level,
    /// printf before 2.20).
    Bare,
}

/// ncclDebugLog's `host:pid:tid [dev]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefix {
    pub host: String,
    pub pid: u32,
    pub tid: u32,
    /// cudaGetDevice of the logging thread; CALL lines have none.
    pub cuda_dev: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub prefix: Option<Prefix>,
    pub level: Level,
    /// None: an NCCL line whose message is not one the reader takes (or is cut short).
    pub event: Option<Event>,
}

/// NCCL formats each line in a 1024-byte buffer (debug.cc ncclDebugLog `char buffer[1024]`) and
/// keeps the hostname to 1024 bytes; a longer host field is not NCCL's.
const MAX_HOST: usize = 1024;

const MARKERS: &[(&str, Level)] = &[
    (" NCCL INFO ", Level::Info),
    (" NCCL WARN ", Level::Warn),
    (" NCCL TRACE ", Level::Trace),
    (" NCCL CALL ", Level::Call),
];

/// Parses one line (without its newline). None: not a line NCCL printed.
pub fn parse(line: &[u8]) -> Option<Line> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // Interleaved writers can leave the head of one line before another: the last marker is the
    // line that was written whole.
    let found = MARKERS
        .iter()
        .filter_map(|(m, level)| rfind(line, m.as_bytes()).map(|at| (at, m.len(), *level)))
        .max_by_key(|(at, _, _)| *at);
    let Some((at, len, level)) = found else {
        let text = String::from_utf8_lossy(line);
        return version(&text).map(|v| Line { prefix: None, level: Level::Bare, event: Some(Event::Version(v)) });
    };
    let head = String::from_utf8_lossy(&line[..at]);
    let prefix = prefix(&head, level)?;
    let msg = String::from_utf8_lossy(&line[at + len..]);
    let msg = msg.trim_end();
    let event = match level {
        Level::Info => info(msg),
        Level::Warn => warn(msg),
        _ => None,
    };
    Some(Line { prefix: Some(prefix), level, event })
}

fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

/// The `host:pid:tid [dev]` before the marker: the last whitespace tokens, checked for their
/// shape (WARN adds `file:line` and `(func)`, TRACE a time and `func:line`, CALL has no device).
fn prefix(head: &str, level: Level) -> Option<Prefix> {
    let tokens: Vec<&str> = head.split_ascii_whitespace().collect();
    let skip = match level {
        Level::Info => 1,
        Level::Call => 0,
        Level::Trace => 3,
        // file:line, then (func) when the line has one.
        Level::Warn if tokens.last().is_some_and(|t| t.starts_with('(') && t.ends_with(')')) => 3,
        Level::Warn => 2,
        Level::Bare => return None,
    };
    let n = tokens.len();
    if n < skip + 1 {
        return None;
    }
    let cuda_dev = match level {
        Level::Call => None,
        _ => Some(tokens[n - skip].strip_prefix('[')?.strip_suffix(']')?.parse().ok()?),
    };
    if level == Level::Warn && !tokens[n - skip + 1].contains(':') {
        return None;
    }
    let ids = tokens[n - skip - 1];
    // host:pid:tid, right to left: a launcher's tag glued before it (`[1,3]<stdout>:host:...`,
    // `[rank3]:host:...`) stays left of the host.
    let mut parts = ids.rsplitn(4, ':');
    let tid = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    let host = parts.next()?;
    if host.is_empty() || host.len() > MAX_HOST {
        return None;
    }
    Some(Prefix { host: host.to_owned(), pid, tid, cuda_dev })
}

/// `NCCL version X+cudaY.Z` (VERSION_STRING always ends in `+cuda` and the CUDA version).
fn version(text: &str) -> Option<String> {
    let at = text.find("NCCL version ")?;
    let before = text[..at].trim_end();
    // WARNs quote versions too ("compiled with NCCL version %s"); VERSION_STRING is a whole message.
    if before.ends_with("with") || before.ends_with("running") {
        return None;
    }
    let v = text[at + "NCCL version ".len()..].split_ascii_whitespace().next()?;
    let (number, cuda) = v.split_once("+cuda")?;
    let mut dots = number.split('.');
    let ok = (0..3).all(|_| dots.next().is_some_and(|p| p.bytes().next().is_some_and(|b| b.is_ascii_digit())));
    (ok && !cuda.is_empty()).then(|| v.to_owned())
}

fn info(msg: &str) -> Option<Event> {
    if let Some(v) = msg.starts_with("NCCL version ").then(|| version(msg)).flatten() {
        return Some(Event::Version(v));
    }
    if let Some(conn) = net_conn(msg) {
        return Some(Event::Net(conn));
    }
    if let Some((name, value)) = msg.split_once(" set by environment to ") {
        if name.starts_with("NCCL_") && !name.contains(' ') {
            return Some(Event::Env { name: name.to_owned(), value: env_value(value) });
        }
    }
    if let Some(rest) = msg.strip_prefix("NET/") {
        if let Some((transport, list)) = rest.split_once(" : Using") {
            return Some(Event::Nics { transport: transport.to_owned(), devices: nics(list) });
        }
    }
    if msg.ends_with(" - Init COMPLETE") || msg.ends_with(" - Init START") {
        return comm(msg).map(Event::Comm);
    }
    // A failed call at INFO is not the failure: IBV_INT_CHECK_RET_ERRNO_OPTIONAL (ibvwrap.cc)
    // reports an optional call so, and ncclDebugNoWarn (debug.cc) turns the WARN of a call NCCL
    // retries otherwise into INFO.
    None
}

/// ncclLoadParam prints `%lld.`: the number without its full stop.
fn env_value(value: &str) -> String {
    let v = value.trim_end();
    match v.strip_suffix('.') {
        Some(n) if n.parse::<i64>().is_ok() => n.to_owned(),
        _ => v.to_owned(),
    }
}

/// `[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ...`: each `[d]name`, up to its `/` or `<`.
fn nics(list: &str) -> Vec<String> {
    let list = list.split(';').next().unwrap_or_default();
    list.split_ascii_whitespace()
        .filter_map(|t| {
            let rest = t.strip_prefix('[')?;
            let (index, name) = rest.split_once(']')?;
            index.parse::<u32>().ok()?;
            let name = name.split(['/', '<']).next().unwrap_or_default();
            (!name.is_empty()).then(|| name.to_owned())
        })
        .collect()
}

fn comm(msg: &str) -> Option<Comm> {
    let tokens: Vec<&str> = msg.split_ascii_whitespace().collect();
    let after = |key: &str| tokens.windows(2).find(|w| w[0] == key).map(|w| w[1]);
    let comm = after("comm")?.to_owned();
    Some(Comm {
        comm,
        rank: after("rank").and_then(|v| v.parse().ok()),
        nranks: after("nranks").and_then(|v| v.parse().ok()),
        cuda_dev: after("cudaDev").and_then(|v| v.parse().ok()),
        comm_id: after("commId").map(str::to_owned),
        complete: msg.ends_with("COMPLETE"),
    })
}

/// `rank[dev]` or `rank` (2.4): the rank.
fn rank_of(token: &str) -> Option<u32> {
    let digits = token.split('[').next()?;
    if token.contains('[') && !token.ends_with(']') {
        return None;
    }
    digits.parse().ok()
}

fn net_conn(msg: &str) -> Option<NetConn> {
    let rest = msg.strip_prefix("Channel ").or_else(|| msg.strip_prefix("Ring "))?;
    let (channel_part, rest) = rest.split_once(" : ")?;
    let (channel, conn_index) = match channel_part.split_once('/') {
        Some((c, i)) => (c.parse().ok()?, i.parse().ok()?),
        None => (channel_part.parse().ok()?, 0),
    };
    let (ends, via) = rest.split_once(" via NET/")?;
    let mut t = ends.split_ascii_whitespace();
    let from = rank_of(t.next()?)?;
    if t.next()? != "->" {
        return None;
    }
    let to = rank_of(t.next()?)?;
    let direction = match t.next()? {
        "[send]" => Direction::Send,
        "[receive]" => Direction::Recv,
        _ => return None,
    };
    if t.next().is_some() {
        return None;
    }
    // NET/<name>/<dev>[(<proxy>)][/GDRDMA][(PCI)][/Shared][/flush=<mode>], right to left: a
    // plugin's name may hold spaces (`AWS Libfabric`).
    let mut v = via;
    // 2.32's recvSetup prints the GPUDirect flush mode last (its libnccl.so's arguments to the
    // format); without this cut, every receive with GPUDirect would go uncounted.
    if let Some((rest, mode)) = v.rsplit_once("/flush=") {
        if !mode.is_empty() && mode.bytes().all(|b| b.is_ascii_alphanumeric()) {
            v = rest;
        }
    }
    let shared = strip(&mut v, "/Shared");
    strip(&mut v, "(PCI)");
    let gdr = strip(&mut v, "/GDRDMA");
    let (net, dev) = v.rsplit_once('/')?;
    let (dev, proxy) = match dev.strip_suffix(')').and_then(|d| d.split_once('(')) {
        Some((d, p)) => (d, Some(p.parse().ok()?)),
        None => (dev, None),
    };
    if net.is_empty() {
        return None;
    }
    Some(NetConn {
        channel,
        conn_index,
        from,
        to,
        direction,
        net: net.to_owned(),
        dev: dev.parse().ok()?,
        proxy,
        gdr,
        shared,
    })
}

fn strip(v: &mut &str, suffix: &str) -> bool {
    match v.strip_suffix(suffix) {
        Some(rest) => {
            *v = rest;
            true
        }
        None => false,
    }
}

fn warn(msg: &str) -> Option<Event> {
    // src/misc/ibvwrap.cc IBV_PTR_CHECK_ERRNO: "Call to %s failed with error %s";
    // IBV_INT_CHECK_RET_ERRNO (2.19+): "... failed with error %s errno %d"; IBV_PTR_CHECK (2.7 and
    // older): "Call to %s failed"; src/include/checks.h SYSCHECK: "Call to %s failed: %s"
    // (" : " before 2.23).
    if let Some(rest) = msg.strip_prefix("Call to ") {
        let (call, tail) = rest.split_once(" failed")?;
        if call.contains(' ') {
            return None;
        }
        let tail = tail.trim();
        // ibvwrap.cc wrap_ibv_modify_qp, in 2.32's library and not 2.23's: "Call to ibv_modify_qp
        // failed with %d %s, %s", the return, its strerror and the QP's transition.
        if let Some((n, rest)) = tail.strip_prefix("with ").and_then(|t| t.split_once(' ')) {
            if let Ok(errno) = n.parse::<i32>() {
                let error = rest.split_once(", ").map_or(rest, |(e, _)| e).to_owned();
                return Some(Event::Failure(Failure { call: call.to_owned(), error: Some(error), errno: Some(errno) }));
            }
        }
        let text = tail.strip_prefix("with error ").or_else(|| tail.strip_prefix(':')).map(str::trim);
        let (error, errno) = match text {
            None => (None, None),
            Some(t) => match t.rsplit_once(" errno ") {
                Some((e, n)) => (Some(e.to_owned()), n.parse().ok()),
                None => (Some(t.to_owned()), errno_of(t)),
            },
        };
        let errno = errno.or_else(|| error.as_deref().and_then(errno_of));
        return Some(Event::Failure(Failure { call: call.to_owned(), error, errno }));
    }
    // aws-ofi-nccl (src/nccl_ofi_net.c register_mr_buffers in 1.x; its rdma and sendrecv protocols
    // since): NCCL_OFI_WARN("Unable to register memory (type = %d) for device %d. RC: %d, Error: %s")
    // after fi_mr_regattr, RC its return (negative from 1.5 on), the text fi_strerror(-RC).
    if let Some(rest) = msg.strip_prefix("NET/OFI Unable to register memory") {
        let rc =
            rest.split_once("RC: ").and_then(|(_, r)| r.split(',').next()).and_then(|r| r.trim().parse::<i32>().ok());
        let error = rest.split_once("Error: ").map(|(_, e)| e.trim().to_owned());
        let errno = rc.map(i32::abs).or_else(|| error.as_deref().and_then(errno_of));
        return Some(Event::Failure(Failure { call: "fi_mr_regattr".to_owned(), error, errno }));
    }
    None
}

/// glibc's strerror texts for the errnos registration and queue creation return.
pub const ERRNOS: &[(i32, &str, &str)] = &[
    (1, "EPERM", "Operation not permitted"),
    (11, "EAGAIN", "Resource temporarily unavailable"),
    (12, "ENOMEM", "Cannot allocate memory"),
    (13, "EACCES", "Permission denied"),
    (14, "EFAULT", "Bad address"),
    (22, "EINVAL", "Invalid argument"),
    (95, "EOPNOTSUPP", "Operation not supported"),
];

fn errno_of(text: &str) -> Option<i32> {
    ERRNOS.iter().find(|(_, _, s)| text.starts_with(s)).map(|(n, _, _)| *n)
}
