//! `/proc/PID/uid_map`: which user namespace a process is in, as far as capabilities go.
//!
//! Every line is `%10u %10u %10u\n`: the first uid inside the namespace, the uid it maps to in
//! the parent namespace, and how many. The initial user namespace maps all 2^32 - 1 uids onto
//! themselves: one line `0 0 4294967295`. `capable(CAP_IPC_LOCK)`, which lifts RLIMIT_MEMLOCK
//! for mlock and RDMA registration, checks the initial namespace, so a capability held only
//! inside a user namespace (rootless containers, Enroot and other Slurm container plugins)
//! does not exempt.
//!
//! A namespace made to map every uid onto itself cannot be told from the initial one by this
//! file alone (`/proc/PID/ns/user` can, but reading it needs ptrace access); only a privileged
//! process can make one.

use super::ParseError;

const ALL_UIDS: u64 = u32::MAX as u64;

/// True when the map is the initial namespace's identity map of every uid, as a reader in the
/// initial namespace sees it.
pub fn is_initial(text: &str) -> Result<bool, ParseError> {
    Ok(full_extent(text)? == Some(0))
}

/// What a process's map says about its namespace, read by a reader in the initial namespace
/// (`reader_initial`) or in another one. `uid_m_show()` (kernel/user_namespace.c) prints the
/// first and count columns as the namespace holds them, and only the middle one relative to the
/// reader (`from_kuid(seq_user_ns(seq), ...)`; relative to the parent when the reader is in that
/// very namespace). So a map that is not one extent of every uid starting at 0 is another
/// namespace from any view: `Some(false)`. One that is: the initial namespace if read from
/// there and mapped onto 0 (`Some`), but from inside a user namespace the host's map reads
/// `0 4294967295 4294967295` or, when the reader maps its root onto host root, `0 0
/// 4294967295`: it cannot tell (`None`).
pub fn judge(text: &str, reader_initial: bool) -> Result<Option<bool>, ParseError> {
    Ok(match full_extent(text)? {
        None => Some(false),
        Some(lower) if reader_initial => Some(lower == 0),
        Some(_) => None,
    })
}

/// The middle column of a map that could be the initial namespace's (one extent of every uid
/// from 0), `None` for any other map.
fn full_extent(text: &str) -> Result<Option<u64>, ParseError> {
    let mut extents = Vec::with_capacity(1);
    for (index, line) in text.split('\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let mut fields = line.split_ascii_whitespace();
        let mut number = |name: &str| -> Result<u64, ParseError> {
            let value =
                fields.next().ok_or_else(|| ParseError::MissingValue { line: index + 1, key: name.to_owned() })?;
            let parsed: u64 = super::decimal(value).ok_or_else(|| ParseError::NotANumber {
                line: index + 1,
                key: name.to_owned(),
                value: value.to_owned(),
            })?;
            if parsed > ALL_UIDS {
                return Err(ParseError::Overflow { line: index + 1, key: name.to_owned() });
            }
            Ok(parsed)
        };
        let extent = (number("inside")?, number("outside")?, number("count")?);
        if fields.next().is_some() {
            return Err(ParseError::Format(format!("line {}: more than three fields", index + 1)));
        }
        extents.push(extent);
    }
    // An empty map is a new namespace whose map is not written yet: not the initial one.
    Ok(match extents[..] {
        [(0, lower, ALL_UIDS)] => Some(lower),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_namespace_maps_every_uid_onto_itself() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/captures/proc_self_uid_map"
        ))
        .unwrap();
        assert_eq!(is_initial(&text), Ok(true));
        assert_eq!(is_initial("         0          0 4294967295\n"), Ok(true));
    }

    #[test]
    fn a_user_namespace_is_not_the_initial_one() {
        // `unshare --user --map-root-user` as uid 65534, and a rootless container's subuid range.
        assert_eq!(is_initial("         0      65534          1\n"), Ok(false));
        assert_eq!(is_initial("         0       1000          1\n         1     100000      65536\n"), Ok(false));
        // Identity, but not of every uid.
        assert_eq!(is_initial("         0          0      65536\n"), Ok(false));
        assert_eq!(is_initial(""), Ok(false));
    }

    /// Read from inside a user namespace, the counts still tell a namespace; only the
    /// host's own map (every uid) cannot be told, whatever its middle column reads.
    #[test]
    fn a_namespaced_reader_still_tells_a_namespace_by_its_extents() {
        // A namespaced root's own map, read from inside that namespace (relative to the parent).
        assert_eq!(judge("         0      65534          1\n", false), Ok(Some(false)));
        assert_eq!(judge("         0      65534          1\n", true), Ok(Some(false)));
        // The host's map from `unshare --user --map-root-user` as nobody, then as root (6.18).
        assert_eq!(judge("         0 4294967295 4294967295\n", false), Ok(None));
        assert_eq!(judge("         0          0 4294967295\n", false), Ok(None));
        assert_eq!(judge("         0          0 4294967295\n", true), Ok(Some(true)));
        assert_eq!(judge("", false), Ok(Some(false)));
        assert!(judge("0 x 1\n", false).is_err());
    }

    #[test]
    fn malformed_maps_are_errors() {
        assert!(matches!(is_initial("0 0\n"), Err(ParseError::MissingValue { line: 1, .. })));
        assert!(matches!(is_initial("0 x 1\n"), Err(ParseError::NotANumber { line: 1, .. })));
        assert!(matches!(is_initial("0 0 4294967296\n"), Err(ParseError::Overflow { line: 1, .. })));
        assert!(matches!(is_initial("0 0 1 1\n"), Err(ParseError::Format(_))));
    }
}
