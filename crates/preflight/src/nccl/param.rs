//! How NCCL reads one value, the vocabulary below its variable list and its grammars: the
//! parser NCCL applies to a variable ([`Parse`], chosen per variable by
//! scripts/nccl_variables.py), glibc's strtoll as NCCL calls it, and how bad a problem is.

/// How NCCL parses a variable; generated per variable by scripts/nccl_variables.py.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parse {
    /// `NCCL_PARAM` (src/include/param.h): `strtoll(value, NULL, 0)` in ncclLoadParam
    /// (src/misc/param.cc). Empty or out of range gives the default; otherwise the number the
    /// leading characters spell, whatever follows.
    Strtoll,
    /// `DEFINE_NCCL_PARAM` of a signed integer type with the default parser
    /// (src/include/param/parser_default.h, ncclIntegerParser): strtoll base 10 over the whole
    /// value, else the default.
    Decimal,
    /// The same with strtoull (an unsigned type).
    DecimalUnsigned,
    /// `DEFINE_NCCL_PARAM` of bool: 1, T, TRUE, 0, F, FALSE (case-insensitive), else the default.
    Bool,
    /// `ncclParamOneOf`: one of these names, case-insensitive, trimmed (parser_enum.h).
    OneOf(&'static [&'static str]),
    /// Read as a string (ncclGetEnv, getenv, `const char*` parameters).
    String,
    /// The first argument of ncclGetLevel (src/graph/paths.cc): strtol base 0, 1 disables.
    DisableSwitch,
    /// The second argument of ncclGetLevel: a path level name (LOC ... SYS) or a number.
    PathLevel,
    /// A parser of its own (bit sets, lists, bounded ranges): not judged here.
    Custom,
}

/// One variable NCCL reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variable {
    pub name: &'static str,
    pub parse: Parse,
    /// The default as written in NCCL's source.
    pub default: &'static str,
    /// Where NCCL defines or reads it (path:line in NVIDIA/nccl).
    pub defined_at: &'static str,
}

/// A variable an earlier release read (or NCCL's guide documents) that this one does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub name: &'static str,
    /// The last release tag that read it; empty when no release in NCCL's history did.
    pub last_release: &'static str,
}

/// What `strtoll(text, &end, 0)` does with a value, as glibc implements it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strtoll {
    /// The whole value is one number.
    Whole(i64),
    /// A number followed by characters strtoll does not read (`4M` reads as 4).
    Prefix { value: i64, rest: Vec<u8> },
    /// No digits at all: strtoll returns 0 and sets no error, so NCCL uses 0.
    NoDigits,
    /// Beyond a 64-bit integer: ERANGE, and NCCL falls back to the default.
    OutOfRange,
}

/// C's isspace in the C locale.
pub(crate) fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// `strtoll(text, &end, base)` for base 0 (a `0x` prefix is hex, a leading 0 octal) or 10.
pub fn strtoll(text: &[u8], base: u32) -> Strtoll {
    let mut i = text.iter().take_while(|b| is_c_space(**b)).count();
    let negative = match text.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let mut radix = if base == 0 { 10 } else { base };
    if base == 0 || base == 16 {
        let hex_prefix = text.get(i) == Some(&b'0')
            && matches!(text.get(i + 1), Some(b'x' | b'X'))
            && text.get(i + 2).is_some_and(|b| b.is_ascii_hexdigit());
        if hex_prefix {
            radix = 16;
            i += 2;
        } else if base == 0 && text.get(i) == Some(&b'0') {
            radix = 8;
        }
    }
    let digits = text[i.min(text.len())..].iter().take_while(|b| (**b as char).is_digit(radix)).count();
    if digits == 0 {
        return Strtoll::NoDigits;
    }
    // Accumulated as a negative number so that i64::MIN fits, as glibc does.
    let mut value: i64 = 0;
    for b in &text[i..i + digits] {
        let d = i64::from((*b as char).to_digit(radix).unwrap_or(0));
        match value.checked_mul(i64::from(radix)).and_then(|v| v.checked_sub(d)) {
            Some(v) => value = v,
            None => return Strtoll::OutOfRange,
        }
    }
    let value = if negative {
        value
    } else {
        match value.checked_neg() {
            Some(v) => v,
            None => return Strtoll::OutOfRange,
        }
    };
    let rest = &text[i + digits..];
    if rest.is_empty() {
        Strtoll::Whole(value)
    } else {
        Strtoll::Prefix { value, rest: rest.to_vec() }
    }
}

/// Bytes as text: UTF-8 as is, other bytes and control characters escaped (`\xff`).
pub(crate) fn show_bytes(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// How bad a problem with a variable is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Does nothing (removed, never existed, a likely typo).
    Warn,
    /// NCCL reads something other than what was written, or cannot run with it.
    Fail,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtoll_reads_what_glibc_reads() {
        assert_eq!(strtoll(b"-1", 0), Strtoll::Whole(-1));
        assert_eq!(strtoll(b"0x10", 0), Strtoll::Whole(16));
        assert_eq!(strtoll(b"0X1f", 0), Strtoll::Whole(31));
        assert_eq!(strtoll(b"010", 0), Strtoll::Whole(8), "a leading 0 is octal");
        assert_eq!(strtoll(b"  +42", 0), Strtoll::Whole(42));
        assert_eq!(strtoll(b"4M", 0), Strtoll::Prefix { value: 4, rest: b"M".to_vec() });
        assert_eq!(strtoll(b"09", 0), Strtoll::Prefix { value: 0, rest: b"9".to_vec() }, "9 is not octal");
        assert_eq!(strtoll(b"0x", 0), Strtoll::Prefix { value: 0, rest: b"x".to_vec() }, "0x without a hex digit");
        assert_eq!(strtoll(b"\xff", 0), Strtoll::NoDigits);
        assert_eq!(strtoll(b"", 0), Strtoll::NoDigits);
        assert_eq!(strtoll(b"-", 0), Strtoll::NoDigits);
        assert_eq!(strtoll(b"9223372036854775807", 0), Strtoll::Whole(i64::MAX));
        assert_eq!(strtoll(b"-9223372036854775808", 0), Strtoll::Whole(i64::MIN));
        assert_eq!(strtoll(b"9223372036854775808", 0), Strtoll::OutOfRange);
        assert_eq!(strtoll(b"0x10", 10), Strtoll::Prefix { value: 0, rest: b"x10".to_vec() });
    }
}
