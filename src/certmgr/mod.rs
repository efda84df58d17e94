//! Self-managed webhook certificates: the CA and serving certificate in a Secret shared by all
//! replicas, written to the server's certificate directory, the CA bundle published in the
//! MutatingWebhookConfiguration; and, with these or with cert-manager's, its failurePolicy
//! switched from the install's `Ignore` to the configured one once a replica answers
//! (docs/install.md).
//!
//! Layout: [`state`] (PURE, the Secret's content and the bundle), [`plan`] (PURE, what to do
//! next), [`policy`] (PURE, when the webhook's failurePolicy becomes the configured one, and the
//! Secret's owner), [`issue`] (new keys for a plan), [`files`] (atomic file set), [`probe`] (this
//! replica's own TLS probe), [`shell`] (the API calls, the loop), [`keeper`] (the failurePolicy
//! switch and its watch of the configuration). Entry points: [`start`], [`keeper::Keeper::run`].
//!
//! Never decides anything in the shell: every rotation step is chosen by [`plan::plan`], every
//! policy switch by [`policy::step`]. Never writes a Secret or a webhook configuration other than
//! those named in [`CertArgs`].

pub mod args;
pub mod files;
pub mod issue;
pub mod keeper;
pub mod metrics;
pub mod pki;
pub mod plan;
pub mod policy;
pub mod probe;
pub mod shell;
pub mod state;

use std::path::PathBuf;

pub use plan::{Plan, Policy};
pub use policy::FailurePolicy;
pub use shell::{Manager, Synced, start};
pub use state::SecretData;

use crate::cluster::rbac::ApiCall;
pub use args::CertArgs;

/// The calls of the failurePolicy switch ([`keeper`]), with either kind of certificates: its
/// MutatingWebhookConfiguration, by name (the list and the watch carry a `metadata.name` field
/// selector, which RBAC authorizes by name). The cert-manager overlay grants exactly these.
pub const POLICY_CALLS: &[ApiCall] = &[
    ApiCall::new(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "get",
    ),
    ApiCall::new(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "list",
    ),
    ApiCall::new(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "watch",
    ),
    ApiCall::new(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "patch",
    ),
];

/// Every other call of self-managed certificates (see `manifests/base/rbac-certs.yaml`, which
/// grants these and [`POLICY_CALLS`]): the Secret, and the revision guard's bundle.
pub const API_CALLS: &[ApiCall] = &[
    ApiCall::new("", "secrets", "get"),
    ApiCall::new("", "secrets", "create"),
    ApiCall::new("", "secrets", "update"),
    ApiCall::new(
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "get",
    ),
    ApiCall::new(
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "patch",
    ),
];

/// The files written into the certificate directory.
pub const FILE_TLS_CRT: &str = "tls.crt";
/// The serving key file (mode 0600).
pub const FILE_TLS_KEY: &str = "tls.key";
/// The CA bundle file: every CA kube-apiserver currently trusts for this webhook.
pub const FILE_CA_CRT: &str = "ca.crt";

/// Errors of certificate self-management.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API call failed: {call}")]
    Api {
        call: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("kubernetes API call timed out after {secs}s: {call}")]
    Timeout { call: &'static str, secs: u64 },
    #[error("cannot issue certificates")]
    Pki(#[from] crate::certmgr::pki::Error),
    #[error("cannot write certificate files into {}", path.display())]
    Files {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the certificate file writer stopped")]
    Join(#[from] tokio::task::JoinError),
    #[error("planned step {0:?} does not apply to the certificate Secret")]
    Unapplicable(Plan),
    #[error("{what} kept changing while we wrote it; giving up for this round")]
    Contention { what: &'static str },
    #[error("the start-up budget ran out while waiting for: {call}")]
    Deadline { call: &'static str },
    #[error("no usable certificates after {secs}s of retries (start-up budget {budget_secs}s)")]
    Bootstrap {
        secs: u64,
        budget_secs: u64,
        #[source]
        source: Box<Error>,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
