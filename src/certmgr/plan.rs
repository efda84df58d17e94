//! PURE: what the certificate Secret needs next, given what it holds, what the webhook
//! configuration publishes, and the time.
//!
//! The CA rotation runs in three steps, one per [`Plan`], so kube-apiserver trusts every
//! certificate a replica may serve at every moment:
//! 1. [`Plan::StageCa`]: a new CA joins the bundle; the old CA still signs the serving certificate.
//! 2. [`Plan::PromoteCa`]: once the bundle with the new CA is published in the webhook
//!    configuration and the overlap period has passed, the new CA signs a new serving certificate;
//!    the old CA stays in the bundle as the previous CA.
//! 3. [`Plan::DropOldCa`]: after the overlap period (longer than a replica's Secret sync period
//!    plus the server's certificate reload interval, so every replica serves the new certificate
//!    by then), the previous CA leaves the bundle.
//!
//! Never does I/O, never reads the clock, never generates keys: `now` is an argument and the
//! shell carries the plan out.

use time::{Duration, OffsetDateTime};

use super::state::{SecretData, bundle_contains, subject_alt_names};
use crate::certmgr::pki;

/// Lifetimes and thresholds of self-managed certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// How long a new CA is valid.
    pub ca_validity: Duration,
    /// Start a CA rotation when the CA expires within this.
    pub ca_renew_before: Duration,
    /// How long a new serving certificate is valid.
    pub serving_validity: Duration,
    /// Issue a new serving certificate when the current one expires within this.
    pub serving_renew_before: Duration,
    /// How long a staged CA waits before it signs, and how long a previous CA stays in the
    /// bundle: must exceed the Secret sync period plus the server's certificate reload interval.
    pub overlap: Duration,
}

impl Default for Policy {
    /// CA 10 years, renewed a year before expiry; serving certificate 90 days, renewed at 2/3
    /// of its lifetime; 10 minutes of overlap.
    fn default() -> Self {
        Self {
            ca_validity: Duration::days(3650),
            ca_renew_before: Duration::days(365),
            serving_validity: Duration::days(90),
            serving_renew_before: Duration::days(30),
            overlap: Duration::minutes(10),
        }
    }
}

/// Why the whole set is (re)created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fresh {
    /// No Secret yet: first start.
    Missing,
    /// The Secret exists but its content cannot be used.
    Unreadable,
    /// The CA has expired: nothing it signed is trusted any more.
    CaExpired,
}

/// The next step for the Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to do.
    Keep,
    /// Create a new CA and serving certificate (any replica may: a server without certificates
    /// cannot serve, and the write is conditional, so racing replicas converge on one Secret).
    CreateAll(Fresh),
    /// Issue a new serving certificate from the current CA (it expires soon, or its names no
    /// longer match the Service).
    RotateServing,
    /// CA rotation step 1: add a new CA to the bundle.
    StageCa,
    /// CA rotation step 2: the new CA signs a new serving certificate; the old CA is kept.
    PromoteCa,
    /// CA rotation step 3: drop the previous CA from the bundle.
    DropOldCa,
}

impl Plan {
    /// Whether only the leader may carry this plan out (every rotation: one writer, one clock).
    pub fn leader_only(self) -> bool {
        !matches!(self, Plan::Keep | Plan::CreateAll(_))
    }
}

/// Decide the next step.
///
/// `secret` is the material read from the Secret, `None` if there is none; `unreadable` says
/// a Secret exists but could not be parsed. `published` holds the `caBundle` of every webhook
/// in the configuration (empty if it was not read); `sans` are the names the serving
/// certificate must carry.
pub fn plan(
    secret: Option<&SecretData>,
    unreadable: bool,
    published: &[Vec<u8>],
    sans: &[String],
    now: OffsetDateTime,
    policy: &Policy,
) -> Plan {
    let Some(s) = secret else {
        return Plan::CreateAll(if unreadable {
            Fresh::Unreadable
        } else {
            Fresh::Missing
        });
    };
    let (Ok(ca_end), Ok(serving_end)) = (
        pki::not_after(&s.ca.cert_pem),
        pki::not_after(&s.serving.cert_pem),
    ) else {
        return Plan::CreateAll(Fresh::Unreadable);
    };
    if now >= ca_end {
        return Plan::CreateAll(Fresh::CaExpired);
    }
    if now + policy.serving_renew_before >= serving_end || !names_match(&s.serving, sans) {
        return Plan::RotateServing;
    }
    if let Some(previous) = &s.previous_ca
        && now >= previous.since + policy.overlap
    {
        return Plan::DropOldCa;
    }
    if let Some(next) = &s.next_ca {
        let published_everywhere = !published.is_empty()
            && published
                .iter()
                .all(|b| bundle_contains(b, &next.value.cert_pem));
        if published_everywhere && now >= next.since + policy.overlap {
            return Plan::PromoteCa;
        }
        return Plan::Keep;
    }
    if s.previous_ca.is_none() && now + policy.ca_renew_before >= ca_end {
        return Plan::StageCa;
    }
    Plan::Keep
}

fn names_match(serving: &pki::CertKey, sans: &[String]) -> bool {
    let mut want = sans.to_vec();
    want.sort();
    subject_alt_names(&serving.cert_pem).is_some_and(|have| have == want)
}

#[cfg(test)]
mod tests {
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
        let serving =
            pki::issue_serving(&ca, names, start, Duration::days(serving_days + 1)).unwrap();
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
}
