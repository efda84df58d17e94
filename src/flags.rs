//! Value parsers shared by every subcommand's flags (the flags themselves live beside the code
//! they configure: `cli::*`, `watch::args`, `certmgr::args`).
//!
//! Values are read as kube users write them: durations as Go writes them (`1m30s`, `1.5s`,
//! `500ms`), listen addresses as Go servers take them (`:8443`). Every error says the form
//! expected. Never reads the environment: clap hands in the text.

use std::net::SocketAddr;
use std::time::Duration;

const DURATION_FORM: &str = "write e.g. 500ms, 10s, 1.5s, 1m30s or 2h (units ns, us, ms, s, m, h; a bare number is seconds)";

/// Parse a duration as Go's `time.ParseDuration` reads it (`500ms`, `1.5s`, `1m30s`, `2h`), or a
/// bare number of seconds. Never negative.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(format!("`{text}` is negative; {DURATION_FORM}"));
    }
    let not_a_duration = || format!("`{text}` is not a duration; {DURATION_FORM}");
    if text.is_empty() {
        return Err(not_a_duration());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = text
            .parse()
            .map_err(|_| format!("duration `{text}` is too large"))?;
        return Ok(Duration::from_secs(secs));
    }
    let mut nanos: u128 = 0;
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let per: u128 = match unit {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => {
                return Err(format!(
                    "`{text}` lacks a unit after {number}; {DURATION_FORM}"
                ));
            }
            other => {
                return Err(format!(
                    "unknown unit `{other}` in `{text}`; {DURATION_FORM}"
                ));
            }
        };
        nanos = number_nanos(number, per)
            .and_then(|n| nanos.checked_add(n))
            .ok_or_else(not_a_duration)?;
        rest = next;
    }
    let secs = u64::try_from(nanos / 1_000_000_000)
        .map_err(|_| format!("duration `{text}` is too large"))?;
    // The remainder is below 10^9 and fits.
    let sub = u32::try_from(nanos % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, sub))
}

/// `number` (digits, optionally with a fraction) times `per` nanoseconds; `None` when it is not a
/// number or too large.
fn number_nanos(number: &str, per: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole: u128 = match whole {
        "" => 0,
        w => w.parse().ok()?,
    };
    // Digits past nanoseconds (18 places covers hours) change nothing.
    let fraction = &fraction[..fraction.len().min(18)];
    let scale = 10u128.pow(u32::try_from(fraction.len()).ok()?);
    let part = match fraction {
        "" => 0,
        f => f.parse::<u128>().ok()? * per / scale,
    };
    whole.checked_mul(per)?.checked_add(part)
}

/// A duration that must be more than zero (a timeout, a lease, an interval).
pub fn parse_nonzero_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        Duration::ZERO => Err(format!(
            "`{text}` is zero, which cannot work here; give a positive duration, e.g. 10s"
        )),
        d => Ok(d),
    }
}

/// Parse a listen address as Go servers take it: `HOST:PORT` with an IP address, `[IPv6]:PORT`,
/// `localhost:PORT`, or `:PORT` for every IPv4 interface (`0.0.0.0`).
pub fn parse_listen_addr(text: &str) -> Result<SocketAddr, String> {
    let full = match text.split_once(':') {
        Some(("", _)) => format!("0.0.0.0{text}"),
        Some(("localhost", port)) => format!("127.0.0.1:{port}"),
        _ => text.to_owned(),
    };
    // A port past 65535 is the one mistake that the form alone does not explain.
    let port = full.rsplit_once(':').map(|(_, port)| port);
    let digits = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if let Some(port) = port.filter(digits)
        && port.parse::<u16>().is_err()
    {
        return Err(format!(
            "`{text}`: port {port} is out of range; a port is at most 65535"
        ));
    }
    full.parse().map_err(|_| {
        format!(
            "`{text}` is not a listen address; write IP:PORT (0.0.0.0:8443, 127.0.0.1:8443, \
             [::]:8443), localhost:PORT, or :PORT for every interface"
        )
    })
}

/// A DNS-1123 subdomain, such as a route domain: dot-separated DNS-1123 labels, at most 253
/// characters.
pub fn parse_dns_subdomain(text: &str) -> Result<String, String> {
    if text.len() > 253 {
        return Err(format!(
            "{text:?} is {} characters long; a DNS-1123 subdomain has at most 253",
            text.len()
        ));
    }
    match text.split('.').all(is_dns_label) {
        true => Ok(text.to_owned()),
        false => Err(format!(
            "{text:?} is not a DNS-1123 subdomain: use dot-separated labels of lower-case \
             letters, digits and '-', each starting and ending with a letter or digit \
             (e.g. apps.example.com)"
        )),
    }
}

/// Whether `text` is a DNS-1123 label, as Kubernetes names a namespace, a Service or a
/// container: 1 to 63 lower-case letters, digits and `-`, starting and ending with a letter or
/// digit. The one check of that shape: flags parse with it, admission's naming rules call it.
pub fn is_dns_label(text: &str) -> bool {
    let bytes = text.as_bytes();
    let ends_ok = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    text.len() <= 63
        && ends_ok(bytes.first())
        && ends_ok(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// Parse a DNS-1123 label ([`is_dns_label`]).
pub fn parse_dns_label(text: &str) -> Result<String, String> {
    match (is_dns_label(text), text.len() <= 63) {
        (true, _) => Ok(text.to_owned()),
        (false, true) => Err(format!(
            "{text:?} is not a DNS-1123 label: use lower-case letters, digits and '-', starting \
             and ending with a letter or digit"
        )),
        (false, false) => Err(format!(
            "{text:?} is {} characters long; a DNS-1123 label has at most 63",
            text.len()
        )),
    }
}

/// Parse a size in bytes such as `64Mi`, `256Ki`, `1Gi` (Kubernetes' binary suffixes) or a bare
/// number of bytes.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let value: usize = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size; write e.g. 65536, 256Ki, 64Mi or 1Gi"))?;
    let scale: usize = match unit.trim() {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => return Err(format!("unknown size unit `{other}`; use Ki, Mi or Gi")),
    };
    value
        .checked_mul(scale)
        .ok_or_else(|| format!("size `{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_go_writes_them() {
        let ms = Duration::from_millis;
        let cases = [
            ("500ms", ms(500)),
            ("10s", ms(10_000)),
            ("7", ms(7_000)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("2m", ms(120_000)),
            ("1h", ms(3_600_000)),
            ("2h", ms(7_200_000)),
            ("1m30s", ms(90_000)),
            ("1.5s", ms(1_500)),
            (".5s", ms(500)),
            ("1.5h", ms(5_400_000)),
            ("1h2m3s4ms", ms(3_723_004)),
            ("250us", Duration::from_micros(250)),
            ("3µs", Duration::from_micros(3)),
            ("9ns", Duration::from_nanos(9)),
            ("+5s", ms(5_000)),
            (" 10s ", ms(10_000)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in [
            "",
            "s",
            "10x",
            "-1s",
            "1.2.3s",
            "1m30",
            ".s",
            "1 m",
            "99999999999999999999h",
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert!(
                err.contains("write e.g. 500ms") || err.contains("too large"),
                "{bad}: {err}"
            );
        }
        assert_eq!(
            parse_duration("1m30").unwrap_err(),
            format!("`1m30` lacks a unit after 30; {DURATION_FORM}")
        );
    }

    #[test]
    fn zero_is_refused_where_it_cannot_work() {
        assert_eq!(
            parse_nonzero_duration("1.5s"),
            Ok(Duration::from_millis(1500))
        );
        for zero in ["0", "0s", "0ms"] {
            let err = parse_nonzero_duration(zero).unwrap_err();
            assert!(err.contains("is zero"), "{err}");
        }
    }

    #[test]
    fn sizes_parse() {
        let cases = [
            ("65536", Ok(65536)),
            ("256Ki", Ok(256 * 1024)),
            ("64Mi", Ok(64 << 20)),
            ("1Gi", Ok(1 << 30)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_bytes(text), want, "{text}");
        }
        for bad in ["", "Mi", "10MB", "-1Mi", "99999999999999999999Gi"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_addresses_read_as_go_servers_take_them() {
        let cases = [
            (":8443", "0.0.0.0:8443"),
            ("127.0.0.1:8443", "127.0.0.1:8443"),
            ("0.0.0.0:9090", "0.0.0.0:9090"),
            ("[::]:8443", "[::]:8443"),
            ("localhost:8080", "127.0.0.1:8080"),
        ];
        for (text, want) in cases {
            assert_eq!(parse_listen_addr(text).unwrap().to_string(), want, "{text}");
        }
        for high in [":99999", "127.0.0.1:65536", "[::]:99999"] {
            let err = parse_listen_addr(high).unwrap_err();
            assert!(
                err.ends_with("is out of range; a port is at most 65535"),
                "{err}"
            );
        }
        for bad in ["8443", ":", "example.com:80", "1.2.3.4", ""] {
            let err = parse_listen_addr(bad).unwrap_err();
            assert!(err.contains("or :PORT for every interface"), "{bad}: {err}");
        }
    }

    #[test]
    fn dns_subdomains_are_checked() {
        for good in ["example.com", "apps.team-1.example.org", "localhost"] {
            assert_eq!(parse_dns_subdomain(good).as_deref(), Ok(good), "{good}");
        }
        for bad in [
            "",
            "not a domain!!",
            "a..b",
            ".a",
            "a.",
            "Apps.example.com",
            &"a.".repeat(130),
        ] {
            assert!(parse_dns_subdomain(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dns_labels_are_checked() {
        for good in ["a", "team-x", "0abc", &"a".repeat(63)] {
            assert_eq!(parse_dns_label(good).as_deref(), Ok(good), "{good}");
        }
        for bad in ["", "a b", "Team", "-a", "a-", "a.b", "a_b", &"a".repeat(64)] {
            assert!(parse_dns_label(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_dns_label("a b").unwrap_err(),
            "\"a b\" is not a DNS-1123 label: use lower-case letters, digits and '-', starting \
             and ending with a letter or digit"
        );
    }
}
