//! Carries out a [`Plan`]: the new Secret material, with fresh keys where the plan needs them.
//!
//! Not pure (key generation draws random numbers), but does no I/O: the clock comes in as `now`.

use time::OffsetDateTime;

use super::plan::{Plan, Policy};
use super::state::{Dated, SecretData};
use crate::certmgr::pki::{self, CertKey};

/// The material after `plan`, or `None` when the plan changes nothing (or cannot apply to what
/// is there, e.g. a promotion without a staged CA).
pub fn apply(
    plan: Plan,
    current: Option<&SecretData>,
    sans: &[String],
    now: OffsetDateTime,
    policy: &Policy,
) -> pki::Result<Option<SecretData>> {
    let serving = |ca: &CertKey| pki::issue_serving(ca, sans, now, policy.serving_validity);
    let next = match (plan, current) {
        (Plan::Keep, _) => None,
        (Plan::CreateAll(_), _) => {
            let ca = new_ca(now, policy)?;
            Some(SecretData {
                serving: serving(&ca)?,
                ca,
                next_ca: None,
                previous_ca: None,
            })
        }
        (_, None) => None,
        (Plan::RotateServing, Some(s)) => Some(SecretData {
            serving: serving(&s.ca)?,
            ..s.clone()
        }),
        (Plan::StageCa, Some(s)) => Some(SecretData {
            next_ca: Some(Dated {
                value: new_ca(now, policy)?,
                since: now,
            }),
            ..s.clone()
        }),
        (Plan::PromoteCa, Some(s)) => match &s.next_ca {
            Some(next) => Some(SecretData {
                serving: serving(&next.value)?,
                ca: next.value.clone(),
                next_ca: None,
                previous_ca: Some(Dated {
                    value: s.ca.cert_pem.clone(),
                    since: now,
                }),
            }),
            None => None,
        },
        (Plan::DropOldCa, Some(s)) => Some(SecretData {
            previous_ca: None,
            ..s.clone()
        }),
    };
    Ok(next)
}

/// A CA whose name carries its start time, so the CAs of a bundle are told apart in logs and
/// by TLS verifiers that index trust anchors by subject.
fn new_ca(now: OffsetDateTime, policy: &Policy) -> pki::Result<CertKey> {
    let name = format!("ksvc-webhook-ca-{}", now.unix_timestamp());
    pki::issue_ca(&name, now, policy.ca_validity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certmgr::plan::Fresh;
    use crate::certmgr::state::bundle_contains;

    #[test]
    fn a_full_ca_rotation_keeps_the_serving_ca_in_the_bundle() {
        let p = Policy::default();
        let sans = pki::service_sans("s", "ns");
        let t = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let first = apply(Plan::CreateAll(Fresh::Missing), None, &sans, t, &p)
            .unwrap()
            .unwrap();
        let staged = apply(Plan::StageCa, Some(&first), &sans, t, &p)
            .unwrap()
            .unwrap();
        assert_eq!(
            staged.serving, first.serving,
            "staging does not touch serving"
        );
        let promoted = apply(Plan::PromoteCa, Some(&staged), &sans, t, &p)
            .unwrap()
            .unwrap();
        let next = staged.next_ca.as_ref().unwrap();
        assert_eq!(promoted.ca, next.value);
        assert_ne!(promoted.serving, first.serving);
        let bundle = promoted.bundle();
        assert!(
            bundle_contains(&bundle, &first.ca.cert_pem),
            "old CA still trusted"
        );
        assert!(bundle_contains(&bundle, &promoted.ca.cert_pem));
        let dropped = apply(Plan::DropOldCa, Some(&promoted), &sans, t, &p)
            .unwrap()
            .unwrap();
        assert!(!bundle_contains(&dropped.bundle(), &first.ca.cert_pem));
        assert_eq!(
            apply(Plan::PromoteCa, Some(&first), &sans, t, &p).unwrap(),
            None
        );
        assert_eq!(apply(Plan::Keep, Some(&first), &sans, t, &p).unwrap(), None);
    }
}
