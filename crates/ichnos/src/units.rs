//! Numbers as the command line reads and prints them: sizes with `K`,
//! `M`, `G`; counts with thousands separators; byte sizes for people.

/// A size in bytes: a number with an optional `K`, `M` or `G` suffix
/// (powers of 1024; a trailing `B` or `iB` is allowed).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let n: u64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a size (a number, with K, M or G)"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// A duration in nanoseconds: a number with `ns`, `us`, `ms` or `s`
/// (no unit: nanoseconds, as uftrace reads `-t`).
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, scale) = if let Some(d) = t.strip_suffix("ns") {
        (d, 1.0)
    } else if let Some(d) = t.strip_suffix("us") {
        (d, 1e3)
    } else if let Some(d) = t.strip_suffix("ms") {
        (d, 1e6)
    } else if let Some(d) = t.strip_suffix('s') {
        (d, 1e9)
    } else {
        (t, 1.0)
    };
    let n: f64 = digits
        .trim()
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| format!("{text:?} is not a duration (a number, with ns, us, ms or s)"))?;
    let ns = n * scale;
    if ns >= u64::MAX as f64 {
        return Err(format!("{text:?} is too long"));
    }
    // Checked above: finite, not negative, below u64::MAX.
    #[allow(clippy::cast_sign_loss)]
    Ok(ns as u64)
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` with thousands separators and the noun for that many: "1
/// process", "2,048 threads".
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

/// A byte count for people: `512 B`, `48.2 KiB`, `3.1 MiB`.
pub fn bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1} MiB", n as f64 / 1_048_576.0),
        _ => format!("{:.1} GiB", n as f64 / 1_073_741_824.0),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations() {
        assert_eq!(super::parse_duration("10us"), Ok(10_000));
        assert_eq!(super::parse_duration("1.5ms"), Ok(1_500_000));
        assert_eq!(super::parse_duration("2s"), Ok(2_000_000_000));
        assert_eq!(super::parse_duration("250"), Ok(250));
        assert_eq!(super::parse_duration("7ns"), Ok(7));
        assert!(super::parse_duration("-1us").is_err());
        assert!(super::parse_duration("fast").is_err());
    }

    #[test]
    fn sizes_and_counts() {
        assert_eq!(super::parse_size("32K"), Ok(32 << 10));
        assert_eq!(super::parse_size("8192"), Ok(8192));
        assert_eq!(super::parse_size("1MiB"), Ok(1 << 20));
        assert!(super::parse_size("x").is_err());
        assert_eq!(super::thousands(1_234_567), "1,234,567");
        assert_eq!(super::counted(1, "process", "processes"), "1 process");
        assert_eq!(super::counted(0, "thread", "threads"), "0 threads");
        assert_eq!(super::counted(2048, "thread", "threads"), "2,048 threads");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::bytes(1536), "1.5 KiB");
    }
}
