//! `/proc/vmstat` and `/sys/devices/system/node/nodeN/vmstat`: `name value` lines, values in
//! pages or event counts.

use super::{field_u64, ParseError, Parsed};

/// The vmstat counters memlock-exporter uses, in pages.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Vmstat {
    pub nr_foll_pin_acquired: Option<u64>,
    pub nr_foll_pin_released: Option<u64>,
    pub nr_mlock: Option<u64>,
}

impl Vmstat {
    /// FOLL_PIN pin references held right now (acquired minus released): pins, not distinct
    /// pages (a page pinned twice counts twice), short O_DIRECT pins included. The two counters
    /// are per-CPU sums read at slightly different moments, so released can briefly lead: clamp
    /// at 0.
    pub fn pinned_pages(&self) -> Option<u64> {
        Some(self.nr_foll_pin_acquired?.saturating_sub(self.nr_foll_pin_released?))
    }
}

/// Parses vmstat text, all or nothing ([`Parsed::strict`]).
pub fn parse(text: &str) -> Result<Vmstat, ParseError> {
    parse_fields(text)?.strict()
}

/// Parses vmstat text field by field: a known key with a malformed value is an error of that
/// field only; other lines are skipped. A text without a single counter is an error.
pub fn parse_fields(text: &str) -> Result<Parsed<Vmstat>, ParseError> {
    let mut parsed = Parsed::<Vmstat>::default();
    let mut fields = 0usize;
    for (index, line) in text.lines().enumerate() {
        let mut parts = line.split_ascii_whitespace();
        let (Some(key), value) = (parts.next(), parts.next()) else { continue };
        let stat = &mut parsed.value;
        let slot = match key {
            "nr_foll_pin_acquired" => &mut stat.nr_foll_pin_acquired,
            "nr_foll_pin_released" => &mut stat.nr_foll_pin_released,
            "nr_mlock" => &mut stat.nr_mlock,
            _ => {
                if value.is_some_and(|v| v.bytes().all(|b| b.is_ascii_digit())) {
                    fields += 1;
                }
                continue;
            }
        };
        fields += 1;
        let line_no = index + 1;
        let value = match value {
            Some(value) => field_u64(line_no, key, value),
            None => Err(ParseError::MissingValue { line: line_no, key: key.to_owned() }),
        };
        match value {
            Ok(value) => *slot = Some(value),
            Err(error) => parsed.field_errors.push(error),
        }
    }
    if fields == 0 {
        return Err(ParseError::Empty);
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_captured_vmstat() {
        let stat = parse(include_str!("../../../tests/fixtures/captures/proc_vmstat")).unwrap();
        assert_eq!(stat.nr_foll_pin_acquired, Some(0));
        assert_eq!(stat.nr_foll_pin_released, Some(0));
        assert_eq!(stat.nr_mlock, Some(125856));
        assert_eq!(stat.pinned_pages(), Some(0));
    }

    #[test]
    fn pinned_pages_is_the_difference_and_never_negative() {
        let stat = parse("nr_foll_pin_acquired 70956\nnr_foll_pin_released 70656\n").unwrap();
        assert_eq!(stat.pinned_pages(), Some(300));
        let racing = parse("nr_foll_pin_acquired 10\nnr_foll_pin_released 12\n").unwrap();
        assert_eq!(racing.pinned_pages(), Some(0));
    }

    #[test]
    fn old_kernels_without_foll_pin_counters_have_no_pinned_value() {
        let stat = parse("nr_free_pages 100\nnr_mlock 3\n").unwrap();
        assert_eq!(stat.pinned_pages(), None);
    }

    #[test]
    fn a_malformed_counter_costs_only_that_counter() {
        let parsed = parse_fields("nr_mlock 3\nnr_foll_pin_acquired x\nnr_foll_pin_released 7\n").unwrap();
        assert_eq!((parsed.value.nr_mlock, parsed.value.nr_foll_pin_released), (Some(3), Some(7)));
        assert_eq!(parsed.value.pinned_pages(), None, "acquired is unknown");
        assert_eq!(parsed.field_errors.len(), 1);
    }

    #[test]
    fn malformed_input() {
        assert!(matches!(parse("nr_foll_pin_acquired -1\n"), Err(ParseError::NotANumber { line: 1, .. })));
        assert!(matches!(
            parse("nr_free_pages 1\nnr_foll_pin_acquired\n"),
            Err(ParseError::MissingValue { line: 2, .. })
        ));
        assert!(matches!(parse("nr_foll_pin_acquired 99999999999999999999999\n"), Err(ParseError::Overflow { .. })));
        assert_eq!(parse(""), Err(ParseError::Empty));
        assert_eq!(parse("garbage garbage\n\0\0\0"), Err(ParseError::Empty));
    }
}
