//! How `app status` prints an app: a short kubectl-like table for a person, JSON or YAML (the
//! `/apps` record) for a program.
//!
//! Pure: the caller passes the record and the app's age; nothing here reads a clock or writes.

use clap::ValueEnum;
use k8s_openapi::jiff::SignedDuration;

use crate::watch::hub::AppRecord;
use crate::watch::status::Phase;

/// The output format of `app status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// `NAME  PHASE  REPLICAS  URL  AGE`, and the message under it when the app is not ACTIVE.
    #[default]
    Table,
    /// One JSON object per line: the record `/apps` serves.
    Json,
    /// One YAML document per record.
    Yaml,
}

const HEADER: [&str; 5] = ["NAME", "PHASE", "REPLICAS", "URL", "AGE"];

/// The table's header line, padded as [`row`] pads its cells.
pub fn header(record: &AppRecord, age: Option<SignedDuration>) -> String {
    align(&HEADER.map(str::to_owned), &cells(record, age))
}

/// One app as a table row, with its message on the next line unless it is ACTIVE.
pub fn row(record: &AppRecord, age: Option<SignedDuration>) -> String {
    let cells = cells(record, age);
    let mut line = align(&cells, &HEADER.map(str::to_owned));
    let message = record.status.message.trim();
    if record.status.phase != Phase::Active && !message.is_empty() {
        line.push_str("\n  ");
        line.push_str(message);
    }
    line
}

fn cells(record: &AppRecord, age: Option<SignedDuration>) -> [String; 5] {
    let status = &record.status;
    [
        record.name.clone(),
        status.phase.as_str().to_owned(),
        status
            .replicas
            .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        status.url.clone().unwrap_or_else(|| "-".to_owned()),
        age.map_or_else(|| "-".to_owned(), human_age),
    ]
}

/// `cells`, each padded to the wider of itself and the matching cell of `other`, three spaces
/// apart, as kubectl aligns its columns.
fn align(cells: &[String; 5], other: &[String; 5]) -> String {
    let mut line = String::new();
    for (i, (cell, peer)) in cells.iter().zip(other).enumerate() {
        if i + 1 == cells.len() {
            line.push_str(cell);
        } else {
            let width = cell.chars().count().max(peer.chars().count());
            line.push_str(&format!("{cell:<width$}   "));
        }
    }
    line
}

/// An age the way kubectl writes one: `45s`, `12m`, `5h`, `3d`.
pub fn human_age(age: SignedDuration) -> String {
    let secs = age.as_secs().max(0);
    match secs {
        0..120 => format!("{secs}s"),
        120..10_800 => format!("{}m", secs / 60),
        10_800..172_800 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::status::AppStatus;

    fn record(phase: Phase, message: &str, replicas: Option<i32>) -> AppRecord {
        AppRecord {
            namespace: "apps".into(),
            name: "hello-proj-dev".into(),
            project: Some("proj".into()),
            domain: Some("dev".into()),
            app_name: Some("hello".into()),
            status: AppStatus {
                phase,
                message: message.into(),
                last_transition_time: "2026-12-01T10:00:00Z".into(),
                replicas,
                url: Some("http://hello-proj-dev.apps.example.com".into()),
                substate: None,
            },
            drift: Default::default(),
        }
    }

    #[test]
    fn an_active_app_is_one_aligned_row_under_its_header() {
        let r = record(Phase::Active, "", Some(2));
        let age = Some(SignedDuration::from_secs(3 * 3600 + 5));
        assert_eq!(
            format!("{}\n{}", header(&r, age), row(&r, age)),
            "NAME             PHASE    REPLICAS   URL                                      AGE\n\
             hello-proj-dev   ACTIVE   2          http://hello-proj-dev.apps.example.com   3h"
        );
    }

    #[test]
    fn an_app_that_is_not_active_shows_its_message_under_the_row() {
        let r = record(Phase::Failed, "RevisionFailed: image not found", None);
        let text = row(&r, None);
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            [
                "hello-proj-dev   FAILED   -          http://hello-proj-dev.apps.example.com   -",
                "  RevisionFailed: image not found",
            ]
        );
    }

    #[test]
    fn ages_read_as_kubectl_writes_them() {
        let cases = [
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (10_799, "179m"),
            (10_800, "3h"),
            (172_799, "47h"),
            (172_800, "2d"),
            (-5, "0s"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_age(SignedDuration::from_secs(secs)), want, "{secs}s");
        }
    }
}
