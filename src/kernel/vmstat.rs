//! `/proc/vmstat` and `/sys/devices/system/node/nodeN/vmstat`: `name value` lines, values in
//! pages or event counts.

use super::ParseError;

/// The vmstat counters memlock-exporter uses, in pages.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Vmstat {
    pub nr_foll_pin_acquired: Option<u64>,
    pub nr_foll_pin_released: Option<u64>,
    pub nr_mlock: Option<u64>,
}

impl Vmstat {
    /// Pages long-term pinned right now (FOLL_PIN acquired minus released). The two counters are
    /// per-CPU sums read at slightly different moments, so released can briefly lead: clamp at 0.
    pub fn pinned_pages(&self) -> Option<u64> {
        Some(self.nr_foll_pin_acquired?.saturating_sub(self.nr_foll_pin_released?))
    }
}

/// Parses vmstat text. Known keys with malformed values are errors; other lines are skipped.
pub fn parse(text: &str) -> Result<Vmstat, ParseError> {
    let mut stat = Vmstat::default();
    let mut fields = 0usize;
    for (index, line) in text.lines().enumerate() {
        let mut parts = line.split_ascii_whitespace();
        let (Some(key), value) = (parts.next(), parts.next()) else { continue };
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
        let line_no = index + 1;
        let Some(value) = value else {
            return Err(ParseError::MissingValue { line: line_no, key: key.to_owned() });
        };
        *slot = Some(value.parse().map_err(|_| ParseError::NotANumber {
            line: line_no,
            key: key.to_owned(),
            value: value.to_owned(),
        })?);
        fields += 1;
    }
    if fields == 0 {
        return Err(ParseError::Empty);
    }
    Ok(stat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_captured_vmstat() {
        let stat = parse(include_str!("../../tests/fixtures/captures/proc_vmstat")).unwrap();
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
    fn malformed_input() {
        assert!(matches!(parse("nr_foll_pin_acquired -1\n"), Err(ParseError::NotANumber { line: 1, .. })));
        assert!(matches!(
            parse("nr_free_pages 1\nnr_foll_pin_acquired\n"),
            Err(ParseError::MissingValue { line: 2, .. })
        ));
        assert!(matches!(parse("nr_foll_pin_acquired 99999999999999999999999\n"), Err(ParseError::NotANumber { .. })));
        assert_eq!(parse(""), Err(ParseError::Empty));
        assert_eq!(parse("garbage garbage\n\0\0\0"), Err(ParseError::Empty));
    }
}
