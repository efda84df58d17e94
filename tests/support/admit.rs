//! Deciding on a KService as a review would, for the admission tests: the request built the
//! way kube-apiserver sends it, and every decision's JSON Patch replayed on the input to check
//! that it gives the decision's object (what kube-apiserver would store); and an object with
//! its injected sidecars taken out again.

use ksvc_webhook::admission::{self, Decision, Policy, Request, mutate};
use ksvc_webhook::json::Node;
use ksvc_webhook::json::edit::Editor;
use serde_json::Value;

/// Decide on `request`, whose object is `input`; when the decision has an object, replaying the
/// decision's patch on `input` must give it.
pub fn decide(request: Request<'static>, input: &Value, policy: &Policy) -> Decision<'static> {
    let decision = admission::decide(request, policy);
    if let Some(out) = decision.object_json() {
        assert_eq!(
            replay(input, &decision),
            out,
            "the patch reproduces the output"
        );
    }
    decision
}

/// Decide on `object` by `op` in namespace `apps`; an UPDATE is over the object itself.
pub fn admit(op: &str, object: Value, policy: &Policy) -> Decision<'static> {
    let old = (op == "UPDATE").then(|| object.clone());
    admit_over(op, object, old, policy)
}

/// [`admit`] with the stored object given.
pub fn admit_over(
    op: &str,
    object: Value,
    old: Option<Value>,
    policy: &Policy,
) -> Decision<'static> {
    let request = Request::kservice("u-1", op, "apps", object.clone(), old);
    decide(request, &object, policy)
}

/// `input` with the decision's JSON Patch applied.
pub fn replay(input: &Value, decision: &Decision) -> Value {
    let mut replayed = input.clone();
    let patch: json_patch::Patch = serde_json::from_slice(decision.patch.json().unwrap()).unwrap();
    json_patch::patch(&mut replayed, &patch).unwrap();
    replayed
}

/// The admitted object; panics with the message of a rejection.
pub fn out(decision: &Decision) -> Value {
    assert!(decision.allowed, "rejected: {}", decision.message());
    decision.object_json().unwrap()
}

/// `object` with every injected sidecar taken out again (`mutate::strip`), which must find some.
pub fn uninject(object: Value) -> Value {
    let mut node = Node::from_json(object);
    assert!(mutate::strip(&mut Editor::new(&mut node)));
    node.to_json()
}
