//! Human-readable units for reports, log lines and alert texts (metrics stay in base units).

/// Binary multiples: 1536 -> "1.5 KiB"; below 1 KiB in whole bytes.
pub fn bytes(value: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = value;
    let mut unit = 0;
    while v.abs() >= 1024.0 && unit + 1 < units.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0} {}", units[unit])
    } else {
        format!("{v:.1} {}", units[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_multiples() {
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(bytes(8.0 * 1024.0 * 1024.0), "8.0 MiB");
        assert_eq!(bytes(-2048.0), "-2.0 KiB");
    }
}
