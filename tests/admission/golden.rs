//! Golden AdmissionReviews: each `tests/fixtures/NAME.review.json` is answered exactly as
//! `NAME.response.json` says, and its patch (decoded) is `NAME.patch.json`. Bodies under
//! `fixtures/invalid/` are refused with an error, never answered. `BLESS=1` rewrites the
//! expectations after a deliberate change; review the diff before committing it.

#![allow(clippy::unwrap_used)] // test helpers may panic

use std::path::{Path, PathBuf};

use base64::Engine as _;
use ksvc_webhook::admission::{Policy, review};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn check(path: &Path, actual: &Value) {
    if std::env::var_os("BLESS").is_some() {
        let text = serde_json::to_string_pretty(actual).unwrap() + "\n";
        std::fs::write(path, text).unwrap();
        return;
    }
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|_| panic!("{} is missing; run with BLESS=1", path.display()));
    let expected: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(actual, &expected, "{}", path.display());
}

#[test]
fn reviews_get_their_golden_responses() {
    let mut seen = 0;
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .strip_suffix(".review.json")
        else {
            continue;
        };
        seen += 1;
        let body = std::fs::read(&path).unwrap();
        let request: Value = serde_json::from_slice(&body).unwrap();
        let reviewed = review(&body, &Policy::default()).unwrap();
        let response: Value = serde_json::from_slice(&reviewed.body).unwrap();
        // What kube-apiserver checks first: the version, the kind and the uid echo.
        assert_eq!(response["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(response["kind"], "AdmissionReview");
        assert_eq!(response["response"]["uid"], request["request"]["uid"]);
        check(&fixtures().join(format!("{stem}.response.json")), &response);

        let patch = match response["response"]["patch"].as_str() {
            Some(b64) => {
                assert_eq!(response["response"]["patchType"], "JSONPatch");
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap();
                let patch: Value = serde_json::from_slice(&bytes).unwrap();
                // The patch applies to the object kube-apiserver holds.
                let ops: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
                let mut object = request["request"]["object"].clone();
                json_patch::patch(&mut object, &ops).unwrap();
                patch
            }
            None => {
                assert!(response["response"].get("patchType").is_none());
                Value::Null
            }
        };
        check(&fixtures().join(format!("{stem}.patch.json")), &patch);
        assert_eq!(
            stem.starts_with("deny"),
            !response["response"]["allowed"].as_bool().unwrap()
        );
    }
    assert!(seen >= 5, "only {seen} fixtures found");
}

#[test]
fn bodies_that_are_not_reviews_are_refused() {
    let mut seen = 0;
    for entry in std::fs::read_dir(fixtures().join("invalid")).unwrap() {
        let path = entry.unwrap().path();
        let body = std::fs::read(&path).unwrap();
        let err = review(&body, &Policy::default()).err();
        let err = err.unwrap_or_else(|| panic!("{} was answered", path.display()));
        assert!(!err.to_string().contains('\n'), "one-line error: {err}");
        seen += 1;
    }
    assert!(seen >= 5);
}
