//! gzip bodies for `/metrics` that compress the snapshot's text once, however many scrapes.
//!
//! A response is the snapshot's text followed by a few series of the moment (sample ages, the
//! exporter's own metrics). The text is compressed once per snapshot into a raw deflate stream
//! that ends with a sync flush: its last block is not final and ends on a byte boundary
//! (RFC 1951, section 3.2.3; zlib's `Z_SYNC_FLUSH`). Each scrape compresses only its own tail
//! into a new raw deflate stream whose last block is final; blocks of the second stream refer
//! to nothing before their own start, so the two read as one deflate stream. The gzip member
//! around them (RFC 1952) needs the CRC-32 and length of the whole: the text's are kept beside
//! its compressed form and combined with the tail's. Every decoder sees one ordinary member
//! (no multi-member files, which some clients stop reading after the first).

use flate2::{Compress, Compression, FlushCompress, Status};
use hyper::body::Bytes;

/// zlib's default level: a snapshot is compressed once and served many times, so ratio
/// matters more than the one-off cost (see docs/benchmarks.md, "gzip").
pub const LEVEL: u32 = 6;

/// RFC 1952 header: magic, deflate, no flags, no modification time, no extra flags, OS unknown.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// A text compressed to be continued: the raw deflate stream without a final block, and the
/// CRC-32 and length of what it holds.
#[derive(Debug)]
pub struct Prefix {
    deflate: Bytes,
    crc: u32,
    /// Bytes of text compressed.
    len: u64,
}

impl Prefix {
    /// `None` only if the compressor reports an error, which it does not for memory it owns;
    /// the caller then serves the text uncompressed.
    pub(crate) fn compress(text: &[u8]) -> Option<Prefix> {
        let deflate = deflate(text, FlushCompress::Sync)?;
        Some(Prefix { deflate: Bytes::from(deflate), crc: crc32fast::hash(text), len: text.len() as u64 })
    }

    /// The compressed text, shared (not copied) by every response that serves it.
    pub fn shared(&self) -> Bytes {
        self.deflate.clone()
    }

    pub fn len(&self) -> usize {
        self.deflate.len()
    }

    pub fn is_empty(&self) -> bool {
        self.deflate.is_empty()
    }

    /// A gzip member of the text this holds followed by `tail`, as the chunks of a body:
    /// header, the shared prefix, and the compressed tail with the trailer.
    pub fn member(&self, tail: &[u8]) -> Option<[Bytes; 3]> {
        let mut end = deflate(tail, FlushCompress::Finish)?;
        let mut crc = crc32fast::Hasher::new_with_initial_len(self.crc, self.len);
        let mut tail_crc = crc32fast::Hasher::new();
        tail_crc.update(tail);
        crc.combine(&tail_crc);
        end.extend_from_slice(&crc.finalize().to_le_bytes());
        // ISIZE: the length modulo 2^32 (RFC 1952, section 2.3.1).
        let length = self.len.wrapping_add(tail.len() as u64);
        end.extend_from_slice(&(length as u32).to_le_bytes());
        Some([Bytes::from_static(&HEADER), self.shared(), Bytes::from(end)])
    }
}

/// Raw deflate of `input`, ended by `flush` (Sync: continuable; Finish: final block).
fn deflate(input: &[u8], flush: FlushCompress) -> Option<Vec<u8>> {
    let mut compressor = Compress::new(Compression::new(LEVEL), false);
    let mut out = Vec::with_capacity(input.len() / 4 + 64);
    loop {
        let consumed = usize::try_from(compressor.total_in()).ok()?;
        let status = compressor.compress_vec(input.get(consumed..)?, &mut out, flush).ok()?;
        let all_in = usize::try_from(compressor.total_in()).ok()? == input.len();
        // Done when all input is in and the compressor left output space unused (a sync flush is
        // complete then), or when it reports the end of a finished stream.
        match (flush, status) {
            (FlushCompress::Finish, Status::StreamEnd) => return Some(out),
            (FlushCompress::Sync, _) if all_in && out.len() < out.capacity() => return Some(out),
            _ => out.reserve(out.capacity().max(4096)),
        }
    }
}

/// Whether the request's `Accept-Encoding` admits gzip (RFC 9110, section 12.5.3): `gzip` or
/// `x-gzip` with a non-zero weight, or `*` with one when gzip is not named. An unreadable header
/// or weight is taken as not admitting it: identity is always acceptable, a wrong guess is not.
pub fn accepted(headers: &hyper::HeaderMap) -> bool {
    let (mut gzip, mut any) = (None, None);
    for value in headers.get_all(hyper::header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { return false };
        for item in value.split(',') {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let mut weight = Some(1.0_f32);
            for param in parts {
                let (name, value) = param.split_once('=').unwrap_or((param, ""));
                if name.trim().eq_ignore_ascii_case("q") {
                    weight = parse_weight(value.trim());
                }
            }
            let Some(weight) = weight else { return false };
            if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                gzip = Some(weight);
            } else if coding == "*" {
                any = Some(weight);
            }
        }
    }
    gzip.or(any).is_some_and(|weight| weight > 0.0)
}

/// A qvalue: 0 to 1 with up to three decimals (RFC 9110, section 12.4.2).
fn parse_weight(text: &str) -> Option<f32> {
    let ok = match text.split_once('.') {
        None => text == "0" || text == "1",
        Some((whole, fraction)) => {
            (whole == "0" || whole == "1")
                && fraction.len() <= 3
                && fraction.bytes().all(|b| b.is_ascii_digit())
                && (whole == "0" || fraction.bytes().all(|b| b == b'0'))
        }
    };
    ok.then(|| text.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn gunzip(chunks: &[Bytes]) -> Vec<u8> {
        let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let mut decoder = flate2::read::GzDecoder::new(&joined[..]);
        let mut out = Vec::new();
        decoder.read_to_end(&mut out).expect("a valid gzip member, CRC and length checked");
        let mut rest = Vec::new();
        decoder.into_inner().read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "one member, nothing after it");
        out
    }

    #[test]
    fn a_shared_prefix_and_a_tail_read_as_one_member() {
        // A text like a snapshot's, several deflate blocks long.
        let text: String = (0..20_000)
            .map(|i| format!("memlock_cgroup_memory_working_set_bytes{{cgroup=\"/job/{i}\"}} {}\n", i * 4096))
            .collect();
        let prefix = Prefix::compress(text.as_bytes()).unwrap();
        assert!(prefix.len() < text.len() / 5, "{} of {}", prefix.len(), text.len());
        for tail in ["", "memlock_exporter_build_info 1\n", &text[..5000]] {
            let member = prefix.member(tail.as_bytes()).unwrap();
            assert_eq!(gunzip(&member), [text.as_bytes(), tail.as_bytes()].concat());
            assert_eq!(member[1].as_ptr(), prefix.shared().as_ptr(), "the text's compressed form is shared");
        }
        let empty = Prefix::compress(b"").unwrap();
        assert_eq!(gunzip(&empty.member(b"tail\n").unwrap()), b"tail\n");
        assert_eq!(gunzip(&empty.member(b"").unwrap()), b"");
    }

    /// Incompressible input makes the sync flush need more room than the first guess.
    #[test]
    fn incompressible_text_grows_the_output_until_flushed() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let noise: Vec<u8> = (0..300_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let prefix = Prefix::compress(&noise).unwrap();
        assert_eq!(gunzip(&prefix.member(&noise[..1000]).unwrap()), [&noise[..], &noise[..1000]].concat());
    }

    fn accepts(values: &[&str]) -> bool {
        let mut headers = hyper::HeaderMap::new();
        for value in values {
            headers.append(hyper::header::ACCEPT_ENCODING, hyper::header::HeaderValue::from_str(value).unwrap());
        }
        accepted(&headers)
    }

    #[test]
    fn accept_encoding_is_read_with_its_weights() {
        // What Prometheus sends (scrape/scrape.go: acceptEncodingHeader).
        assert!(accepts(&["gzip"]));
        assert!(accepts(&["deflate, gzip;q=1.0, *;q=0.5"]));
        assert!(accepts(&["br", "GZip ; q=0.001"]), "two header lines, case and spaces");
        assert!(accepts(&["x-gzip"]));
        assert!(accepts(&["*"]));
        assert!(!accepts(&[]));
        assert!(!accepts(&["identity"]));
        assert!(!accepts(&["gzip;q=0"]));
        assert!(!accepts(&["gzip;q=0.000, *"]), "gzip named and refused: * does not bring it back");
        assert!(!accepts(&["*;q=0"]));
        assert!(!accepts(&["gzip;q=2"]), "out of range");
        assert!(!accepts(&["gzip;q=0.5000"]), "more than three decimals");
        assert!(!accepts(&["gzip;q=abc"]));
        assert!(!accepts(&["gzip;q=1.5"]));
    }
}
