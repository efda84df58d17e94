//! The admission role's own watch of Knative Services: a projection of each Service that holds
//! only what the revision guard reads (deleting, stopped, the `status.traffic` entries), about
//! two hundred bytes an app, so the process that answers admission never grows with the size of
//! the Services in the cluster.
//!
//! Objects are decoded straight into [`SlimService`] (every other field is skipped by serde,
//! never built), listed in pages of [`PAGE_SIZE`]. A re-list updates the projection in place and
//! drops at its end what it did not see, so it holds one copy. Never writes to the API and
//! never serves HTTP; says [`Owner::Unknown`] until the first list is complete.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admission::guard::{Lookup, Owner, OwnerView, Route};
use crate::admission::ksvc;
use crate::cluster::call::WATCH_TIMEOUT_SECS;
use crate::cluster::client::{self, ClientArgs};
use crate::cluster::lease;
use crate::cluster::rbac::ApiCall;

/// Every API call the projection makes (the RBAC test compares these with the admission part's
/// ServiceAccount).
pub const API_CALLS: &[ApiCall] = &[
    ApiCall::new("serving.knative.dev", "services", "list"),
    ApiCall::new("serving.knative.dev", "services", "watch"),
];

/// Objects a list page asks for: the page, not the cluster, bounds what one response holds.
pub const PAGE_SIZE: u32 = 500;

/// One `status.traffic` entry, as the guard reads it: its revision, tag and share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    revision: Box<str>,
    tag: Option<Box<str>>,
    percent: Option<i64>,
}

impl Target {
    fn route(&self) -> Route {
        Route {
            tag: self.tag.as_deref().map(String::from),
            percent: self.percent,
        }
    }
}

/// A Knative Service as the revision guard sees it; the only part of the object ever built.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "RawService")]
pub struct SlimService {
    /// Name, namespace and resourceVersion only (the watcher resumes from the last one).
    metadata: ObjectMeta,
    deleting: bool,
    stopped: bool,
    traffic: Box<[Target]>,
}

#[derive(Deserialize)]
struct RawService {
    metadata: RawMeta,
    #[serde(default)]
    status: RawStatus,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    // Only whether it is there: the time itself is never read.
    deletion_timestamp: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
struct RawStatus {
    #[serde(default)]
    traffic: Vec<RawTarget>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTarget {
    #[serde(default)]
    revision_name: String,
    tag: Option<String>,
    percent: Option<i64>,
}

impl From<RawService> for SlimService {
    fn from(raw: RawService) -> Self {
        let meta = raw.metadata;
        let stopped = ksvc::is_stopped(|key| meta.labels.get(key).map(String::as_str));
        let traffic = raw.status.traffic.into_iter().map(|t| Target {
            revision: t.revision_name.into(),
            tag: t
                .tag
                .filter(|tag| !tag.is_empty())
                .map(String::into_boxed_str),
            percent: t.percent,
        });
        Self {
            metadata: ObjectMeta {
                name: meta.name,
                namespace: meta.namespace,
                resource_version: meta.resource_version,
                ..ObjectMeta::default()
            },
            deleting: meta.deletion_timestamp.is_some(),
            stopped,
            traffic: traffic.collect(),
        }
    }
}

impl kube::Resource for SlimService {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Service")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("serving.knative.dev")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("services")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What is kept of one Service.
#[derive(Debug)]
struct Kept {
    deleting: bool,
    stopped: bool,
    traffic: Box<[Target]>,
    /// The list that last saw it: a re-list drops what it did not see.
    list: u32,
}

/// The projection of every watched Service, filled from the watcher's events.
#[derive(Debug, Default)]
pub struct Projection {
    /// By `namespace/name`: one allocation a key.
    apps: HashMap<Box<str>, Kept>,
    /// Lists started so far; the one under way, if any, is the last.
    list: u32,
    /// The first list is complete: a Service missing from the projection is gone.
    synced: bool,
}

impl Projection {
    /// Apply one watcher event.
    pub fn apply(&mut self, event: watcher::Event<SlimService>) {
        match event {
            watcher::Event::Init => self.list = self.list.wrapping_add(1),
            watcher::Event::InitApply(svc) | watcher::Event::Apply(svc) => self.keep(svc),
            watcher::Event::Delete(svc) => {
                if let Some(key) = key(&svc) {
                    self.apps.remove(&*key);
                }
            }
            watcher::Event::InitDone => {
                let list = self.list;
                self.apps.retain(|_, kept| kept.list == list);
                self.apps.shrink_to_fit();
                self.synced = true;
            }
        }
    }

    fn keep(&mut self, svc: SlimService) {
        let Some(key) = key(&svc) else { return };
        let kept = Kept {
            deleting: svc.deleting,
            stopped: svc.stopped,
            traffic: svc.traffic,
            list: self.list,
        };
        self.apps.insert(key, kept);
    }

    /// Services held.
    pub fn len(&self) -> usize {
        self.apps.len()
    }

    /// Whether it holds no Service.
    pub fn is_empty(&self) -> bool {
        self.apps.is_empty()
    }

    /// What the projection says of `lookup`'s Service and revision.
    pub fn owner(&self, lookup: &Lookup) -> Owner {
        if !self.synced {
            return Owner::Unknown;
        }
        match self
            .apps
            .get(format!("{}/{}", lookup.namespace, lookup.service).as_str())
        {
            None => Owner::Gone,
            Some(kept) if kept.deleting => Owner::Deleting,
            Some(kept) => Owner::Present {
                stopped: kept.stopped,
                routes: kept
                    .traffic
                    .iter()
                    .filter(|t| &*t.revision == lookup.revision)
                    .map(Target::route)
                    .collect(),
            },
        }
    }
}

fn key(svc: &SlimService) -> Option<Box<str>> {
    let meta = &svc.metadata;
    Some(format!("{}/{}", meta.namespace.as_deref()?, meta.name.as_deref()?).into_boxed_str())
}

/// The running projection: its view for the guard and its task.
pub struct Handle {
    projection: Arc<RwLock<Projection>>,
    namespace: Option<String>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Handle {
    /// The revision guard's view: unknown until synced, and outside the watched namespace.
    pub fn revision_owners(&self) -> OwnerView {
        let projection = self.projection.clone();
        let namespace = self.namespace.clone();
        OwnerView::new(move |lookup: &Lookup| {
            if namespace
                .as_deref()
                .is_some_and(|ns| ns != lookup.namespace)
            {
                return Owner::Unknown;
            }
            match projection.read() {
                Ok(p) => p.owner(lookup),
                Err(_) => Owner::Unknown,
            }
        })
    }

    /// Stop the watch.
    pub async fn shutdown(self) {
        self.stop.send_replace(true);
        self.task.abort();
        let _ = self.task.await;
    }
}

/// Start watching the Services of `namespace` (all when `None`) in the background; returns at
/// once. Must be called inside a Tokio runtime.
pub fn spawn(client_args: &ClientArgs, namespace: Option<String>) -> Handle {
    let projection = Arc::new(RwLock::new(Projection::default()));
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(run(
        client_args.clone(),
        namespace.clone(),
        projection.clone(),
        stopped,
    ));
    Handle {
        projection,
        namespace,
        stop,
        task,
    }
}

async fn run(
    client_args: ClientArgs,
    namespace: Option<String>,
    projection: Arc<RwLock<Projection>>,
    mut stop: watch::Receiver<bool>,
) {
    let api_timeout = client_args.api_timeout.max(Duration::from_secs(1));
    let read_timeout = Duration::from_secs(u64::from(WATCH_TIMEOUT_SECS))
        + api_timeout.max(Duration::from_secs(30));
    let connect = client::connect_with_backoff(
        &client_args,
        read_timeout,
        "the revision guard's Service watch",
        || {},
    );
    let client = tokio::select! {
        client = connect => client,
        () = lease::stop_requested(&mut stop) => return,
    };
    let api: Api<SlimService> = match &namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let cfg = watcher::Config::default()
        .timeout(WATCH_TIMEOUT_SECS)
        .page_size(PAGE_SIZE);
    let mut events = std::pin::pin!(watcher(api, cfg).default_backoff());
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            () = lease::stop_requested(&mut stop) => return,
        };
        match event {
            Some(Ok(event)) => {
                let done = matches!(event, watcher::Event::InitDone);
                let held = match projection.write() {
                    Ok(mut p) => {
                        p.apply(event);
                        p.len()
                    }
                    Err(_) => return,
                };
                if done {
                    tracing::info!(
                        services = held,
                        "revision guard's Service projection listed"
                    );
                }
            }
            Some(Err(error)) => tracing::warn!(
                error = %error,
                "revision guard's Service watch failed; waiting for the API server, resuming with backoff"
            ),
            None => return,
        }
    }
}

#[cfg(test)]
#[path = "projection_tests.rs"]
mod tests;
