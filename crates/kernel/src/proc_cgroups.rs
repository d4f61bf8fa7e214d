//! `/proc/cgroups`: one line per controller, `subsys_name hierarchy num_cgroups enabled`,
//! tab-separated, after a `#` header. Hierarchy 0 means the controller is on cgroup v2 (or
//! bound nowhere); `enabled 0` means it was disabled on the kernel command line.

use super::ParseError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Controller {
    pub name: String,
    pub hierarchy: u32,
    pub(crate) num_cgroups: u64,
    pub enabled: bool,
}

impl Controller {
    /// Mounted on a cgroup v1 hierarchy.
    #[cfg(test)]
    pub(crate) fn on_v1(&self) -> bool {
        self.hierarchy != 0
    }
}

/// Parses `/proc/cgroups`. A line with the wrong number of fields or a non-numeric field is an
/// error naming the line; a file with no controller line is an error.
pub fn parse(text: &str) -> Result<Vec<Controller>, ParseError> {
    let mut controllers = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let line_no = index + 1;
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        let [name, hierarchy, num_cgroups, enabled] = fields[..] else {
            return Err(ParseError::Format(format!("line {line_no}: expected 4 fields, found {}", fields.len())));
        };
        let number = |value: &str| {
            super::decimal::<u64>(value).ok_or_else(|| ParseError::NotANumber {
                line: line_no,
                key: name.to_owned(),
                value: value.to_owned(),
            })
        };
        let hierarchy = u32::try_from(number(hierarchy)?)
            .map_err(|_| ParseError::Overflow { line: line_no, key: name.to_owned() })?;
        controllers.push(Controller {
            name: name.to_owned(),
            hierarchy,
            num_cgroups: number(num_cgroups)?,
            enabled: number(enabled)? != 0,
        });
    }
    if controllers.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(controllers)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPTURE: &str = include_str!("../../../tests/fixtures/captures/proc_cgroups");

    #[test]
    fn the_captured_hybrid_host() {
        let controllers = parse(CAPTURE).unwrap();
        assert_eq!(controllers.len(), 12);
        let memory = controllers.iter().find(|c| c.name == "memory").unwrap();
        assert_eq!(*memory, Controller { name: "memory".into(), hierarchy: 4, num_cgroups: 69, enabled: true });
        assert!(memory.on_v1());
        let hugetlb = controllers.iter().find(|c| c.name == "hugetlb").unwrap();
        assert!(!hugetlb.on_v1(), "hierarchy 0: on the unified hierarchy");
        assert!(controllers.iter().all(|c| c.name != "rdma"), "the captured kernel has no rdma controller");
    }

    #[test]
    fn disabled_controllers_and_pure_v2() {
        let text = "#subsys_name\thierarchy\tnum_cgroups\tenabled\nmemory\t0\t112\t1\nrdma\t0\t1\t0\n";
        let controllers = parse(text).unwrap();
        assert!(!controllers[0].on_v1() && controllers[0].enabled);
        assert!(!controllers[1].enabled);
    }

    #[test]
    fn malformed_files_are_errors() {
        assert_eq!(parse(""), Err(ParseError::Empty));
        assert_eq!(parse("#subsys_name\thierarchy\tnum_cgroups\tenabled\n"), Err(ParseError::Empty));
        assert!(matches!(parse("memory\t4\t69\n"), Err(ParseError::Format(m)) if m.contains("line 1")));
        assert!(matches!(parse("memory\t4\tmany\t1\n"), Err(ParseError::NotANumber { .. })));
        assert!(matches!(parse("memory\t4294967296\t1\t1\n"), Err(ParseError::Overflow { .. })));
    }
}
