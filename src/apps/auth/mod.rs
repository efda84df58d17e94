//! The status API's delegated authentication and authorization, one concern per file:
//!
//! - [`reviewer`]: who a token is ([`Caller`]) and what it may read, through the caches and budgets;
//! - [`api`]: the two API calls (TokenReview, SubjectAccessReview) and their RBAC;
//! - [`access`] (PURE): bearer headers, the attributes a request needs, the namespace filter;
//! - [`flight`]: the answer cache with one in-flight lookup per key;
//! - [`cache`] (PURE): fixed-size keys, expiry, bounds in entries and bytes;
//! - [`limits`] (PURE): the token buckets of the review budgets;
//! - [`refusal`]: why a request is not served, as HTTP;
//! - [`metrics_access`]: the `/metrics` guard of `--metrics-auth`.
//!
//! Never decides access itself: the API server does. Never answers "allowed" when it cannot ask.

pub mod access;
pub mod api;
pub mod cache;
pub mod flight;
pub mod limits;
pub mod metrics_access;
pub mod refusal;
pub mod reviewer;

pub use metrics_access::{MetricsAccess, metrics_guard};
pub use refusal::{Budget, RETRY_AFTER_SECS, Refusal};
pub use reviewer::{Caller, ClientSource, Reviewer, Settings};
