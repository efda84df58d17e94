//! One re-admission write, off the loop: a server dry run judged by the drift report, then
//! the write, both an annotation bump on the object the wave decided on; and the probe that asks
//! an API server that could not be reached whether it answers again. Never decides whom to
//! write (the wave does) and never retries across the wave's interval by itself.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use serde_json::Value;

use super::Outcome;
use super::wave::Written;
use crate::admission::Policy;
use crate::admission::drift;
use crate::cluster::call::{self, Updated};
use crate::keys;
use crate::report::error_chain;
use crate::watch::hub::AppKey;
use crate::watch::view::KService;
use crate::watch::writes::{Writer, knative};

/// Write one app again: a server dry run, then the write, each an annotation bump. Both are
/// made only on the object the wave decided on (`ksvc`'s resourceVersion): if it changed since
/// (another writer, a conflict, a write by a leader this replica's cache has not seen yet),
/// nothing is written and the wave looks again. `new_revision`: the drift report said the write
/// changes the template.
pub(super) async fn readmit(
    writer: Writer,
    key: AppKey,
    ksvc: Arc<KService>,
    policy: Arc<Policy>,
    new_revision: bool,
) -> Outcome {
    let api = Api::namespaced_with(
        writer.client.clone(),
        &key.namespace,
        &knative("Service", "services"),
    );
    let stamp = Timestamp::now().to_string();
    let decided_on = ksvc.metadata.resource_version.as_deref().map(str::to_owned);
    let bump = |v: &mut Value| {
        let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) else {
            return false;
        };
        if meta.get("resourceVersion").and_then(Value::as_str) != decided_on.as_deref() {
            return false;
        }
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        match annotations.as_object_mut() {
            Some(map) => {
                map.insert(keys::ANNOTATION_READMITTED.into(), stamp.clone().into());
                true
            }
            None => false,
        }
    };
    let outcome = |written, detail: String| Outcome {
        key: key.clone(),
        found: ksvc.stored.clone(),
        written,
        detail,
    };
    let (timeout, backoff) = (writer.timeout, &writer.backoff);
    let dry = call::update_raw_with(&api, &key.name, timeout, backoff, true, bump).await;
    match judged(dry, &policy) {
        Judged::Converges => {}
        Judged::Drifts(detail) => return outcome(Written::Unfixable, detail),
        Judged::Failed(written, detail) => return outcome(written, detail),
    }
    let wrote = call::update_raw(&api, &key.name, timeout, backoff, bump).await;
    match wrote {
        Ok(Updated::Written(stored)) => {
            let generation = stored
                .pointer("/metadata/generation")
                .and_then(Value::as_i64);
            let written = Written::Yes {
                new_revision,
                generation: generation.unwrap_or(0),
            };
            outcome(written, String::new())
        }
        Ok(Updated::NotFound) => outcome(Written::Skipped, GONE.into()),
        Ok(Updated::Unchanged) => outcome(Written::Skipped, CHANGED.into()),
        Err(error) => {
            let (written, detail) = failure(&error);
            outcome(written, detail)
        }
    }
}

/// Whether the API server answers: its version (`/version`, which every authenticated client
/// may read, so no RBAC), one call bounded by the writer's timeout.
pub(super) async fn probe(writer: &Writer) -> Result<(), String> {
    let version = writer.client.apiserver_version();
    match call::timed("the API server's version", writer.timeout, version).await {
        Ok(_) => Ok(()),
        Err(error) => Err(error_chain(&error)),
    }
}

const GONE: &str = "the KService is gone";
const CHANGED: &str = "the KService changed since the wave looked at it; it looks again";

enum Judged {
    /// The dry run's result has no reason left that re-admission acts on.
    Converges,
    /// It still drifts: these reasons.
    Drifts(String),
    Failed(Written, String),
}

/// What a dry run says of the write.
fn judged(dry: call::Result<Updated>, policy: &Policy) -> Judged {
    let after = match dry {
        Ok(Updated::Written(after)) => after,
        Ok(Updated::NotFound) => return Judged::Failed(Written::Skipped, GONE.into()),
        Ok(Updated::Unchanged) => return Judged::Failed(Written::Skipped, CHANGED.into()),
        Err(error) => {
            let (written, detail) = failure(&error);
            return Judged::Failed(written, detail);
        }
    };
    // The app was in a served namespace when it was started: only admission's view matters.
    let left = serde_json::from_value::<KService>(after)
        .map_err(|e| e.to_string())
        .and_then(|k| {
            drift::drift(k.stored.text().unwrap_or_default(), None, policy)
                .map_err(|e| e.to_string())
        });
    match left {
        Ok(d) if d.reasons().all(|r| !r.fixable()) => Judged::Converges,
        Ok(d) => {
            let reasons: Vec<&str> = d.reasons().map(|r| r.as_str()).collect();
            Judged::Drifts(reasons.join(", "))
        }
        Err(why) => Judged::Drifts(why),
    }
}

/// A write that failed: refused by admission or the API server (it answered no: a 4xx, or a
/// 500, which is how kube-apiserver words a webhook in the chain it could not call), or it
/// could not be asked (no answer, a timeout, throttling, a 502/503/504 from the API server or
/// a proxy before it), or another writer kept changing the KService (the wave looks again).
fn failure(error: &call::Error) -> (Written, String) {
    let written = match error {
        call::Error::Api { source, .. } => match call::status_code(source) {
            Some(429 | 502..=504) | None => Written::Unreachable,
            Some(_) => Written::Refused,
        },
        call::Error::Timeout { .. } => Written::Unreachable,
        call::Error::Conflicts { .. } | call::Error::Encode { .. } => Written::Skipped,
    };
    (written, error_chain(error))
}
