//! `strftime_now`, the clock helper HF exposes to chat templates (Llama 3.x prints today's
//! date with it), without pulling in a date-time crate for one function.

use std::time::{SystemTime, UNIX_EPOCH};

/// `strftime_now(fmt)`: current time (UTC; HF uses local time, which on a server is usually UTC)
/// formatted with the common C `strftime` specifiers. Unknown specifiers are copied verbatim.
pub(super) fn strftime_now(fmt: String) -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    strftime(&fmt, secs)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// Formats a unix timestamp (UTC); separate from the clock so it can be tested.
pub(super) fn strftime(fmt: &str, unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let secs_of_day = unix_secs.rem_euclid(86_400);
    let (h, mi, s) = (secs_of_day / 3600, secs_of_day / 60 % 60, secs_of_day % 60);
    // Howard Hinnant's civil_from_days: proleptic Gregorian date of a day count since 1970-01-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_mar = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_mar + 2) / 153;
    let d = doy_mar - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(m - 1) as usize] + d + i64::from(leap && m > 2);
    let wday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday (index 3).
    let month = MONTHS[(m - 1) as usize];

    let mut out = String::with_capacity(fmt.len() + 16);
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:2}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('H') => out.push_str(&format!("{h:02}")),
            Some('I') => out.push_str(&format!("{:02}", (h + 11) % 12 + 1)),
            Some('p') => out.push_str(if h < 12 { "AM" } else { "PM" }),
            Some('M') => out.push_str(&format!("{mi:02}")),
            Some('S') => out.push_str(&format!("{s:02}")),
            Some('B') => out.push_str(month),
            Some('b') | Some('h') => out.push_str(&month[..3]),
            Some('A') => out.push_str(WEEKDAYS[wday]),
            Some('a') => out.push_str(&WEEKDAYS[wday][..3]),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::strftime;

    /// Expected strings from Python's `datetime.fromtimestamp(t, timezone.utc).strftime(...)`.
    #[test]
    fn strftime_matches_python() {
        let fmt = "%Y-%m-%d %H:%M:%S|%y %j %a %A %b %B %I %p %e %%|%d %b %Y";
        let cases = [
            (0, "1970-01-01 00:00:00|70 001 Thu Thursday Jan January 12 AM  1 %|01 Jan 1970"),
            (1_709_210_096, "2024-02-29 12:34:56|24 060 Thu Thursday Feb February 12 PM 29 %|29 Feb 2024"),
            (951_782_400, "2000-02-29 00:00:00|00 060 Tue Tuesday Feb February 12 AM 29 %|29 Feb 2000"),
            (-86_400, "1969-12-31 00:00:00|69 365 Wed Wednesday Dec December 12 AM 31 %|31 Dec 1969"),
            (4_102_444_799, "2099-12-31 23:59:59|99 365 Thu Thursday Dec December 11 PM 31 %|31 Dec 2099"),
        ];
        for (t, want) in cases {
            assert_eq!(strftime(fmt, t), want, "t = {t}");
        }
    }
}
