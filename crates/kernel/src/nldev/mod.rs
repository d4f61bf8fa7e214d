//! RDMA netlink ("nldev", `NETLINK_RDMA`): the messages behind `rdma resource show`.
//!
//! Pure code over bytes: message and attribute framing, the replies the exporter reads
//! (`RES_GET` summary, `RES_MR_GET` dump parts, `GET` device info), the end of a reply
//! (`NLMSG_DONE`, `NLMSG_ERROR`), and the requests. Constants are the kernel's uapi
//! (`include/uapi/linux/netlink.h`, `include/uapi/rdma/rdma_netlink.h`).
//!
//! Every length field is checked against the bytes actually present before it is used, nothing
//! is allocated from an unchecked length, and malformed input is an error, never a panic.
//! Quirks handled: no generic-netlink header (attributes follow `nlmsghdr` directly); the
//! resource nests are sent without `NLA_F_NESTED`, so nests are recognised by id; u64 values
//! may sit at a 4-byte boundary (x86_64 and arm64 emit no PAD) or follow a type-0 PAD
//! attribute (other architectures); a failed dump reports its errno inside `NLMSG_DONE`.

use thiserror::Error;

/// The netlink protocol number of RDMA (`NETLINK_RDMA`).
pub const NETLINK_RDMA: i32 = 20;

/// `sizeof(struct nlmsghdr)`.
pub const HEADER_LEN: usize = 16;
/// `sizeof(struct nlattr)`.
pub const ATTR_HEADER_LEN: usize = 4;

/// Control message types (`NLMSG_*`); replies use types at or above `MIN_TYPE`.
pub mod msg {
    #[cfg(test)]
    pub(crate) const NOOP: u16 = 1;
    pub const ERROR: u16 = 2;
    pub(crate) const DONE: u16 = 3;
    pub(crate) const OVERRUN: u16 = 4;
    pub(crate) const MIN_TYPE: u16 = 0x10;
}

/// `nlmsg_flags` (`NLM_F_*`).
pub mod flags {
    pub const REQUEST: u16 = 0x1;
    #[cfg(any(test, feature = "testing"))]
    pub(crate) const MULTI: u16 = 0x2;
    pub const ACK: u16 = 0x4;
    /// `NLM_F_ROOT | NLM_F_MATCH`.
    pub const DUMP: u16 = 0x300;
    /// On an ACK: only the request's header is echoed.
    #[cfg(test)]
    pub(crate) const CAPPED: u16 = 0x100;
}

/// `RDMA_NL_NLDEV`, the client id in the upper 6 bits of the message type.
pub(crate) const CLIENT_NLDEV: u16 = 5;

/// `enum rdma_nldev_command` values the exporter uses (and one admin-only for tests).
pub mod cmd {
    pub const GET: u16 = 1;
    pub const RES_GET: u16 = 9;
    pub const RES_MR_GET: u16 = 13;
    pub const RES_MR_GET_RAW: u16 = 21;
}

/// `enum rdma_nldev_attr` ids (ABI order).
pub mod attr {
    pub(crate) const PAD: u16 = 0;
    pub const DEV_INDEX: u16 = 1;
    pub(crate) const DEV_NAME: u16 = 2;
    pub(crate) const PORT_INDEX: u16 = 3;
    pub(crate) const FW_VERSION: u16 = 5;
    pub(crate) const NODE_GUID: u16 = 6;
    pub(crate) const RES_SUMMARY: u16 = 15;
    pub(crate) const RES_SUMMARY_ENTRY: u16 = 16;
    pub(crate) const RES_SUMMARY_ENTRY_NAME: u16 = 17;
    pub(crate) const RES_SUMMARY_ENTRY_CURR: u16 = 18;
    pub const RES_PID: u16 = 28;
    pub const RES_KERN_NAME: u16 = 29;
    pub(crate) const RES_MR: u16 = 40;
    pub(crate) const RES_MR_ENTRY: u16 = 41;
    pub const RES_MRLEN: u16 = 45;
    #[cfg(test)]
    pub(crate) const DRIVER: u16 = 52;
    pub const RES_PDN: u16 = 60;
    pub(crate) const RES_MRN: u16 = 62;
    pub(crate) const DEV_PROTOCOL: u16 = 67;
    pub(crate) const DRIVER_DETAILS: u16 = 97;
}

/// `NLA_F_NESTED`; the kernel leaves it off the resource nests, so it is informational only.
#[cfg(test)]
pub(crate) const NLA_F_NESTED: u16 = 0x8000;
/// Strips `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER` from an attribute type.
pub(crate) const NLA_TYPE_MASK: u16 = 0x3fff;

/// Strings become label values: longer ones are cut (device names are at most 64 bytes,
/// kernel owner names a task comm).
pub const MAX_STRING_BYTES: usize = 128;

/// `RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)`.
pub const fn nldev_type(op: u16) -> u16 {
    (CLIENT_NLDEV << 10) + op
}

/// `(client, op)` of a message type.
pub const fn split_type(kind: u16) -> (u16, u16) {
    ((kind >> 10) & 0x3f, kind & 0x3ff)
}

const fn align4(len: usize) -> usize {
    (len + 3) & !3
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("message header truncated: {have} of {HEADER_LEN} bytes")]
    TruncatedHeader { have: usize },
    #[error("message length {len} is outside {HEADER_LEN}..={available}")]
    BadMessageLength { len: u32, available: usize },
    #[error("attribute at offset {offset}: length {len} is outside {ATTR_HEADER_LEN}..={available}")]
    BadAttributeLength { offset: usize, len: usize, available: usize },
    #[error("attribute {kind}: {len}-byte payload, expected {expected}")]
    BadAttributeSize { kind: u16, len: usize, expected: usize },
    #[error("{what}: {len}-byte payload is too short")]
    TruncatedPayload { what: &'static str, len: usize },
    #[error("{what}: required attribute {attribute} is missing")]
    MissingAttribute { what: &'static str, attribute: &'static str },
    #[error("unexpected message type {kind:#06x} (expected {expected:#06x})")]
    UnexpectedType { kind: u16, expected: u16 },
}

/// `struct nlmsghdr`, in host byte order like all of netlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub len: u32,
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    /// The sender's port id (0 for the kernel; the destination's in a reply).
    pub port: u32,
}

impl Header {
    pub fn parse(bytes: &[u8]) -> Result<Header, DecodeError> {
        let Some(head) = bytes.get(..HEADER_LEN) else {
            return Err(DecodeError::TruncatedHeader { have: bytes.len() });
        };
        Ok(Header {
            len: u32_at(head, 0),
            kind: u16_at(head, 4),
            flags: u16_at(head, 6),
            seq: u32_at(head, 8),
            port: u32_at(head, 12),
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.len.to_ne_bytes());
        out.extend_from_slice(&self.kind.to_ne_bytes());
        out.extend_from_slice(&self.flags.to_ne_bytes());
        out.extend_from_slice(&self.seq.to_ne_bytes());
        out.extend_from_slice(&self.port.to_ne_bytes());
    }
}

// Callers pass slices whose length was checked; the fixed-size copies cannot fail then, and
// `unwrap_or_default` keeps even a wrong call from panicking.
fn u16_at(bytes: &[u8], at: usize) -> u16 {
    bytes.get(at..at + 2).and_then(|b| b.try_into().ok()).map(u16::from_ne_bytes).unwrap_or_default()
}
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_ne_bytes).unwrap_or_default()
}

/// One netlink message of a datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<'a> {
    /// A reply; `attrs` are its attributes (no family header in nldev).
    Reply { header: Header, attrs: &'a [u8] },
    /// The end of a dump: `error` is 0, or the negative errno of a failed dump callback.
    Done { header: Header, error: i32 },
    /// `NLMSG_ERROR`: an acknowledgement when `error` is 0, else a negative errno. `request` is
    /// the echoed header of the request it answers, when present.
    Error { header: Header, error: i32, request: Option<Header> },
    /// `NLMSG_NOOP`, `NLMSG_OVERRUN` and the other reserved control types.
    Control { header: Header },
}

impl Message<'_> {
    pub fn header(&self) -> &Header {
        match self {
            Message::Reply { header, .. }
            | Message::Done { header, .. }
            | Message::Error { header, .. }
            | Message::Control { header } => header,
        }
    }
}

/// The messages of one datagram, in order. Stops after the first framing error.
pub fn messages(datagram: &[u8]) -> Messages<'_> {
    Messages { rest: datagram, failed: false }
}

pub struct Messages<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let result = self.decode_next();
        self.failed = result.is_err();
        Some(result)
    }
}

impl<'a> Messages<'a> {
    fn decode_next(&mut self) -> Result<Message<'a>, DecodeError> {
        let header = Header::parse(self.rest)?;
        let len = header.len as usize;
        if len < HEADER_LEN || len > self.rest.len() {
            return Err(DecodeError::BadMessageLength { len: header.len, available: self.rest.len() });
        }
        let body = &self.rest[HEADER_LEN..len];
        // The last message of a datagram may lack its alignment padding.
        self.rest = &self.rest[align4(len).min(self.rest.len())..];
        match header.kind {
            msg::DONE => {
                if body.len() < 4 {
                    return Err(DecodeError::TruncatedPayload { what: "NLMSG_DONE", len: body.len() });
                }
                Ok(Message::Done { header, error: u32_at(body, 0) as i32 })
            }
            msg::ERROR => {
                if body.len() < 4 {
                    return Err(DecodeError::TruncatedPayload { what: "NLMSG_ERROR", len: body.len() });
                }
                let request = Header::parse(&body[4..]).ok();
                Ok(Message::Error { header, error: u32_at(body, 0) as i32, request })
            }
            kind if kind < msg::MIN_TYPE => Ok(Message::Control { header }),
            _ => Ok(Message::Reply { header, attrs: body }),
        }
    }
}

/// One attribute. `kind` has the flag bits masked off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    pub kind: u16,
    pub payload: &'a [u8],
}

impl<'a> Attr<'a> {
    fn exact<const N: usize>(&self) -> Result<[u8; N], DecodeError> {
        self.payload.try_into().map_err(|_| DecodeError::BadAttributeSize {
            kind: self.kind,
            len: self.payload.len(),
            expected: N,
        })
    }

    pub fn u8(&self) -> Result<u8, DecodeError> {
        Ok(self.exact::<1>()?[0])
    }

    pub fn u32(&self) -> Result<u32, DecodeError> {
        self.exact::<4>().map(u32::from_ne_bytes)
    }

    /// Reads a u64 wherever it sits: the kernel aligns it to 4 bytes only.
    pub fn u64(&self) -> Result<u64, DecodeError> {
        self.exact::<8>().map(u64::from_ne_bytes)
    }

    /// A NUL-terminated string (a missing NUL is tolerated); invalid UTF-8 is replaced rather
    /// than rejected. The result is cut at [`MAX_STRING_BYTES`] after the replacement (each
    /// invalid byte becomes a 3-byte U+FFFD), on a character boundary.
    pub fn string(&self) -> String {
        let text = self.payload.split(|b| *b == 0).next().unwrap_or_default();
        let text = &text[..text.len().min(MAX_STRING_BYTES)];
        let mut string = String::from_utf8_lossy(text).into_owned();
        if string.len() > MAX_STRING_BYTES {
            let mut cut = MAX_STRING_BYTES;
            while !string.is_char_boundary(cut) {
                cut -= 1;
            }
            string.truncate(cut);
        }
        string
    }

    /// The attributes nested in this one.
    pub fn nested(&self) -> Attrs<'a> {
        attrs(self.payload)
    }
}

/// The attributes of a message body or a nest, skipping type-0 PAD attributes.
pub fn attrs(bytes: &[u8]) -> Attrs<'_> {
    Attrs { bytes, offset: 0, failed: false }
}

pub struct Attrs<'a> {
    bytes: &'a [u8],
    offset: usize,
    failed: bool,
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.failed || self.offset >= self.bytes.len() {
                return None;
            }
            let rest = &self.bytes[self.offset..];
            let len = usize::from(u16_at(rest, 0));
            if rest.len() < ATTR_HEADER_LEN || len < ATTR_HEADER_LEN || len > rest.len() {
                self.failed = true;
                return Some(Err(DecodeError::BadAttributeLength { offset: self.offset, len, available: rest.len() }));
            }
            let kind = u16_at(rest, 2) & NLA_TYPE_MASK;
            let payload = &rest[ATTR_HEADER_LEN..len];
            self.offset += align4(len).min(rest.len());
            if kind == attr::PAD {
                continue;
            }
            return Some(Ok(Attr { kind, payload }));
        }
    }
}

/// The resource summary of one device (`RES_GET` reply): `("mr", 37)`, `("qp", 18)`, ...
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSummary {
    pub dev_index: u32,
    pub dev_name: String,
    pub entries: Vec<(String, u64)>,
}

pub fn decode_res_summary(body: &[u8]) -> Result<ResourceSummary, DecodeError> {
    const WHAT: &str = "RES_GET reply";
    let (mut dev_index, mut dev_name, mut entries) = (None, None, Vec::new());
    for a in attrs(body) {
        let a = a?;
        match a.kind {
            attr::DEV_INDEX => dev_index = Some(a.u32()?),
            attr::DEV_NAME => dev_name = Some(a.string()),
            attr::RES_SUMMARY => {
                for entry in a.nested() {
                    let entry = entry?;
                    if entry.kind != attr::RES_SUMMARY_ENTRY {
                        continue;
                    }
                    let (mut name, mut current) = (None, None);
                    for field in entry.nested() {
                        let field = field?;
                        match field.kind {
                            attr::RES_SUMMARY_ENTRY_NAME => name = Some(field.string()),
                            attr::RES_SUMMARY_ENTRY_CURR => current = Some(field.u64()?),
                            _ => {}
                        }
                    }
                    let name =
                        name.ok_or(DecodeError::MissingAttribute { what: WHAT, attribute: "RES_SUMMARY_ENTRY_NAME" })?;
                    let current = current
                        .ok_or(DecodeError::MissingAttribute { what: WHAT, attribute: "RES_SUMMARY_ENTRY_CURR" })?;
                    entries.push((name, current));
                }
            }
            _ => {}
        }
    }
    Ok(ResourceSummary {
        dev_index: dev_index.ok_or(DecodeError::MissingAttribute { what: WHAT, attribute: "DEV_INDEX" })?,
        dev_name: dev_name.ok_or(DecodeError::MissingAttribute { what: WHAT, attribute: "DEV_NAME" })?,
        entries,
    })
}

/// One memory region of a `RES_MR_GET` dump. Attributes the kernel may leave out are options:
/// `pid` is absent for kernel MRs (which carry `kern_name`), for zombies and for owners outside
/// the reader's PID namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MrEntry {
    pub length: Option<u64>,
    pub mrn: Option<u32>,
    pub pdn: Option<u32>,
    pub pid: Option<u32>,
    pub kern_name: Option<String>,
}

impl MrEntry {
    /// An implicit ODP MR: registered with start 0 and length `U64_MAX`, the whole address space
    /// on demand (`ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND)`; UCX registers one).
    /// `ib_uverbs_reg_mr` (drivers/infiniband/core/uverbs_cmd.c) stores the requested length in
    /// `mr->length`, mlx5's `create_user_odp_mr` (drivers/infiniband/hw/mlx5/mr.c) takes `!start
    /// && length == U64_MAX` for implicit (`ib_umem_odp_alloc_implicit`,
    /// drivers/infiniband/core/umem_odp.c), and `fill_res_mr_entry`
    /// (drivers/infiniband/core/nldev.c) reports `mr->length` as MRLEN: 2^64 - 1, while nothing is
    /// pinned up front (ODP pages are faulted in and out, never charged to VmPin).
    pub fn is_implicit_odp(&self) -> bool {
        self.length == Some(u64::MAX)
    }
}

/// One part of a `RES_MR_GET` dump: some of one device's MRs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrDumpPart {
    pub dev_index: u32,
    pub dev_name: String,
    pub entries: Vec<MrEntry>,
}

pub fn decode_mr_part(body: &[u8]) -> Result<MrDumpPart, DecodeError> {
    const WHAT: &str = "RES_MR_GET reply";
    let (mut dev_index, mut dev_name, mut entries) = (None, None, Vec::new());
    for a in attrs(body) {
        let a = a?;
        match a.kind {
            attr::DEV_INDEX => dev_index = Some(a.u32()?),
            attr::DEV_NAME => dev_name = Some(a.string()),
            attr::RES_MR => {
                for entry in a.nested() {
                    let entry = entry?;
                    if entry.kind != attr::RES_MR_ENTRY {
                        continue;
                    }
                    let mut mr = MrEntry::default();
                    for field in entry.nested() {
                        let field = field?;
                        match field.kind {
                            attr::RES_MRLEN => mr.length = Some(field.u64()?),
                            attr::RES_MRN => mr.mrn = Some(field.u32()?),
                            attr::RES_PDN => mr.pdn = Some(field.u32()?),
                            attr::RES_PID => mr.pid = Some(field.u32()?),
                            attr::RES_KERN_NAME => mr.kern_name = Some(field.string()),
                            // Keys (privileged readers only), IOVA and the driver nest are not needed.
                            _ => {}
                        }
                    }
                    entries.push(mr);
                }
            }
            _ => {}
        }
    }
    Ok(MrDumpPart {
        dev_index: dev_index.ok_or(DecodeError::MissingAttribute { what: WHAT, attribute: "DEV_INDEX" })?,
        dev_name: dev_name.ok_or(DecodeError::MissingAttribute { what: WHAT, attribute: "DEV_NAME" })?,
        entries,
    })
}

/// A device of a `GET` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub index: u32,
    pub name: String,
    /// In `GET` replies `PORT_INDEX` is the number of ports.
    pub ports: Option<u32>,
    pub(crate) fw_version: Option<String>,
    pub node_guid: Option<u64>,
    /// `ib`, `roce`, `iw`, `opa`, `usnic`, `virtio`.
    pub protocol: Option<String>,
}

pub fn decode_device(body: &[u8]) -> Result<DeviceInfo, DecodeError> {
    const WHAT: &str = "GET reply";
    let (mut index, mut name) = (None, None);
    let mut info =
        DeviceInfo { index: 0, name: String::new(), ports: None, fw_version: None, node_guid: None, protocol: None };
    for a in attrs(body) {
        let a = a?;
        match a.kind {
            attr::DEV_INDEX => index = Some(a.u32()?),
            attr::DEV_NAME => name = Some(a.string()),
            attr::PORT_INDEX => info.ports = Some(a.u32()?),
            attr::FW_VERSION => info.fw_version = Some(a.string()),
            attr::NODE_GUID => info.node_guid = Some(a.u64()?),
            attr::DEV_PROTOCOL => info.protocol = Some(a.string()),
            _ => {}
        }
    }
    info.index = index.ok_or(DecodeError::MissingAttribute { what: WHAT, attribute: "DEV_INDEX" })?;
    info.name = name.ok_or(DecodeError::MissingAttribute { what: WHAT, attribute: "DEV_NAME" })?;
    Ok(info)
}

// ---------------------------------------------------------------------------------------------
// Requests.

fn request(op: u16, flags: u16, seq: u32, attributes: &[(u16, &[u8])]) -> Vec<u8> {
    let body: usize = attributes.iter().map(|(_, v)| align4(ATTR_HEADER_LEN + v.len())).sum();
    let mut out = Vec::with_capacity(HEADER_LEN + body);
    Header { len: (HEADER_LEN + body) as u32, kind: nldev_type(op), flags, seq, port: 0 }.write(&mut out);
    for (kind, value) in attributes {
        let len = ATTR_HEADER_LEN + value.len();
        out.extend_from_slice(&(len as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        out.resize(out.len() + align4(len) - len, 0);
    }
    out
}

/// `GET` dump: every device with its index, name, port count, firmware and protocol.
#[cfg(test)]
pub(crate) fn get_devices_request(seq: u32) -> Vec<u8> {
    request(cmd::GET, flags::REQUEST | flags::ACK | flags::DUMP, seq, &[])
}

/// `RES_GET`: the resource summary of one device (a doit, answered by one reply and an ACK),
/// or of every device (`None`: a dump ending in `NLMSG_DONE`). Like iproute2 it asks for
/// user-visible objects only (`DRIVER_DETAILS` 0).
pub fn res_summary_request(seq: u32, dev_index: Option<u32>) -> Vec<u8> {
    match dev_index {
        Some(index) => request(
            cmd::RES_GET,
            flags::REQUEST | flags::ACK,
            seq,
            &[(attr::DRIVER_DETAILS, &[0]), (attr::DEV_INDEX, &index.to_ne_bytes())],
        ),
        None => request(cmd::RES_GET, flags::REQUEST | flags::ACK | flags::DUMP, seq, &[(attr::DRIVER_DETAILS, &[0])]),
    }
}

/// `RES_MR_GET` dump of one device; the kernel refuses it without `DEV_INDEX` (-EINVAL).
pub fn res_mr_request(seq: u32, dev_index: u32) -> Vec<u8> {
    request(
        cmd::RES_MR_GET,
        flags::REQUEST | flags::ACK | flags::DUMP,
        seq,
        &[(attr::DRIVER_DETAILS, &[0]), (attr::DEV_INDEX, &dev_index.to_ne_bytes())],
    )
}

// ---------------------------------------------------------------------------------------------
// Reading a reply to the end.

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReplyError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The kernel refused the request or the dump failed; `error` is the negative errno.
    #[error("the kernel answered {}", std::io::Error::from_raw_os_error(error.saturating_neg()))]
    Kernel { error: i32 },
    #[error("more than {0} messages in one reply")]
    TooManyMessages(usize),
    #[error("netlink overrun: the kernel dropped messages")]
    Overrun,
}

impl ReplyError {
    /// The errno the kernel sent, if this is a kernel error.
    pub fn errno(&self) -> Option<i32> {
        match self {
            ReplyError::Kernel { error } => Some(error.saturating_neg()),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Read another datagram.
    More,
    /// `NLMSG_DONE` or the ACK arrived: the reply is complete.
    Finished,
}

/// Follows the reply to one request across datagrams: hands each reply body to the caller,
/// skips messages of other (earlier, abandoned) requests by sequence number, ends at
/// `NLMSG_DONE` (dump) or the ACK (doit), and turns kernel errors into [`ReplyError::Kernel`].
#[derive(Debug)]
pub struct ReplyReader {
    kind: u16,
    seq: u32,
    max_messages: usize,
    seen: usize,
}

impl ReplyReader {
    pub fn new(kind: u16, seq: u32, max_messages: usize) -> Self {
        Self { kind, seq, max_messages, seen: 0 }
    }

    pub fn feed<'a>(
        &mut self,
        datagram: &'a [u8],
        mut on_reply: impl FnMut(&Header, &'a [u8]) -> Result<(), DecodeError>,
    ) -> Result<Progress, ReplyError> {
        for message in messages(datagram) {
            let message = message?;
            self.seen += 1;
            if self.seen > self.max_messages {
                return Err(ReplyError::TooManyMessages(self.max_messages));
            }
            if message.header().seq != self.seq {
                continue;
            }
            match message {
                Message::Reply { header, attrs } => {
                    if header.kind != self.kind {
                        return Err(DecodeError::UnexpectedType { kind: header.kind, expected: self.kind }.into());
                    }
                    on_reply(&header, attrs)?;
                }
                Message::Done { error: 0, .. } | Message::Error { error: 0, .. } => return Ok(Progress::Finished),
                Message::Done { error, .. } | Message::Error { error, .. } => return Err(ReplyError::Kernel { error }),
                Message::Control { header } if header.kind == msg::OVERRUN => return Err(ReplyError::Overrun),
                Message::Control { .. } => {}
            }
        }
        Ok(Progress::More)
    }
}

/// Messages built from the uapi constants, for tests here and in the collector's crate (its
/// dev-dependency turns on the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod tests;
