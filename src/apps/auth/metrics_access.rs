//! The `/metrics` check of `--metrics-auth`: a bearer token allowed `get` on the non-resource
//! URL `/metrics` (what kube-rbac-proxy asks for Prometheus), through a reviewer of its own, so
//! a flood of `/apps` requests does not spend the scraper's budgets. Its budgets are shared as
//! the status API's are: new tokens per address first, then for everyone, with a quarter of the
//! reviews in flight kept for known callers (the scraper, once its token is cached).

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use futures::future::BoxFuture;

use super::reviewer::{ClientSource, Reviewer, Settings};
use crate::apps::args::StatusApiArgs;
use crate::apps::auth::access::Attributes;
use crate::apps::metrics::StatusMetrics;
use crate::cluster::client::ClientArgs;

/// The `/metrics` guard.
#[derive(Debug)]
pub struct MetricsAccess {
    reviewer: Arc<Reviewer>,
}

impl MetricsAccess {
    /// A check asking through `reviewer`.
    pub fn new(reviewer: Arc<Reviewer>) -> Self {
        Self { reviewer }
    }
}

impl crate::server::routes::Guard for MetricsAccess {
    fn check(
        &self,
        headers: HeaderMap,
        from: Option<IpAddr>,
    ) -> BoxFuture<'static, Result<(), Response>> {
        let reviewer = self.reviewer.clone();
        async move {
            let caller = reviewer.authenticate(&headers, from).await;
            let needs = Attributes::Path("/metrics".into());
            let allowed = match caller {
                Ok(caller) => reviewer.require(&caller, needs).await,
                Err(refusal) => Err(refusal),
            };
            allowed.map_err(IntoResponse::into_response)
        }
        .boxed()
    }
}

/// The `/metrics` guard of `serve`: its own reviewer (caches and budgets) on the cluster `client`
/// names.
pub fn metrics_guard(
    client: &ClientArgs,
    status: &StatusApiArgs,
    metrics: &StatusMetrics,
) -> Arc<dyn crate::server::routes::Guard> {
    let source = ClientSource::Connect(Box::new(client.clone()));
    let settings = Settings::from_args(status);
    let reviewer = Reviewer::new(source, settings, metrics.clone());
    Arc::new(MetricsAccess::new(Arc::new(reviewer)))
}
