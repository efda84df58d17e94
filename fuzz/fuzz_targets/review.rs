//! Fuzz the review path: arbitrary bytes never panic, and a body `serde_json` accepts is
//! decided exactly as the `serde_json` path decides it (the same response bytes and summary),
//! with no sidecars and with the example catalogue (its auth proxy fronting the app, so the
//! serving port and the probes are handed over).

#![no_main]

use std::sync::{Arc, LazyLock};

use ksvc_webhook::admission::sidecars::{Catalogue, Knative};
use ksvc_webhook::admission::{self, Policy, Reader};
use libfuzzer_sys::fuzz_target;

static POLICIES: LazyLock<[Policy; 2]> = LazyLock::new(|| {
    let catalogue = Catalogue::parse(include_str!("../../examples/sidecars.yaml"))
        .expect("the example catalogue loads");
    let fronting = Policy {
        sidecars: Arc::new(catalogue),
        knative: Knative {
            multi_container_probing: true,
        },
        ..Policy::default()
    };
    [Policy::default(), fronting]
});

fuzz_target!(|body: &[u8]| {
    for policy in POLICIES.iter() {
        let server = admission::review(body, policy);
        if serde_json::from_slice::<serde_json::Value>(body).is_err() {
            return;
        }
        let reference = admission::review_with(body, policy, Reader::SerdeJson);
        match (server, reference) {
            (Ok(got), Ok(want)) => {
                assert_eq!(
                    String::from_utf8_lossy(&got.body),
                    String::from_utf8_lossy(&want.body)
                );
                assert_eq!(got.summary, want.summary);
            }
            (Err(got), Err(want)) => assert_eq!(got.to_string(), want.to_string()),
            (got, want) => panic!("server: {got:?}\nserde_json: {want:?}"),
        }
    }
});
