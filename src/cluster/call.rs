//! Thin, bounded Kubernetes API calls: every call has a timeout; writes carry preconditions and
//! retry on 409 Conflict with exponential backoff: read, edit, write with the resourceVersion read,
//! and on a conflict read again, so a concurrent writer's change is never overwritten.
//!
//! Decides nothing: the edit to make comes in as a closure over the raw JSON, so fields unknown to
//! our types survive. Shared by the loop and the `app` CLI.

use std::future::Future;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, PostParams, Preconditions};
use serde_json::Value;

use crate::keys;
use crate::locks::lock;

/// Errors of one API call or write loop.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} timed out after {after:?}")]
    Timeout { what: String, after: Duration },
    #[error("{what} failed")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{what} still conflicted after {attempts} attempts; another writer keeps changing it")]
    Conflicts { what: String, attempts: u32 },
    #[error("{what}: the object is not valid JSON for the API")]
    Encode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Server-side timeout of each watch request; the client's read timeout must exceed it.
pub const WATCH_TIMEOUT_SECS: u32 = 60;
/// The timeout of one API call that is not a watch, for the certificate manager and the policy
/// keeper.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Exponential backoff: `min · factor^attempt`, capped at `max`, for at most `attempts` tries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub min: Duration,
    pub max: Duration,
    pub factor: u32,
    pub attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            min: Duration::from_millis(100),
            max: Duration::from_secs(5),
            factor: 2,
            attempts: 6,
        }
    }
}

impl Backoff {
    /// The delay after failed attempt number `attempt` (0-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let mult = self.factor.saturating_pow(attempt);
        self.min.saturating_mul(mult).min(self.max)
    }
}

/// The HTTP status code of an API error, if the server answered.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Run one API call with a timeout.
pub async fn timed<T, F>(what: &str, timeout: Duration, call: F) -> Result<T>
where
    F: Future<Output = Result<T, kube::Error>>,
{
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(Error::Api {
            what: what.to_owned(),
            source,
        }),
        Err(_) => Err(Error::Timeout {
            what: what.to_owned(),
            after: timeout,
        }),
    }
}

/// Retry `attempt` while it fails with 409 Conflict, sleeping [`Backoff::delay`] in between.
pub async fn retry_on_conflict<T, F, Fut>(
    what: &str,
    backoff: &Backoff,
    mut attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    for n in 0..backoff.attempts.max(1) {
        match attempt().await {
            Err(Error::Api { source, .. }) if status_code(&source) == Some(409) => {
                let retry_in = backoff.delay(n);
                tracing::info!(
                    what,
                    attempt = n,
                    ?retry_in,
                    "conflict; retrying with a fresh read"
                );
                tokio::time::sleep(retry_in).await;
            }
            other => return other,
        }
    }
    Err(Error::Conflicts {
        what: what.to_owned(),
        attempts: backoff.attempts.max(1),
    })
}

/// What a read-modify-write did.
#[derive(Debug, Clone, PartialEq)]
pub enum Updated {
    /// The edit changed nothing; nothing was written.
    Unchanged,
    /// The object was replaced; the server's answer.
    Written(Value),
    /// The object does not exist.
    NotFound,
}

/// Read-modify-write one object: GET it, `edit` its raw JSON, PUT it back with the read
/// resourceVersion as precondition; on 409 read again and retry.
pub async fn update_raw<F>(
    api: &Api<DynamicObject>,
    name: &str,
    timeout: Duration,
    backoff: &Backoff,
    edit: F,
) -> Result<Updated>
where
    F: FnMut(&mut Value) -> bool,
{
    update_raw_with(api, name, timeout, backoff, false, edit).await
}

/// [`update_raw`], as a server dry run when `dry_run` (admission and validation run, nothing
/// is stored).
pub async fn update_raw_with<F>(
    api: &Api<DynamicObject>,
    name: &str,
    timeout: Duration,
    backoff: &Backoff,
    dry_run: bool,
    mut edit: F,
) -> Result<Updated>
where
    F: FnMut(&mut Value) -> bool,
{
    let what = format!("update {name}");
    // The edit is shared by the attempts; it is only ever called between two awaits.
    let edit = std::sync::Mutex::new(&mut edit);
    let pp = PostParams {
        field_manager: Some(keys::FIELD_MANAGER.into()),
        dry_run,
    };
    retry_on_conflict(&what, backoff, || {
        update_once(api, name, &what, timeout, &pp, &edit)
    })
    .await
}

async fn update_once<F>(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    timeout: Duration,
    pp: &PostParams,
    edit: &std::sync::Mutex<&mut F>,
) -> Result<Updated>
where
    F: FnMut(&mut Value) -> bool,
{
    let Some(current) = timed(what, timeout, api.get_opt(name)).await? else {
        return Ok(Updated::NotFound);
    };
    let encode = |source| Error::Encode {
        what: what.to_owned(),
        source,
    };
    let mut raw = serde_json::to_value(&current).map_err(encode)?;
    let changed = (lock(edit))(&mut raw);
    if !changed {
        return Ok(Updated::Unchanged);
    }
    let obj: DynamicObject = serde_json::from_value(raw).map_err(encode)?;
    let written = timed(what, timeout, api.replace(name, pp, &obj)).await?;
    Ok(Updated::Written(
        serde_json::to_value(written).map_err(encode)?,
    ))
}

/// What a precondition delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    /// Already gone.
    NotFound,
    /// The object changed since it was planned (uid or resourceVersion); plan again.
    Changed,
}

/// Delete one object if it is still the one planned (uid and resourceVersion preconditions).
pub async fn delete_if_unchanged(
    api: &Api<DynamicObject>,
    name: &str,
    uid: Option<String>,
    resource_version: Option<String>,
    timeout: Duration,
) -> Result<Deleted> {
    let what = format!("delete {name}");
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version,
        }),
        ..Default::default()
    };
    match timed(&what, timeout, api.delete(name, &dp)).await {
        Ok(_) => Ok(Deleted::Deleted),
        Err(Error::Api { source, .. }) if status_code(&source) == Some(404) => {
            Ok(Deleted::NotFound)
        }
        Err(Error::Api { source, .. }) if status_code(&source) == Some(409) => Ok(Deleted::Changed),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn conflict() -> Error {
        let status =
            kube::core::Status::failure("the object has been modified", "Conflict").with_code(409);
        Error::Api {
            what: "w".into(),
            source: kube::Error::Api(status.boxed()),
        }
    }

    #[test]
    fn backoff_grows_and_caps() {
        let b = Backoff {
            min: Duration::from_millis(100),
            max: Duration::from_secs(1),
            factor: 2,
            attempts: 9,
        };
        let delays: Vec<u128> = (0..6).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.delay(200), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn conflicts_are_retried_with_backoff_then_succeed() {
        let calls = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let b = Backoff::default();
        let got = retry_on_conflict("w", &b, || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(conflict()),
                _ => Ok(7),
            }
        })
        .await;
        assert_eq!(got.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        // Paused time: exactly the two backoff delays elapsed, deterministically.
        assert_eq!(start.elapsed(), b.delay(0) + b.delay(1));
    }

    #[tokio::test(start_paused = true)]
    async fn endless_conflicts_give_up_with_a_clear_error() {
        let b = Backoff {
            attempts: 3,
            ..Backoff::default()
        };
        let got: Result<()> =
            retry_on_conflict("update app", &b, || async { Err(conflict()) }).await;
        let err = got.unwrap_err();
        assert!(matches!(err, Error::Conflicts { attempts: 3, .. }));
        assert!(
            err.to_string()
                .contains("update app still conflicted after 3 attempts")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn other_errors_are_not_retried() {
        let calls = AtomicU32::new(0);
        let got: Result<()> = retry_on_conflict("w", &Backoff::default(), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Error::Timeout {
                what: "w".into(),
                after: Duration::from_secs(1),
            })
        })
        .await;
        assert!(got.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_time_out() {
        let got: Result<()> = timed(
            "get x",
            Duration::from_secs(3),
            std::future::pending::<Result<(), kube::Error>>(),
        )
        .await;
        assert!(matches!(got, Err(Error::Timeout { .. })));
    }
}
