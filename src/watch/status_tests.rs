//! Table tests of `status_for`: the A2.7 vectors and every condition combination we map.

use serde_json::{Value, json};

use super::*;

const NOW: &str = "2026-11-30T00:00:00Z";
const LTT: &str = "2026-11-29T12:00:00Z";

fn cond(t: &str, s: &str, reason: &str, message: &str) -> Value {
    json!({"type": t, "status": s, "reason": reason, "message": message, "lastTransitionTime": LTT})
}

fn ksvc(
    labels: Value,
    generation: i64,
    observed: i64,
    conditions: Vec<Value>,
    traffic: &[&str],
) -> KService {
    let traffic: Vec<Value> = traffic
        .iter()
        .map(|r| json!({"revisionName": r, "percent": 100}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": "app", "namespace": "ns", "generation": generation, "labels": labels},
        "spec": {"template": {
            "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "0"}},
            "spec": {"containers": [{"image": "x"}]}
        }},
        "status": {
            "observedGeneration": observed, "conditions": conditions, "url": "http://app.ns.example",
            "latestCreatedRevisionName": "app-00002", "latestReadyRevisionName": "app-00001",
            "traffic": traffic, "unknownField": {"kept": true}
        }
    }))
    .unwrap()
}

fn rev(name: &str, replicas: i32, conditions: Vec<Value>) -> Revision {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns",
                     "labels": {"serving.knative.dev/service": "app"}},
        "status": {"actualReplicas": replicas, "conditions": conditions}
    }))
    .unwrap()
}

/// The stop label and the stop edits' visibility label (the template annotation is set in `ksvc`).
fn stopped() -> Value {
    json!({"flyte.org/app-stopped": "true", "networking.knative.dev/visibility": "cluster-local"})
}

struct Case {
    name: &'static str,
    ksvc: KService,
    revisions: Vec<Revision>,
    phase: Phase,
    message: &'static str,
    substate: Option<Substate>,
}

fn case(name: &'static str, ksvc: KService, revisions: Vec<Revision>) -> Case {
    Case {
        name,
        ksvc,
        revisions,
        phase: Phase::Pending,
        message: "",
        substate: None,
    }
}

impl Case {
    fn expect(mut self, phase: Phase, message: &'static str, substate: Option<Substate>) -> Self {
        (self.phase, self.message, self.substate) = (phase, message, substate);
        self
    }
}

// One row per case: the table is the data, so it is laid out as a table.
#[rustfmt::skip]
fn cases() -> Vec<Case> {
    use Phase::*;
    use Substate::*;
    let ready = || cond("Ready", "True", "", "");
    let unknown = |reason: &str, message: &str| cond("Ready", "Unknown", reason, message);
    let failed = |reason: &str, message: &str| cond("Ready", "False", reason, message);
    let no_traffic = || vec![cond("Active", "False", "NoTraffic", "The target is not receiving traffic.")];
    let running = || json!({});
    const TNM: &str = "Traffic is not yet migrated to the latest revision.";
    const OUT_OF_DATE: &str = "OutOfDate: generation 3 is not yet observed by Knative (observed 2)";
    vec![
        // A2.7 vectors.
        case("a2.7 active, single", ksvc(running(), 1, 1, vec![ready()], &["app-00001"]), vec![])
            .expect(Active, "Service is ready", None),
        case("a2.7 active, all three", ksvc(running(), 1, 1, vec![cond("ConfigurationsReady", "True", "", ""), cond("RoutesReady", "True", "", ""), ready()], &["app-00001"]), vec![])
            .expect(Active, "Service is ready", None),
        case("a2.7 deploying", ksvc(running(), 2, 2, vec![unknown("TrafficNotMigrated", TNM), cond("RoutesReady", "Unknown", "TrafficNotMigrated", TNM)], &["app-00001"]), vec![])
            .expect(Pending, "TrafficNotMigrated: Traffic is not yet migrated to the latest revision.", None),
        case("a2.7 stopped (stop edits applied, nothing observed serving)", ksvc(stopped(), 1, 1, vec![ready()], &[]), vec![])
            .expect(Stopped, "App scaled to zero", Some(ScaledToZero)),
        // Gap fixes.
        case("stop label only: Flyte says STOPPED, but the route is still external", ksvc(json!({"flyte.org/app-stopped": "true"}), 1, 1, vec![ready()], &[]), vec![])
            .expect(Stopping, "Stopping: waiting for min-scale 0 and cluster-local visibility to be applied", None),
        case("stale generation with Ready=True is DEPLOYING", ksvc(running(), 3, 2, vec![ready()], &["app-00001"]), vec![])
            .expect(Deploying, OUT_OF_DATE, None),
        case("stale generation with Ready=False is DEPLOYING", ksvc(running(), 3, 2, vec![failed("RevisionFailed", "boom")], &["app-00001"]), vec![])
            .expect(Deploying, OUT_OF_DATE, None),
        case("stopped but Knative has not observed it", ksvc(stopped(), 3, 2, vec![ready()], &["app-00001"]), vec![])
            .expect(Stopping, "Stopping: waiting for Knative to observe the stop", None),
        case("stopped but traffic still on the old revision", ksvc(stopped(), 2, 2, vec![ready()], &["app-00001"]), vec![rev("app-00001", 2, vec![])])
            .expect(Stopping, "Stopping: traffic still goes to revision app-00001", None),
        case("stopped, traffic moved, old revision still has pods", ksvc(stopped(), 2, 2, vec![ready()], &["app-00002"]), vec![rev("app-00001", 1, vec![]), rev("app-00002", 0, no_traffic())])
            .expect(Stopping, "Stopping: revision app-00001 still has pods", None),
        case("stopped and drained", ksvc(stopped(), 2, 2, vec![ready()], &["app-00002"]), vec![rev("app-00001", 0, no_traffic()), rev("app-00002", 0, no_traffic())])
            .expect(Stopped, "App scaled to zero", Some(ScaledToZero)),
        case("stopped and old revision deleted", ksvc(stopped(), 2, 2, vec![ready()], &["app-00002"]), vec![rev("app-00002", 0, vec![])])
            .expect(Stopped, "App scaled to zero", Some(ScaledToZero)),
        // Other combinations.
        case("no status yet", ksvc(running(), 1, 1, vec![], &[]), vec![])
            .expect(Pending, "Waiting for Knative to report the service", None),
        case("bare Ready=Unknown", ksvc(running(), 1, 1, vec![unknown("", "")], &[]), vec![])
            .expect(Pending, "Service is not ready yet", None),
        case("configuration ready, routes migrating", ksvc(running(), 1, 1, vec![cond("ConfigurationsReady", "True", "", ""), unknown("IngressNotConfigured", "")], &[]), vec![])
            .expect(Deploying, "IngressNotConfigured: ", None),
        case("failed, revision missing", ksvc(running(), 1, 1, vec![failed("RevisionMissing", "Revision \"app-00001\" referenced in traffic not found.")], &[]), vec![])
            .expect(Failed, "RevisionMissing: Revision \"app-00001\" referenced in traffic not found.", None),
        case("failed, image pull", ksvc(running(), 1, 1, vec![failed("RevisionFailed", "x")], &[]), vec![rev("app-00002", 0, vec![cond("ResourcesAvailable", "False", "ImagePullBackOff", "no image")])])
            .expect(Failed, "RevisionFailed: x", Some(ImagePullError)),
        case("failed, crash loop via exit code", ksvc(running(), 1, 1, vec![failed("RevisionFailed", "x")], &[]), vec![rev("app-00002", 0, vec![cond("ContainerHealthy", "False", "ExitCode1", "Container failed")])])
            .expect(Failed, "RevisionFailed: x", Some(CrashLoop)),
        case("failed, OOM in the nested message", ksvc(running(), 1, 1, vec![failed("RevisionFailed", "Revision \"app-00002\" failed with message: OOMKilled.")], &[]), vec![])
            .expect(Failed, "RevisionFailed: Revision \"app-00002\" failed with message: OOMKilled.", Some(OomKilled)),
        case("pending, progress deadline", ksvc(running(), 1, 1, vec![unknown("", "")], &[]), vec![rev("app-00002", 0, vec![cond("ResourcesAvailable", "False", "ProgressDeadlineExceeded", "Initial scale was never achieved")])])
            .expect(Pending, "Service is not ready yet", Some(ProgressDeadlineExceeded)),
        case("active, scaled to zero", ksvc(running(), 1, 1, vec![ready()], &["app-00001"]), vec![rev("app-00001", 0, no_traffic())])
            .expect(Active, "Service is ready", Some(ScaledToZero)),
        case("active, scaling from zero", ksvc(running(), 1, 1, vec![ready()], &["app-00001"]), vec![rev("app-00001", 0, vec![cond("Active", "Unknown", "Queued", "buffered")])])
            .expect(Active, "Service is ready", Some(ScalingFromZero)),
        case("stop label false is running", ksvc(json!({"flyte.org/app-stopped": "false"}), 1, 1, vec![ready()], &[]), vec![])
            .expect(Active, "Service is ready", None),
    ]
}

#[test]
fn status_table() {
    for c in cases() {
        let got = status_for(&c.ksvc, &c.revisions, NOW);
        assert_eq!(
            (got.phase, got.message.as_str(), got.substate),
            (c.phase, c.message, c.substate),
            "{}",
            c.name
        );
        assert_eq!(
            got.url.as_deref(),
            Some("http://app.ns.example"),
            "{}",
            c.name
        );
    }
}

#[test]
fn replicas_come_from_the_latest_ready_revision() {
    let k = ksvc(
        json!({}),
        1,
        1,
        vec![cond("Ready", "True", "", "")],
        &["app-00001"],
    );
    let got = status_for(
        &k,
        &[rev("app-00001", 4, vec![]), rev("app-00002", 9, vec![])],
        NOW,
    );
    assert_eq!(got.replicas, Some(4));
}

#[test]
fn revisions_of_other_services_are_ignored() {
    let k = ksvc(stopped(), 2, 2, vec![], &["app-00002"]);
    let mut other = rev("other-00001", 3, vec![]);
    other.owner = Some("other".into());
    assert_eq!(status_for(&k, &[other], NOW).phase, Phase::Stopped);
}

#[test]
fn transition_time_is_knatives_or_now() {
    let k = ksvc(json!({}), 1, 1, vec![cond("Ready", "True", "", "")], &[]);
    assert_eq!(
        status_for::<Revision>(&k, &[], NOW).last_transition_time,
        LTT
    );
    let k = ksvc(stopped(), 1, 1, vec![], &[]);
    assert_eq!(
        status_for::<Revision>(&k, &[], NOW).last_transition_time,
        NOW
    );
}

#[test]
fn phases_serialise_as_flyte_names() {
    assert_eq!(
        serde_json::to_value(Phase::Stopping).unwrap(),
        json!("STOPPING")
    );
    assert_eq!(
        serde_json::to_value(Substate::OomKilled).unwrap(),
        json!("OOM_KILLED")
    );
    assert!(
        Phase::ALL
            .iter()
            .all(|p| serde_json::to_value(p).unwrap() == json!(p.as_str()))
    );
}

/// Every combination of stop label, stop edits, generation, Ready, traffic and pods: the status
/// invariants hold, and the plan never deletes what the status says is still serving.
#[test]
fn every_combination_keeps_the_invariants() {
    use crate::watch::plan::{Action, plan};
    let mut checked = 0;
    for stopped_label in [false, true] {
        for edits in [false, true] {
            for stale in [false, true] {
                for ready in ["True", "False", "Unknown", "absent"] {
                    for traffic in [
                        &[][..],
                        &["app-00001"],
                        &["app-00002"],
                        &["app-00001", "app-00002"],
                    ] {
                        for old_pods in [None, Some(0), Some(2)] {
                            for new_pods in [0, 1] {
                                let mut labels = json!({"flyte.org/app-name": "app"});
                                if stopped_label {
                                    labels["flyte.org/app-stopped"] = json!("true");
                                }
                                if edits {
                                    labels["networking.knative.dev/visibility"] =
                                        json!("cluster-local");
                                }
                                let conditions = match ready {
                                    "absent" => vec![],
                                    s => vec![cond("Ready", s, "", "")],
                                };
                                let mut k =
                                    ksvc(labels, if stale { 3 } else { 2 }, 2, conditions, traffic);
                                if !edits {
                                    k.spec.template.metadata = Default::default();
                                }
                                let mut revs = vec![rev("app-00002", new_pods, vec![])];
                                if let Some(p) = old_pods {
                                    revs.push(rev("app-00001", p, vec![]));
                                }
                                let got = status_for(&k, &revs, NOW);
                                let name = format!(
                                    "label={stopped_label} edits={edits} stale={stale} ready={ready} traffic={traffic:?} old={old_pods:?} new={new_pods} -> {got:?}"
                                );
                                let drained = traffic.iter().all(|t| *t == "app-00002")
                                    && old_pods.unwrap_or(0) == 0
                                    && new_pods == 0;
                                assert!(!got.message.is_empty(), "{name}");
                                assert_eq!(
                                    stopped_label,
                                    matches!(got.phase, Phase::Stopping | Phase::Stopped),
                                    "{name}"
                                );
                                assert_eq!(
                                    got.phase == Phase::Stopped,
                                    stopped_label && edits && !stale && drained,
                                    "{name}"
                                );
                                if got.phase == Phase::Active {
                                    assert!(!stale && ready == "True", "{name}");
                                }
                                if got.phase == Phase::Failed {
                                    assert!(!stale && ready == "False", "{name}");
                                }
                                let deleted: Vec<String> = plan(&k, &revs)
                                    .actions
                                    .into_iter()
                                    .filter_map(|a| match a {
                                        Action::DeleteRevision { name, .. } => Some(name),
                                        Action::ApplyStopEdits => None,
                                    })
                                    .collect();
                                for d in &deleted {
                                    assert!(
                                        !traffic.contains(&d.as_str())
                                            && d != "app-00002"
                                            && !stale
                                            && !traffic.is_empty(),
                                        "{name}: deleted {d}"
                                    );
                                    assert_eq!(got.phase, Phase::Stopping, "{name}");
                                }
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 2 * 2 * 2 * 4 * 4 * 3 * 2);
}
