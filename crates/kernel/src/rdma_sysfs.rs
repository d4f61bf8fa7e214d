//! Value formats of `/sys/class/infiniband/<device>/...` (`drivers/infiniband/core/sysfs.c`).
//!
//! Every file holds one newline-terminated value: `state` `4: ACTIVE`, `phys_state` `5: LinkUp`,
//! `node_type` `1: CA`, `rate` `400 Gb/sec (4X NDR)`, counters a decimal u64. Old kernels print
//! `N/A (no PMA)` for a PMA counter the device cannot report: that is absent, not an error.

use super::ParseError;

/// A kernel enum printed as `<n>: <text>` (`state`, `phys_state`, `node_type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numbered {
    pub value: u32,
    pub name: String,
}

/// Parses `4: ACTIVE`, `7: Phy Test`, `0: <unknown>`.
pub fn parse_numbered(text: &str) -> Result<Numbered, ParseError> {
    let line = single_line(text)?;
    let (number, name) =
        line.split_once(':').ok_or_else(|| ParseError::Format(format!("{line:?} is not \"<number>: <name>\"")))?;
    let value = super::decimal::<u32>(number.trim())
        .ok_or_else(|| ParseError::Format(format!("{line:?}: {number:?} is not a number")))?;
    Ok(Numbered { value, name: label_value(name) })
}

/// Parses `rate` into bytes per second: `400 Gb/sec (4X NDR)` is 50,000,000,000.
///
/// The kernel prints the signalling rate in Gb/s with at most one decimal (`2.5`, `0.5`
/// granularity), then the width and speed in parentheses, which are not needed for the value.
pub fn parse_rate(text: &str) -> Result<u64, ParseError> {
    let line = single_line(text)?;
    let bad = || ParseError::Format(format!("{line:?} is not \"<Gb> Gb/sec (<width>X <speed>)\""));
    let mut words = line.split_ascii_whitespace();
    let number = words.next().ok_or_else(bad)?;
    if words.next() != Some("Gb/sec") {
        return Err(bad());
    }
    let bits = parse_decimal_giga(number).ok_or_else(bad)?;
    Ok(bits / 8)
}

/// `12.5` (Gb/s) -> 12_500_000_000 (bit/s), exactly, without floating point.
fn parse_decimal_giga(number: &str) -> Option<u64> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.len() > 9 || !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let mut fraction_bits = 0u64;
    let mut scale = 100_000_000u64;
    for digit in fraction.bytes() {
        fraction_bits += u64::from(digit - b'0') * scale;
        scale /= 10;
    }
    whole.checked_mul(1_000_000_000)?.checked_add(fraction_bits)
}

/// A counter file: `Some(value)`, or `None` for the `N/A (no PMA)` of old kernels.
pub fn parse_counter(text: &str) -> Result<Option<u64>, ParseError> {
    let value = text.trim();
    if value.starts_with("N/A") {
        return Ok(None);
    }
    super::parse_u64(value).map(Some)
}

/// How one `ports/N/counters/` file is exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortCounter<'a> {
    /// The `counter` label: the file name, with `_bytes` appended when the unit was converted.
    pub name: std::borrow::Cow<'a, str>,
    /// Multiply the file's value by this to get the exported value.
    pub scale: u64,
}

/// `port_xmit_data` and `port_rcv_data` count 4-byte words (IBTA PortXmitData/PortRcvData);
/// they are exported in bytes as `port_xmit_data_bytes` and `port_rcv_data_bytes`, so the
/// label says which unit the value has. Every other counter keeps its name and value.
pub fn port_counter(file: &str) -> PortCounter<'_> {
    match file {
        "port_xmit_data" | "port_rcv_data" => PortCounter { name: format!("{file}_bytes").into(), scale: 4 },
        _ => PortCounter { name: file.into(), scale: 1 },
    }
}

/// Whether a `hw_counters/` file is a level rather than a monotonic count: bnxt_re's
/// `active_*` (objects that exist now, such as `active_mrs`) and `watermark_*` (their peak).
/// `rate()` over those would read every decrease as a counter reset.
pub fn hw_counter_is_gauge(name: &str) -> bool {
    name.starts_with("active_") || name.starts_with("watermark_")
}

/// `lifespan` in `hw_counters/` is the refresh interval in milliseconds, not a counter.
pub fn hw_counter_is_setting(name: &str) -> bool {
    name == "lifespan"
}

/// A single-value string file (`fw_ver`, `hca_type`, `board_id`, `node_guid`, `link_layer`)
/// as a label value: trimmed, first line only. Its length is bounded where every label value
/// is, on export (the exposition's `label_value`): a broken driver must not turn one series
/// into kilobytes of text.
pub fn label_value(text: &str) -> String {
    text.trim().lines().next().unwrap_or("").trim().to_owned()
}

fn single_line(text: &str) -> Result<&str, ParseError> {
    let line = text.trim();
    if line.is_empty() {
        return Err(ParseError::Empty);
    }
    if line.contains('\n') {
        return Err(ParseError::Format(format!("{line:?} has more than one line")));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_states() {
        assert_eq!(parse_numbered("4: ACTIVE\n"), Ok(Numbered { value: 4, name: "ACTIVE".into() }));
        assert_eq!(parse_numbered("5: LinkUp\n"), Ok(Numbered { value: 5, name: "LinkUp".into() }));
        assert_eq!(parse_numbered("7: Phy Test\n"), Ok(Numbered { value: 7, name: "Phy Test".into() }));
        assert_eq!(parse_numbered("1: CA\n"), Ok(Numbered { value: 1, name: "CA".into() }));
        assert_eq!(parse_numbered("6: usNIC UDP\n").unwrap().name, "usNIC UDP");
        assert_eq!(parse_numbered("0: <unknown>\n"), Ok(Numbered { value: 0, name: "<unknown>".into() }));
        assert!(parse_numbered("ACTIVE\n").is_err());
        assert!(parse_numbered("x: ACTIVE\n").is_err());
        assert!(parse_numbered("-1: DOWN\n").is_err());
        assert!(parse_numbered("4: ACTIVE\n5: LinkUp\n").is_err());
        assert_eq!(parse_numbered(""), Err(ParseError::Empty));
    }

    #[test]
    fn rates_in_bytes_per_second() {
        assert_eq!(parse_rate("400 Gb/sec (4X NDR)\n"), Ok(50_000_000_000));
        assert_eq!(parse_rate("2.5 Gb/sec (1X SDR)\n"), Ok(312_500_000));
        assert_eq!(parse_rate("56 Gb/sec (4X FDR)\n"), Ok(7_000_000_000));
        assert_eq!(parse_rate("100 Gb/sec (2X HDR)\n"), Ok(12_500_000_000));
        assert_eq!(parse_rate("200 Gb/sec (4X HDR)\n"), Ok(25_000_000_000));
        assert_eq!(parse_rate("800 Gb/sec (4X XDR)\n"), Ok(100_000_000_000));
        assert_eq!(parse_rate("12.5 Gb/sec (1X EDR)\n"), Ok(1_562_500_000));
        // Drivers that report no rate print the SDR default for a 1X link.
        assert_eq!(parse_rate("0 Gb/sec (1X SDR)\n"), Ok(0));
        assert_eq!(parse_rate("400 Gb/sec\n"), Ok(50_000_000_000));
        for bad in [
            "",
            "400\n",
            "400 Mb/sec (4X NDR)\n",
            "fast Gb/sec\n",
            "4.0.0 Gb/sec\n",
            "-1 Gb/sec\n",
            ".5 Gb/sec\n",
            "99999999999999999999 Gb/sec\n",
            "1.0000000001 Gb/sec\n",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn counters_and_the_no_pma_text() {
        assert_eq!(parse_counter("123456789012\n"), Ok(Some(123456789012)));
        assert_eq!(parse_counter("0\n"), Ok(Some(0)));
        assert_eq!(parse_counter("18446744073709551615\n"), Ok(Some(u64::MAX)));
        assert_eq!(parse_counter("N/A (no PMA)\n"), Ok(None));
        assert!(parse_counter("-1\n").is_err());
        assert!(parse_counter("lots\n").is_err());
        assert!(parse_counter("").is_err());
    }

    #[test]
    fn data_counters_are_renamed_to_bytes() {
        let xmit = port_counter("port_xmit_data");
        assert_eq!((xmit.name.as_ref(), xmit.scale), ("port_xmit_data_bytes", 4));
        let rcv = port_counter("port_rcv_data");
        assert_eq!((rcv.name.as_ref(), rcv.scale), ("port_rcv_data_bytes", 4));
        let packets = port_counter("port_xmit_packets");
        assert_eq!((packets.name.as_ref(), packets.scale), ("port_xmit_packets", 1));
        assert_eq!(port_counter("VL15_dropped").name, "VL15_dropped");
    }

    #[test]
    fn hw_counter_kinds() {
        assert!(hw_counter_is_gauge("active_mrs"));
        assert!(hw_counter_is_gauge("watermark_mrs"));
        assert!(!hw_counter_is_gauge("reg_mr_err"));
        assert!(!hw_counter_is_gauge("out_of_buffer"));
        assert!(hw_counter_is_setting("lifespan"));
        assert!(!hw_counter_is_setting("tx_bytes"));
    }

    #[test]
    fn label_values_are_one_trimmed_line() {
        assert_eq!(label_value("28.39.1002\n"), "28.39.1002");
        assert_eq!(label_value("b859:9f03:00d4:5a2e\n"), "b859:9f03:00d4:5a2e");
        assert_eq!(
            label_value("  Broadcom NetXtreme-C/E RoCE Driver HCA  \n"),
            "Broadcom NetXtreme-C/E RoCE Driver HCA"
        );
        assert_eq!(label_value("first\nsecond\n"), "first");
        assert_eq!(label_value(""), "");
        // Long values are kept whole here; the exposition bounds every label value on export.
        let long = "x".repeat(1000);
        assert_eq!(label_value(&long), long);
    }

    /// Found by the fuzzer (tests/fuzz, target rdma_sysfs_label) when the cut was here: a long
    /// line whose byte 128 followed a space came out with a trailing space.
    #[test]
    fn a_long_label_has_no_trailing_space() {
        let text = format!("{} {}", "a".repeat(127), "b".repeat(50));
        assert_eq!(label_value(&text), text);
        let form_feed = format!("{}\u{c}tail", "x".repeat(127));
        assert_eq!(label_value(&form_feed), form_feed);
        assert_eq!(label_value(&format!("{}\u{c}\n", "x".repeat(127))), "x".repeat(127));
    }
}
