//! PURE: what the loop must do to a stopped app — apply the stop edits the webhook would have made
//! (if it was bypassed), and tear down the revisions that served before the stop, but only once
//! Knative's route has moved off them: deleting a revision that still receives traffic loses the
//! requests in flight to it and leaves the Service reporting RevisionMissing.
//!
//! Never deletes a revision still named in `status.traffic`, one still labelled
//! `serving.knative.dev/routingState: active` (the label lags the route, and the revision guard
//! refuses such a delete), the latest created or latest ready one, or one annotated
//! `serving.knative.dev/no-gc: "true"`. Reads no clock. Must never do I/O.

use std::borrow::Borrow;

use super::view::{KService, Revision};
use crate::keys;

/// One write the shell performs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Set min-scale 0 and cluster-local visibility on the Service (see
    /// [`super::edit::apply_stop_edits`]).
    ApplyStopEdits,
    /// Delete a revision, with its uid and resourceVersion as preconditions.
    DeleteRevision {
        name: String,
        uid: Option<String>,
        resource_version: Option<String>,
    },
}

/// The plan for one Service: the writes, and why nothing more is done yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// What the plan waits for before it can finish, for logs.
    pub waiting: Option<String>,
}

/// Plan the writes for one Service from the cache. Running apps and unmanaged Services get an
/// empty plan.
pub fn plan<R: Borrow<Revision>>(ksvc: &KService, revisions: &[R]) -> Plan {
    if !ksvc.is_managed() || !ksvc.is_stopped() {
        return Plan::default();
    }
    if !has_stop_edits(ksvc) {
        return Plan {
            actions: vec![Action::ApplyStopEdits],
            waiting: Some("the stop edits to be applied".into()),
        };
    }
    if !ksvc.generation_observed() {
        return waiting("Knative to observe the stopped generation");
    }
    if ksvc.status.traffic.is_empty() {
        return waiting("Knative to report the route's traffic");
    }
    let latest = |name: &str| {
        *name == *ksvc.status.latest_created_revision_name
            || *name == *ksvc.status.latest_ready_revision_name
    };
    let protected = |r: &Revision| {
        r.is_no_gc() || r.is_routed() || ksvc.routes_to(r.name()) || latest(r.name())
    };
    let owned: Vec<&Revision> = revisions
        .iter()
        .map(Borrow::borrow)
        .filter(|r| r.namespace() == ksvc.namespace() && r.service() == Some(ksvc.name()))
        .collect();
    let mut doomed: Vec<&Revision> = owned
        .iter()
        .copied()
        .filter(|r| r.has_pods() && !protected(r))
        .collect();
    doomed.sort_by(|a, b| a.name().cmp(b.name()));
    let actions: Vec<Action> = doomed
        .into_iter()
        .map(|r| Action::DeleteRevision {
            name: r.name().to_owned(),
            uid: r.metadata.uid.as_deref().map(str::to_owned),
            resource_version: r.metadata.resource_version.as_deref().map(str::to_owned),
        })
        .collect();
    let waiting = ksvc
        .status
        .traffic
        .iter()
        .find(|t| t.revision_name != ksvc.status.latest_created_revision_name)
        .map(|t| format!("traffic to leave revision {}", t.revision_name))
        .or_else(|| {
            let routed = owned
                .iter()
                .find(|r| r.has_pods() && r.is_routed() && !latest(r.name()))?;
            Some(format!(
                "Knative to stop routing to revision {} (label {})",
                routed.name(),
                keys::LABEL_ROUTING_STATE
            ))
        });
    Plan { actions, waiting }
}

fn waiting(what: &str) -> Plan {
    Plan {
        actions: Vec::new(),
        waiting: Some(what.to_owned()),
    }
}

/// The Service already carries min-scale 0 and cluster-local visibility.
pub fn has_stop_edits(ksvc: &KService) -> bool {
    ksvc.template_annotation(keys::ANNOTATION_MIN_SCALE) == Some("0")
        && ksvc.label(keys::LABEL_VISIBILITY) == Some(keys::VISIBILITY_CLUSTER_LOCAL)
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
