//! A Kubernetes API server the tests control: plain HTTP on 127.0.0.1, real Kubernetes JSON.
//!
//! Lists carry a resourceVersion; watches stream `{"type":"ADDED","object":…}` lines, replay
//! history after the requested resourceVersion (so a broken watch can resume), answer a
//! streaming list (`sendInitialEvents=true`: every object, then the bookmark that ends them)
//! unless [`FakeApi::refuse_streaming_lists`], and can be cut
//! with [`FakeApi::disconnect_watches`]; writes check resourceVersion and delete preconditions and
//! answer 409/404 with `Status` bodies (a replace with `?dryRun=All` is checked and admitted but
//! not stored); [`FakeApi::fail_puts`] injects conflicting writers and
//! [`FakeApi::inject`] any [`Fault`] (an error status, throttling, no answer, a dropped
//! connection) into the next calls of one verb on one resource, and [`FakeApi::unreachable`]
//! into every call. The service proxy (`…/services/NAME:PORT/proxy/…`) reaches what
//! [`FakeApi::proxy_to`] put behind it, or answers as kube-apiserver does for a Service that is
//! not there or has no endpoints. The webhook's core Service, its pods and their
//! `pods/NAME/portforward` WebSocket ([`portforward`]) reach the server's loopback status
//! listener, as `drift` does. Every request is recorded. Only what the watch loop, the `app` CLI and the certificate manager use is
//! implemented (JSON Patch for the webhook configuration's caBundle).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::Method;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

mod admit;
pub mod authn;
mod faults;
pub mod knative;
mod portforward;
mod routes;

pub use faults::{Fault, verb};

type Key = (String, String, String); // resource, namespace, name

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    pub resource: String,
    pub name: Option<String>,
    pub query: HashMap<String, String>,
    pub body: Value,
    /// When it arrived.
    pub at: std::time::Instant,
}

#[derive(Debug, Clone)]
struct Change {
    rv: u64,
    resource: String,
    namespace: String,
    kind: &'static str,
    object: Value,
}

#[derive(Default)]
struct Inner {
    objects: BTreeMap<Key, Value>,
    rv: u64,
    uid: u64,
    history: Vec<Change>,
    requests: Vec<Request>,
    conflicts: HashMap<String, u32>,
    failures: HashMap<(Method, String), u32>,
    /// Watches from before this resourceVersion get 410 Gone (history compacted).
    compacted: u64,
    /// Watch requests are refused with 503 while set.
    watches_blocked: bool,
    /// Every request's connection drops while set ([`FakeApi::unreachable`]).
    unreachable: bool,
    /// Faults still to inject ([`FakeApi::inject`]).
    faults: Vec<faults::Injected>,
    /// Run once, just before the next request of a verb on a resource is handled.
    hooks: Vec<(&'static str, String, Hook)>,
    /// When the last injected fault was served.
    last_fault: Option<std::time::Instant>,
    /// Admission in the write path (see admit.rs).
    admission: admit::Admission,
    /// What is behind the service proxy (the webhook's Service).
    proxy: Proxy,
    /// Lists honour `limit` and `continue` ([`FakeApi::page_lists`]).
    paging: bool,
    /// Writes (PUT, DELETE) to these objects are held this long before they are handled.
    write_delays: HashMap<Key, std::time::Duration>,
    /// Streaming lists (`sendInitialEvents`) are refused with 422, as by a server with the
    /// WatchList feature off ([`FakeApi::refuse_streaming_lists`]).
    streaming_refused: bool,
    /// Objects made on demand, never stored ([`FakeApi::generate`]).
    generated: HashMap<String, Generated>,
    /// The webhook's Service and where its pods' ports go ([`portforward`]).
    forwarding: portforward::Forwarding,
}

/// `count` objects of one resource, the one of index `i` made by `make(i)` as JSON text.
#[derive(Clone)]
pub struct Generated {
    pub count: usize,
    pub make: Arc<dyn Fn(usize) -> String + Send + Sync>,
}

/// What the API server's service proxy reaches, as kube-apiserver answers for it.
#[derive(Default, Clone)]
pub(crate) enum Proxy {
    /// No such Service: 404 `services "NAME" not found`.
    #[default]
    NoService,
    /// A Service without ready endpoints: 503 `no endpoints available for service "NAME"`.
    NoEndpoints,
    /// A Service whose pod serves these routes (the request goes on without `Authorization`,
    /// which kube-apiserver removes once it has authenticated the caller).
    To(axum::Router),
}

/// What a test stages just before a request is handled (another writer getting there first).
type Hook = Box<dyn FnOnce(&FakeApi) + Send>;

/// The fake API server.
#[derive(Clone)]
pub struct FakeApi {
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    changes: broadcast::Sender<Change>,
    cut: Arc<watch::Sender<u64>>,
}

impl FakeApi {
    /// Start the server on 127.0.0.1, port chosen by the OS.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (changes, _) = broadcast::channel(4096);
        let fake = FakeApi {
            addr: listener.local_addr().unwrap(),
            inner: Arc::default(),
            changes,
            cut: Arc::new(watch::channel(0).0),
        };
        let app = Router::new()
            .route(
                "/api/v1/namespaces/{namespace}/pods/{name}/portforward",
                axum::routing::get(portforward::handle),
            )
            .fallback(routes::handle)
            .with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        fake
    }

    /// Run `hook` once, just before the next `verb` on `resource` is handled: another writer that
    /// gets there first (an object created between a read and a create, a resourceVersion bumped
    /// between a read and a patch).
    pub fn before_next(
        &self,
        verb: &'static str,
        resource: &str,
        hook: impl FnOnce(&FakeApi) + Send + 'static,
    ) {
        let hook: Hook = Box::new(hook);
        self.inner
            .lock()
            .unwrap()
            .hooks
            .push((verb, resource.to_owned(), hook));
    }

    /// The hook staged for this request, if any.
    pub(super) fn take_hook(
        &self,
        method: &Method,
        resource: &str,
        name: Option<&str>,
        query: &HashMap<String, String>,
    ) -> Option<Hook> {
        let verb = verb(method, name, query);
        let mut inner = self.inner.lock().unwrap();
        let at = inner
            .hooks
            .iter()
            .position(|(v, r, _)| *v == verb && r == resource)?;
        Some(inner.hooks.remove(at).2)
    }

    /// Put `router` behind the service proxy: the webhook's Service with a pod that answers.
    pub fn proxy_to(&self, router: axum::Router) {
        self.inner.lock().unwrap().proxy = Proxy::To(router);
    }

    /// Answer a list with `limit` one page at a time, with a `continue` token while more
    /// remain, as kube-apiserver does (off: every object at once, as before).
    pub fn page_lists(&self, on: bool) {
        self.inner.lock().unwrap().paging = on;
    }

    /// Nothing behind the service proxy: the webhook's Service does not exist.
    pub fn proxy_to_nothing(&self) {
        self.inner.lock().unwrap().proxy = Proxy::NoService;
    }

    /// The webhook's Service exists, and no pod of it is ready (the server stopped).
    pub fn proxy_without_endpoints(&self) {
        self.inner.lock().unwrap().proxy = Proxy::NoEndpoints;
    }

    /// A client pointed at this server.
    pub fn client(&self) -> kube::Client {
        let uri: axum::http::Uri = format!("http://{}", self.addr).parse().unwrap();
        let config = kube::Config::new(uri);
        kube::Client::try_from(config).unwrap()
    }

    /// A kubeconfig in `dir` for this server (plain HTTP, namespace ksvc-system).
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        crate::kubeconfig(&format!("http://{}", self.addr), "ksvc-system", dir)
    }

    /// Create or replace the namespace `name`, with `labels` if there are any.
    pub fn put_namespace(&self, name: &str, labels: &[(&str, &str)]) {
        let mut namespace =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        if !labels.is_empty() {
            let labels: serde_json::Map<_, _> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            namespace["metadata"]["labels"] = labels.into();
        }
        self.put("namespaces", namespace);
    }

    /// Create or replace an object as another controller (Knative, a user) would, keeping the
    /// stored generation unless the object sets one.
    pub fn put(&self, resource: &str, mut obj: Value) {
        let mut inner = self.inner.lock().unwrap();
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let name = obj["metadata"]["name"].as_str().unwrap().to_owned();
        let key = (resource.to_owned(), ns.clone(), name);
        let existing = inner.objects.get(&key).cloned();
        if obj["metadata"]["uid"].is_null() {
            inner.uid += 1;
            let uid = existing
                .as_ref()
                .map_or(json!(format!("uid-{}", inner.uid)), |e| {
                    e["metadata"]["uid"].clone()
                });
            obj["metadata"]["uid"] = uid;
        }
        if obj["metadata"]["generation"].is_null() {
            obj["metadata"]["generation"] = existing
                .as_ref()
                .map_or(json!(1), |e| e["metadata"]["generation"].clone());
        }
        let kind = if existing.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.commit(&mut inner, key, kind, obj);
    }

    /// Change a stored object in place, atomically, as another controller would (Knative
    /// writing a Service's status); whether it exists.
    pub fn edit(&self, resource: &str, ns: &str, name: &str, f: impl FnOnce(&mut Value)) -> bool {
        let mut inner = self.inner.lock().unwrap();
        let key = (resource.to_owned(), ns.to_owned(), name.to_owned());
        let Some(mut obj) = inner.objects.get(&key).cloned() else {
            return false;
        };
        f(&mut obj);
        self.commit(&mut inner, key, "MODIFIED", obj);
        true
    }

    /// Delete an object as another controller would.
    pub fn remove(&self, resource: &str, ns: &str, name: &str) {
        let mut inner = self.inner.lock().unwrap();
        let key = (resource.to_owned(), ns.to_owned(), name.to_owned());
        if let Some(obj) = inner.objects.get(&key).cloned() {
            self.commit(&mut inner, key, "DELETED", obj);
        }
    }

    fn commit(&self, inner: &mut Inner, key: Key, kind: &'static str, mut obj: Value) -> Value {
        inner.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        if kind == "DELETED" {
            inner.objects.remove(&key);
        } else {
            inner.objects.insert(key.clone(), obj.clone());
        }
        let change = Change {
            rv: inner.rv,
            resource: key.0,
            namespace: key.1,
            kind,
            object: obj.clone(),
        };
        inner.history.push(change.clone());
        let _ = self.changes.send(change);
        obj
    }

    /// The stored object.
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Value> {
        let key = (resource.to_owned(), ns.to_owned(), name.to_owned());
        self.inner.lock().unwrap().objects.get(&key).cloned()
    }

    /// Every stored object of a resource.
    pub fn all(&self, resource: &str) -> Vec<Value> {
        let inner = self.inner.lock().unwrap();
        inner
            .objects
            .iter()
            .filter(|(k, _)| k.0 == resource)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The recorded requests.
    pub fn requests(&self) -> Vec<Request> {
        self.inner.lock().unwrap().requests.clone()
    }

    /// The recorded requests with this method on this resource.
    pub fn requests_to(&self, method: Method, resource: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.resource == resource)
            .collect()
    }

    /// Make the next `n` PUTs (dry runs aside) on `resource` lose a race: another writer changes the object first
    /// (annotation `fake/concurrent-writes`), and the PUT gets 409 Conflict.
    pub fn fail_puts(&self, resource: &str, n: u32) {
        self.inner
            .lock()
            .unwrap()
            .conflicts
            .insert(resource.to_owned(), n);
    }

    /// Make the next `n` requests with `method` on `resource` fail with 500, as an overloaded
    /// API server would.
    pub fn fail_requests(&self, method: Method, resource: &str, n: u32) {
        self.inner
            .lock()
            .unwrap()
            .failures
            .insert((method, resource.to_owned()), n);
    }

    /// Refuse streaming lists (a watch with `sendInitialEvents=true`) with 422 Invalid, as
    /// kube-apiserver does with the WatchList feature turned off; served by default.
    pub fn refuse_streaming_lists(&self) {
        self.inner.lock().unwrap().streaming_refused = true;
    }

    /// Refuse (503) new watch requests while `blocked`, as during an API server restart.
    pub fn block_watches(&self, blocked: bool) {
        self.inner.lock().unwrap().watches_blocked = blocked;
    }

    /// Serve `generated` as every object of `resource` in lists of every namespace, in pages
    /// (`limit`, `continue`) as the API server does, made as each page is asked for: a scale
    /// test's tens of thousands of apps cost the fake no memory. Never watched, got or written.
    pub fn generate(&self, resource: &str, generated: Generated) {
        let mut inner = self.inner.lock().unwrap();
        inner.generated.insert(resource.to_owned(), generated);
    }

    /// The generated objects of `resource`, if any.
    pub(super) fn generated(&self, resource: &str) -> Option<Generated> {
        self.inner.lock().unwrap().generated.get(resource).cloned()
    }

    /// Compact the history: a watch resuming from before now gets 410 Gone and must relist.
    pub fn compact(&self) {
        let mut inner = self.inner.lock().unwrap();
        inner.compacted = inner.rv;
    }

    /// End every open watch stream, as an API server restart or a load balancer would.
    pub fn disconnect_watches(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// Hold every write (PUT, DELETE, and POST: a create, or a review when `resource` is
    /// `tokenreviews` or `subjectaccessreviews` and `ns` and `name` are empty) to one object for
    /// `delay` before handling it, as a slow API server or admission webhook would. The request is
    /// recorded when it arrives.
    pub fn delay_writes(&self, resource: &str, ns: &str, name: &str, delay: std::time::Duration) {
        let key = (resource.to_owned(), ns.to_owned(), name.to_owned());
        self.inner.lock().unwrap().write_delays.insert(key, delay);
    }

    /// How long a write with `method` to this object is held.
    fn write_delay(&self, method: &Method, key: Key) -> Option<std::time::Duration> {
        let write = [Method::PUT, Method::DELETE, Method::POST].contains(method);
        let inner = self.inner.lock().unwrap();
        write
            .then(|| inner.write_delays.get(&key).copied())
            .flatten()
    }
}

/// `object` as another writer left it just before ours: annotation `fake/concurrent-writes`
/// counts up, so that our write, made on the old version, conflicts.
fn concurrent_write(mut object: Value) -> Value {
    let annotation = &mut object["metadata"]["annotations"]["fake/concurrent-writes"];
    let writes = annotation.as_str().unwrap_or("0").parse::<u32>().unwrap() + 1;
    *annotation = json!(writes.to_string());
    object
}
