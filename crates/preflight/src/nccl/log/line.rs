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
    /// A connection of another transport (P2P, SHM, CollNet), counted apart from the network's.
    Local(LocalConn),
    /// `NVLS comm %p headRank %d nHeads %d ...` (src/transport/nvls.cc, in the 2.23.4 and 2.32.3 libraries): the
    /// communicator's NVLink SHARP buffers, set up once per rank.
    Nvls {
        comm: String,
    },
    /// `NAME set by environment to VALUE` (src/misc/param.cc ncclLoadParam adds a `.` after a
    /// number; the string-valued readers, e.g. src/misc/socket.cc, print the value as is; 2.32's
    /// net_ib puts `NET/IB: ` before one), and `NAME set to VALUE` (NCCL_IB_HCA and
    /// NCCL_SOCKET_IFNAME in net_ib.cc and socket.cc, NCCL_OOB_NET_IFNAME in 2.23 on: a variable
    /// read from the environment or nccl.conf).
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
pub(crate) enum Direction {
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
    pub(crate) conn_index: u32,
    /// The sending rank and the receiving rank, as printed (`from -> to`).
    pub from: u32,
    pub to: u32,
    pub(crate) direction: Direction,
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

/// The transports that are not the network's: their buffers are GPU memory (P2P, NVLS) or host
/// memory shared between the node's processes (SHM), which no NIC registers; CollNet's go through
/// the CollNet plugin (SHARP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transport {
    P2p,
    Shm,
    CollNet,
}

/// One connection of another transport, as the sender's setup prints it:
/// src/transport/p2p.cc p2pSendSetup `Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s` (also
/// `P2P/IPC%s%s`, `P2P/direct pointer%s`, `P2P/indirect/%d[%d]%s`; `Channel %02d : %d[%lx] ->
/// %d[%lx] via P2P/...` before 2.12, `Ring %02d : %d -> %d via P2P/...` in 2.4), shm.cc
/// `Channel %02d : %d[%d] -> %d[%d] via SHM/%s/%s` (`via SHM/direct` in 2.32), and coll_net.cc
/// `CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s` (no peer: the CollNet network is the other
/// end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConn {
    pub transport: Transport,
    pub channel: u32,
    pub(crate) conn_index: u32,
    /// This process's rank: the sender for P2P and SHM, the rank for CollNet.
    pub me: u32,
    /// The receiver for P2P and SHM; none for CollNet.
    pub peer: Option<u32>,
    pub(crate) direction: Direction,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comm {
    /// The communicator's address as printed (`0x55d0c1c0a2b0`).
    pub comm: String,
    pub rank: Option<u32>,
    pub nranks: Option<u32>,
    pub cuda_dev: Option<i32>,
    /// hashUniqueId of the unique id (`commId 0x%llx`), the same in every rank of it.
    pub(crate) comm_id: Option<String>,
    pub complete: bool,
    /// `Init START`: the connections this process prints next are this communicator's.
    pub start: bool,
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

/// Parses one line (without its newline). None: not a line NCCL printed. Of a line holding
/// several records ([`parse_all`]), the last.
pub fn parse(line: &[u8]) -> Option<Line> {
    parse_all(line).pop()
}

/// Every record of one line, in order. Usually one; but a log pasted from a terminal can hold
/// several on one line, separated by spaces, and interleaved
/// writers can leave the head of one record before another (its message then stops where the
/// next record's `host:pid:tid` begins, and is too short to read).
pub(crate) fn parse_all(line: &[u8]) -> Vec<Line> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let marks = markers(line);
    if marks.is_empty() {
        let text = String::from_utf8_lossy(line);
        return version(&text)
            .map(|v| Line { prefix: None, level: Level::Bare, event: Some(Event::Version(v)) })
            .into_iter()
            .collect();
    }
    let mut out = Vec::new();
    let mut from = 0;
    for (i, &(at, len, level)) in marks.iter().enumerate() {
        if at < from {
            continue;
        }
        let Some((found, _)) = prefix(&line[from..at], level) else { continue };
        // The message runs to the next record's prefix: a marker whose head is no prefix (a
        // message quoting "NCCL INFO") is part of this message.
        let end = marks[i + 1..]
            .iter()
            // A marker that starts inside this one (overlapping text) heads no record.
            .filter(|&&(next, _, _)| next >= at + len)
            .find_map(|&(next, _, next_level)| {
                prefix(&line[at + len..next], next_level).map(|(_, start)| at + len + start)
            })
            .unwrap_or_else(|| at + len + torn_record(&line[at + len..]));
        let msg = String::from_utf8_lossy(&line[at + len..end]);
        let msg = msg.trim_end();
        let event = match level {
            Level::Info => info(msg),
            Level::Warn => warn(msg),
            _ => None,
        };
        out.push(Line { prefix: Some(found), level, event });
        from = end;
    }
    out
}

/// Where a record torn off before its marker begins in the last message of a line (`host:pid:tid
/// [dev] NCCL I` where a terminal's wrap cut it), or the message's length when none does.
fn torn_record(msg: &[u8]) -> usize {
    let ids = |t: &[u8]| {
        let mut parts = t.rsplitn(3, |b| *b == b':');
        let numeric = |p: Option<&[u8]>| p.is_some_and(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit));
        numeric(parts.next()) && numeric(parts.next()) && parts.next().is_some()
    };
    let dev = |t: &[u8]| {
        t.len() > 2 && t[0] == b'[' && t[t.len() - 1] == b']' && t[1..t.len() - 1].iter().all(u8::is_ascii_digit)
    };
    let mut words: Vec<(usize, &[u8])> = Vec::new();
    let mut start = None;
    for (i, b) in msg.iter().chain(std::iter::once(&b' ')).enumerate() {
        match (b.is_ascii_whitespace(), start) {
            (true, Some(s)) => {
                words.push((s, &msg[s..i]));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    words.windows(2).find(|w| ids(w[0].1) && dev(w[1].1)).map_or(msg.len(), |w| w[0].0)
}

/// Where each level marker (` NCCL INFO ` ...) is, in order.
fn markers(line: &[u8]) -> Vec<(usize, usize, Level)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = line.get(at..).and_then(|rest| rest.windows(6).position(|w| w == b" NCCL ")) {
        let start = at + i;
        match MARKERS.iter().find(|(m, _)| line[start..].starts_with(m.as_bytes())) {
            Some((m, level)) => {
                out.push((start, m.len(), *level));
                at = start + m.len() - 1;
            }
            None => at = start + 1,
        }
    }
    out
}

/// The last `n` whitespace-separated tokens of `head`, in order, each with its byte offset: read
/// right to left, so that a line of many markers costs no more than its length per marker.
fn last_tokens(head: &[u8], n: usize) -> Vec<(usize, &[u8])> {
    let mut out = Vec::with_capacity(n);
    let mut end = head.len();
    while out.len() < n {
        while end > 0 && head[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        if end == 0 {
            break;
        }
        let mut start = end;
        while start > 0 && !head[start - 1].is_ascii_whitespace() {
            start -= 1;
        }
        out.push((start, &head[start..end]));
        end = start;
    }
    out.reverse();
    out
}

/// The `host:pid:tid [dev]` before the marker, and the byte offset in `head` where it begins: the
/// last whitespace tokens, checked for their shape (WARN adds `file:line` and `(func)`, TRACE a
/// time and `func:line`, CALL has no device).
fn prefix(head: &[u8], level: Level) -> Option<(Prefix, usize)> {
    // At most host:pid:tid, [dev], file:line and (func).
    let tokens = last_tokens(head, 4);
    fn text(t: &[u8]) -> Option<&str> {
        std::str::from_utf8(t).ok()
    }
    let skip = match level {
        Level::Info => 1,
        Level::Call => 0,
        Level::Trace => 3,
        // file:line, then (func) when the line has one.
        Level::Warn if tokens.last().is_some_and(|(_, t)| t.starts_with(b"(") && t.ends_with(b")")) => 3,
        Level::Warn => 2,
        Level::Bare => return None,
    };
    let n = tokens.len();
    if n < skip + 1 {
        return None;
    }
    let cuda_dev = match level {
        Level::Call => None,
        _ => Some(text(tokens[n - skip].1)?.strip_prefix('[')?.strip_suffix(']')?.parse().ok()?),
    };
    if level == Level::Warn && !tokens[n - skip + 1].1.contains(&b':') {
        return None;
    }
    let (start, ids) = tokens[n - skip - 1];
    // host:pid:tid, right to left: a launcher's tag glued before it (`[1,3]<stdout>:host:...`,
    // `[rank3]:host:...`) stays left of the host.
    let mut parts = ids.rsplitn(4, |b| *b == b':');
    let tid = text(parts.next()?)?.parse().ok()?;
    let pid = text(parts.next()?)?.parse().ok()?;
    let host = parts.next()?;
    // An empty host is a log whose reporter cut the host names out (`:22901:22901 [0] NCCL INFO`):
    // the rest of the prefix is NCCL's, and the process is still told apart by its pid.
    if host.len() > MAX_HOST {
        return None;
    }
    let host = String::from_utf8_lossy(host).into_owned();
    Some((Prefix { host, pid, tid, cuda_dev }, start))
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
    if let Some(event) = channel_line(msg) {
        return Some(event);
    }
    if let Some(event) = env(msg) {
        return Some(event);
    }
    if let Some(rest) = msg.strip_prefix("NET/") {
        if let Some((transport, list)) = rest.split_once(" : Using") {
            return Some(Event::Nics { transport: transport.to_owned(), devices: nics(list) });
        }
    }
    if msg.ends_with(" - Init COMPLETE") || msg.ends_with(" - Init START") {
        return comm(msg).map(Event::Comm);
    }
    // init.cc initTransportsRank (2.19 on): "comm %p rank %d nRanks %d nNodes %d localRanks %d
    // localRank %d MNNVL %d", printed before the connections are set up.
    if msg.starts_with("comm 0x") && msg.contains(" nRanks ") && msg.contains(" nNodes ") {
        return comm(msg).map(|c| Event::Comm(Comm { start: true, ..c }));
    }
    if let Some(rest) = msg.strip_prefix("NVLS comm ") {
        let comm = rest.split_ascii_whitespace().next()?;
        if comm.starts_with("0x") && rest.contains(" headRank ") {
            return Some(Event::Nvls { comm: comm.to_owned() });
        }
    }
    // A failed call at INFO is not the failure: IBV_INT_CHECK_RET_ERRNO_OPTIONAL (ibvwrap.cc)
    // reports an optional call so, and ncclDebugNoWarn (debug.cc) turns the WARN of a call NCCL
    // retries otherwise into INFO.
    None
}

/// `NAME set by environment to VALUE` and `NAME set to VALUE`: NAME the last word before, so
/// that 2.32's `NET/IB: NCCL_IB_RAIL_POLICY set by environment to %s` and 2.21's
/// `TUNER/Plugin: NCCL_TUNER_PLUGIN set to %s` read; `set to` only with a one-word value, as
/// `NCCL_SYM_KERNEL set to %s. At largest grouped work size ...` (2.32) is a remark, not the value.
fn env(msg: &str) -> Option<Event> {
    let (head, value, whole) = match msg.split_once(" set by environment to ") {
        Some((head, value)) => (head, value, true),
        None => {
            let (head, value) = msg.split_once(" set to ")?;
            (head, value, false)
        }
    };
    let name = head.rsplit(' ').next().unwrap_or(head);
    let known_head = name.len() == head.len() || head[..head.len() - name.len()].trim_end().ends_with(':');
    let ok_name = name.starts_with("NCCL_") && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !known_head || !ok_name || (!whole && value.split_ascii_whitespace().count() != 1) {
        return None;
    }
    Some(Event::Env { name: name.to_owned(), value: env_value(value) })
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
        nranks: after("nranks").or_else(|| after("nRanks")).and_then(|v| v.parse().ok()),
        cuda_dev: after("cudaDev").and_then(|v| v.parse().ok()),
        comm_id: after("commId").map(str::to_owned),
        complete: msg.ends_with("COMPLETE"),
        start: msg.ends_with(" - Init START"),
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

/// A `Channel ...` (or 2.4's `Ring ...`) connection line of any transport, or a `CollNet ...` one.
fn channel_line(msg: &str) -> Option<Event> {
    if let Some(rest) = msg.strip_prefix("CollNet ") {
        return collnet(rest).map(Event::Local);
    }
    let rest = msg.strip_prefix("Channel ").or_else(|| msg.strip_prefix("Ring "))?;
    let (channel_part, rest) = rest.split_once(" : ")?;
    let (channel, conn_index) = match channel_part.split_once('/') {
        Some((c, i)) => (c.parse().ok()?, i.parse().ok()?),
        None => (channel_part.parse().ok()?, 0),
    };
    let (ends, via) = rest.split_once(" via ")?;
    if let Some(via) = via.strip_prefix("NET/") {
        return net_conn(channel, conn_index, ends, via).map(Event::Net);
    }
    let transport = if via.starts_with("P2P/") {
        Transport::P2p
    } else if via.starts_with("SHM/") {
        Transport::Shm
    } else {
        return None;
    };
    // Printed by the sender's setup, with no direction: `from -> to` and nothing after.
    let mut t = ends.split_ascii_whitespace();
    let from = rank_of(t.next()?)?;
    if t.next()? != "->" {
        return None;
    }
    let to = rank_of(t.next()?)?;
    if t.next().is_some() {
        return None;
    }
    Some(Event::Local(LocalConn {
        transport,
        channel,
        conn_index,
        me: from,
        peer: Some(to),
        direction: Direction::Send,
    }))
}

/// `%02d/%1d : %d [send] via COLLNET/%s/%d%s`.
fn collnet(rest: &str) -> Option<LocalConn> {
    let (channel_part, rest) = rest.split_once(" : ")?;
    let (c, i) = channel_part.split_once('/')?;
    let (ends, via) = rest.split_once(" via COLLNET/")?;
    let mut t = ends.split_ascii_whitespace();
    let me = t.next()?.parse().ok()?;
    let direction = match t.next()? {
        "[send]" => Direction::Send,
        "[receive]" => Direction::Recv,
        _ => return None,
    };
    if t.next().is_some() || via.is_empty() {
        return None;
    }
    Some(LocalConn {
        transport: Transport::CollNet,
        channel: c.parse().ok()?,
        conn_index: i.parse().ok()?,
        me,
        peer: None,
        direction,
    })
}

fn net_conn(channel: u32, conn_index: u32, ends: &str, via: &str) -> Option<NetConn> {
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
        let error = rest.split_once("Error:").map(|(_, e)| e.trim()).filter(|e| !e.is_empty()).map(str::to_owned);
        // An RC that is no errno (older aws-ofi-nccl printed garbage there, and no text) says nothing.
        let errno = rc.map(i32::unsigned_abs).filter(|n| (1..MAX_ERRNO).contains(n)).map(|n| n as i32);
        let errno = errno.or_else(|| error.as_deref().and_then(errno_of));
        return Some(Event::Failure(Failure { call: "fi_mr_regattr".to_owned(), error, errno }));
    }
    None
}

/// Linux errnos are below 4096 (MAX_ERRNO in include/linux/err.h).
const MAX_ERRNO: u32 = 4096;

/// glibc's strerror texts for the errnos registration and queue creation return.
pub(crate) const ERRNOS: &[(i32, &str, &str)] = &[
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
