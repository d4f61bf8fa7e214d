//! The rdma cgroup controller's `rdma.current` and `rdma.max` (`kernel/cgroup/rdma.c`): one
//! line per RDMA device, `<device> hca_handle=<n> hca_object=<n> \n`, each pair followed by a
//! space. Values are counts (verbs contexts, uverbs objects), not bytes; `max` means no limit
//! (or no pool yet). Both files are absent in the root cgroup.

use super::ParseError;

/// A count, or `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaValue {
    Count(u64),
    Max,
}

impl RdmaValue {
    /// The number, or `None` for `max` (an unlimited value is not exported as a number).
    pub fn count(self) -> Option<u64> {
        match self {
            RdmaValue::Count(n) => Some(n),
            RdmaValue::Max => None,
        }
    }
}

/// One device line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDevice {
    pub device: String,
    /// Open verbs contexts (`ibv_open_device`).
    pub hca_handle: Option<RdmaValue>,
    /// uverbs objects of any type: PD, MR, CQ, QP...
    pub hca_object: Option<RdmaValue>,
}

/// Parses `rdma.current` or `rdma.max`. An empty file is no devices. Resources other than the
/// two the kernel has today are skipped, so a newer kernel does not break the parser.
pub fn parse(text: &str) -> Result<Vec<RdmaDevice>, ParseError> {
    let mut devices = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        let mut fields = line.split_ascii_whitespace();
        let Some(device) = fields.next() else { continue };
        if device.contains('=') {
            return Err(ParseError::Format(format!("line {line_no}: {device:?} is a resource, not a device name")));
        }
        let mut entry = RdmaDevice { device: device.to_owned(), hca_handle: None, hca_object: None };
        for pair in fields {
            let Some((resource, value)) = pair.split_once('=') else {
                return Err(ParseError::Format(format!("line {line_no}: {pair:?} is not name=value")));
            };
            let value = match value {
                "max" => RdmaValue::Max,
                number => RdmaValue::Count(super::decimal(number).ok_or_else(|| ParseError::NotANumber {
                    line: line_no,
                    key: format!("{device} {resource}"),
                    value: number.to_owned(),
                })?),
            };
            match resource {
                "hca_handle" => entry.hca_handle = Some(value),
                "hca_object" => entry.hca_object = Some(value),
                _ => {}
            }
        }
        devices.push(entry);
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_examples_with_their_trailing_spaces() {
        let max = parse("mlx5_0 hca_handle=2 hca_object=2000 \nmlx5_1 hca_handle=max hca_object=max \n").unwrap();
        assert_eq!(
            max,
            vec![
                RdmaDevice {
                    device: "mlx5_0".into(),
                    hca_handle: Some(RdmaValue::Count(2)),
                    hca_object: Some(RdmaValue::Count(2000))
                },
                RdmaDevice {
                    device: "mlx5_1".into(),
                    hca_handle: Some(RdmaValue::Max),
                    hca_object: Some(RdmaValue::Max)
                },
            ]
        );
        let current = parse("mlx5_0 hca_handle=1 hca_object=213 \nmlx5_1 hca_handle=0 hca_object=0 \n").unwrap();
        assert_eq!(current[0].hca_object.and_then(RdmaValue::count), Some(213));
        assert_eq!(current[1].hca_handle, Some(RdmaValue::Count(0)));
        assert_eq!(RdmaValue::Max.count(), None);
    }

    #[test]
    fn empty_files_and_unknown_resources() {
        assert_eq!(parse(""), Ok(vec![]));
        assert_eq!(parse("\n"), Ok(vec![]));
        // A resource added by a later kernel is ignored; the known ones are kept.
        let devices = parse("efa_0 hca_handle=1 hca_object=9 mr_bytes=4096 \n").unwrap();
        assert_eq!(devices[0].hca_object, Some(RdmaValue::Count(9)));
        // A device with no resources listed yet.
        assert_eq!(parse("bnxt_re0 \n").unwrap()[0].hca_handle, None);
    }

    #[test]
    fn malformed_lines_are_errors() {
        assert!(matches!(parse("mlx5_0 hca_handle=lots \n"), Err(ParseError::NotANumber { line: 1, .. })));
        assert!(matches!(parse("mlx5_0 hca_handle=1 \nmlx5_1 \
                hca_handle \n"), Err(ParseError::Format(m)) if m.contains("line 2")));
        assert!(matches!(parse("hca_handle=1 \n"), Err(ParseError::Format(_))));
        assert!(matches!(parse("mlx5_0 hca_handle=-1 \n"), Err(ParseError::NotANumber { .. })));
        assert!(matches!(parse("mlx5_0 hca_handle= \n"), Err(ParseError::NotANumber { .. })));
        assert!(matches!(parse("mlx5_0 hca_object=99999999999999999999999 \n"), Err(ParseError::NotANumber { .. })));
    }
}
