//! The projection answers the revision guard as the rich cache does, and a re-list sweeps what
//! it did not see.

use serde_json::{Value, json};

use super::*;
use crate::watch::owners;
use crate::watch::view::KService;

fn object(name: &str, extra: Value) -> Value {
    let mut obj = json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "apps", "resourceVersion": "7",
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": {"template": {"spec": {"containers": [{"image": "x"}]}}},
        "status": {"traffic": [
            {"revisionName": format!("{name}-00002"), "percent": 100},
            {"revisionName": format!("{name}-00001"), "percent": 0, "tag": "canary"},
            {"revisionName": format!("{name}-00001"), "tag": ""}]}});
    json_patch::merge(&mut obj, &extra);
    obj
}

fn slim(obj: &Value) -> SlimService {
    serde_json::from_value(obj.clone()).unwrap()
}

fn ask<'a>(namespace: &'a str, service: &'a str, revision: &'a str) -> Lookup<'a> {
    Lookup {
        namespace,
        service,
        revision,
    }
}

#[test]
fn the_projection_answers_as_the_rich_cache_does() {
    let objects = [
        object("live", json!({})),
        object(
            "quiet",
            json!({"metadata": {"labels": {"flyte.org/app-stopped": "true"}}}),
        ),
        object(
            "leaving",
            json!({"metadata": {"deletionTimestamp": "2026-11-30T00:00:00Z"}}),
        ),
        object("bare", json!({"status": null})),
    ];
    let mut p = Projection::default();
    p.apply(watcher::Event::Init);
    for obj in &objects {
        p.apply(watcher::Event::InitApply(slim(obj)));
    }
    assert_eq!(
        p.owner(&ask("apps", "live", "live-00002")),
        Owner::Unknown,
        "not listed yet"
    );
    p.apply(watcher::Event::InitDone);
    let rich: Vec<KService> = objects
        .iter()
        .map(|o| serde_json::from_value(o.clone()).unwrap())
        .collect();
    for (name, revision) in [
        ("live", "live-00002"),
        ("live", "live-00001"),
        ("live", "live-00000"),
        ("quiet", "quiet-00002"),
        ("leaving", "leaving-00002"),
        ("bare", "bare-00001"),
        ("gone", "gone-00001"),
    ] {
        let cached = rich.iter().find(|k| k.name() == name);
        let want = owners::owner(cached, revision);
        assert_eq!(
            p.owner(&ask("apps", name, revision)),
            want,
            "{name} {revision}"
        );
    }
    assert_eq!(
        p.owner(&ask("apps", "quiet", "quiet-00002")),
        Owner::Present {
            stopped: true,
            routes: vec![Route {
                tag: None,
                percent: Some(100)
            }]
        }
    );
}

#[test]
fn only_name_namespace_and_resource_version_are_kept_of_the_metadata() {
    let svc = slim(&object(
        "live",
        json!({"metadata": {"uid": "u", "labels": {"a": "b"}}}),
    ));
    let meta = kube::Resource::meta(&svc);
    assert_eq!(
        *meta,
        ObjectMeta {
            name: Some("live".into()),
            namespace: Some("apps".into()),
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        }
    );
}

#[test]
fn a_relist_drops_what_it_did_not_see_and_keeps_answering_meanwhile() {
    let mut p = Projection::default();
    p.apply(watcher::Event::Init);
    for name in ["a", "b", "c"] {
        p.apply(watcher::Event::InitApply(slim(&object(name, json!({})))));
    }
    p.apply(watcher::Event::InitDone);
    p.apply(watcher::Event::Apply(slim(&object("d", json!({})))));
    p.apply(watcher::Event::Delete(slim(&object("c", json!({})))));
    assert_eq!(p.len(), 3);
    assert_eq!(p.owner(&ask("apps", "c", "c-00002")), Owner::Gone);

    // A re-list sees only `a` and a new `e`; until it ends, `b` and `d` still answer.
    p.apply(watcher::Event::Init);
    p.apply(watcher::Event::InitApply(slim(&object("a", json!({})))));
    p.apply(watcher::Event::InitApply(slim(&object("e", json!({})))));
    assert!(matches!(
        p.owner(&ask("apps", "b", "b-00002")),
        Owner::Present { .. }
    ));
    p.apply(watcher::Event::InitDone);
    assert_eq!(p.len(), 2);
    for (name, present) in [("a", true), ("b", false), ("d", false), ("e", true)] {
        let owner = p.owner(&ask("apps", name, &format!("{name}-00002")));
        assert_eq!(matches!(owner, Owner::Present { .. }), present, "{name}");
    }
    p.apply(watcher::Event::Init);
    p.apply(watcher::Event::InitDone);
    assert!(p.is_empty());
}
