//! PURE: the app status of a Knative Service — phase, message, transition time, replicas, URL and
//! substate — from the Service and its Revisions as observed.
//!
//! Follows the Flyte platform's mapping of Knative conditions to app phases (the stop label wins;
//! a True condition is ACTIVE, False is FAILED when `Ready` is False, Unknown is PENDING) and
//! fixes its gaps: a `Ready` from an older
//! generation is DEPLOYING, not ACTIVE; STOPPED is observed (nothing left serving), not merely
//! desired, and until then the app is STOPPING; the substate is filled from Knative's reasons.
//! Reads no clock: `now` is an argument. Must never do I/O.

use std::borrow::Borrow;

use serde::{Deserialize, Serialize};

use super::plan::has_stop_edits;
use super::view::{Condition, KService, Revision, condition};

/// The phase of an app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Phase {
    Pending,
    Deploying,
    Active,
    Failed,
    Stopping,
    Stopped,
}

impl Phase {
    /// Every phase, for metrics.
    pub const ALL: [Phase; 6] = [
        Phase::Pending,
        Phase::Deploying,
        Phase::Active,
        Phase::Failed,
        Phase::Stopping,
        Phase::Stopped,
    ];

    /// The wire name (`ACTIVE`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "PENDING",
            Phase::Deploying => "DEPLOYING",
            Phase::Active => "ACTIVE",
            Phase::Failed => "FAILED",
            Phase::Stopping => "STOPPING",
            Phase::Stopped => "STOPPED",
        }
    }
}

/// What the app is doing inside its phase, where Knative's reasons tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Substate {
    ImagePullError,
    CrashLoop,
    OomKilled,
    ProgressDeadlineExceeded,
    ScaledToZero,
    ScalingFromZero,
}

/// The status of one app, as served by `/apps` and the CLI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppStatus {
    pub phase: Phase,
    /// `Reason: Message` as in Flyte's mapping, or a message of our own.
    pub message: String,
    /// RFC 3339; Knative's `Ready` transition time, or `now` for phases we derive.
    pub last_transition_time: String,
    /// `status.actualReplicas` of the latest ready revision.
    pub replicas: Option<i32>,
    /// `status.url`.
    pub url: Option<String>,
    pub substate: Option<Substate>,
}

impl AppStatus {
    /// Same phase, message and substate: a change of only timestamps or replicas is no transition.
    pub fn same_state(&self, other: &AppStatus) -> bool {
        self.phase == other.phase
            && self.message == other.message
            && self.substate == other.substate
    }
}

/// Map a Service and its Revisions (any order; others' revisions are ignored) to the app status.
pub fn status_for<R: Borrow<Revision>>(ksvc: &KService, revisions: &[R], now: &str) -> AppStatus {
    let own: Vec<&Revision> = revisions
        .iter()
        .map(Borrow::borrow)
        .filter(|r| r.namespace() == ksvc.namespace() && r.service() == Some(ksvc.name()))
        .collect();
    let find = |name: &str| {
        own.iter()
            .copied()
            .find(|r| !name.is_empty() && r.name() == name)
    };
    let latest_ready = find(&ksvc.status.latest_ready_revision_name);
    let latest_created = find(&ksvc.status.latest_created_revision_name);
    let url = Some(ksvc.status.url.to_string()).filter(|u| !u.is_empty());
    let replicas = latest_ready.and_then(|r| r.status.actual_replicas);
    let base = |phase, message: String, ltt: &str, substate| AppStatus {
        phase,
        message,
        last_transition_time: if ltt.is_empty() {
            now.to_owned()
        } else {
            ltt.to_owned()
        },
        replicas,
        url: url.clone(),
        substate,
    };

    if ksvc.is_stopped() {
        let (phase, message) = stop_progress(ksvc, &own);
        let substate = (phase == Phase::Stopped).then_some(Substate::ScaledToZero);
        return base(phase, message, "", substate);
    }

    let ready = condition(&ksvc.status.conditions, "Ready");
    if !ksvc.generation_observed() {
        let message = format!(
            "OutOfDate: generation {} is not yet observed by Knative (observed {})",
            ksvc.generation.unwrap_or_default(),
            ksvc.status.observed_generation.unwrap_or_default()
        );
        return base(
            Phase::Deploying,
            message,
            "",
            failure_substate(latest_created, ksvc),
        );
    }
    let Some(ready) = ready else {
        return base(
            Phase::Pending,
            "Waiting for Knative to report the service".into(),
            "",
            None,
        );
    };
    let configs_ready = condition(&ksvc.status.conditions, "ConfigurationsReady")
        .is_some_and(|c| &*c.status == "True");
    let (phase, substate) = match &*ready.status {
        "True" => (Phase::Active, activity_substate(latest_ready)),
        "False" => (Phase::Failed, failure_substate(latest_created, ksvc)),
        _ if configs_ready => (Phase::Deploying, failure_substate(latest_created, ksvc)),
        _ => (Phase::Pending, failure_substate(latest_created, ksvc)),
    };
    base(
        phase,
        message_of(ready),
        &ready.last_transition_time,
        substate,
    )
}

/// Flyte's message rule: `Reason: Message` when there is a reason (even with an empty message),
/// else the message, else a default. Fixes the quirk that a bare `Ready=Unknown` read "Service is
/// ready".
pub fn message_of(c: &Condition) -> String {
    if !c.reason.is_empty() {
        return format!("{}: {}", c.reason, c.message);
    }
    if !c.message.is_empty() {
        return c.message.to_string();
    }
    match (&*c.type_, &*c.status) {
        ("ConfigurationsReady", "True") => "Configuration is ready".into(),
        ("RoutesReady", "True") => "Routes are ready".into(),
        ("Ready", "True") => "Service is ready".into(),
        ("Ready", _) => "Service is not ready yet".into(),
        _ => String::new(),
    }
}

/// STOPPED only when observed: the stop edits are on the Service (no external route, min-scale
/// 0), Knative saw that spec, traffic left every other revision, and no revision still holds
/// pods. Otherwise STOPPING, saying what it waits for.
fn stop_progress(ksvc: &KService, own: &[&Revision]) -> (Phase, String) {
    if !has_stop_edits(ksvc) {
        let message =
            "Stopping: waiting for min-scale 0 and cluster-local visibility to be applied";
        return (Phase::Stopping, message.into());
    }
    if !ksvc.generation_observed() {
        return (
            Phase::Stopping,
            "Stopping: waiting for Knative to observe the stop".into(),
        );
    }
    let latest = &ksvc.status.latest_created_revision_name;
    if let Some(t) = ksvc
        .status
        .traffic
        .iter()
        .find(|t| &t.revision_name != latest)
    {
        let message = format!(
            "Stopping: traffic still goes to revision {}",
            t.revision_name
        );
        return (Phase::Stopping, message);
    }
    let mut serving: Vec<&str> = own
        .iter()
        .filter(|r| r.has_pods())
        .map(|r| r.name())
        .collect();
    serving.sort_unstable();
    match serving.first() {
        Some(name) => (
            Phase::Stopping,
            format!("Stopping: revision {name} still has pods"),
        ),
        None => (Phase::Stopped, "App scaled to zero".into()),
    }
}

/// Scale-to-zero substates of a ready app, from the latest ready revision's `Active` condition.
fn activity_substate(latest_ready: Option<&Revision>) -> Option<Substate> {
    let active = condition(&latest_ready?.status.conditions, "Active")?;
    match (&*active.status, &*active.reason) {
        ("False", "NoTraffic") => Some(Substate::ScaledToZero),
        ("Unknown", "Queued") => Some(Substate::ScalingFromZero),
        _ => None,
    }
}

/// Failure substates, from the latest created revision's conditions, then the Service's.
fn failure_substate(latest_created: Option<&Revision>, ksvc: &KService) -> Option<Substate> {
    let rev = latest_created
        .map(|r| r.status.conditions.as_slice())
        .unwrap_or_default();
    rev.iter()
        .chain(ksvc.status.conditions.iter())
        .filter(|c| &*c.status != "True")
        .find_map(|c| classify(&c.reason).or_else(|| classify_text(&c.message)))
}

fn classify(reason: &str) -> Option<Substate> {
    match reason {
        "ImagePullBackOff" | "ErrImagePull" | "InvalidImageName" | "ContainerMissing" => {
            Some(Substate::ImagePullError)
        }
        "CrashLoopBackOff" => Some(Substate::CrashLoop),
        "OOMKilled" => Some(Substate::OomKilled),
        "ProgressDeadlineExceeded" => Some(Substate::ProgressDeadlineExceeded),
        r if r.starts_with("ExitCode") => Some(Substate::CrashLoop),
        _ => None,
    }
}

/// Knative nests revision failures in messages (`Revision "x" failed with message: …`).
fn classify_text(message: &str) -> Option<Substate> {
    const NEEDLES: [(&str, Substate); 6] = [
        ("OOMKilled", Substate::OomKilled),
        ("ImagePullBackOff", Substate::ImagePullError),
        ("ErrImagePull", Substate::ImagePullError),
        ("CrashLoopBackOff", Substate::CrashLoop),
        (
            "ProgressDeadlineExceeded",
            Substate::ProgressDeadlineExceeded,
        ),
        (
            "Initial scale was never achieved",
            Substate::ProgressDeadlineExceeded,
        ),
    ];
    NEEDLES
        .iter()
        .find(|(n, _)| message.contains(n))
        .map(|(_, s)| *s)
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
