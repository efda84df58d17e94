//! Fuzz the review path: arbitrary bytes never panic, and a body `serde_json` accepts is
//! decided exactly as the `serde_json` path decides it (the same response bytes and summary).

#![no_main]

use ksvc_webhook::admission::{self, Policy, Reader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let policy = Policy::default();
    let server = admission::review(body, &policy);
    if serde_json::from_slice::<serde_json::Value>(body).is_err() {
        return;
    }
    let reference = admission::review_with(body, &policy, Reader::SerdeJson);
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
});
