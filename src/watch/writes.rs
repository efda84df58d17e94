//! The leader's writes: the stop edits, revision deletes and Kubernetes Events (events.k8s.io/v1).
//!
//! Thin: each method makes one bounded, preconditioned write (see [`super::kapi`]), counts it, and
//! logs one line. Deciding what to write is [`super::plan`]'s job; deciding *whether* this replica
//! may write (leadership) is the caller's.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};

use super::edit::apply_stop_edits;
use super::hub::{AppKey, AppRecord};
use super::kapi::{self, Backoff, Deleted, Updated, timed};
use super::metrics::Metrics;
use super::status::Phase;
use super::view::{GROUP, KService, VERSION};
use crate::keys;

/// The `ApiResource` of a Knative kind (`services`, `revisions`).
pub fn knative(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Makes the leader's writes.
#[derive(Clone)]
pub struct Writer {
    pub client: Client,
    pub timeout: std::time::Duration,
    pub backoff: Backoff,
    /// This replica, as reported on Events.
    pub identity: String,
    pub metrics: Metrics,
}

impl Writer {
    fn api(&self, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &knative(kind, plural))
    }

    /// Apply min-scale 0 and cluster-local visibility (read-modify-write, retried on conflict).
    pub async fn apply_stop_edits(&self, key: &AppKey) -> kapi::Result<Updated> {
        let api = self.api(&key.namespace, "Service", "services");
        let result = kapi::update_raw(
            &api,
            &key.name,
            self.timeout,
            &self.backoff,
            apply_stop_edits,
        )
        .await;
        if let Ok(Updated::Written(_)) = &result {
            self.metrics.write("stop_edits");
            tracing::info!(ns = %key.namespace, name = %key.name, "applied the stop edits the webhook did not");
        }
        result
    }

    /// Delete one revision if it is still the one planned.
    pub async fn delete_revision(
        &self,
        key: &AppKey,
        name: &str,
        uid: Option<String>,
        resource_version: Option<String>,
    ) -> kapi::Result<Deleted> {
        let api = self.api(&key.namespace, "Revision", "revisions");
        let result =
            kapi::delete_if_unchanged(&api, name, uid, resource_version, self.timeout).await;
        if let Ok(Deleted::Deleted) = result {
            self.metrics.write("delete_revision");
            tracing::info!(ns = %key.namespace, app = %key.name, revision = name, "deleted old revision");
        }
        result
    }

    /// Record an Event on the KService. Failures are counted and logged, never fatal.
    pub async fn event(
        &self,
        ksvc: &KService,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let ns = ksvc.namespace().to_owned();
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", ksvc.name())),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(Timestamp::now())),
            action: Some(action.into()),
            reason: Some(reason.into()),
            note: Some(note.chars().take(1024).collect()),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            regarding: Some(ObjectReference {
                api_version: Some(format!("{GROUP}/{VERSION}")),
                kind: Some("Service".into()),
                name: ksvc.metadata.name.clone(),
                namespace: Some(ns.clone()),
                uid: ksvc.metadata.uid.clone(),
                resource_version: ksvc.metadata.resource_version.clone(),
                ..Default::default()
            }),
            reporting_controller: Some(keys::FIELD_MANAGER.into()),
            reporting_instance: Some(self.identity.clone()),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let created = timed(
            "create event",
            self.timeout,
            api.create(&PostParams::default(), &event),
        )
        .await;
        match created {
            Ok(_) => self.metrics.write("event"),
            Err(error) => {
                self.metrics.error("event");
                tracing::warn!(ns, name = ksvc.name(), error = %crate::report::error_chain(&error), "event not recorded");
            }
        }
    }

    /// The Event for a status transition.
    pub async fn transition_event(&self, ksvc: &KService, previous: Phase, record: &AppRecord) {
        let phase = record.status.phase;
        let reason = transition_reason(phase);
        let note = format!(
            "app is {} (was {}): {}",
            phase.as_str(),
            previous.as_str(),
            record.status.message
        );
        self.event(ksvc, phase == Phase::Failed, reason, "StatusChanged", note)
            .await;
    }
}

/// The Event reason of entering a phase.
pub fn transition_reason(phase: Phase) -> &'static str {
    match phase {
        Phase::Pending => "AppPending",
        Phase::Deploying => "AppDeploying",
        Phase::Active => "AppActive",
        Phase::Failed => "AppFailed",
        Phase::Stopping => "AppStopping",
        Phase::Stopped => "AppStopped",
    }
}
