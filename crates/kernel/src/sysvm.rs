//! Single-value sysctl and sysfs files, and the bracketed "choice" files of transparent
//! hugepages (`always [madvise] never`).

use super::ParseError;

/// The options a THP file offers and which one is active (the bracketed token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub options: Vec<String>,
    pub active: String,
}

/// Parses `always [madvise] never`. Exactly one bracketed token must be present.
pub fn parse_choice(text: &str) -> Result<Choice, ParseError> {
    let mut options = Vec::new();
    let mut active = None;
    for token in text.split_ascii_whitespace() {
        if let Some(inner) = token.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            if active.replace(inner.to_owned()).is_some() {
                return Err(ParseError::Format("more than one bracketed choice".into()));
            }
            options.push(inner.to_owned());
        } else {
            options.push(token.to_owned());
        }
    }
    let active = active.ok_or_else(|| ParseError::Format("no bracketed (active) choice".into()))?;
    if options.iter().any(|o| o.is_empty() || !o.bytes().all(|b| b.is_ascii_graphic())) {
        return Err(ParseError::Format("choice is not a plain word".into()));
    }
    Ok(Choice { options, active })
}

/// `hugepages-2048kB` -> 2097152 (bytes).
pub fn parse_hugepage_dir_name(name: &str) -> Option<u64> {
    let kib: u64 = super::name_number(name.strip_prefix("hugepages-")?.strip_suffix("kB")?)?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_captured_thp_files() {
        let enabled = parse_choice(include_str!("../../../tests/fixtures/captures/thp_enabled")).unwrap();
        assert_eq!(enabled.active, "madvise");
        assert_eq!(enabled.options, ["always", "madvise", "never"]);
        let defrag = parse_choice(include_str!("../../../tests/fixtures/captures/thp_defrag")).unwrap();
        assert_eq!(defrag.active, "madvise");
        assert_eq!(defrag.options.len(), 5);
        let shmem = parse_choice(include_str!("../../../tests/fixtures/captures/thp_shmem_enabled")).unwrap();
        assert_eq!(shmem.active, "never");
    }

    #[test]
    fn malformed_choices() {
        assert!(parse_choice("always madvise never").is_err());
        assert!(parse_choice("[always] [never]").is_err());
        assert!(parse_choice("").is_err());
        assert!(parse_choice("[]").is_err());
    }

    #[test]
    fn hugepage_directory_names() {
        assert_eq!(parse_hugepage_dir_name("hugepages-2048kB"), Some(2 << 20));
        assert_eq!(parse_hugepage_dir_name("hugepages-1048576kB"), Some(1 << 30));
        assert_eq!(parse_hugepage_dir_name("hugepages-64kB"), Some(64 << 10));
        assert_eq!(parse_hugepage_dir_name("hugepages-2048MB"), None);
        assert_eq!(parse_hugepage_dir_name("hugepages-99999999999999999999kB"), None);
        assert_eq!(parse_hugepage_dir_name("hugepages-18014398509481984kB"), None);
    }

    #[test]
    fn single_numbers() {
        assert_eq!(crate::parse_u64("65530\n"), Ok(65530));
        assert!(crate::parse_u64("").is_err());
        assert!(crate::parse_u64("-1").is_err());
        assert!(crate::parse_u64("18446744073709551616").is_err());
        assert_eq!(crate::parse_i64("-1\n"), Ok(-1));
    }
}
