//! Tests of the status hub: transitions, filters, and resync on overflow.

use super::*;
use crate::watch::status::{AppStatus, Phase};

pub(crate) fn record(ns: &str, name: &str, phase: Phase, time: &str) -> AppRecord {
    AppRecord {
        namespace: ns.into(),
        name: name.into(),
        project: Some("proj".into()),
        domain: Some("dev".into()),
        app_name: Some(name.into()),
        status: AppStatus {
            phase,
            message: phase.as_str().into(),
            last_transition_time: time.into(),
            replicas: None,
            url: None,
            substate: None,
        },
        drift: Default::default(),
    }
}

#[test]
fn upsert_reports_transitions_and_ignores_timestamp_only_changes() {
    let hub = Hub::new();
    let a = record("ns", "a", Phase::Pending, "t1");
    assert!(matches!(
        hub.upsert(a.clone()),
        Change::Transition { previous: None, .. }
    ));
    assert_eq!(
        hub.upsert(record("ns", "a", Phase::Pending, "t2")),
        Change::None
    );
    assert_eq!(hub.get(&a.key()).unwrap().status.last_transition_time, "t1");
    let change = hub.upsert(record("ns", "a", Phase::Active, "t3"));
    assert!(matches!(
        change,
        Change::Transition {
            previous: Some(Phase::Pending),
            ..
        }
    ));
    let mut more = record("ns", "a", Phase::Active, "t4");
    more.status.replicas = Some(3);
    assert_eq!(hub.upsert(more), Change::Refresh);
    assert_eq!(hub.get(&a.key()).unwrap().status.last_transition_time, "t3");
}

#[test]
fn list_filters_by_namespace_project_and_domain() {
    let hub = Hub::new();
    hub.upsert(record("a", "x", Phase::Active, "t"));
    hub.upsert(record("b", "y", Phase::Active, "t"));
    let mut other = record("b", "z", Phase::Active, "t");
    other.project = Some("other".into());
    hub.upsert(other);
    let names = |f: Filter| {
        hub.list(&f)
            .into_iter()
            .map(|r| r.name.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(Filter::default()), ["x", "y", "z"]);
    assert_eq!(
        names(Filter {
            namespace: Some("b".into()),
            ..Filter::default()
        }),
        ["y", "z"]
    );
    assert_eq!(
        names(Filter {
            project: Some("proj".into()),
            ..Filter::default()
        }),
        ["x", "y"]
    );
    assert_eq!(
        names(Filter {
            domain: Some("prod".into()),
            ..Filter::default()
        }),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn subscriber_gets_current_state_then_changes_then_deletes() {
    let hub = Hub::new();
    hub.upsert(record("ns", "a", Phase::Pending, "t"));
    let mut sub = hub.subscribe(Filter::default(), 8);
    assert!(matches!(sub.next().await, WatchEvent::Created { app } if &*app.name == "a"));
    hub.upsert(record("ns", "a", Phase::Active, "t"));
    hub.upsert(record("ns", "b", Phase::Pending, "t"));
    hub.remove(&AppKey {
        namespace: "ns".into(),
        name: "a".into(),
    });
    assert!(
        matches!(sub.next().await, WatchEvent::Updated { app } if app.status.phase == Phase::Active)
    );
    assert!(matches!(sub.next().await, WatchEvent::Created { app } if &*app.name == "b"));
    assert!(matches!(sub.next().await, WatchEvent::Deleted { app } if &*app.name == "a"));
    assert_eq!(sub.try_next(), None);
}

#[tokio::test]
async fn slow_subscriber_gets_resync_and_current_state_instead_of_a_silent_drop() {
    let hub = Hub::new();
    let mut slow = hub.subscribe(Filter::default(), 2);
    let mut one = hub.subscribe(
        Filter {
            name: Some("app-1".into()),
            ..Filter::default()
        },
        64,
    );
    for i in 0..5 {
        hub.upsert(record("ns", &format!("app-{i}"), Phase::Pending, "t"));
    }
    hub.upsert(record("ns", "app-1", Phase::Active, "t"));
    // The slow reader overflowed at the third event: it is told to resync, then gets every app.
    assert_eq!(slow.next().await, WatchEvent::Resync);
    let mut state = Vec::new();
    while let Some(WatchEvent::Updated { app }) = slow.try_next() {
        state.push((app.name, app.status.phase));
    }
    assert_eq!(state.len(), 5);
    assert!(state.contains(&("app-1".into(), Phase::Active)));
    // After a resync it keeps receiving changes.
    hub.upsert(record("ns", "app-4", Phase::Failed, "t"));
    assert!(
        matches!(slow.next().await, WatchEvent::Updated { app } if app.status.phase == Phase::Failed)
    );
    // A filtered subscriber with room saw exactly its app, in order.
    assert!(matches!(one.next().await, WatchEvent::Created { app } if &*app.name == "app-1"));
    assert!(
        matches!(one.next().await, WatchEvent::Updated { app } if app.status.phase == Phase::Active)
    );
    assert_eq!(one.try_next(), None);
}

#[test]
fn dropping_a_subscription_unsubscribes() {
    let hub = Hub::new();
    let sub = hub.subscribe(Filter::default(), 1);
    assert_eq!(hub.subscriber_count(), 1);
    drop(sub);
    assert_eq!(hub.subscriber_count(), 0);
}

#[test]
fn watch_events_serialise_with_a_type_tag() {
    let json = serde_json::to_value(WatchEvent::Resync).unwrap();
    assert_eq!(json, serde_json::json!({"type": "RESYNC"}));
    let json = serde_json::to_value(WatchEvent::Deleted {
        app: record("n", "a", Phase::Stopped, "t"),
    })
    .unwrap();
    assert_eq!(json["type"], "DELETED");
    assert_eq!(json["app"]["status"]["phase"], "STOPPED");
}

#[test]
fn phase_counts_follow_every_change_without_a_walk() {
    let hub = Hub::new();
    let walk = |hub: &Hub| {
        let mut counts: BTreeMap<Phase, i64> = Phase::ALL.iter().map(|p| (*p, 0)).collect();
        for r in hub.list(&Filter::default()) {
            *counts.get_mut(&r.status.phase).unwrap() += 1;
        }
        counts
    };
    // (app, Some(phase): upsert, None: remove)
    let steps = [
        ("a", Some(Phase::Pending)),
        ("b", Some(Phase::Pending)),
        ("a", Some(Phase::Active)),
        ("a", Some(Phase::Active)),
        ("c", Some(Phase::Failed)),
        ("b", None),
        ("b", None),
        ("c", Some(Phase::Stopping)),
        ("c", Some(Phase::Stopped)),
        ("a", None),
    ];
    for (i, (name, phase)) in steps.into_iter().enumerate() {
        match phase {
            Some(phase) => {
                hub.upsert(record("ns", name, phase, &format!("t{i}")));
            }
            None => {
                hub.remove(&record("ns", name, Phase::Pending, "").key());
            }
        }
        assert_eq!(hub.count_by_phase(), walk(&hub), "after step {i}");
    }
    hub.retain(&std::collections::BTreeSet::new());
    assert!(hub.count_by_phase().values().all(|n| *n == 0));
}

#[test]
fn pages_walk_every_covered_app_once_in_key_order() {
    let hub = Hub::new();
    for ns in ["a", "b", "c"] {
        for name in ["x", "y", "z"] {
            hub.upsert(record(ns, name, Phase::Active, "t"));
        }
    }
    let walk = |filter: &Filter, limit: usize| {
        let (mut after, mut seen, mut pages) = (None, Vec::new(), 0);
        loop {
            let (records, more) = hub.page(filter, after.as_ref(), limit);
            pages += 1;
            after = records.last().map(AppRecord::key);
            seen.extend(
                records
                    .iter()
                    .map(|r| format!("{}/{}", r.namespace, r.name)),
            );
            if !more {
                return (seen, pages);
            }
        }
    };
    let all = hub.list(&Filter::default());
    let want: Vec<String> = all
        .iter()
        .map(|r| format!("{}/{}", r.namespace, r.name))
        .collect();
    for limit in [1, 2, 4, 9, 100] {
        let (seen, pages) = walk(&Filter::default(), limit);
        assert_eq!(seen, want, "limit {limit}");
        assert_eq!(pages, 9usize.div_ceil(limit).max(1), "limit {limit}");
    }
    let in_b = Filter {
        namespace: Some("b".into()),
        ..Filter::default()
    };
    assert_eq!(walk(&in_b, 2).0, ["b/x", "b/y", "b/z"]);
    let named_y = Filter {
        name: Some("y".into()),
        ..Filter::default()
    };
    assert_eq!(walk(&named_y, 1).0, ["a/y", "b/y", "c/y"]);
    let nowhere = Filter {
        namespace: Some("bb".into()),
        ..Filter::default()
    };
    assert_eq!(hub.page(&nowhere, None, 10), (Vec::new(), false));
}
