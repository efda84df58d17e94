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
}
