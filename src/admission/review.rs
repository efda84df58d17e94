//! PURE: one AdmissionReview through the pipeline — decode ([`super::request`]), decide
//! ([`super::decision`]), answer ([`super::response`]). Holds no step of its own.

use super::decide::decide;
use super::ksvc;
use super::policy::Policy;
use super::request::{Reader, ReviewError, decode_with};
use super::response::{Reviewed, Summary, answer};

/// Decide on one AdmissionReview: the bytes kube-apiserver sent in, the bytes to answer with.
pub fn review(body: &[u8], policy: &Policy) -> Result<Reviewed, ReviewError> {
    review_with(body, policy, Reader::Skim)
}

/// [`review`] with the reader given.
pub fn review_with(body: &[u8], policy: &Policy, reader: Reader) -> Result<Reviewed, ReviewError> {
    let request = decode_with(body, reader)?;
    let mut summary = Summary::of(&request);
    let decision = decide(request, policy);
    // A CREATE with `generateName` names no object: the decision's object has the name.
    if let (true, Some(object)) = (summary.name.is_empty(), &decision.object) {
        summary.name = ksvc::name(object).to_string();
    }
    Ok(answer(summary, &decision))
}
