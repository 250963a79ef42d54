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

/// A time in nanoseconds since 1970 as `2026-12-07 07:50:12 UTC` (the
/// recording keeps no time zone; UTC reads the same on every machine).
pub fn utc(ns_since_1970: u64) -> String {
    let seconds = ns_since_1970 / 1_000_000_000;
    let (days, of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, for days not before 1970).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Counted from 0000-03-01, so that a leap day ends each year.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    /// Dates as GNU date prints them, leap days and century ends included.
    #[test]
    fn utc_dates_agree_with_date() {
        let seconds: [u64; 7] = [
            0,
            951_782_400,   // 2000-02-29
            951_868_799,   // 2000-03-01 23:59:59
            1_709_164_800, // 2024-02-29
            1_796_601_012,
            4_107_542_400, // 2100-03-01
            4_102_444_799, // 2099-12-31 23:59:59
        ];
        for s in seconds {
            let out = std::process::Command::new("date")
                .args(["-u", "-d", &format!("@{s}"), "+%Y-%m-%d %H:%M:%S UTC"])
                .output()
                .expect("run date");
            let theirs = String::from_utf8(out.stdout).unwrap();
            assert_eq!(super::utc(s * 1_000_000_000 + 999), theirs.trim(), "{s}");
        }
    }

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
