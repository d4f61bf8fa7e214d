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
    pub const NOOP: u16 = 1;
    pub const ERROR: u16 = 2;
    pub const DONE: u16 = 3;
    pub const OVERRUN: u16 = 4;
    pub const MIN_TYPE: u16 = 0x10;
}

/// `nlmsg_flags` (`NLM_F_*`).
pub mod flags {
    pub const REQUEST: u16 = 0x1;
    pub const MULTI: u16 = 0x2;
    pub const ACK: u16 = 0x4;
    /// `NLM_F_ROOT | NLM_F_MATCH`.
    pub const DUMP: u16 = 0x300;
    /// On an ACK: only the request's header is echoed.
    pub const CAPPED: u16 = 0x100;
    /// On an ACK: extended-ACK attributes follow.
    pub const ACK_TLVS: u16 = 0x200;
}

/// `RDMA_NL_NLDEV`, the client id in the upper 6 bits of the message type.
pub const CLIENT_NLDEV: u16 = 5;

/// `enum rdma_nldev_command` values the exporter uses (and one admin-only for tests).
pub mod cmd {
    pub const GET: u16 = 1;
    pub const RES_GET: u16 = 9;
    pub const RES_MR_GET: u16 = 13;
    pub const RES_MR_GET_RAW: u16 = 21;
}

/// `enum rdma_nldev_attr` ids (ABI order).
pub mod attr {
    pub const PAD: u16 = 0;
    pub const DEV_INDEX: u16 = 1;
    pub const DEV_NAME: u16 = 2;
    pub const PORT_INDEX: u16 = 3;
    pub const FW_VERSION: u16 = 5;
    pub const NODE_GUID: u16 = 6;
    pub const RES_SUMMARY: u16 = 15;
    pub const RES_SUMMARY_ENTRY: u16 = 16;
    pub const RES_SUMMARY_ENTRY_NAME: u16 = 17;
    pub const RES_SUMMARY_ENTRY_CURR: u16 = 18;
    pub const RES_PID: u16 = 28;
    pub const RES_KERN_NAME: u16 = 29;
    pub const RES_MR: u16 = 40;
    pub const RES_MR_ENTRY: u16 = 41;
    pub const RES_RKEY: u16 = 42;
    pub const RES_LKEY: u16 = 43;
    pub const RES_IOVA: u16 = 44;
    pub const RES_MRLEN: u16 = 45;
    pub const DRIVER: u16 = 52;
    pub const RES_PDN: u16 = 60;
    pub const RES_MRN: u16 = 62;
    pub const DEV_PROTOCOL: u16 = 67;
    pub const DRIVER_DETAILS: u16 = 97;
}

/// `NLA_F_NESTED`; the kernel leaves it off the resource nests, so it is informational only.
pub const NLA_F_NESTED: u16 = 0x8000;
/// Strips `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER` from an attribute type.
pub const NLA_TYPE_MASK: u16 = 0x3fff;

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
    pub fw_version: Option<String>,
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
pub fn get_devices_request(seq: u32) -> Vec<u8> {
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

/// Messages built from the uapi constants, for tests here and in the collector.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    pub fn attribute(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = ATTR_HEADER_LEN + value.len();
        let mut out = Vec::new();
        out.extend_from_slice(&(len as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        out.resize(align4(len), 0);
        out
    }

    pub fn string(kind: u16, text: &str) -> Vec<u8> {
        let mut value = text.as_bytes().to_vec();
        value.push(0);
        attribute(kind, &value)
    }

    pub fn message(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        Header { len: (HEADER_LEN + body.len()) as u32, kind, flags, seq, port: 4711 }.write(&mut out);
        out.extend_from_slice(body);
        out.resize(align4(out.len()), 0);
        out
    }

    pub fn mr_entry(fields: &[Vec<u8>]) -> Vec<u8> {
        attribute(attr::RES_MR_ENTRY, &fields.concat())
    }

    pub fn mr_part(seq: u32, dev: (u32, &str), entries: &[Vec<u8>]) -> Vec<u8> {
        let body = [
            attribute(attr::DEV_INDEX, &dev.0.to_ne_bytes()),
            string(attr::DEV_NAME, dev.1),
            attribute(attr::RES_MR, &entries.concat()),
        ]
        .concat();
        message(nldev_type(cmd::RES_MR_GET), flags::MULTI, seq, &body)
    }

    pub fn done(seq: u32, error: i32) -> Vec<u8> {
        message(msg::DONE, flags::MULTI, seq, &error.to_ne_bytes())
    }

    /// Issue 23: a reply part in the captures' format (sample 5's layout, x86_64) with the
    /// implicit ODP MR UCX registers (MRLEN 2^64 - 1, mrn 6) beside a 2 MiB MR (mrn 7), both of
    /// pid 4243, as an unprivileged reader gets them from fill_res_mr_entry.
    pub const IMPLICIT_ODP_PART: &str = "
        0000  78 00 00 00 0d 14 02 00 00 f1 53 65 39 30 00 00
        0010  08 00 01 00 00 00 00 00 0b 00 02 00 6d 6c 78 35
        0020  5f 30 00 00 54 00 28 00 28 00 29 00 0c 00 2d 00
        0030  ff ff ff ff ff ff ff ff 08 00 3e 00 06 00 00 00
        0040  08 00 3c 00 03 00 00 00 08 00 1c 00 93 10 00 00
        0050  28 00 29 00 0c 00 2d 00 00 00 20 00 00 00 00 00
        0060  08 00 3e 00 07 00 00 00 08 00 3c 00 03 00 00 00
        0070  08 00 1c 00 93 10 00 00";

    /// The bytes of a hex dump in the captures' `OFFSET  BYTES` format.
    pub fn hex_dump(text: &str) -> Vec<u8> {
        text.lines()
            .filter_map(|line| line.trim().split_once("  "))
            .flat_map(|(_, hex)| hex.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect::<Vec<_>>())
            .collect()
    }

    /// A `RES_GET` dump part: one device's summary.
    pub fn summary_part(seq: u32, dev: (u32, &str), entries: &[(&str, u64)]) -> Vec<u8> {
        let table: Vec<u8> = entries
            .iter()
            .flat_map(|(name, current)| {
                let fields = [
                    string(attr::RES_SUMMARY_ENTRY_NAME, name),
                    attribute(attr::RES_SUMMARY_ENTRY_CURR, &current.to_ne_bytes()),
                ]
                .concat();
                attribute(attr::RES_SUMMARY_ENTRY, &fields)
            })
            .collect();
        let body = [
            attribute(attr::DEV_INDEX, &dev.0.to_ne_bytes()),
            string(attr::DEV_NAME, dev.1),
            attribute(attr::RES_SUMMARY, &table),
        ]
        .concat();
        message(nldev_type(cmd::RES_GET), flags::MULTI, seq, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    const SAMPLES: &str = include_str!("../../tests/fixtures/captures/rdma-netlink-samples.txt");

    /// The hex dumps of the captures file, by sample number: `## N. ...` starts a sample and
    /// `0010  08 00 ...` lines hold its bytes at the given offset.
    fn samples() -> Vec<(u32, Vec<u8>)> {
        let mut out: Vec<(u32, Vec<u8>)> = Vec::new();
        for line in SAMPLES.lines() {
            if let Some(rest) = line.strip_prefix("## ") {
                // "## 5. reply part ..." starts sample 5; "##    (no rkey/lkey) ..." continues its title.
                if let Some(Ok(number)) = rest.split_once(". ").map(|(n, _)| n.parse()) {
                    out.push((number, Vec::new()));
                }
                continue;
            }
            let Some((offset, hex)) = line.split_once("  ") else { continue };
            if offset.len() != 4 || !offset.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            let offset = usize::from_str_radix(offset, 16).unwrap();
            let bytes = &mut out.last_mut().unwrap().1;
            assert_eq!(bytes.len(), offset, "offsets are contiguous in {line:?}");
            bytes.extend(hex.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()));
        }
        out
    }

    fn sample(number: u32) -> Vec<u8> {
        samples().into_iter().find(|(n, _)| *n == number).unwrap().1
    }

    const SEQ: u32 = 0x6553_f100;

    #[test]
    fn the_captures_file_holds_eleven_samples_whose_lengths_match_their_headers() {
        let all = samples();
        assert_eq!(all.iter().map(|(n, _)| *n).collect::<Vec<_>>(), (1..=11).collect::<Vec<_>>());
        for (n, bytes) in &all {
            assert_eq!(Header::parse(bytes).unwrap().len as usize, bytes.len(), "sample {n}");
            assert_eq!(messages(bytes).count(), 1, "sample {n}");
        }
    }

    #[test]
    fn builds_the_sample_requests_byte_for_byte() {
        assert_eq!(res_mr_request(SEQ, 0), sample(1));
        assert_eq!(res_summary_request(SEQ + 1, Some(0)), sample(2));
        let dump = res_summary_request(7, None);
        let header = Header::parse(&dump).unwrap();
        assert_eq!((header.kind, header.flags, header.len), (5129, 0x0305, 24));
        assert_eq!(attrs(&dump[HEADER_LEN..]).map(|a| a.unwrap().kind).collect::<Vec<_>>(), [attr::DRIVER_DETAILS]);
        let get = get_devices_request(9);
        assert_eq!(Header::parse(&get).unwrap(), Header { len: 16, kind: 5121, flags: 0x0305, seq: 9, port: 0 });
        assert_eq!(get.len(), 16);
    }

    #[test]
    fn decodes_the_request_samples() {
        for (n, op, flags, index) in [
            (1, cmd::RES_MR_GET, 0x0305, Some(0)),
            (2, cmd::RES_GET, 0x0005, Some(0)),
            (8, cmd::RES_MR_GET, 0x0305, None),
            (10, cmd::RES_MR_GET_RAW, 0x0305, Some(0)),
        ] {
            let bytes = sample(n);
            let Message::Reply { header, attrs: body } = messages(&bytes).next().unwrap().unwrap() else {
                panic!("sample {n}")
            };
            assert_eq!(split_type(header.kind), (CLIENT_NLDEV, op), "sample {n}");
            assert_eq!(header.flags, flags, "sample {n}");
            let mut dev_index = None;
            for a in attrs(body) {
                let a = a.unwrap();
                match a.kind {
                    attr::DRIVER_DETAILS => assert_eq!(a.u8(), Ok(0)),
                    attr::DEV_INDEX => dev_index = Some(a.u32().unwrap()),
                    other => panic!("sample {n}: attribute {other}"),
                }
            }
            assert_eq!(dev_index, index, "sample {n}");
        }
    }

    #[test]
    fn decodes_the_res_get_reply_and_its_ack() {
        let bytes = sample(3);
        let mut reader = ReplyReader::new(nldev_type(cmd::RES_GET), SEQ + 1, 100);
        let mut summaries = Vec::new();
        let progress = reader.feed(&bytes, |header, body| {
            assert_eq!(header.port, 12345);
            summaries.push(decode_res_summary(body)?);
            Ok(())
        });
        assert_eq!(progress, Ok(Progress::More), "a doit reply is followed by its ACK");
        let expected: Vec<(String, u64)> =
            [("pd", 4), ("cq", 9), ("qp", 18), ("cm_id", 0), ("mr", 37), ("ctx", 2), ("srq", 0)]
                .iter()
                .map(|(n, v)| (n.to_string(), *v))
                .collect();
        assert_eq!(summaries, [ResourceSummary { dev_index: 0, dev_name: "mlx5_0".into(), entries: expected }]);

        let ack = sample(4);
        let Message::Error { header, error, request } = messages(&ack).next().unwrap().unwrap() else { panic!("ACK") };
        assert_eq!((error, header.flags), (0, flags::CAPPED));
        assert_eq!(request, Some(Header { len: 32, kind: 5129, flags: 0x0005, seq: SEQ + 1, port: 0 }));
        assert_eq!(reader.feed(&ack, |_, _| panic!("an ACK has no body")), Ok(Progress::Finished));
    }

    #[test]
    fn decodes_unprivileged_and_privileged_mr_parts() {
        let part = decode_mr_body(&sample(5));
        assert_eq!(part.dev_name, "mlx5_0");
        assert_eq!(part.dev_index, 0);
        assert_eq!(
            part.entries,
            [
                MrEntry { length: Some(9_633_792), mrn: Some(4), pdn: Some(2), pid: Some(4242), kern_name: None },
                MrEntry { length: Some(4096), mrn: Some(5), pdn: Some(2), pid: Some(4242), kern_name: None },
            ]
        );
        let privileged = decode_mr_body(&sample(7));
        assert_eq!(
            privileged.entries,
            [MrEntry { length: Some(9_633_792), mrn: Some(4), pdn: Some(2), pid: Some(4242), kern_name: None }]
        );
    }

    #[test]
    fn an_implicit_odp_mr_reports_the_whole_address_space() {
        let bytes = hex_dump(IMPLICIT_ODP_PART);
        let mut built = mr_part(
            SEQ,
            (0, "mlx5_0"),
            &[
                mr_entry(&[
                    attribute(attr::RES_MRLEN, &u64::MAX.to_ne_bytes()),
                    attribute(attr::RES_MRN, &6u32.to_ne_bytes()),
                    attribute(attr::RES_PDN, &3u32.to_ne_bytes()),
                    attribute(attr::RES_PID, &4243u32.to_ne_bytes()),
                ]),
                mr_entry(&[
                    attribute(attr::RES_MRLEN, &(2u64 << 20).to_ne_bytes()),
                    attribute(attr::RES_MRN, &7u32.to_ne_bytes()),
                    attribute(attr::RES_PDN, &3u32.to_ne_bytes()),
                    attribute(attr::RES_PID, &4243u32.to_ne_bytes()),
                ]),
            ],
        );
        built[12..16].copy_from_slice(&12345u32.to_ne_bytes());
        assert_eq!(bytes, built, "the dump is what the uapi layout gives");
        let part = decode_mr_body(&bytes);
        let implicit: Vec<(Option<u32>, bool)> = part.entries.iter().map(|e| (e.mrn, e.is_implicit_odp())).collect();
        assert_eq!(implicit, [(Some(6), true), (Some(7), false)]);
        assert_eq!(part.entries[0].length, Some(u64::MAX));
    }

    fn decode_mr_body(bytes: &[u8]) -> MrDumpPart {
        let Message::Reply { header, attrs: body } = messages(bytes).next().unwrap().unwrap() else { panic!("reply") };
        assert_eq!(header.flags & flags::MULTI, flags::MULTI);
        decode_mr_part(body).unwrap()
    }

    #[test]
    fn a_dump_ends_at_done_and_a_failed_dump_reports_its_errno() {
        let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), SEQ, 100);
        let mut entries = 0;
        let count = |_: &Header, body: &[u8]| {
            entries += decode_mr_part(body)?.entries.len();
            Ok(())
        };
        assert_eq!(reader.feed(&sample(5), count), Ok(Progress::More));
        assert_eq!(reader.feed(&sample(6), |_, _| panic!("DONE has no body")), Ok(Progress::Finished));
        assert_eq!(entries, 2);

        let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), SEQ + 2, 100);
        let err = reader.feed(&sample(9), |_, _| Ok(())).unwrap_err();
        assert_eq!(err, ReplyError::Kernel { error: -22 });
        assert_eq!(err.errno(), Some(libc::EINVAL));
        assert!(err.to_string().contains("Invalid argument"), "{err}");
    }

    #[test]
    fn an_admin_only_request_is_refused_with_eperm_and_the_echoed_request() {
        let bytes = sample(11);
        let Message::Error { error, request, .. } = messages(&bytes).next().unwrap().unwrap() else { panic!("error") };
        assert_eq!(error, -1);
        let request = request.unwrap();
        assert_eq!((request.kind, request.len, request.seq), (nldev_type(cmd::RES_MR_GET_RAW), 32, SEQ + 3));
        // The whole request follows the error code: it is sample 10.
        assert_eq!(&bytes[HEADER_LEN + 4..], &sample(10)[..]);
        let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET_RAW), SEQ + 3, 100);
        let err = reader.feed(&bytes, |_, _| Ok(())).unwrap_err();
        assert_eq!(err.errno(), Some(libc::EPERM));
    }

    #[test]
    fn a_multi_part_dump_across_datagrams_with_pad_kernel_owners_and_stale_messages() {
        let user = mr_entry(&[
            attribute(attr::RES_MRLEN, &(3u64 << 32).to_ne_bytes()),
            attribute(attr::RES_MRN, &1u32.to_ne_bytes()),
            attribute(attr::RES_PID, &77u32.to_ne_bytes()),
        ]);
        // Architectures without efficient unaligned access put a PAD before each u64.
        let padded = mr_entry(&[
            attribute(attr::PAD, &[]),
            attribute(attr::RES_MRLEN, &8192u64.to_ne_bytes()),
            string(attr::RES_KERN_NAME, "nvme_rdma"),
        ]);
        // Owner outside our PID namespace: no PID, no kernel name. And a driver nest flagged NESTED.
        let mut driver = attribute(attr::DRIVER, &string(54, "odp"));
        driver[2..4].copy_from_slice(&(attr::DRIVER | NLA_F_NESTED).to_ne_bytes());
        let foreign = mr_entry(&[
            attribute(attr::RES_MRLEN, &4096u64.to_ne_bytes()),
            attribute(attr::RES_PDN, &3u32.to_ne_bytes()),
            driver,
        ]);

        let seq = 500;
        let first = [
            mr_part(seq, (2, "mlx5_2"), &[user.clone(), padded]),
            mr_part(seq - 1, (2, "mlx5_2"), std::slice::from_ref(&user)),
        ]
        .concat();
        let second =
            [mr_part(seq, (2, "mlx5_2"), &[foreign]), done(seq, 0), mr_part(seq, (2, "mlx5_2"), &[user])].concat();

        let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), seq, 100);
        let mut all = Vec::new();
        let mut on_reply = |_: &Header, body: &[u8]| {
            all.extend(decode_mr_part(body)?.entries);
            Ok(())
        };
        assert_eq!(reader.feed(&first, &mut on_reply), Ok(Progress::More));
        assert_eq!(reader.feed(&second, &mut on_reply), Ok(Progress::Finished), "nothing after DONE is read");
        assert_eq!(
            all,
            [
                MrEntry { length: Some(3 << 32), mrn: Some(1), pid: Some(77), ..MrEntry::default() },
                MrEntry { length: Some(8192), kern_name: Some("nvme_rdma".into()), ..MrEntry::default() },
                MrEntry { length: Some(4096), pdn: Some(3), ..MrEntry::default() },
            ],
            "the part with the old sequence number was skipped"
        );
    }

    #[test]
    fn done_with_einval_and_error_with_eperm_built_from_constants() {
        let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), 9, 10);
        assert_eq!(reader.feed(&done(9, -libc::EINVAL), |_, _| Ok(())), Err(ReplyError::Kernel { error: -22 }));

        let request = res_mr_request(10, 0);
        let error = message(msg::ERROR, 0, 10, &[(-libc::EPERM).to_ne_bytes().to_vec(), request.clone()].concat());
        let Message::Error { error: code, request: echoed, .. } = messages(&error).next().unwrap().unwrap() else {
            panic!()
        };
        assert_eq!((code, echoed), (-1, Some(Header::parse(&request).unwrap())));
        let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), 10, 10);
        assert_eq!(reader.feed(&error, |_, _| Ok(())).unwrap_err().errno(), Some(libc::EPERM));

        let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), 11, 10);
        assert_eq!(reader.feed(&message(msg::OVERRUN, 0, 11, &[]), |_, _| Ok(())), Err(ReplyError::Overrun));
        let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), 12, 10);
        assert_eq!(
            reader.feed(&[message(msg::NOOP, 0, 12, &[]), done(12, 0)].concat(), |_, _| Ok(())),
            Ok(Progress::Finished)
        );
    }

    #[test]
    fn replies_of_another_type_and_endless_replies_are_refused() {
        let part = mr_part(3, (0, "mlx5_0"), &[]);
        let mut reader = ReplyReader::new(nldev_type(cmd::RES_GET), 3, 10);
        assert!(matches!(
            reader.feed(&part, |_, _| Ok(())),
            Err(ReplyError::Decode(DecodeError::UnexpectedType { .. }))
        ));
        let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), 3, 3);
        let three = [part.clone(), part.clone(), part.clone()].concat();
        assert_eq!(reader.feed(&three, |_, _| Ok(())), Ok(Progress::More));
        assert_eq!(reader.feed(&part, |_, _| Ok(())), Err(ReplyError::TooManyMessages(3)));
    }

    #[test]
    fn decodes_a_device_from_a_get_reply() {
        let body = [
            attribute(attr::DEV_INDEX, &3u32.to_ne_bytes()),
            string(attr::DEV_NAME, "efa_0"),
            attribute(attr::PORT_INDEX, &1u32.to_ne_bytes()),
            string(attr::FW_VERSION, "0.0.0.0"),
            attribute(attr::NODE_GUID, &0x0123_4567_89ab_cdefu64.to_ne_bytes()),
            string(attr::DEV_PROTOCOL, "ib"),
            attribute(99, &[1, 2, 3]),
        ]
        .concat();
        assert_eq!(
            decode_device(&body),
            Ok(DeviceInfo {
                index: 3,
                name: "efa_0".into(),
                ports: Some(1),
                fw_version: Some("0.0.0.0".into()),
                node_guid: Some(0x0123_4567_89ab_cdef),
                protocol: Some("ib".into()),
            })
        );
        assert!(matches!(decode_device(&body[8..]), Err(DecodeError::MissingAttribute { attribute: "DEV_INDEX", .. })));
    }

    #[test]
    fn malformed_framing_is_an_error() {
        let good = sample(5);
        assert_eq!(messages(&good[..10]).next(), Some(Err(DecodeError::TruncatedHeader { have: 10 })));
        assert!(matches!(
            messages(&good[..100]).next(),
            Some(Err(DecodeError::BadMessageLength { len: 120, available: 100 }))
        ));
        let mut short = good.clone();
        short[0] = 8;
        assert!(matches!(messages(&short).next(), Some(Err(DecodeError::BadMessageLength { len: 8, .. }))));
        // An attribute claiming more bytes than its nest holds.
        let mut long_attr = good.clone();
        long_attr[0x2c] = 0xff;
        let Message::Reply { attrs: body, .. } = messages(&long_attr).next().unwrap().unwrap() else { panic!() };
        assert!(matches!(decode_mr_part(body), Err(DecodeError::BadAttributeLength { .. })));
        // A u64 of the wrong size.
        let bad_u64 = attribute(attr::RES_MRLEN, &[1, 2, 3, 4]);
        let part = mr_part(1, (0, "x"), &[mr_entry(&[bad_u64])]);
        let Message::Reply { attrs: body, .. } = messages(&part).next().unwrap().unwrap() else { panic!() };
        assert_eq!(
            decode_mr_part(body),
            Err(DecodeError::BadAttributeSize { kind: attr::RES_MRLEN, len: 4, expected: 8 })
        );
        // A summary entry without its value.
        let entry = attribute(attr::RES_SUMMARY_ENTRY, &string(attr::RES_SUMMARY_ENTRY_NAME, "mr"));
        let body = [
            attribute(attr::DEV_INDEX, &0u32.to_ne_bytes()),
            string(attr::DEV_NAME, "x"),
            attribute(attr::RES_SUMMARY, &entry),
        ]
        .concat();
        assert!(matches!(
            decode_res_summary(&body),
            Err(DecodeError::MissingAttribute { attribute: "RES_SUMMARY_ENTRY_CURR", .. })
        ));
        // DONE and ERROR without their error code.
        assert!(matches!(
            messages(&message(msg::DONE, 0, 1, &[])).next(),
            Some(Err(DecodeError::TruncatedPayload { .. }))
        ));
        assert!(matches!(
            messages(&message(msg::ERROR, 0, 1, &[0, 0])).next(),
            Some(Err(DecodeError::TruncatedPayload { .. }))
        ));
        // Trailing bytes too short for an attribute header.
        assert!(matches!(attrs(&[4, 0, 1, 0, 9]).nth(1), Some(Err(DecodeError::BadAttributeLength { .. }))));
        assert!(attrs(&[]).next().is_none());
    }

    #[test]
    fn strings_are_bounded_and_lossy() {
        let long = string(attr::DEV_NAME, &"x".repeat(1000));
        let a = attrs(&long).next().unwrap().unwrap();
        assert_eq!(a.string().len(), MAX_STRING_BYTES);
        let bad = attribute(attr::DEV_NAME, &[b'a', 0xff, b'b', 0]);
        assert_eq!(attrs(&bad).next().unwrap().unwrap().string(), "a\u{fffd}b");
        let unterminated = attribute(attr::DEV_NAME, b"mlx5_0");
        assert_eq!(attrs(&unterminated).next().unwrap().unwrap().string(), "mlx5_0");
    }

    /// Found by libFuzzer (scripts/fuzz.sh, target nldev): 120 invalid bytes became 360 bytes
    /// of replacement characters, past the bound.
    #[test]
    fn invalid_utf8_does_not_stretch_a_string_past_the_bound() {
        let mut value = vec![0xb8u8; 120];
        value.push(0);
        let a = attribute(attr::DEV_NAME, &value);
        let string = attrs(&a).next().unwrap().unwrap().string();
        assert!(string.len() <= MAX_STRING_BYTES, "{} bytes", string.len());
        assert_eq!(string, "\u{fffd}".repeat(MAX_STRING_BYTES / 3));
    }
}
