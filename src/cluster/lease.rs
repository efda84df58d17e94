//! Leader election over a `coordination.k8s.io/v1` Lease, so only one replica writes.
//!
//! [`decide`] is pure (the lease and `now` in, the step out); [`run_elector`] reads the Lease,
//! writes it with its resourceVersion as precondition (a 409 means another replica won the
//! race), and publishes leadership on a `tokio::sync::watch` channel that any component (the
//! loop, the certificate manager) can follow. Any failure to renew drops leadership at once:
//! a replica that cannot prove it leads must not write.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use super::call::{self as kapi, status_code, timed};
use crate::report::error_chain;

/// Where the Lease lives, who we are, and the timings.
#[derive(Debug, Clone)]
pub struct LeaseOptions {
    pub namespace: String,
    pub name: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// How long a lease stays valid without renewal.
    pub lease_duration: Duration,
    /// How often the leader renews.
    pub renew_every: Duration,
    /// How often a follower retries.
    pub retry_every: Duration,
    /// The timeout of each API call.
    pub api_timeout: Duration,
}

/// What to do with the Lease now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// No Lease yet: create it, holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free or expired: take it over.
    Acquire,
    /// Someone else holds a valid lease.
    Follow { holder: String },
}

/// Decide the step from the Lease as read.
pub fn decide(lease: Option<&LeaseSpec>, me: &str, now: Timestamp) -> Step {
    let Some(spec) = lease else {
        return Step::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder == me {
        return Step::Renew;
    }
    let expires = spec.renew_time.as_ref().map(|t| {
        let secs = i64::from(spec.lease_duration_seconds.unwrap_or(15));
        t.0.saturating_add(SignedDuration::from_secs(secs))
            .unwrap_or(t.0)
    });
    match expires {
        Some(at) if !holder.is_empty() && at > now => Step::Follow {
            holder: holder.to_owned(),
        },
        _ => Step::Acquire,
    }
}

fn held_spec(opts: &LeaseOptions, now: Timestamp, base: Option<LeaseSpec>) -> LeaseSpec {
    let mut spec = base.unwrap_or_default();
    let taking_over = spec.holder_identity.as_deref() != Some(opts.identity.as_str());
    if taking_over {
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions =
            Some(spec.lease_transitions.unwrap_or(0) + i32::from(spec.holder_identity.is_some()));
    }
    spec.holder_identity = Some(opts.identity.clone());
    spec.lease_duration_seconds =
        Some(i32::try_from(opts.lease_duration.as_secs()).unwrap_or(i32::MAX));
    spec.renew_time = Some(MicroTime(now));
    spec
}

/// How one election round ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// We hold the lease.
    Leading,
    /// Another replica holds a valid lease.
    Following { holder: String },
    /// Another replica wrote the Lease between our read and our write (409).
    LostRace,
}

/// One election round.
pub async fn try_lead(
    api: &Api<Lease>,
    opts: &LeaseOptions,
    now: Timestamp,
) -> kapi::Result<Round> {
    let what = format!("lease {}/{}", opts.namespace, opts.name);
    let current = timed(&what, opts.api_timeout, api.get_opt(&opts.name)).await?;
    let step = decide(
        current.as_ref().and_then(|l| l.spec.as_ref()),
        &opts.identity,
        now,
    );
    let pp = PostParams::default();
    let result = match (step, current) {
        (Step::Follow { holder }, _) => return Ok(Round::Following { holder }),
        (Step::Create, _) | (_, None) => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(opts.name.clone()),
                    namespace: Some(opts.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(held_spec(opts, now, None)),
            };
            timed(&what, opts.api_timeout, api.create(&pp, &lease)).await
        }
        (Step::Renew | Step::Acquire, Some(mut lease)) => {
            // The read resourceVersion stays in metadata: the replace is conditional on it.
            lease.spec = Some(held_spec(opts, now, lease.spec.take()));
            timed(
                &what,
                opts.api_timeout,
                api.replace(&opts.name, &pp, &lease),
            )
            .await
        }
    };
    match result {
        Ok(_) => Ok(Round::Leading),
        Err(kapi::Error::Api { source, .. }) if status_code(&source) == Some(409) => {
            Ok(Round::LostRace)
        }
        Err(e) => Err(e),
    }
}

/// Run the election until `stop` turns true, publishing leadership on `tx` and counting failed
/// rounds in `failed_rounds`. On stop, leadership is dropped first (no more writes), then a held
/// lease is released so another replica takes over at once instead of after the lease expires.
pub async fn run_elector(
    client: Client,
    opts: LeaseOptions,
    tx: watch::Sender<bool>,
    failed_rounds: prometheus_client::metrics::counter::Counter,
    mut stop: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &opts.namespace);
    let mut followed: Option<String> = None;
    while !*stop.borrow() {
        let leading = match try_lead(&api, &opts, Timestamp::now()).await {
            Ok(Round::Following { holder }) => {
                // Once per holder: a follower's rounds are a wait, said once, not every round.
                if followed.as_ref() != Some(&holder) {
                    tracing::info!(%holder, retry_every = ?opts.retry_every, "following the leader; taking over if its Lease expires or is released");
                    followed = Some(holder);
                }
                false
            }
            Ok(round) => round == Round::Leading,
            Err(error) => {
                failed_rounds.inc();
                // One line per round: the next round is the retry, `retry_every` away.
                tracing::warn!(error = %error_chain(&error), retry_in = ?opts.retry_every, "lease round failed; not leading until it succeeds");
                false
            }
        };
        if tx.send_if_modified(|v| std::mem::replace(v, leading) != leading) {
            tracing::info!(identity = %opts.identity, leading, "leadership changed");
        }
        let pause = if leading {
            opts.renew_every
        } else {
            opts.retry_every
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop_requested(&mut stop) => {}
        }
    }
    tx.send_replace(false);
    match release(&api, &opts).await {
        Ok(true) => tracing::info!(identity = %opts.identity, "lease released"),
        Ok(false) => {}
        Err(error) => {
            tracing::warn!(error = %error_chain(&error), "lease not released; it will expire")
        }
    }
}

/// Resolves once `stop` turns true. A dropped sender never stops anything: dropping the handle
/// that owns it must not silently end leader election.
pub async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Give up the lease if we hold it: empty holder, 1 s duration (as client-go does).
pub async fn release(api: &Api<Lease>, opts: &LeaseOptions) -> kapi::Result<bool> {
    let what = format!("release lease {}/{}", opts.namespace, opts.name);
    let Some(mut lease) = timed(&what, opts.api_timeout, api.get_opt(&opts.name)).await? else {
        return Ok(false);
    };
    let Some(spec) = lease
        .spec
        .as_mut()
        .filter(|s| s.holder_identity.as_deref() == Some(&opts.identity))
    else {
        return Ok(false);
    };
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(Timestamp::now()));
    match timed(
        &what,
        opts.api_timeout,
        api.replace(&opts.name, &PostParams::default(), &lease),
    )
    .await
    {
        Ok(_) => Ok(true),
        Err(kapi::Error::Api { source, .. }) if status_code(&source) == Some(409) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, renewed: &str, secs: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(renewed.parse().unwrap())),
            lease_duration_seconds: Some(secs),
            ..Default::default()
        }
    }

    #[test]
    fn election_steps() {
        let now: Timestamp = "2026-11-30T00:00:30Z".parse().unwrap();
        let cases = [
            ("no lease", None, Step::Create),
            (
                "ours",
                Some(spec("me", "2026-11-30T00:00:00Z", 15)),
                Step::Renew,
            ),
            (
                "ours even if expired",
                Some(spec("me", "2026-11-29T00:00:00Z", 15)),
                Step::Renew,
            ),
            (
                "theirs, valid",
                Some(spec("other", "2026-11-30T00:00:20Z", 15)),
                Step::Follow {
                    holder: "other".into(),
                },
            ),
            (
                "theirs, expired",
                Some(spec("other", "2026-11-30T00:00:10Z", 15)),
                Step::Acquire,
            ),
            (
                "released",
                Some(spec("", "2026-11-30T00:00:29Z", 15)),
                Step::Acquire,
            ),
            (
                "never renewed",
                Some(LeaseSpec {
                    holder_identity: Some("other".into()),
                    ..Default::default()
                }),
                Step::Acquire,
            ),
        ];
        for (name, lease, want) in cases {
            assert_eq!(decide(lease.as_ref(), "me", now), want, "{name}");
        }
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_does_not() {
        let opts = LeaseOptions {
            namespace: "ns".into(),
            name: "l".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
            retry_every: Duration::from_secs(2),
            api_timeout: Duration::from_secs(5),
        };
        let now: Timestamp = "2026-11-30T00:00:30Z".parse().unwrap();
        let taken = held_spec(&opts, now, Some(spec("other", "2026-11-30T00:00:00Z", 15)));
        assert_eq!(
            (taken.holder_identity.as_deref(), taken.lease_transitions),
            (Some("me"), Some(1))
        );
        let renewed = held_spec(&opts, now, Some(taken.clone()));
        assert_eq!(renewed.lease_transitions, Some(1));
        assert_eq!(renewed.acquire_time, taken.acquire_time);
        assert_eq!(held_spec(&opts, now, None).lease_transitions, Some(0));
    }
}
