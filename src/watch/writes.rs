//! The leader's writes: the stop edits, revision deletes and Kubernetes Events (events.k8s.io/v1).
//!
//! Thin: each method makes one bounded, preconditioned write (see [`crate::cluster::call`]), counts it, and
//! logs one line; [`Writer::run`] makes one app's [`Job`] in order, reading leadership before
//! every write so a replica that loses the lease stops at once. Deciding what to write is
//! [`super::plan`]'s job; when and how many jobs run is [`super::inflight`]'s.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use std::sync::Arc;
use tokio::sync::watch;

use super::edit::apply_stop_edits;
use super::hub::{AppKey, AppRecord};
use super::metrics::Metrics;
use super::plan::Action;
use super::status::Phase;
use super::view::{GROUP, KService, VERSION};
use crate::cluster::call::{self, Backoff, Deleted, Updated, timed};
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

/// A phase change to record as an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub previous: Phase,
    pub record: Box<AppRecord>,
}

impl Transition {
    /// Two changes seen one after the other, as one: from the first's phase to the second's record.
    pub fn then(self, later: Transition) -> Transition {
        Transition {
            previous: self.previous,
            record: later.record,
        }
    }
}

/// One app's writes, planned by the loop from its cache and made off the loop.
#[derive(Clone)]
pub struct Job {
    pub key: AppKey,
    pub ksvc: Arc<KService>,
    /// The Event of a phase change, if the app changed phase since the last one recorded.
    pub transition: Option<Transition>,
    pub actions: Vec<Action>,
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

    /// Make one app's writes in order while this replica leads; the first failed write ends the
    /// job (the loop retries it with backoff). Leadership is read before every write.
    pub async fn run(&self, job: Job, leader: &watch::Receiver<bool>) -> call::Result<()> {
        let leading = || *leader.borrow();
        let Job {
            key,
            ksvc,
            transition,
            actions,
        } = job;
        // One Event per phase change; progress within a phase (a new STOPPING message) is not one.
        if let Some(Transition { previous, record }) = transition
            && previous != record.status.phase
            && leading()
        {
            self.transition_event(&ksvc, previous, &record).await;
        }
        for action in actions {
            if !leading() {
                tracing::info!(ns = %key.namespace, name = %key.name, "lost leadership; the app's remaining writes are left to the new leader");
                return Ok(());
            }
            match action {
                Action::ApplyStopEdits => {
                    self.apply_stop_edits(&key).await?;
                }
                Action::DeleteRevision {
                    name,
                    uid,
                    resource_version,
                } => {
                    let deleted = self
                        .delete_revision(&key, &name, uid, resource_version)
                        .await?;
                    if deleted == Deleted::Deleted {
                        let note = format!(
                            "deleted revision {name}: the app is stopped and traffic has left it"
                        );
                        self.event(&ksvc, false, "RevisionDeleted", "Delete", note)
                            .await;
                    }
                }
            }
        }
        Ok(())
    }

    /// Apply min-scale 0 and cluster-local visibility (read-modify-write, retried on conflict).
    pub async fn apply_stop_edits(&self, key: &AppKey) -> call::Result<Updated> {
        let api = self.api(&key.namespace, "Service", "services");
        let result = call::update_raw(
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
    ) -> call::Result<Deleted> {
        let api = self.api(&key.namespace, "Revision", "revisions");
        let result =
            call::delete_if_unchanged(&api, name, uid, resource_version, self.timeout).await;
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
