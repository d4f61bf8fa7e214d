//! RDMA resources and registered memory from RDMA netlink (`NETLINK_RDMA`), the source of
//! `rdma resource show`: a per-device summary (`RES_GET` dump) and every memory region of every
//! device (`RES_MR_GET` dump per device), summed per owning process.
//!
//! Works unprivileged. A kernel without RDMA refuses the socket with `EPROTONOSUPPORT`: that is
//! reported as `memlock_rdma_netlink_supported 0` with a successful run, not as a failure.
//! PIDs are those of the exporter's PID namespace: MRs of processes outside it carry no PID and
//! are counted under `pid="unknown"`, never dropped.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::budget::{self, Claim, Grants, Tier};
use crate::exposition::{Exposition, Kind};
use memlock_kernel::fsroot::{self, Roots, SourceError};
use memlock_kernel::nldev::{self, cmd, DecodeError, Progress, ReplyError, ReplyReader};
use memlock_kernel::rdma_sysfs::label_value;
use memlock_kernel::ParseError;

use super::rdma_filter::{RawRdmaCollector, RdmaConfig};
use super::settings::{Configured, Context, Invalid};
use super::{Collector, Data};

/// How long one `recv` may block before the exchange is abandoned.
const RECV_TIMEOUT: Duration = Duration::from_secs(2);
/// The whole of one request and its reply, however many datagrams it takes.
const EXCHANGE_DEADLINE: Duration = Duration::from_secs(10);
/// The kernel fills dump datagrams up to 32 KiB (`netlink_dump` caps its allocation there);
/// a larger buffer is never truncated.
const RECV_BUFFER_BYTES: usize = 64 * 1024;
/// Messages in one reply: at ~40 bytes per MR this allows millions of MRs, and stops a
/// runaway dump long before it costs real time.
const MAX_MESSAGES_PER_REPLY: usize = 200_000;
/// Per device, processes beyond this many (by registered bytes) are summed into `pid="other"`,
/// so a node with many small registrants cannot explode the series count.
pub(crate) const MAX_PROCESS_SERIES: usize = 500;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RdmaNetlinkStats {
    /// False when the kernel has no RDMA netlink (no InfiniBand support): "no RDMA here".
    pub supported: bool,
    pub devices: Vec<NetlinkDevice>,
    /// The series budget's order of the owners ([`RdmaNetlinkStats::owners`]), made by the first
    /// render.
    ranking: budget::Ranked<budget::Order>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetlinkDevice {
    pub name: String,
    pub index: u32,
    /// `(type, current count)` from the resource summary: pd, cq, qp, cm_id, mr, ctx, srq.
    pub resources: Vec<(String, u64)>,
    /// `None` when the MR dump of this device failed.
    pub mrs: Option<MrUsage>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MrUsage {
    /// Sum of the lengths of every MR of the device, whoever owns it, implicit ODP MRs left out.
    pub registered_bytes: u64,
    /// Implicit ODP MRs ([`nldev::MrEntry::is_implicit_odp`]): their MRLEN is 2^64 - 1, the whole
    /// address space, of which nothing is pinned; added, it saturated every byte sum.
    pub(crate) implicit_odp_mrs: u64,
    pub owners: Vec<OwnerMrs>,
}

/// MRs of one owner on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerMrs {
    /// A PID, `""` for kernel MRs, `"unknown"` when the kernel gave no owner (another PID
    /// namespace, a zombie), `"other"` for the owners folded together past
    /// [`MAX_PROCESS_SERIES`].
    pub pid: String,
    /// `/proc/PID/comm`, `[name]` for kernel MRs (`[nvme_rdma]`, as `rdma` prints it), else "".
    pub comm: String,
    /// Every MR of the owner, implicit ODP ones included.
    pub mrs: u64,
    /// Their lengths, implicit ODP MRs left out.
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Owner {
    Process(u32),
    Kernel(String),
    Unknown,
}

/// Sums MRs per owner across the parts of one device's dump.
#[derive(Debug, Default)]
pub(crate) struct MrTally {
    registered_bytes: u64,
    implicit_odp_mrs: u64,
    owners: HashMap<Owner, (u64, u64)>,
}

impl MrTally {
    pub fn add(&mut self, entry: &nldev::MrEntry) {
        let bytes = if entry.is_implicit_odp() {
            self.implicit_odp_mrs += 1;
            0
        } else {
            entry.length.unwrap_or(0)
        };
        self.registered_bytes = self.registered_bytes.saturating_add(bytes);
        let owner = match (entry.pid, &entry.kern_name) {
            (Some(pid), _) => Owner::Process(pid),
            (None, Some(name)) => Owner::Kernel(name.clone()),
            (None, None) => Owner::Unknown,
        };
        let slot = self.owners.entry(owner).or_default();
        slot.0 += 1;
        slot.1 = slot.1.saturating_add(bytes);
    }

    /// The per-owner series: processes by PID, then kernel owners, then `unknown`; past
    /// `max_series` the smallest owners are summed into `pid="other"`.
    pub fn finish(self, max_series: usize, mut comm_of: impl FnMut(u32) -> String) -> MrUsage {
        let mut owners: Vec<(Owner, (u64, u64))> = self.owners.into_iter().collect();
        let mut other: Option<(u64, u64)> = None;
        if owners.len() > max_series {
            owners.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then_with(|| a.0.cmp(&b.0)));
            for (_, (mrs, bytes)) in owners.drain(max_series..) {
                let sum = other.get_or_insert((0, 0));
                sum.0 += mrs;
                sum.1 = sum.1.saturating_add(bytes);
            }
        }
        owners.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<OwnerMrs> = owners
            .into_iter()
            .map(|(owner, (mrs, bytes))| {
                let (pid, comm) = match owner {
                    Owner::Process(pid) => (pid.to_string(), comm_of(pid)),
                    Owner::Kernel(name) => (String::new(), format!("[{name}]")),
                    Owner::Unknown => ("unknown".to_owned(), String::new()),
                };
                OwnerMrs { pid, comm, mrs, bytes }
            })
            .collect();
        if let Some((mrs, bytes)) = other {
            out.push(OwnerMrs { pid: "other".into(), comm: String::new(), mrs, bytes });
        }
        MrUsage { registered_bytes: self.registered_bytes, implicit_odp_mrs: self.implicit_odp_mrs, owners: out }
    }
}

/// A netlink socket to the kernel's RDMA side.
struct NetlinkSocket {
    fd: OwnedFd,
}

impl NetlinkSocket {
    fn open() -> io::Result<Self> {
        Self::open_protocol(nldev::NETLINK_RDMA)
    }

    /// Any netlink protocol: the tests drive this code against NETLINK_ROUTE, which every
    /// kernel has, to exercise the real socket path on machines without RDMA.
    fn open_protocol(protocol: i32) -> io::Result<Self> {
        // SAFETY: plain socket(2); the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let timeout = libc::timeval {
            tv_sec: RECV_TIMEOUT.as_secs() as libc::time_t,
            tv_usec: RECV_TIMEOUT.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: the option value points to a live timeval of the size passed.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&timeout as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: sockaddr_nl is plain data; all-zero is a valid value.
        let mut local: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        local.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: the address points to a live sockaddr_nl of the size passed; port 0 lets the
        // kernel pick a unique port id.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&local as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd })
    }

    fn send(&self, request: &[u8]) -> io::Result<()> {
        // SAFETY: as in `open`.
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        loop {
            // SAFETY: the buffer and the address are live for the call, with their sizes.
            let sent = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    request.as_ptr().cast(),
                    request.len(),
                    0,
                    (&kernel as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            };
            if sent >= 0 {
                return if sent as usize == request.len() {
                    Ok(())
                } else {
                    Err(io::Error::new(io::ErrorKind::WriteZero, "short netlink send"))
                };
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    /// Receives one datagram into `buf`, returning its length. A datagram from another sender
    /// than the kernel is dropped and reported as length 0 (nothing to read), so the caller's
    /// deadline still applies; one larger than `buf` is an error, not a silent truncation.
    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: as in `open`.
            let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
            let mut from_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
            // SAFETY: `buf` and `from` are live and writable for the sizes passed. MSG_TRUNC makes
            // netlink return the datagram's real length, so truncation is detected.
            let got = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_TRUNC,
                    (&mut from as *mut libc::sockaddr_nl).cast(),
                    &mut from_len,
                )
            };
            if got < 0 {
                let err = io::Error::last_os_error();
                match err.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("no reply within {RECV_TIMEOUT:?}"),
                        ))
                    }
                    _ => return Err(err),
                }
            }
            let got = got as usize;
            if got > buf.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{got}-byte datagram exceeds the {}-byte buffer", buf.len()),
                ));
            }
            return Ok(if from.nl_pid == 0 { got } else { 0 });
        }
    }
}

/// The datagram pipe to the kernel's RDMA netlink side. A trait only so that a test can stand
/// in for a kernel with RDMA, which this project's machines do not have.
trait Transport: Send {
    fn send(&mut self, request: &[u8]) -> io::Result<()>;
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize>;
}

impl Transport for NetlinkSocket {
    fn send(&mut self, request: &[u8]) -> io::Result<()> {
        NetlinkSocket::send(self, request)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        NetlinkSocket::recv(self, buf)
    }
}

type Connect = Box<dyn FnMut() -> io::Result<Box<dyn Transport>> + Send>;

/// Why one exchange failed, kept apart so each maps to the right error kind.
#[derive(Debug)]
enum ExchangeError {
    Io(io::Error),
    Reply(ReplyError),
}

pub struct RdmaNetlinkCollector {
    connect: Connect,
    roots: Roots,
    config: RdmaConfig,
    buffer: Vec<u8>,
    seq: u32,
    said_unsupported: bool,
}

impl RdmaNetlinkCollector {
    pub fn new(roots: Roots, config: RdmaConfig) -> Self {
        Self::with_transport(
            roots,
            config,
            Box::new(|| NetlinkSocket::open().map(|s| Box::new(s) as Box<dyn Transport>)),
        )
    }

    fn with_transport(roots: Roots, config: RdmaConfig, connect: Connect) -> Self {
        // Start sequence numbers somewhere unpredictable so replies to an earlier run's
        // abandoned request are never mistaken for this one's.
        let seed =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        Self {
            connect,
            roots,
            config,
            buffer: vec![0; RECV_BUFFER_BYTES],
            seq: seed ^ std::process::id(),
            said_unsupported: false,
        }
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    pub fn read(&mut self, errors: &mut Vec<SourceError>) -> Option<RdmaNetlinkStats> {
        let mut socket = match (self.connect)() {
            Ok(socket) => socket,
            Err(e) if e.raw_os_error() == Some(libc::EPROTONOSUPPORT) => {
                if !self.said_unsupported {
                    tracing::debug!(
                        collector = "rdma_netlink",
                        "the kernel has no RDMA netlink (socket: EPROTONOSUPPORT): no RDMA here"
                    );
                    self.said_unsupported = true;
                }
                return Some(RdmaNetlinkStats { supported: false, ..Default::default() });
            }
            Err(source) => {
                errors.push(SourceError::Io { path: source_name("socket", None), source });
                return None;
            }
        };
        self.said_unsupported = false;
        let mut stats = RdmaNetlinkStats { supported: true, ..Default::default() };

        let seq = self.next_seq();
        let config = &self.config;
        let mut summaries = Vec::new();
        let result = exchange(
            &mut *socket,
            &mut self.buffer,
            &nldev::res_summary_request(seq, None),
            nldev::nldev_type(cmd::RES_GET),
            seq,
            |body| {
                let summary = nldev::decode_res_summary(body)?;
                if config.wants(&summary.dev_name) {
                    summaries.push(summary);
                }
                Ok(())
            },
        );
        if let Err(e) = result {
            errors.push(into_source_error(e, "RES_GET", None));
            // Whatever was read is kept; the MR dumps need a fresh socket (see `reopen`).
            socket = match reopen(&mut self.connect, errors) {
                Some(socket) => socket,
                None => return Some(stats),
            };
        }
        summaries.sort_by_key(|s| s.dev_index);
        summaries.dedup_by_key(|s| s.dev_index);

        // A process with MRs on several devices is looked up once per run.
        let mut comms: HashMap<u32, String> = HashMap::new();
        for summary in summaries {
            let seq = self.next_seq();
            let mut tally = MrTally::default();
            let index = summary.dev_index;
            let result = exchange(
                &mut *socket,
                &mut self.buffer,
                &nldev::res_mr_request(seq, index),
                nldev::nldev_type(cmd::RES_MR_GET),
                seq,
                |body| {
                    let part = nldev::decode_mr_part(body)?;
                    // A part of another device would be a kernel bug; never mix devices' sums.
                    if part.dev_index == index {
                        part.entries.iter().for_each(|entry| tally.add(entry));
                    }
                    Ok(())
                },
            );
            let mrs = match result {
                Ok(()) => Some(tally.finish(MAX_PROCESS_SERIES, |pid| {
                    comms.entry(pid).or_insert_with(|| self.comm(pid, errors)).clone()
                })),
                Err(e) => {
                    errors.push(into_source_error(e, "RES_MR_GET", Some(&summary.dev_name)));
                    None
                }
            };
            let failed = mrs.is_none();
            stats.devices.push(NetlinkDevice { name: summary.dev_name, index, resources: summary.entries, mrs });
            if failed {
                socket = match reopen(&mut self.connect, errors) {
                    Some(socket) => socket,
                    None => break,
                };
            }
        }
        stats.devices.sort_by(|a, b| a.name.cmp(&b.name));
        Some(stats)
    }

    /// `comm` of a PID from procfs; "" when the process is gone or the read is refused.
    fn comm(&self, pid: u32, errors: &mut Vec<SourceError>) -> String {
        match fsroot::read_string(&self.roots.proc(format!("{pid}/comm"))) {
            Ok(text) => label_value(&text),
            // It exited between the dump and this read: expected, not a problem.
            Err(e) if e.is_not_found() => String::new(),
            Err(e) => {
                errors.push(e);
                String::new()
            }
        }
    }
}

/// A socket whose exchange failed may still be in the middle of a dump, and netlink answers
/// any further dump request on it with EBUSY until that one is read to the end: start afresh.
fn reopen(connect: &mut Connect, errors: &mut Vec<SourceError>) -> Option<Box<dyn Transport>> {
    match connect() {
        Ok(socket) => Some(socket),
        Err(source) => {
            errors.push(SourceError::Io { path: source_name("socket", None), source });
            None
        }
    }
}

/// Sends one request and reads its reply to the end, handing each reply body to `on_reply`.
fn exchange(
    socket: &mut dyn Transport,
    buffer: &mut [u8],
    request: &[u8],
    reply_type: u16,
    seq: u32,
    mut on_reply: impl FnMut(&[u8]) -> Result<(), DecodeError>,
) -> Result<(), ExchangeError> {
    socket.send(request).map_err(ExchangeError::Io)?;
    let mut reader = ReplyReader::new(reply_type, seq, MAX_MESSAGES_PER_REPLY);
    let deadline = Instant::now() + EXCHANGE_DEADLINE;
    loop {
        if Instant::now() > deadline {
            return Err(ExchangeError::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("reply not complete within {EXCHANGE_DEADLINE:?}"),
            )));
        }
        let len = socket.recv(buffer).map_err(ExchangeError::Io)?;
        let datagram = buffer.get(..len).unwrap_or_default();
        match reader.feed(datagram, |_, body| on_reply(body)).map_err(ExchangeError::Reply)? {
            Progress::Finished => return Ok(()),
            Progress::More => {}
        }
    }
}

/// Netlink has no file path; errors name the request instead, e.g.
/// `netlink:NETLINK_RDMA/RES_MR_GET/mlx5_0`.
fn source_name(what: &str, device: Option<&str>) -> PathBuf {
    match device {
        Some(device) => PathBuf::from(format!("netlink:NETLINK_RDMA/{what}/{device}")),
        None => PathBuf::from(format!("netlink:NETLINK_RDMA/{what}")),
    }
}

fn into_source_error(error: ExchangeError, what: &str, device: Option<&str>) -> SourceError {
    let path = source_name(what, device);
    match error {
        ExchangeError::Io(source) => SourceError::Io { path, source },
        ExchangeError::Reply(ReplyError::Kernel { error }) => {
            SourceError::Io { path, source: io::Error::from_raw_os_error(error.saturating_neg()) }
        }
        ExchangeError::Reply(ReplyError::Decode(e)) => {
            SourceError::Parse { path, source: ParseError::Format(e.to_string()) }
        }
        ExchangeError::Reply(other) => SourceError::Io { path, source: io::Error::other(other.to_string()) },
    }
}

impl Collector for RdmaNetlinkCollector {
    fn name(&self) -> &'static str {
        "rdma_netlink"
    }

    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data> {
        self.read(errors).map(|s| Arc::new(s) as Data)
    }
}

/// Budget classes ([`crate::budget`]): the per-device summary, and each owner's registrations
/// on a device.
const DEVICES: &str = "rdma_netlink_device";
const OWNERS: &str = "rdma_owner";

impl RdmaNetlinkStats {
    /// Every device and owner.
    pub fn render(&self, out: &mut Exposition) {
        self.render_granted(out, &Grants::all())
    }

    /// (device index, owner) pairs, in device order, as the kernel listed them.
    fn owners(&self) -> impl Iterator<Item = (usize, &OwnerMrs)> {
        self.devices.iter().enumerate().flat_map(|(i, d)| d.mrs.iter().flat_map(|m| &m.owners).map(move |o| (i, o)))
    }

    /// The owners, the largest registrations first.
    fn owner_order(&self) -> &budget::Order {
        self.ranking.get_or_rank(|| {
            let bytes: Vec<u64> = self.owners().map(|(_, owner)| owner.bytes).collect();
            let mut order: Vec<usize> = (0..bytes.len()).collect();
            order.sort_by_key(|&i| std::cmp::Reverse(bytes[i]));
            let entities = order.iter().map(|_| (2, 0.6)).collect();
            (order, entities)
        })
    }

    pub fn claims(&self) -> Vec<Claim> {
        let devices =
            self.devices.iter().map(|d| (d.resources.len() + 2 * usize::from(d.mrs.is_some()), 0.7)).collect();
        let owners = self.owner_order().1.clone();
        vec![
            Claim { class: DEVICES, tier: Tier::Explain, floor: 0, cap: usize::MAX, entities: devices },
            Claim { class: OWNERS, tier: Tier::Explain, floor: 0, cap: usize::MAX, entities: owners },
        ]
    }

    pub(crate) fn render_granted(&self, out: &mut Exposition, grants: &Grants) {
        let devices: Vec<&NetlinkDevice> = self.devices.iter().take(grants.get(DEVICES)).collect();
        let order = &self.owner_order().0;
        // In device order, as the kernel listed them, whatever the budget kept.
        let owners: Vec<(usize, &OwnerMrs)> = self
            .owners()
            .zip(grants.mask(OWNERS, order, order.len()))
            .filter_map(|(owner, shown)| shown.then_some(owner))
            .collect();
        out.family(
            "memlock_rdma_netlink_supported",
            "1 if the kernel answers RDMA netlink, 0 if it has no RDMA support.",
            Kind::Gauge,
        )
        .sample(&[], self.supported);
        out.family(
            "memlock_rdma_resources",
            "RDMA objects per device and type, as `rdma resource show` summarises them.",
            Kind::Gauge,
        );
        for d in &devices {
            for (kind, count) in &d.resources {
                out.sample(&[("device", &d.name), ("type", kind)], *count);
            }
        }
        out.family(
            "memlock_rdma_mr_registered_bytes",
            "Sum of the lengths of the memory regions registered on the device.",
            Kind::Gauge,
        );
        for d in &devices {
            out.maybe(&[("device", &d.name)], d.mrs.as_ref().map(|m| m.registered_bytes));
        }
        out.family(
            "memlock_rdma_mr_implicit_odp",
            "Implicit ODP memory regions on the device, left out of every byte sum.",
            Kind::Gauge,
        );
        for d in &devices {
            out.maybe(&[("device", &d.name)], d.mrs.as_ref().map(|m| m.implicit_odp_mrs));
        }
        type Field = fn(&OwnerMrs) -> u64;
        let per_owner: [(&'static str, &'static str, Field); 2] = [
            ("memlock_rdma_process_mrs", "Memory regions per owning process and device.", |o| o.mrs),
            (
                "memlock_rdma_process_mr_bytes",
                "Sum of the lengths of the memory regions per owning process and device.",
                |o| o.bytes,
            ),
        ];
        for (name, help, field) in per_owner {
            out.family(name, help, Kind::Gauge);
            for (device, owner) in &owners {
                let d = &self.devices[*device];
                out.sample(&[("pid", &owner.pid), ("comm", &owner.comm), ("device", &d.name)], field(owner));
            }
        }
    }
}

impl super::Stats for RdmaNetlinkStats {
    fn render(&self, out: &mut Exposition, grants: &Grants) {
        self.render_granted(out, grants)
    }

    fn claims(&self) -> Vec<Claim> {
        RdmaNetlinkStats::claims(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Configured for RdmaNetlinkCollector {
    type Raw = RawRdmaCollector;
    type Settings = RdmaConfig;

    fn key_template() -> RawRdmaCollector {
        RawRdmaCollector::key_template()
    }

    fn validate(raw: RawRdmaCollector) -> Result<RdmaConfig, Invalid> {
        raw.validate()
    }

    fn build(context: &Context, settings: &RdmaConfig) -> Self {
        RdmaNetlinkCollector::new(context.roots.clone(), settings.clone())
    }
}

/// This collector's entry in the registry ([`crate::collect::REGISTRY`]): its name, flags,
/// default interval and settings.
pub(crate) const REGISTRATION: super::Registration = super::Registration {
    name: "rdma_netlink",
    reads: "RDMA resources and registered memory",
    default_interval: "5s",
    default_enabled: true,
    settings: super::settings::of::<RdmaNetlinkCollector>(),
};

#[cfg(test)]
mod tests;
