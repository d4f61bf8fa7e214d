//! The NCCL version inside `libnccl.so` and beside it, for a library whose file name carries none
//! (`site-packages/nvidia/nccl/lib/libnccl.so.2`, as the nvidia-nccl-cuXX wheels ship it).
//!
//! The library: NCCL builds `VERSION_STRING` as `"NCCL version " STR(NCCL_MAJOR) "." STR(NCCL_MINOR)
//! "." STR(NCCL_PATCH) NCCL_SUFFIX "+cuda" STR(CUDA_MAJOR) "." STR(CUDA_MINOR)` (src/init.cc; printed
//! by `showVersion`), a string literal, so it sits in the ELF `.rodata` section. Nearly all of a
//! wheel's library is the `.nv_fatbin` device code and `.rodata` is a small part (docs/metrics.md
//! gives the sizes and how to see them), so the section is located through the section headers
//! and only it is scanned, in chunks, up to [`MAX_RODATA_SCAN`].
//!
//! The wheel: `site-packages/nvidia_nccl_cu12-X.dist-info/METADATA`, the core metadata's
//! `Version:` header.
//!
//! Pure functions over bytes the caller read; [`crate::collect::nccl_version`] does the reading.

/// What is read of the file's start: the ELF64 header.
pub(crate) const ELF_HEADER_BYTES: usize = 64;

/// Bytes of one ELF64 section header (`Elf64_Shdr`).
pub(crate) const SECTION_HEADER_BYTES: usize = 64;

/// The most section headers read: far more than a linker writes for a shared library.
pub const MAX_SECTIONS: u16 = 1024;

/// The longest section name table read (`.shstrtab`: a few hundred bytes in a linked library).
pub const MAX_SECTION_NAMES: u64 = 64 << 10;

/// The most of `.rodata` scanned: several times the largest wheel's (docs/metrics.md), room for
/// NCCL's growth that still bounds the work a hostile file costs.
pub const MAX_RODATA_SCAN: u64 = 4 << 20;

/// The longest version text taken after `NCCL version ` (release, suffix and `+cudaX.Y`).
pub const MAX_VERSION_TEXT: usize = 64;

const MARKER: &[u8] = b"NCCL version ";

/// Where the section header table is and how to read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SectionTable {
    pub offset: u64,
    pub count: u16,
    /// Index of the section holding the section names (`e_shstrndx`).
    pub names: u16,
}

impl SectionTable {
    /// Bytes of the whole table.
    pub fn bytes(&self) -> u64 {
        u64::from(self.count) * SECTION_HEADER_BYTES as u64
    }
}

/// One section's place in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    pub name: u32,
    pub offset: u64,
    pub size: u64,
    /// `SHT_NOBITS` (8): the section occupies no bytes in the file (`.bss`).
    pub(crate) nobits: bool,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The section header table of an ELF64 little-endian file (the only kind NCCL ships: x86_64 and
/// aarch64), from its first [`ELF_HEADER_BYTES`] and its size. Field offsets are `Elf64_Ehdr`'s
/// (include/uapi/linux/elf.h). The error says what is wrong, for a reason shown to the operator.
pub(crate) fn section_table(header: &[u8], file_size: u64) -> Result<SectionTable, String> {
    if header.len() < 4 || &header[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if header.len() < ELF_HEADER_BYTES {
        return Err(format!("truncated: {} bytes, shorter than an ELF header", header.len()));
    }
    if header[4] != 2 || header[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let (Some(offset), Some(entry), Some(count), Some(names)) =
        (u64_at(header, 0x28), u16_at(header, 0x3a), u16_at(header, 0x3c), u16_at(header, 0x3e))
    else {
        return Err("truncated ELF header".into());
    };
    if offset == 0 || count == 0 {
        return Err("no section headers".into());
    }
    if usize::from(entry) != SECTION_HEADER_BYTES {
        return Err(format!("section headers of {entry} bytes, not {SECTION_HEADER_BYTES}"));
    }
    if count > MAX_SECTIONS {
        return Err(format!("{count} sections, more than {MAX_SECTIONS}"));
    }
    if names >= count {
        return Err(format!("section name table {names} beyond the {count} sections"));
    }
    let table = SectionTable { offset, count, names };
    if offset.checked_add(table.bytes()).is_none_or(|end| end > file_size) {
        return Err(format!("truncated: section headers end beyond the file's {file_size} bytes"));
    }
    Ok(table)
}

/// Section `index` of the table's bytes (`Elf64_Shdr`: sh_name, sh_type, sh_offset, sh_size).
pub fn section(table: &[u8], index: u16) -> Option<Section> {
    let at = usize::from(index) * SECTION_HEADER_BYTES;
    let entry = table.get(at..at + SECTION_HEADER_BYTES)?;
    Some(Section {
        name: u32_at(entry, 0)?,
        nobits: u32_at(entry, 4)? == 8,
        offset: u64_at(entry, 0x18)?,
        size: u64_at(entry, 0x20)?,
    })
}

/// The section called `want` (`.rodata`), given the table's bytes and the name table's.
pub(crate) fn find_section(table: &[u8], names: &[u8], want: &str) -> Option<Section> {
    let count = u16::try_from(table.len() / SECTION_HEADER_BYTES).unwrap_or(u16::MAX);
    (0..count).filter_map(|i| section(table, i)).find(|s| {
        let start = s.name as usize;
        names.get(start..).and_then(|rest| rest.split(|&b| b == 0).next()) == Some(want.as_bytes())
    })
}

/// What one window of the library's bytes says about `NCCL version X`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scan {
    /// The text after `NCCL version `: `2.21.5+cuda12.4`.
    Found(String),
    /// A `NCCL version <digit>` string that is no version: why.
    Bad(String),
    /// A candidate runs to the window's end: scan again from this index with more bytes.
    Partial(usize),
    /// None here; the window's last `MARKER.len() - 1` bytes may start one.
    Absent,
}

/// Bytes of a window to carry into the next when it ends in [`Scan::Absent`].
pub(crate) const CARRY: usize = 12;

/// The first `NCCL version <digit>...` string in `window`, NUL-terminated as a C literal. The
/// format `NCCL version %s` (and any other non-digit continuation) is skipped. A candidate with
/// no NUL within [`MAX_VERSION_TEXT`] bytes, or whose bytes are not printable ASCII, is
/// [`Scan::Bad`]: the first such string decides, so that a hostile file costs one window.
pub fn scan(window: &[u8]) -> Scan {
    let mut from = 0;
    while let Some(i) = window[from..].windows(MARKER.len()).position(|w| w == MARKER) {
        let start = from + i;
        let rest = &window[start + MARKER.len()..];
        match rest.first() {
            None => return Scan::Partial(start),
            Some(b) if !b.is_ascii_digit() => {
                from = start + MARKER.len();
                continue;
            }
            Some(_) => {}
        }
        return match rest.iter().take(MAX_VERSION_TEXT + 1).position(|&b| b == 0) {
            Some(end) => match std::str::from_utf8(&rest[..end]) {
                Ok(text) if text.bytes().all(|b| b.is_ascii_graphic() || b == b' ') => Scan::Found(text.to_owned()),
                Ok(_) => Scan::Bad("its `NCCL version` string has control characters".into()),
                Err(_) => Scan::Bad("its `NCCL version` string is not UTF-8".into()),
            },
            None if rest.len() > MAX_VERSION_TEXT => {
                Scan::Bad(format!("its `NCCL version` string is longer than {MAX_VERSION_TEXT} bytes"))
            }
            None => Scan::Partial(start),
        };
    }
    Scan::Absent
}

/// Bytes read from the library per call.
pub const CHUNK: usize = 64 << 10;

/// The library's `NCCL version` text, from `.rodata` located through the section headers, for a
/// file of `size` bytes that `read(offset, len)` reads (the caller's I/O: `pread` on the file, or
/// a slice). At most [`MAX_RODATA_SCAN`] bytes of the section are read, [`CHUNK`] at a time, and
/// memory is one chunk and the carried tail of the last. The error says why, for the operator.
pub fn library_version(size: u64, mut read: impl FnMut(u64, u64) -> Result<Vec<u8>, String>) -> Result<String, String> {
    let header = read(0, (ELF_HEADER_BYTES as u64).min(size))?;
    let table = section_table(&header, size)?;
    let headers = read(table.offset, table.bytes())?;
    let names = section(&headers, table.names).ok_or("no section name table")?;
    if names.size > MAX_SECTION_NAMES || names.offset.checked_add(names.size).is_none_or(|end| end > size) {
        return Err(format!("section name table of {} bytes at {}", names.size, names.offset));
    }
    let names = read(names.offset, names.size)?;
    let rodata = find_section(&headers, &names, ".rodata").ok_or("no .rodata section")?;
    if rodata.nobits || rodata.offset.checked_add(rodata.size).is_none_or(|end| end > size) {
        return Err(format!("truncated: .rodata ends beyond the file's {size} bytes"));
    }
    let len = rodata.size.min(MAX_RODATA_SCAN);
    let mut window: Vec<u8> = Vec::with_capacity(CHUNK + MARKER.len() + MAX_VERSION_TEXT + 1);
    let mut done = 0u64;
    while done < len {
        let want = (len - done).min(CHUNK as u64);
        window.extend_from_slice(&read(rodata.offset + done, want)?);
        done += want;
        match scan(&window) {
            Scan::Found(text) => return Ok(text),
            Scan::Bad(why) => return Err(why),
            Scan::Partial(from) => {
                window.drain(..from);
            }
            Scan::Absent => {
                let tail = window.len().saturating_sub(CARRY);
                window.drain(..tail);
            }
        }
    }
    Err(format!("no `NCCL version` string in the first {len} bytes of .rodata"))
}

/// The release in a library's version text: `2.21.5` of `2.21.5+cuda12.4` (NCCL_SUFFIX, empty in
/// releases, stays: `2.19.0a0`). `None` when it does not start as a dotted version.
pub fn release(text: &str) -> Option<&str> {
    let release = text.split(['+', ' ']).next()?;
    let numbers: Vec<&str> = release.split('.').collect();
    let dotted = numbers.len() >= 3
        && numbers[..2].iter().all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        && numbers[2].starts_with(|c: char| c.is_ascii_digit());
    (dotted && release.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.')).then_some(release)
}

/// The `Version:` of a wheel's `METADATA` (core metadata: RFC 822 headers, then a blank line and
/// the description). `None` when absent or not a plausible version.
pub fn dist_info_version(metadata: &str) -> Option<&str> {
    let version = metadata.lines().take_while(|l| !l.trim().is_empty()).find_map(|l| l.strip_prefix("Version:"))?;
    let version = version.trim();
    let plausible = !version.is_empty()
        && version.len() <= MAX_VERSION_TEXT
        && version.bytes().all(|b| b.is_ascii_alphanumeric() || b"._+-!".contains(&b));
    plausible.then_some(version)
}

/// Whether a directory entry of site-packages is the nvidia-nccl wheel's dist-info
/// (`nvidia_nccl_cu12-2.23.4.dist-info`; pip normalises the project name's dashes).
pub fn is_nccl_dist_info(name: &str) -> bool {
    name.starts_with("nvidia_nccl_cu") && name.ends_with(".dist-info")
}

#[doc(hidden)]
/// An ELF64 file with the named sections laid out after the header, then the section header
/// table: what a linker writes, reduced to the fields read here. For tests and fuzz seeds.
pub fn elf(sections: &[(&str, &[u8])]) -> Vec<u8> {
    let mut names = vec![0u8];
    let mut bodies = Vec::new();
    let mut out = vec![0u8; ELF_HEADER_BYTES];
    let name_of = |name: &str, names: &mut Vec<u8>| {
        let at = names.len() as u32;
        names.extend_from_slice(name.as_bytes());
        names.push(0);
        at
    };
    for (name, body) in sections {
        let at = name_of(name, &mut names);
        bodies.push((at, out.len() as u64, body.len() as u64));
        out.extend_from_slice(body);
    }
    let shstrtab = name_of(".shstrtab", &mut names);
    bodies.push((shstrtab, out.len() as u64, names.len() as u64));
    out.extend_from_slice(&names);
    let table = out.len() as u64;
    out.extend_from_slice(&[0u8; SECTION_HEADER_BYTES]);
    for (name, offset, size) in &bodies {
        let mut entry = [0u8; SECTION_HEADER_BYTES];
        entry[..4].copy_from_slice(&name.to_le_bytes());
        entry[4..8].copy_from_slice(&1u32.to_le_bytes());
        entry[0x18..0x20].copy_from_slice(&offset.to_le_bytes());
        entry[0x20..0x28].copy_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&entry);
    }
    out[..6].copy_from_slice(b"\x7fELF\x02\x01");
    out[0x28..0x30].copy_from_slice(&table.to_le_bytes());
    out[0x3a..0x3c].copy_from_slice(&(SECTION_HEADER_BYTES as u16).to_le_bytes());
    let count = bodies.len() as u16 + 1;
    out[0x3c..0x3e].copy_from_slice(&count.to_le_bytes());
    out[0x3e..0x40].copy_from_slice(&(count - 1).to_le_bytes());
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn rodata_of(file: &[u8]) -> Result<Option<Section>, String> {
        let t = section_table(&file[..ELF_HEADER_BYTES.min(file.len())], file.len() as u64)?;
        let table = &file[t.offset as usize..(t.offset + t.bytes()) as usize];
        let names = section(table, t.names).ok_or("no names")?;
        let names = &file[names.offset as usize..(names.offset + names.size) as usize];
        Ok(find_section(table, names, ".rodata"))
    }

    #[test]
    fn rodata_is_found_through_the_section_headers() {
        let body = b"\0NCCL version %s\0NCCL version 2.23.4+cuda12.6\0";
        let file = elf(&[(".text", b"\x90\x90"), (".rodata", body), (".nv_fatbin", b"NCCL version 9.9.9\0")]);
        let rodata = rodata_of(&file).unwrap().unwrap();
        let bytes = &file[rodata.offset as usize..(rodata.offset + rodata.size) as usize];
        assert_eq!(bytes, body);
        assert_eq!(scan(bytes), Scan::Found("2.23.4+cuda12.6".into()), "the format string is skipped");
        assert_eq!(release("2.23.4+cuda12.6"), Some("2.23.4"));
        assert_eq!(rodata_of(&elf(&[(".text", b"x")])).unwrap(), None, "no .rodata");
    }

    fn reader<'a>(file: &'a [u8], total: &'a mut u64) -> impl FnMut(u64, u64) -> Result<Vec<u8>, String> + 'a {
        let total = std::cell::Cell::from_mut(total);
        move |offset, len| {
            total.set(total.get() + len);
            file.get(offset as usize..(offset + len) as usize).map(<[u8]>::to_vec).ok_or_else(|| "beyond".into())
        }
    }

    #[test]
    fn the_version_is_found_across_chunks_and_only_within_the_bound() {
        for pad in [0, CHUNK - 20, CHUNK - 13, CHUNK - 5, CHUNK - 1, CHUNK, 3 * CHUNK + 7] {
            let rodata = [vec![b'x'; pad], b"NCCL version 2.23.4+cuda12.6\0".to_vec()].concat();
            let file = elf(&[(".text", b"\x90"), (".rodata", &rodata)]);
            let mut read = 0;
            let found = library_version(file.len() as u64, reader(&file, &mut read));
            assert_eq!(found, Ok("2.23.4+cuda12.6".into()), "{pad} bytes before it");
        }
        // Past the bound: not read, and no more than the bound is.
        let rodata = [vec![b'x'; MAX_RODATA_SCAN as usize], b"NCCL version 2.23.4+cuda12.6\0".to_vec()].concat();
        let file = elf(&[(".rodata", &rodata)]);
        let mut read = 0;
        let found = library_version(file.len() as u64, reader(&file, &mut read));
        assert_eq!(found, Err(format!("no `NCCL version` string in the first {MAX_RODATA_SCAN} bytes of .rodata")));
        assert!(read < MAX_RODATA_SCAN + 4096, "{read} bytes read");
        // A truncated .rodata, or one of no bytes in the file.
        let cut = &file[..file.len() / 2];
        let mut read = 0;
        let found = library_version(cut.len() as u64, reader(cut, &mut read));
        assert!(found.unwrap_err().starts_with("truncated"));
    }

    #[test]
    fn broken_files_give_a_reason() {
        let file = elf(&[(".rodata", b"NCCL version 2.21.5+cuda12.4\0")]);
        assert_eq!(section_table(b"#!/bin/sh\n", 10).unwrap_err(), "not an ELF file");
        assert_eq!(section_table(&file[..20], 20).unwrap_err(), "truncated: 20 bytes, shorter than an ELF header");
        let cut = (file.len() - 10) as u64;
        assert_eq!(
            section_table(&file[..ELF_HEADER_BYTES], cut).unwrap_err(),
            format!("truncated: section headers end beyond the file's {cut} bytes")
        );
        let mut big_endian = file.clone();
        big_endian[5] = 2;
        assert_eq!(section_table(&big_endian[..64], 1 << 20).unwrap_err(), "not a 64-bit little-endian ELF file");
        let mut many = file.clone();
        many[0x3c..0x3e].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(section_table(&many[..64], u64::MAX).unwrap_err(), "65535 sections, more than 1024");
        let mut huge_offset = file.clone();
        huge_offset[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(section_table(&huge_offset[..64], u64::MAX).unwrap_err().starts_with("truncated"), "no overflow");
        let mut no_names = file;
        no_names[0x3e..0x40].copy_from_slice(&9u16.to_le_bytes());
        assert_eq!(section_table(&no_names[..64], 1 << 20).unwrap_err(), "section name table 9 beyond the 3 sections");
    }

    #[test]
    fn the_version_string_is_bounded_and_checked() {
        assert_eq!(scan(b"xNCCL version 2.21.5+cuda12.4\0y"), Scan::Found("2.21.5+cuda12.4".into()));
        assert_eq!(scan(b"NCCL version %s\0 NCCL version  \0"), Scan::Absent);
        let long = [b"NCCL version 2".as_slice(), &[b'1'; 10 << 20], b"\0"].concat();
        assert_eq!(scan(&long), Scan::Bad("its `NCCL version` string is longer than 64 bytes".into()));
        assert_eq!(scan(b"NCCL version 2.\xff\xfe\0"), Scan::Bad("its `NCCL version` string is not UTF-8".into()));
        assert_eq!(
            scan(b"NCCL version 2.\x1b[31m\0"),
            Scan::Bad("its `NCCL version` string has control characters".into())
        );
        // Cut by the window: scanned again with the next bytes.
        assert_eq!(scan(b"....NCCL version 2.2"), Scan::Partial(4));
        assert_eq!(scan(b"....NCCL version "), Scan::Partial(4));
        assert_eq!(CARRY, MARKER.len() - 1);
    }

    #[test]
    fn releases_and_dist_info() {
        assert_eq!(release("2.32.3+cuda12.9"), Some("2.32.3"));
        assert_eq!(release("2.19.0a0+cuda12.2"), Some("2.19.0a0"));
        assert_eq!(release("2.21.5 compiled with CUDA 12.4"), Some("2.21.5"));
        for bad in ["x.1.2", "2.21", "2..5", "2.21.x", "2.21.5;rm"] {
            assert_eq!(release(bad), None, "{bad}");
        }
        let metadata = "Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: 2.23.4\nSummary: NCCL\n\n\
            Version: 9.9.9 in the description\n";
        assert_eq!(dist_info_version(metadata), Some("2.23.4"));
        assert_eq!(dist_info_version("Name: x\n\nVersion: 1.2.3\n"), None, "the description is not a header");
        assert_eq!(dist_info_version(&format!("Version: {}\n", "9".repeat(100))), None);
        assert_eq!(dist_info_version("Version: 2.1 <script>\n"), None);
        assert!(is_nccl_dist_info("nvidia_nccl_cu12-2.23.4.dist-info"));
        assert!(is_nccl_dist_info("nvidia_nccl_cu11-2.21.5.dist-info"));
        assert!(!is_nccl_dist_info("nvidia_cublas_cu12-12.4.dist-info"));
        assert!(!is_nccl_dist_info("nvidia_nccl_cu12-2.23.4.data"));
    }
}
