//! PURE: AdmissionReview bytes in, AdmissionReview bytes out.
//!
//! One way through, one file a step: [`request`] decodes a review (its objects skimmed as the
//! [`skim`] table says); [`decide`] decides on it with the [`policy`] ([`validate`], then the
//! edits of [`mutate`] and its helpers) into a [`decision`]; [`response`] encodes the answer;
//! [`review`] runs the three. The revision guard ([`guard`]) decides on revision deletes and
//! answers through the same [`response`].

pub mod decide;
pub mod decision;
pub mod drift;
pub mod guard;
pub mod ksvc;
pub mod mutate;
pub mod naming;
pub mod policy;
pub mod request;
pub mod response;
pub mod review;
pub mod sidecars;
pub mod skim;
pub mod spec_sha;
pub mod stop;
pub mod validate;
pub mod violation;
pub mod writers;

pub use decide::decide;
pub use decision::Decision;
pub use policy::Policy;
pub use request::{
    GroupVersionKind, REVIEW_API_VERSION, Reader, Request, ReviewError, decode, decode_with,
};
pub use response::{EncodeError, Reviewed, Summary, answer, encode, failure_response};
pub use review::{review, review_with};
pub use violation::RULES;
