//! Value parsers shared by every subcommand's flags (the flags themselves live beside the code
//! they configure: `cli::*`, `watch::args`, `certmgr::args`).

use std::time::Duration;

/// Parse a duration such as `500ms`, `10s`, `2m` or `1h` (a bare number means seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a duration; write e.g. 500ms, 10s, 2m or 1h"))?;
    let millis = match unit.trim() {
        "ms" => Some(value),
        "" | "s" => value.checked_mul(1_000),
        "m" => value.checked_mul(60_000),
        "h" => value.checked_mul(3_600_000),
        other => {
            return Err(format!(
                "unknown duration unit `{other}`; use ms, s, m or h"
            ));
        }
    };
    millis
        .map(Duration::from_millis)
        .ok_or_else(|| format!("duration `{text}` is too large"))
}

/// Parse a DNS-1123 label, as Kubernetes names a namespace or a Service: at most 63 lower-case
/// letters, digits and `-`, starting and ending with a letter or digit.
pub fn parse_dns_label(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let ends_ok = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let shape_ok = ends_ok(bytes.first())
        && ends_ok(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    match (shape_ok, text.len() <= 63) {
        (true, true) => Ok(text.to_owned()),
        (false, _) => Err(format!(
            "{text:?} is not a DNS-1123 label: use lower-case letters, digits and '-', starting \
             and ending with a letter or digit"
        )),
        (true, false) => Err(format!(
            "{text:?} is {} characters long; a DNS-1123 label has at most 63",
            text.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        let cases = [
            ("500ms", Ok(Duration::from_millis(500))),
            ("10s", Ok(Duration::from_secs(10))),
            ("7", Ok(Duration::from_secs(7))),
            ("2m", Ok(Duration::from_secs(120))),
            ("1h", Ok(Duration::from_secs(3600))),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), want, "{text}");
        }
        for bad in ["", "s", "10x", "-1s", "99999999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
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
