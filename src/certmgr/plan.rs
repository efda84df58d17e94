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
#[path = "plan_tests.rs"]
mod tests;
