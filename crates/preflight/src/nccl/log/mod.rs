//! The job's own NCCL_DEBUG=INFO log, read: which process set up which network connection, with
//! or without GPUDirect, over which NIC, in how many communicators, and which call failed.
//! [`line`] parses one line (pure); [`read`] streams any reader through it with bounded memory:
//! lines are cut at [`MAX_LINE`] bytes, and every set the summary keeps has a cap, past which it
//! counts what it dropped and says the figures are no longer exact.

pub mod line;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, BufRead};

use serde::Serialize;

pub use line::{parse, Event, Failure, Line, Prefix, Transport};
pub(crate) use line::{parse_all, Comm, Direction, Level, LocalConn, NetConn};

/// A line longer than NCCL's 1024-byte buffer (debug.cc ncclDebugLog) plus a launcher's tag and
/// a timestamp is not one NCCL line: it is kept to this length, counted as cut and not parsed.
pub const MAX_LINE: usize = 16 * 1024;
/// Processes (host, pid, device) the summary tracks.
pub const MAX_PROCESSES: usize = 16_384;
/// Distinct connections kept to count each once, over all processes: 2^21 keys of 16 bytes
/// (and the hash set's overhead) stay below 100 MiB however large the log.
pub const MAX_CONNECTIONS: usize = 1 << 21;
pub const MAX_FAILURES: usize = 1024;
pub const MAX_ENV: usize = 512;
pub(crate) const MAX_NICS: usize = 256;
pub(crate) const MAX_COMMUNICATORS: usize = 65_536;
/// Communicators as each process logged them (its rank in one, its connections there), over all
/// processes.
pub const MAX_PROCESS_COMMUNICATORS: usize = 1 << 17;
/// Connections kept aside per process until the communicator they belong to says so (before
/// 2.18 the connections come before the only line naming it, `Init COMPLETE`).
const MAX_PENDING: usize = 64;
/// Longest value kept of a variable or a failure's error text.
pub const MAX_TEXT: usize = 1024;

/// Reads lines of at most [`MAX_LINE`] bytes from any reader, whatever the input's line lengths.
pub(crate) struct LineReader<R> {
    inner: R,
}

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R) -> Self {
        Self { inner }
    }

    /// The next line, without its newline, in `buf`: `Some(true)` when it was longer than
    /// [`MAX_LINE`] and was cut; `None` at the end.
    pub(crate) fn next_line(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<bool>> {
        buf.clear();
        let (mut any, mut cut) = (false, false);
        loop {
            let chunk = match self.inner.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                return Ok(any.then_some(cut));
            }
            any = true;
            let newline = chunk.iter().position(|b| *b == b'\n');
            let take = newline.unwrap_or(chunk.len());
            let room = MAX_LINE - buf.len();
            if take > room {
                cut = true;
            }
            buf.extend_from_slice(&chunk[..take.min(room)]);
            self.inner.consume(take + usize::from(newline.is_some()));
            if newline.is_some() {
                return Ok(Some(cut));
            }
        }
    }
}

/// One process of the job as the log shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rank {
    pub host: String,
    pub pid: u32,
    /// The `[dev]` of its lines: the CUDA device it logged from.
    pub cuda_dev: Option<i32>,
    /// Its rank in the first communicator it initialised (or connected in, without Init lines).
    pub rank: Option<u32>,
    /// Its connections, each (own rank, channel, connIndex, peer, transport, direction) once.
    #[serde(flatten)]
    pub connections: Connections,
    /// Of its sends, those another rank's proxy set up and registers (PXN, `NET/IB/0(8)`).
    pub(crate) net_send_proxied: u64,
    /// Those sends by the proxy's rank: (rank, sends, of them with GPUDirect, NIC).
    pub(crate) proxied_to: Vec<(u32, u64, u64, u32)>,
    /// true: every connection with GPUDirect (`/GDRDMA`); false: at least one without, so its
    /// buffers are host memory the NIC pins; null: no network line.
    pub gdr: Option<bool>,
    pub gdr_connections: u64,
    /// The communicators it logged (their keys, as in [`NcclLog::per_communicator`]).
    pub communicators: Vec<String>,
    /// Connections (of any transport) no communicator line of the process accounts for.
    pub unattributed: u64,
    /// NIC indices (the `%d` after the plugin's name) of its connections.
    pub nics: Vec<u32>,
    /// Its connections on each of `nics`, in the same order (the shared p2p ones apart: `p2p`).
    pub(crate) nic_connections: Vec<u64>,
    /// Connection lines seen again (the same key): a log captured twice, or a second
    /// communicator over the same ranks and channels.
    pub repeated: u64,
    /// Of its sends and receives, the p2p ones on shared buffers (`/Shared`, connIndex 1), which
    /// have no buffers of their own: the network connections and pools they use are below.
    pub(crate) shared_send: u64,
    pub(crate) shared_send_gdr: u64,
    pub(crate) shared_recv: u64,
    pub(crate) shared_recv_gdr: u64,
    /// The shared p2p network connections this process registers, each once however many
    /// local senders use it (net.cc sendProxyConnect, recvProxyConnect with
    /// NCCL_NET_SHARED_COMMS): sends per (NIC, remote rank, channel) for itself and the ranks it
    /// proxies, receives per (NIC, remote proxy rank, channel).
    pub(crate) shared_p2p: SharedP2p,
}

/// A process's shared p2p connections and pools, from the `/Shared` lines.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct SharedP2p {
    pub sends: u64,
    pub(crate) sends_gdr: u64,
    pub receives: u64,
    pub(crate) receives_gdr: u64,
    /// Pools (net.cc sharedNetBuffersInit: one per origin rank and direction): send pools per
    /// (NIC, origin rank), receive pools per NIC.
    pub(crate) send_pools: u64,
    pub(crate) send_pools_gdr: u64,
    pub(crate) receive_pools: u64,
    pub(crate) receive_pools_gdr: u64,
    /// Its shared connections per NIC: (NIC, connections).
    pub(crate) nic_connections: Vec<(u32, u64)>,
}

/// Connections by transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Connections {
    pub net_send: u64,
    pub net_recv: u64,
    /// Of the sends and receives, those with GPUDirect.
    pub(crate) net_send_gdr: u64,
    pub(crate) net_recv_gdr: u64,
    /// Connections of the other transports, none registered as a NET connection's buffers are
    /// (see [`Transport`]): P2P and SHM sends, CollNet sends and receives (the CollNet plugin
    /// registers its own), NVLS set-ups (one per communicator).
    pub p2p: u64,
    pub shm: u64,
    pub collnet_send: u64,
    pub collnet_recv: u64,
    pub nvls: u64,
}

impl Connections {
    fn add(&mut self, o: &Connections) {
        self.net_send += o.net_send;
        self.net_recv += o.net_recv;
        self.net_send_gdr += o.net_send_gdr;
        self.net_recv_gdr += o.net_recv_gdr;
        self.p2p += o.p2p;
        self.shm += o.shm;
        self.collnet_send += o.collnet_send;
        self.collnet_recv += o.collnet_recv;
        self.nvls += o.nvls;
    }

    fn total(&self) -> u64 {
        self.net_send + self.net_recv + self.p2p + self.shm + self.collnet_send + self.collnet_recv + self.nvls
    }
}

/// A process's place in a communicator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Member {
    pub host: String,
    pub pid: u32,
    pub cuda_dev: Option<i32>,
    pub rank: Option<u32>,
    /// Its `Init COMPLETE` line was seen.
    pub complete: bool,
}

/// One communicator, its processes and the connections they set up in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Communicator {
    /// The commId (2.18 on), else `host:pid:address`: before 2.18 nothing ties one process's
    /// communicator to another's, so each process's is listed apart.
    pub key: String,
    pub(crate) comm_id: Option<String>,
    pub nranks: Option<u32>,
    pub members: Vec<Member>,
    #[serde(flatten)]
    pub connections: Connections,
}

/// A failed call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureAt {
    pub host: String,
    pub pid: u32,
    pub cuda_dev: Option<i32>,
    pub call: String,
    pub error: Option<String>,
    pub errno: Option<i32>,
    /// 1-based line number in the log.
    pub line: u64,
    /// The communicator its process was initialising when the call failed (else its last one),
    /// a key of [`NcclLog::per_communicator`].
    pub communicator: Option<String>,
}

/// What hit a cap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Dropped {
    pub processes: u64,
    pub connections: u64,
    pub failures: u64,
    pub env: u64,
    pub nics: u64,
    pub communicators: u64,
    pub(crate) process_communicators: u64,
    pub pending: u64,
}

impl Dropped {
    fn any(&self) -> bool {
        *self != Self::default()
    }
}

/// The log, summarised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NcclLog {
    /// The first `NCCL version` line's version (`2.18.6+cuda12.1`).
    pub nccl_version: Option<String>,
    /// Other versions in the same log (several jobs, or mismatched libraries).
    pub(crate) other_versions: Vec<String>,
    pub lines: u64,
    /// Lines with NCCL's prefix (or its version line): 0 means the file is not an NCCL log.
    pub nccl_lines: u64,
    pub cut_lines: u64,
    pub ranks: Vec<Rank>,
    pub failures: Vec<FailureAt>,
    /// NCCL_* values the log says were set by environment, the first one printed of each.
    pub env: BTreeMap<String, String>,
    /// Devices the network transports list as in use (`NET/IB : Using [0]mlx5_0:1/IB`).
    pub nics: Vec<String>,
    /// Network plugins of the connection lines (`IB`, `Socket`, `AWS Libfabric`).
    pub(crate) networks: Vec<String>,
    /// Communicators whose init completed: distinct commIds, or (host, pid, comm address) for
    /// NCCL before 2.18, which prints no commId.
    pub communicators: u64,
    /// Each communicator the log names, with its processes and their connections in it: a
    /// connection belongs to the communicator of its process whose rank is the connection's own
    /// rank, the one being initialised (after its `Init START` or `comm %p rank %d nRanks %d`
    /// line) first, else the last one; before 2.18, where only `Init COMPLETE` names it, to the
    /// one whose COMPLETE follows.
    pub per_communicator: Vec<Communicator>,
    /// false when a cap was hit (see `dropped`): counts are then lower bounds.
    pub exact: bool,
    pub dropped: Dropped,
}

type ProcKey = (String, u32, Option<i32>);

/// What makes a connection the same connection: the process's communicator (its index in the
/// process's list, `NO_COMM` when none), own rank, peer (`NO_PEER` for CollNet), channel,
/// connIndex, transport and direction, in 16 bytes so that [`MAX_CONNECTIONS`] keys stay small.
type ConnKey = u128;
const NO_COMM: u32 = u32::MAX;
const NO_PEER: u32 = u32::MAX;

/// The transport of a key: the network, or one of the others.
#[derive(Clone, Copy)]
enum Kind {
    Net,
    Local(Transport),
}

fn conn_key(comm: u32, me: u32, peer: u32, channel: u32, conn_index: u32, kind: Kind, d: Direction) -> ConnKey {
    let kind = match kind {
        Kind::Net => 0u128,
        Kind::Local(Transport::P2p) => 1,
        Kind::Local(Transport::Shm) => 2,
        Kind::Local(Transport::CollNet) => 3,
    };
    // NCCL has at most 64 channels (MAXCHANNELS) and two connIndex values: the rest of a larger
    // number only makes two garbled lines one.
    (u128::from(comm) << 96)
        | (u128::from(me) << 64)
        | (u128::from(peer) << 32)
        | (u128::from(channel & 0xffff) << 16)
        | (u128::from(conn_index & 0xff) << 8)
        | (kind << 1)
        | u128::from(d == Direction::Recv)
}

/// A communicator as one process logged it.
struct ProcComm {
    addr: String,
    comm_id: Option<String>,
    rank: Option<u32>,
    nranks: Option<u32>,
    /// Being initialised: after START (or the nRanks line), before COMPLETE.
    open: bool,
    complete: bool,
    nvls: bool,
    c: Connections,
}

#[derive(Default)]
struct Proc {
    rank: Option<u32>,
    seen: HashSet<ConnKey>,
    connections: Connections,
    proxied: u64,
    proxied_to: Vec<(u32, u64, u64, u32)>,
    nics: Vec<(u32, u64)>,
    repeated: u64,
    shared_send: u64,
    shared_send_gdr: u64,
    shared_recv: u64,
    shared_recv_gdr: u64,
    comms: Vec<ProcComm>,
    /// Connections no communicator line has claimed yet, by own rank.
    pending: Vec<(u32, Connections)>,
    unattributed: u64,
}

impl Proc {
    /// The communicator a connection of rank `me` to `peer` belongs to: the one being
    /// initialised, else the last, of those where the process has that rank.
    fn comm_of(&self, me: u32, peer: Option<u32>) -> Option<usize> {
        let fits = |c: &ProcComm| {
            c.rank == Some(me)
                && match (peer, c.nranks) {
                    (Some(p), Some(n)) => p < n,
                    _ => true,
                }
        };
        self.comms.iter().rposition(|c| c.open && fits(c)).or_else(|| self.comms.iter().rposition(fits))
    }

    /// Counts `c` for the process, and in the communicator `slot` or, until one claims it, apart.
    fn charge(&mut self, slot: Option<usize>, me: u32, c: &Connections) {
        self.connections.add(c);
        if let Some(at) = slot {
            self.comms[at].c.add(c);
            return;
        }
        match self.pending.iter().position(|(r, _)| *r == me) {
            Some(at) => self.pending[at].1.add(c),
            None if self.pending.len() < MAX_PENDING => self.pending.push((me, *c)),
            None => self.unattributed += c.total(),
        }
    }
}

/// A `/Shared` line: (host id, own rank, channel, peer, NIC, the rank whose process registers
/// it, GPUDirect); for a receive the registering rank is its own.
type SharedLine = (u32, u32, u32, u32, u32, u32, bool);

/// The state of a log being read; every part bounded.
#[derive(Default)]
pub(crate) struct Summary {
    version: Option<String>,
    other_versions: Vec<String>,
    lines: u64,
    nccl_lines: u64,
    cut_lines: u64,
    procs: HashMap<ProcKey, Proc>,
    connections: usize,
    failures: Vec<FailureAt>,
    env: BTreeMap<String, String>,
    nics: Vec<String>,
    networks: Vec<String>,
    comms: HashSet<String>,
    /// The `/Shared` sends and receives, within MAX_CONNECTIONS, for [`SharedP2p`].
    shared_sends: Vec<SharedLine>,
    /// Receives with the receiving process's pid and device.
    shared_recvs: Vec<(u32, Option<i32>, SharedLine)>,
    /// Hosts of the shared lines by id (at most one per process).
    host_ids: HashMap<String, u32>,
    proc_comms: usize,
    /// Per failure, its process's communicator then (its index in the process's list), named
    /// once the log is read: its commId may come later.
    failure_comms: Vec<Option<usize>>,
    dropped: Dropped,
}

fn bounded(s: &str) -> String {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

impl Summary {
    /// Takes one line (without its newline); `cut` when the reader cut it short.
    pub fn feed(&mut self, bytes: &[u8], cut: bool) {
        self.lines += 1;
        if cut {
            self.cut_lines += 1;
            return;
        }
        let records = parse_all(bytes);
        if records.is_empty() {
            return;
        }
        self.nccl_lines += 1;
        for line in records {
            self.take(line);
        }
    }

    /// One record of a line.
    fn take(&mut self, line: Line) {
        let Some(event) = line.event else { return };
        if let Event::Version(v) = event {
            match &self.version {
                None => self.version = Some(bounded(&v)),
                Some(first) if *first != v && self.other_versions.len() < 16 && !self.other_versions.contains(&v) => {
                    self.other_versions.push(bounded(&v))
                }
                Some(_) => {}
            }
            return;
        }
        let Some(prefix) = line.prefix else { return };
        match event {
            Event::Version(_) => {}
            Event::Env { name, value } => {
                if self.env.contains_key(&name) {
                } else if self.env.len() < MAX_ENV {
                    self.env.insert(bounded(&name), bounded(&value));
                } else {
                    self.dropped.env += 1;
                }
            }
            Event::Nics { devices, .. } => {
                for d in devices {
                    if self.nics.contains(&d) {
                    } else if self.nics.len() < MAX_NICS {
                        self.nics.push(bounded(&d));
                    } else {
                        self.dropped.nics += 1;
                    }
                }
            }
            Event::Comm(c) => {
                let key = match &c.comm_id {
                    Some(id) => id.clone(),
                    None => format!("{}:{}:{}", prefix.host, prefix.pid, c.comm),
                };
                if c.complete && !self.comms.contains(&key) {
                    if self.comms.len() < MAX_COMMUNICATORS {
                        self.comms.insert(bounded(&key));
                    } else {
                        self.dropped.communicators += 1;
                    }
                }
                self.comm(&prefix, &c);
            }
            Event::Net(conn) => self.net(&prefix, conn),
            Event::Local(conn) => self.local(&prefix, conn),
            Event::Nvls { comm } => {
                let Some(at) = self.proc_comm(&prefix, &comm, false) else { return };
                let Some(p) = self.proc(&prefix) else { return };
                let pc = &mut p.comms[at];
                if !pc.nvls {
                    pc.nvls = true;
                    pc.c.nvls += 1;
                    p.connections.nvls += 1;
                }
            }
            Event::Failure(f) => {
                if line.level != Level::Warn {
                    return;
                }
                let comm = self
                    .proc(&prefix)
                    .and_then(|p| p.comms.iter().rposition(|c| c.open).or_else(|| p.comms.len().checked_sub(1)));
                if self.failures.len() < MAX_FAILURES {
                    self.failures.push(FailureAt {
                        host: bounded(&prefix.host),
                        pid: prefix.pid,
                        cuda_dev: prefix.cuda_dev,
                        call: bounded(&f.call),
                        error: f.error.as_deref().map(bounded),
                        errno: f.errno,
                        line: self.lines,
                        communicator: None,
                    });
                    self.failure_comms.push(comm);
                } else {
                    self.dropped.failures += 1;
                }
            }
        }
    }

    fn proc(&mut self, prefix: &Prefix) -> Option<&mut Proc> {
        let key = (prefix.host.clone(), prefix.pid, prefix.cuda_dev);
        if !self.procs.contains_key(&key) {
            if self.procs.len() >= MAX_PROCESSES {
                self.dropped.processes += 1;
                return None;
            }
            self.procs.insert((bounded(&prefix.host), prefix.pid, prefix.cuda_dev), Proc::default());
        }
        self.procs.get_mut(&key)
    }

    /// The process's communicator at `addr`: the last one logged there, or a new one (`start`: a
    /// START for an address whose communicator completed is a new communicator at a reused address).
    fn proc_comm(&mut self, prefix: &Prefix, addr: &str, start: bool) -> Option<usize> {
        let room = self.proc_comms < MAX_PROCESS_COMMUNICATORS;
        let p = self.proc(prefix)?;
        if let Some(at) = p.comms.iter().rposition(|c| c.addr == addr) {
            if !(start && p.comms[at].complete) {
                return Some(at);
            }
        }
        if !room {
            self.dropped.process_communicators += 1;
            return None;
        }
        p.comms.push(ProcComm {
            addr: bounded(addr),
            comm_id: None,
            rank: None,
            nranks: None,
            open: false,
            complete: false,
            nvls: false,
            c: Connections::default(),
        });
        let at = p.comms.len() - 1;
        self.proc_comms += 1;
        Some(at)
    }

    fn comm(&mut self, prefix: &Prefix, c: &Comm) {
        let Some(at) = self.proc_comm(prefix, &c.comm, c.start) else {
            if let Some(p) = self.proc(prefix) {
                p.rank = p.rank.or(c.rank);
            }
            return;
        };
        let Some(p) = self.proc(prefix) else { return };
        p.rank = p.rank.or(c.rank);
        let pc = &mut p.comms[at];
        if let Some(id) = &c.comm_id {
            pc.comm_id = Some(bounded(id));
        }
        pc.rank = c.rank.or(pc.rank);
        pc.nranks = c.nranks.or(pc.nranks);
        if c.start {
            pc.open = true;
        }
        if c.complete {
            (pc.open, pc.complete) = (false, true);
        }
        // Before 2.18 the connections come first and COMPLETE names their communicator.
        if let Some(rank) = pc.rank {
            if let Some(i) = p.pending.iter().position(|(r, _)| *r == rank) {
                let (_, pending) = p.pending.swap_remove(i);
                p.comms[at].c.add(&pending);
            }
        }
    }

    /// Whether the connection `key` is new to `p` (and kept to tell the next one), counting a
    /// repeat or a connection past the cap.
    fn first_time(&mut self, prefix: &Prefix, key: ConnKey) -> Option<bool> {
        let room = self.connections < MAX_CONNECTIONS;
        let p = self.proc(prefix)?;
        if p.seen.contains(&key) {
            p.repeated += 1;
            return Some(false);
        }
        if room {
            p.seen.insert(key);
            self.connections += 1;
        } else {
            // Past the cap a connection cannot be told from one seen before: counted, and the
            // figures are marked as not exact.
            self.dropped.connections += 1;
        }
        Some(true)
    }

    fn local(&mut self, prefix: &Prefix, conn: LocalConn) {
        let Some(p) = self.proc(prefix) else { return };
        let slot = p.comm_of(conn.me, conn.peer);
        let comm = slot.map_or(NO_COMM, |s| s as u32);
        let peer = conn.peer.unwrap_or(NO_PEER);
        let key =
            conn_key(comm, conn.me, peer, conn.channel, conn.conn_index, Kind::Local(conn.transport), conn.direction);
        if self.first_time(prefix, key) != Some(true) {
            return;
        }
        let Some(p) = self.proc(prefix) else { return };
        if p.rank.is_none() {
            p.rank = Some(conn.me);
        }
        let mut c = Connections::default();
        match (conn.transport, conn.direction) {
            (Transport::P2p, _) => c.p2p = 1,
            (Transport::Shm, _) => c.shm = 1,
            (Transport::CollNet, Direction::Send) => c.collnet_send = 1,
            (Transport::CollNet, Direction::Recv) => c.collnet_recv = 1,
        }
        p.charge(slot, conn.me, &c);
    }

    fn net(&mut self, prefix: &Prefix, conn: NetConn) {
        if !self.networks.contains(&conn.net) && self.networks.len() < MAX_NICS {
            self.networks.push(bounded(&conn.net));
        }
        let Some(p) = self.proc(prefix) else { return };
        let slot = p.comm_of(conn.me(), Some(conn.peer()));
        let comm = slot.map_or(NO_COMM, |s| s as u32);
        let key = conn_key(comm, conn.me(), conn.peer(), conn.channel, conn.conn_index, Kind::Net, conn.direction);
        let room = self.connections < MAX_CONNECTIONS;
        if self.first_time(prefix, key) != Some(true) {
            return;
        }
        let Some(p) = self.proc(prefix) else { return };
        if p.rank.is_none() {
            p.rank = Some(conn.me());
        }
        let gdr = u64::from(conn.gdr);
        let mut c = Connections::default();
        match conn.direction {
            Direction::Send => (c.net_send, c.net_send_gdr) = (1, gdr),
            Direction::Recv => (c.net_recv, c.net_recv_gdr) = (1, gdr),
        }
        p.charge(slot, conn.me(), &c);
        if conn.shared {
            // Shared buffers and comms: charged by network connection and pool (finish), not
            // as a connection of its own.
            match conn.direction {
                Direction::Send => (p.shared_send, p.shared_send_gdr) = (p.shared_send + 1, p.shared_send_gdr + gdr),
                Direction::Recv => (p.shared_recv, p.shared_recv_gdr) = (p.shared_recv + 1, p.shared_recv_gdr + gdr),
            }
            if conn.proxy.is_some_and(|r| r != conn.from) {
                p.proxied += 1;
            }
            // The NIC is in use; its dedicated connections (the doorbell count) are not these.
            if !p.nics.iter().any(|(d, _)| *d == conn.dev) && p.nics.len() < MAX_NICS {
                p.nics.push((conn.dev, 0));
            }
            if room {
                let next = self.host_ids.len() as u32;
                let host = *self.host_ids.entry(bounded(&prefix.host)).or_insert(next);
                let registrar = conn.proxy.unwrap_or(conn.me());
                let line = (host, conn.me(), conn.channel, conn.peer(), conn.dev, registrar, conn.gdr);
                match conn.direction {
                    Direction::Send => self.shared_sends.push(line),
                    Direction::Recv => self.shared_recvs.push((prefix.pid, prefix.cuda_dev, line)),
                }
            }
            return;
        }
        if let Some(proxy) = conn.proxy.filter(|r| *r != conn.from) {
            p.proxied += 1;
            match p.proxied_to.iter().position(|(r, _, _, d)| *r == proxy && *d == conn.dev) {
                Some(at) => {
                    (p.proxied_to[at].1, p.proxied_to[at].2) = (p.proxied_to[at].1 + 1, p.proxied_to[at].2 + gdr)
                }
                None if p.proxied_to.len() < MAX_NICS => p.proxied_to.push((proxy, 1, gdr, conn.dev)),
                None => {}
            }
        }
        match p.nics.iter().position(|(d, _)| *d == conn.dev) {
            Some(at) => p.nics[at].1 += 1,
            None if p.nics.len() < MAX_NICS => p.nics.push((conn.dev, 1)),
            None => {}
        }
    }

    /// Per process, the shared p2p connections and pools it registers (see [`SharedP2p`]).
    fn shared_p2p(&self) -> HashMap<ProcKey, SharedP2p> {
        type Dev = u32;
        // The process of (host, rank): the one whose lines name that rank.
        let by_rank: HashMap<(u32, u32), &ProcKey> =
            self.procs.iter().filter_map(|(k, p)| Some(((*self.host_ids.get(&k.0)?, p.rank?), k))).collect();
        let hosts: HashMap<u32, &String> = self.host_ids.iter().map(|(h, id)| (*id, h)).collect();
        // (channel, sender, receiver) -> the rank whose process registers the send.
        let proxy_of: HashMap<(u32, u32, u32), u32> =
            self.shared_sends.iter().map(|(_, me, c, peer, _, reg, _)| ((*c, *me, *peer), *reg)).collect();
        let mut send_comms: HashMap<&ProcKey, HashMap<(Dev, u32, u32), bool>> = HashMap::new();
        let mut send_pools: HashMap<&ProcKey, HashMap<(Dev, u32), bool>> = HashMap::new();
        for (host, me, channel, peer, dev, reg, gdr) in &self.shared_sends {
            // A proxy the log does not show (another host's, or no line of its own): the sender.
            let Some(key) = by_rank.get(&(*host, *reg)).or_else(|| by_rank.get(&(*host, *me))) else { continue };
            *send_comms.entry(key).or_default().entry((*dev, *peer, *channel)).or_default() |= *gdr;
            *send_pools.entry(key).or_default().entry((*dev, *me)).or_default() |= *gdr;
        }
        let mut recv_comms: HashMap<ProcKey, HashMap<(Dev, u32, u32), bool>> = HashMap::new();
        let mut recv_pools: HashMap<ProcKey, HashMap<Dev, bool>> = HashMap::new();
        for (pid, cuda_dev, (host, me, channel, from, dev, _, gdr)) in &self.shared_recvs {
            let Some(host) = hosts.get(host) else { continue };
            let key: ProcKey = ((*host).clone(), *pid, *cuda_dev);
            let remote_proxy = proxy_of.get(&(*channel, *from, *me)).copied().unwrap_or(*from);
            *recv_comms.entry(key.clone()).or_default().entry((*dev, remote_proxy, *channel)).or_default() |= *gdr;
            *recv_pools.entry(key).or_default().entry(*dev).or_default() |= *gdr;
        }
        let mut out: HashMap<ProcKey, SharedP2p> = HashMap::new();
        let mut per_nic = |key: &ProcKey, dev: Dev| {
            let p = out.entry(key.clone()).or_default();
            match p.nic_connections.iter_mut().find(|(d, _)| *d == dev) {
                Some(slot) => slot.1 += 1,
                None => p.nic_connections.push((dev, 1)),
            }
        };
        for (key, comms) in &send_comms {
            for (dev, _, _) in comms.keys() {
                per_nic(key, *dev);
            }
        }
        for (key, comms) in &recv_comms {
            for (dev, _, _) in comms.keys() {
                per_nic(key, *dev);
            }
        }
        fn count<K>(m: Option<&HashMap<K, bool>>) -> (u64, u64) {
            m.map_or((0, 0), |m| (m.len() as u64, m.values().filter(|g| **g).count() as u64))
        }
        for (key, p) in out.iter_mut() {
            (p.sends, p.sends_gdr) = count(send_comms.get(key));
            (p.receives, p.receives_gdr) = count(recv_comms.get(key));
            (p.send_pools, p.send_pools_gdr) = count(send_pools.get(key));
            (p.receive_pools, p.receive_pools_gdr) = count(recv_pools.get(key));
            p.nic_connections.sort_unstable();
        }
        out
    }

    pub fn finish(self) -> NcclLog {
        let mut shared = self.shared_p2p();
        let mut groups: BTreeMap<String, Communicator> = BTreeMap::new();
        let mut ranks: Vec<Rank> = Vec::with_capacity(self.procs.len());
        let mut failures = self.failures;
        for ((host, pid, cuda_dev), p) in self.procs {
            let mut keys = Vec::with_capacity(p.comms.len());
            let key_of = |pc: &ProcComm| pc.comm_id.clone().unwrap_or_else(|| format!("{host}:{pid}:{}", pc.addr));
            for (f, comm) in failures.iter_mut().zip(&self.failure_comms) {
                if (f.host.as_str(), f.pid, f.cuda_dev) == (host.as_str(), pid, cuda_dev) {
                    f.communicator = comm.and_then(|at| p.comms.get(at)).map(key_of);
                }
            }
            for pc in &p.comms {
                let key = key_of(pc);
                let g = groups.entry(key.clone()).or_insert_with(|| Communicator {
                    key: key.clone(),
                    comm_id: pc.comm_id.clone(),
                    nranks: None,
                    members: Vec::new(),
                    connections: Connections::default(),
                });
                g.nranks = g.nranks.or(pc.nranks);
                g.members.push(Member { host: host.clone(), pid, cuda_dev, rank: pc.rank, complete: pc.complete });
                g.connections.add(&pc.c);
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
            let c = p.connections;
            let (total, gdr) = (c.net_send + c.net_recv, c.net_send_gdr + c.net_recv_gdr);
            let mut nics = p.nics;
            nics.sort_unstable();
            let unattributed = p.unattributed + p.pending.iter().map(|(_, c)| c.total()).sum::<u64>();
            let shared_p2p = shared.remove(&(host.clone(), pid, cuda_dev)).unwrap_or_default();
            ranks.push(Rank {
                host,
                pid,
                cuda_dev,
                rank: p.rank,
                connections: c,
                net_send_proxied: p.proxied,
                proxied_to: p.proxied_to,
                gdr: (total > 0).then_some(gdr == total),
                gdr_connections: gdr,
                communicators: keys,
                unattributed,
                nics: nics.iter().map(|(d, _)| *d).collect(),
                nic_connections: nics.iter().map(|(_, n)| *n).collect(),
                repeated: p.repeated,
                shared_send: p.shared_send,
                shared_send_gdr: p.shared_send_gdr,
                shared_recv: p.shared_recv,
                shared_recv_gdr: p.shared_recv_gdr,
                shared_p2p,
            });
        }
        ranks.sort_by(|a, b| (&a.host, a.pid, a.cuda_dev).cmp(&(&b.host, b.pid, b.cuda_dev)));
        let mut per_communicator: Vec<Communicator> = groups.into_values().collect();
        for g in &mut per_communicator {
            g.members.sort_by(|a, b| (a.rank, &a.host, a.pid).cmp(&(b.rank, &b.host, b.pid)));
        }
        NcclLog {
            nccl_version: self.version,
            other_versions: self.other_versions,
            lines: self.lines,
            nccl_lines: self.nccl_lines,
            cut_lines: self.cut_lines,
            ranks,
            failures,
            env: self.env,
            nics: self.nics,
            networks: self.networks,
            communicators: self.comms.len() as u64 + self.dropped.communicators,
            per_communicator,
            exact: !self.dropped.any(),
            dropped: self.dropped,
        }
    }
}

/// Reads a whole log from any reader, streaming.
pub fn read(reader: impl BufRead) -> io::Result<NcclLog> {
    let mut lines = LineReader::new(reader);
    let mut summary = Summary::default();
    let mut buf = Vec::with_capacity(1024);
    while let Some(cut) = lines.next_line(&mut buf)? {
        summary.feed(&buf, cut);
    }
    Ok(summary.finish())
}

#[cfg(test)]
#[path = "tests/format.rs"]
mod format_tests;
#[cfg(test)]
mod tests;
