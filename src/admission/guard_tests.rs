//! Table tests of the revision guard: who may delete, the owner states, the wording per case,
//! the override, and the review round trip.

use super::*;

fn user(name: &str) -> UserInfo {
    UserInfo {
        username: name.into(),
        groups: vec!["system:authenticated".into()],
    }
}

fn present(stopped: bool, routes: &[(Option<&str>, Option<i64>)]) -> Owner {
    Owner::Present {
        stopped,
        routes: routes
            .iter()
            .map(|(tag, percent)| Route {
                tag: tag.map(str::to_string),
                percent: *percent,
            })
            .collect(),
    }
}

fn delete<'a>(who: &'a UserInfo, routing_state: Option<&'a str>, allow: bool) -> Delete<'a> {
    Delete {
        namespace: "flyte",
        revision: "app-00001",
        service: Some("app"),
        routing_state,
        allow_delete: allow,
        user: who,
    }
}

#[test]
fn the_allow_list_and_the_refusals() {
    let platform = user("system:serviceaccount:flyte:flyteadmin");
    let gc = user(GARBAGE_COLLECTOR);
    let ns = user(NAMESPACE_CONTROLLER);
    let kcm = user(KUBE_CONTROLLER_MANAGER);
    let active = Some("active");
    let routed = present(false, &[(None, Some(100))]);
    let unrouted = present(false, &[]);
    #[rustfmt::skip]
    let cases: [(&str, &UserInfo, Option<&str>, Owner, bool); 14] = [
        ("garbage collector, routed", &gc, active, routed.clone(), true),
        ("namespace controller, routed", &ns, active, routed.clone(), true),
        ("kube-controller-manager, routed", &kcm, active, routed.clone(), true),
        ("Service gone", &platform, active, Owner::Gone, true),
        ("Service being deleted", &platform, active, Owner::Deleting, true),
        ("not routed, no cache", &platform, None, Owner::Unknown, true),
        ("reserve label, no cache", &platform, Some("reserve"), Owner::Unknown, true),
        ("not routed by label or status", &platform, Some("reserve"), unrouted.clone(), true),
        ("routed by label, no cache", &platform, active, Owner::Unknown, false),
        ("routed by label, status moved on", &platform, active, unrouted, false),
        ("routed by status, label lags", &platform, Some("pending"), routed.clone(), false),
        ("routed by both", &platform, active, routed.clone(), false),
        ("a stopped app's, routed", &platform, active, present(true, &[(None, Some(100))]), false),
        ("a person, routed", &user("alice"), active, routed, false),
    ];
    for (name, who, routing_state, owner, allowed) in cases {
        let verdict = decide(
            &delete(who, routing_state, false),
            &owner,
            &Settings::default(),
        );
        assert_eq!(
            !matches!(verdict, Verdict::Refused(_)),
            allowed,
            "{name}: {verdict:?}"
        );
    }
}

#[test]
fn the_allowed_deleters_are_a_setting() {
    let settings = Settings {
        allowed_deleters: Principals::parse(&["group:cleanup"]).unwrap(),
    };
    let routed = present(false, &[(None, Some(100))]);
    let member = UserInfo {
        username: "janitor".into(),
        groups: vec!["cleanup".into()],
    };
    let gc = user(GARBAGE_COLLECTOR);
    let verdict = |who| decide(&delete(who, Some("active"), false), &routed, &settings);
    assert_eq!(verdict(&member), Verdict::SystemCleanup);
    assert!(
        matches!(verdict(&gc), Verdict::Refused(_)),
        "the list replaces the defaults"
    );
}

#[test]
fn the_override_annotation_lets_an_administrator_delete_with_a_warning() {
    let admin = user("kubernetes-admin");
    let routed = present(false, &[(None, Some(100))]);
    let Verdict::Overridden(warning) = decide(
        &delete(&admin, Some("active"), true),
        &routed,
        &Settings::default(),
    ) else {
        panic!("not overridden");
    };
    assert!(warning.contains("deleted anyway"), "{warning}");
    // Without a route the annotation changes nothing.
    let verdict = decide(
        &delete(&admin, None, true),
        &present(false, &[]),
        &Settings::default(),
    );
    assert_eq!(verdict, Verdict::NotRouted);
}

#[test]
fn a_refusal_is_worded_for_the_case() {
    let who = user("system:serviceaccount:flyte:flyteadmin");
    let refusal = |owner: Owner| {
        let verdict = decide(
            &delete(&who, Some("active"), false),
            &owner,
            &Settings::default(),
        );
        let Verdict::Refused(v) = verdict else {
            panic!("allowed: {verdict:?}");
        };
        assert_eq!(v.rule, RULE);
        v.to_string()
    };
    let override_hint = "; an administrator who must delete it now can annotate it \
                         ksvc-webhook.flyte.org/allow-delete=true first";
    assert_eq!(
        refusal(present(true, &[(None, Some(100))])),
        format!(
            "revision \"app-00001\" in namespace \"flyte\": is still serving: \"app\" routes \
             traffic to it (status.traffic, label serving.knative.dev/routingState: active), \
             so deleting it now would lose requests; it will be removed once traffic has left \
             it (ksvc-webhook deletes the old revisions of a stopped app then); nothing to do\
             {override_hint}"
        )
    );
    let running = refusal(present(
        false,
        &[(None, Some(90)), (Some("canary"), Some(0))],
    ));
    assert!(
        running.contains(
            "remove its traffic or tag first (90% of the traffic, tag \"canary\" (0%) in the \
             spec.traffic of Service \"app\""
        ),
        "{running}"
    );
    assert!(!running.contains("nothing to do"), "{running}");
    let unknown = refusal(Owner::Unknown);
    assert!(
        unknown
            .contains("remove its traffic or tag from the spec.traffic of Service \"app\" first"),
        "{unknown}"
    );
    assert!(unknown.ends_with(override_hint), "{unknown}");
}

#[test]
fn reviews_of_other_requests_are_allowed_and_refusals_are_encoded() {
    let body = |op: &str, kind: &str, user: &str| {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": op, "name": "app-00001", "namespace": "flyte",
                "kind": {"group": "serving.knative.dev", "version": "v1", "kind": kind},
                "userInfo": {"username": user},
                "oldObject": {"metadata": {"name": "app-00001", "labels": {
                    "serving.knative.dev/service": "app",
                    "serving.knative.dev/routingState": "active"}}}}
        }))
        .unwrap()
    };
    let answer = |body: &[u8]| {
        let r = review(body, &Settings::default(), |_| Owner::Unknown).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        (r.summary, v)
    };
    let (s, v) = answer(&body("DELETE", "Revision", "alice"));
    assert!(!s.allowed);
    assert_eq!(s.rejected_rules, vec![RULE]);
    assert_eq!(v["response"]["uid"], "u1");
    assert_eq!(v["response"]["status"]["code"], 400);
    let message = v["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("app-00001") && message.contains("remove its traffic or tag"));
    for (op, kind, user) in [
        ("DELETE", "Revision", GARBAGE_COLLECTOR),
        ("DELETE", "Revision", KUBE_CONTROLLER_MANAGER),
        ("DELETE", "Service", "alice"),
        ("UPDATE", "Revision", "alice"),
    ] {
        let (s, v) = answer(&body(op, kind, user));
        assert!(s.allowed, "{op} {kind} {user}");
        assert_eq!(v["response"]["allowed"], true);
    }
}
