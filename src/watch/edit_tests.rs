//! Tests of the raw edits: the stop label round-trips, a parent of another type is left alone,
//! an update changes only the fields it was given and refuses what cannot be applied.

use serde_json::json;

use super::*;

fn svc() -> Value {
    json!({"metadata": {"name": "app", "labels": {"keep": "me"}},
           "spec": {"template": {"metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
                                 "spec": {"containers": [{"image": "old", "futureField": 1}]}}}})
}

#[test]
fn stop_label_round_trips() {
    let mut v = svc();
    assert!(set_stopped(&mut v, true));
    assert!(!set_stopped(&mut v, true));
    assert_eq!(v["metadata"]["labels"]["flyte.org/app-stopped"], "true");
    assert!(set_stopped(&mut v, false));
    assert!(!set_stopped(&mut v, false));
    assert_eq!(v, svc());
}

#[test]
fn a_parent_of_another_type_is_left_alone_not_replaced() {
    let mut v = json!({"metadata": {"labels": "not-a-map"}});
    assert!(!set_stopped(&mut v, true));
    assert_eq!(v, json!({"metadata": {"labels": "not-a-map"}}));
    let mut v = json!({"spec": {"template": {"metadata": {"annotations": ["x"]}}}});
    let update = AppUpdate {
        min_scale: Some(1),
        ..Default::default()
    };
    assert_eq!(update.apply(&mut v), Ok(false));
    assert_eq!(
        v["spec"]["template"]["metadata"]["annotations"],
        json!(["x"])
    );
}

#[test]
fn update_changes_only_given_fields() {
    let cases = [
        (AppUpdate::default(), false),
        (
            AppUpdate {
                image: Some("new".into()),
                ..Default::default()
            },
            true,
        ),
        (
            AppUpdate {
                image: Some("old".into()),
                ..Default::default()
            },
            false,
        ),
        (
            AppUpdate {
                min_scale: Some(1),
                ..Default::default()
            },
            false,
        ),
        (
            AppUpdate {
                max_scale: Some(4),
                ..Default::default()
            },
            true,
        ),
        (
            AppUpdate {
                min_scale: Some(2),
                max_scale: Some(0),
                image: None,
            },
            true,
        ),
    ];
    for (update, want) in cases {
        let mut v = svc();
        assert_eq!(update.apply(&mut v).unwrap(), want, "{update:?}");
        assert_eq!(
            v["spec"]["template"]["spec"]["containers"][0]["futureField"],
            1
        );
        assert_eq!(v["metadata"]["labels"]["keep"], "me");
        let once = v.clone();
        assert!(!update.apply(&mut v).unwrap(), "idempotent: {update:?}");
        assert_eq!(v, once);
    }
}

#[test]
fn update_rejects_max_below_min_and_missing_containers() {
    let mut v = svc();
    let bad = AppUpdate {
        max_scale: Some(0),
        min_scale: Some(3),
        image: None,
    };
    assert!(bad.apply(&mut v).is_ok(), "0 is unlimited");
    let bad = AppUpdate {
        max_scale: Some(2),
        min_scale: None,
        image: None,
    };
    assert!(bad.apply(&mut svc()).unwrap());
    let bad = AppUpdate {
        max_scale: Some(2),
        min_scale: Some(3),
        image: None,
    };
    assert_eq!(
        bad.apply(&mut svc()),
        Err(Error::MaxBelowMin { min: 3, max: 2 })
    );
    let mut empty = json!({"spec": {}});
    let image = AppUpdate {
        image: Some("x".into()),
        ..Default::default()
    };
    assert_eq!(image.apply(&mut empty), Err(Error::NoContainer));
}
