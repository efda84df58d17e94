//! The leader's writes: the stop edits, revision deletes and Kubernetes Events (events.k8s.io/v1).
//!
//! Events go through kube-runtime's [`Recorder`], as controllers' do: the same reason on the same
//! app within six minutes becomes one Event whose `series.count` grows (a PATCH), not a new Event,
//! so a busy wave or a flapping app does not flood `kubectl describe`.
//!
//! Thin: each method makes one bounded, preconditioned write (see [`crate::cluster::call`]), counts it, and
//! logs one line; [`Writer::run`] makes one app's [`Job`] in order, reading leadership before
//! every write so a replica that loses the lease stops at once. Deciding what to write is
//! [`super::plan`]'s job; when and how many jobs run is [`super::write_queue`]'s.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
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
    pub metrics: Metrics,
    /// Shared by every clone, so series are counted across the loop's and the wave's Events.
    recorder: Recorder,
}

impl Writer {
    /// A writer whose Events name this replica (`identity`) as their reporting instance.
    pub fn new(
        client: Client,
        timeout: std::time::Duration,
        backoff: Backoff,
        identity: String,
        metrics: Metrics,
    ) -> Self {
        let reporter = Reporter {
            controller: keys::FIELD_MANAGER.into(),
            instance: Some(identity),
        };
        Writer {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            timeout,
            backoff,
            metrics,
        }
    }

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
                        let revision = Some(name.as_str());
                        self.event(&ksvc, false, "RevisionDeleted", "Delete", note, revision)
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

    /// Record an Event on the KService, with the Revision it concerns as its `related` object (so
    /// events about two Revisions are two series). Failures are counted and logged, never fatal.
    pub async fn event(
        &self,
        ksvc: &KService,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
        revision: Option<&str>,
    ) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            // The API server refuses a note over 1 kB.
            note: Some(note.chars().take(1024).collect()),
            action: action.into(),
            secondary: revision.map(|name| reference(ksvc, "Revision", name, None)),
        };
        // No resourceVersion: the Recorder keys its series on the whole reference.
        let regarding = reference(
            ksvc,
            "Service",
            ksvc.name(),
            ksvc.metadata.uid.as_deref().map(str::to_owned),
        );
        let published = timed(
            "publish event",
            self.timeout,
            self.recorder.publish(&event, &regarding),
        )
        .await;
        match published {
            Ok(()) => self.metrics.write("event"),
            Err(error) => {
                self.metrics.error("event");
                tracing::warn!(ns = ksvc.namespace(), name = ksvc.name(), error = %crate::report::error_chain(&error), "event not recorded");
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
        self.event(
            ksvc,
            phase == Phase::Failed,
            reason,
            "StatusChanged",
            note,
            None,
        )
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

/// A reference to a Knative object in the KService's namespace.
fn reference(ksvc: &KService, kind: &str, name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{GROUP}/{VERSION}")),
        kind: Some(kind.into()),
        name: Some(name.into()),
        namespace: Some(ksvc.namespace().into()),
        uid,
        ..Default::default()
    }
}
