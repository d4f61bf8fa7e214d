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

/// A reply part in the captures' format (sample 5's layout, x86_64) with the
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
