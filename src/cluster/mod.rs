//! Cluster plumbing shared by the watch loop, the certificate manager and the `app` CLI: one
//! timed call, one backoff, one retry-on-conflict read-modify-write ([`call`]), the Lease
//! election ([`lease`]), the client configuration ([`config_for`]), the wording of a failed call
//! as kubectl words it ([`errors`]), and the list of API calls each part makes, which the RBAC
//! manifests must grant exactly ([`rbac`]).
//!
//! Knows the Kubernetes API, never a KService's meaning: what to write is decided elsewhere.

pub mod call;
pub mod errors;
pub mod lease;
pub mod rbac;

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::report::error_chain;

/// The client configuration for a kubeconfig file, or else the in-cluster config or the usual
/// lookup; an error is its whole chain on one line.
pub async fn config_for(kubeconfig: Option<&Path>) -> Result<kube::Config, String> {
    match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| error_chain(&e))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| error_chain(&e))
        }
        None => kube::Config::infer().await.map_err(|e| error_chain(&e)),
    }
}
