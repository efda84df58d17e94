//! Tests of the certificate plan: a table of Secret states and times against the plan for each,
//! which steps need the leader, and the default renewal point.

use super::*;
use crate::certmgr::state::Dated;

const DAY: i64 = 86_400;

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn sans() -> Vec<String> {
    pki::service_sans("ksvc-webhook", "ksvc-system")
}

/// Material whose CA and serving certificate expire `ca_days` and `serving_days` after t0.
fn material(ca_days: i64, serving_days: i64, names: &[String]) -> SecretData {
    let start = t0() - Duration::days(1);
    let ca = pki::issue_ca("ca", start, Duration::days(ca_days + 1)).unwrap();
    let serving = pki::issue_serving(&ca, names, start, Duration::days(serving_days + 1)).unwrap();
    SecretData {
        ca,
        serving,
        next_ca: None,
        previous_ca: None,
    }
}

fn staged(mut s: SecretData, since_secs: i64) -> SecretData {
    let next = pki::issue_ca("next", t0(), Duration::days(3650)).unwrap();
    s.next_ca = Some(Dated {
        value: next,
        since: t0() + Duration::seconds(since_secs),
    });
    s
}

fn retired(mut s: SecretData, since_secs: i64) -> SecretData {
    s.previous_ca = Some(Dated {
        value: "-----BEGIN CERTIFICATE-----\nold\n-----END CERTIFICATE-----".into(),
        since: t0() + Duration::seconds(since_secs),
    });
    s
}

#[test]
fn plan_table() {
    let p = Policy::default();
    let healthy = material(3000, 80, &sans());
    let next_staged_now = staged(healthy.clone(), 0);
    let next_bundle = next_staged_now.bundle();
    let old_bundle = healthy.bundle();
    let over = p.overlap.whole_seconds();
    // (case, secret, unreadable, published, seconds after t0, expected)
    type Case = (
        &'static str,
        Option<SecretData>,
        bool,
        Vec<Vec<u8>>,
        i64,
        Plan,
    );
    let cases: Vec<Case> = vec![
        (
            "no secret",
            None,
            false,
            vec![],
            0,
            Plan::CreateAll(Fresh::Missing),
        ),
        (
            "unparseable",
            None,
            true,
            vec![],
            0,
            Plan::CreateAll(Fresh::Unreadable),
        ),
        (
            "healthy",
            Some(healthy.clone()),
            false,
            vec![],
            0,
            Plan::Keep,
        ),
        (
            "serving at 1/3 left",
            Some(material(3000, 30, &sans())),
            false,
            vec![],
            0,
            Plan::RotateServing,
        ),
        (
            "serving expired",
            Some(material(3000, 1, &sans())),
            false,
            vec![],
            2 * DAY,
            Plan::RotateServing,
        ),
        (
            "serving names changed",
            Some(material(3000, 80, &["other".to_string()])),
            false,
            vec![],
            0,
            Plan::RotateServing,
        ),
        (
            "ca expired",
            Some(material(10, 80, &sans())),
            false,
            vec![],
            11 * DAY,
            Plan::CreateAll(Fresh::CaExpired),
        ),
        (
            "ca within a year",
            Some(material(365, 80, &sans())),
            false,
            vec![],
            0,
            Plan::StageCa,
        ),
        (
            "ca just outside a year",
            Some(material(366, 80, &sans())),
            false,
            vec![],
            0,
            Plan::Keep,
        ),
        (
            "staged, not published",
            Some(next_staged_now.clone()),
            false,
            vec![old_bundle.clone()],
            over,
            Plan::Keep,
        ),
        (
            "staged, config unread",
            Some(next_staged_now.clone()),
            false,
            vec![],
            over,
            Plan::Keep,
        ),
        (
            "staged, published, overlap running",
            Some(next_staged_now.clone()),
            false,
            vec![next_bundle.clone()],
            over - 1,
            Plan::Keep,
        ),
        (
            "staged, published, overlap over",
            Some(next_staged_now.clone()),
            false,
            vec![next_bundle.clone()],
            over,
            Plan::PromoteCa,
        ),
        (
            "staged, one webhook lags",
            Some(next_staged_now.clone()),
            false,
            vec![next_bundle.clone(), old_bundle.clone()],
            over,
            Plan::Keep,
        ),
        (
            "previous, overlap running",
            Some(retired(healthy.clone(), 0)),
            false,
            vec![],
            over - 1,
            Plan::Keep,
        ),
        (
            "previous, overlap over",
            Some(retired(healthy.clone(), 0)),
            false,
            vec![],
            over,
            Plan::DropOldCa,
        ),
        (
            "previous kept: no new stage yet",
            Some(retired(material(100, 80, &sans()), 0)),
            false,
            vec![],
            1,
            Plan::Keep,
        ),
        (
            "serving first, then the rest",
            Some(retired(material(3000, 10, &sans()), 0)),
            false,
            vec![],
            over,
            Plan::RotateServing,
        ),
    ];
    for (case, secret, unreadable, published, after, want) in cases {
        let now = t0() + Duration::seconds(after);
        let got = plan(secret.as_ref(), unreadable, &published, &sans(), now, &p);
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn only_rotations_need_the_leader() {
    assert!(!Plan::Keep.leader_only());
    assert!(!Plan::CreateAll(Fresh::Missing).leader_only());
    for p in [
        Plan::RotateServing,
        Plan::StageCa,
        Plan::PromoteCa,
        Plan::DropOldCa,
    ] {
        assert!(p.leader_only(), "{p:?}");
    }
}

#[test]
fn default_policy_renews_serving_at_two_thirds() {
    let p = Policy::default();
    assert_eq!(p.serving_renew_before * 3, p.serving_validity);
    assert!(p.ca_renew_before > p.serving_validity);
}
