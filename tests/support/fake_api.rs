//! A Kubernetes API server the tests control: plain HTTP on 127.0.0.1, real Kubernetes JSON.
//!
//! Lists carry a resourceVersion; watches stream `{"type":"ADDED","object":…}` lines, replay
//! history after the requested resourceVersion (so a broken watch can resume) and can be cut
//! with [`FakeApi::disconnect_watches`]; writes check resourceVersion and delete preconditions and
//! answer 409/404 with `Status` bodies (a replace with `?dryRun=All` is checked and admitted but
//! not stored); [`FakeApi::fail_puts`] injects conflicting writers and
//! [`FakeApi::inject`] any [`Fault`] (an error status, throttling, no answer, a dropped
//! connection) into the next calls of one verb on one resource, and [`FakeApi::unreachable`]
//! into every call. Every request is recorded. Only what the watch loop, the `app` CLI and the certificate manager use is
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
pub mod knative;
mod routes;

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
    faults: Vec<Injected>,
    /// Run once, just before the next request of a verb on a resource is handled.
    hooks: Vec<(&'static str, String, Hook)>,
    /// When the last injected fault was served.
    last_fault: Option<std::time::Instant>,
    /// Admission in the write path (issue 13, see admit.rs).
    admission: admit::Admission,
    /// What the service proxy answers for the webhook's routes (`None`: 401, as the status API
    /// does to a caller without a token).
    proxy_status: Option<u16>,
    /// Writes (PUT, DELETE) to these objects are held this long before they are handled.
    write_delays: HashMap<Key, std::time::Duration>,
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

    /// Make the service proxy answer `code` for the webhook's routes.
    pub fn proxy_answers(&self, code: u16) {
        self.inner.lock().unwrap().proxy_status = Some(code);
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

    /// Refuse (503) new watch requests while `blocked`, as during an API server restart.
    pub fn block_watches(&self, blocked: bool) {
        self.inner.lock().unwrap().watches_blocked = blocked;
    }

    /// Make the API server unreachable (`true`) or reachable again: while it is, the open watches
    /// end and every request (recorded all the same) loses its connection before an answer.
    pub fn unreachable(&self, down: bool) {
        self.inner.lock().unwrap().unreachable = down;
        if down {
            self.disconnect_watches();
        }
    }

    /// Whether requests lose their connection ([`FakeApi::unreachable`]).
    pub(super) fn is_unreachable(&self) -> bool {
        self.inner.lock().unwrap().unreachable
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

    /// Hold every write (PUT, DELETE) to one object for `delay` before handling it, as a slow
    /// API server or admission webhook would. The request is recorded when it arrives.
    pub fn delay_writes(&self, resource: &str, ns: &str, name: &str, delay: std::time::Duration) {
        let key = (resource.to_owned(), ns.to_owned(), name.to_owned());
        self.inner.lock().unwrap().write_delays.insert(key, delay);
    }

    /// How long a write with `method` to this object is held.
    fn write_delay(&self, method: &Method, key: Key) -> Option<std::time::Duration> {
        let write = *method == Method::PUT || *method == Method::DELETE;
        let inner = self.inner.lock().unwrap();
        write
            .then(|| inner.write_delays.get(&key).copied())
            .flatten()
    }
}

/// A transient failure the fake answers a call with instead of serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// An error `Status` with this code (403, 404, 409, 500 …). A 409 on a named object also
    /// changes it first, as the concurrent writer behind a real conflict would.
    Status(u16),
    /// An error `Status` with this code, reason and message, as a real refusal words it.
    Refusal(u16, &'static str, &'static str),
    /// 429 Too Many Requests with `Retry-After: 1`.
    Throttled,
    /// Never answer: the client's timeout ends the call.
    Hang,
    /// Send the headers, then drop the connection before the body ends.
    Drop,
}

impl Fault {
    /// Every fault the fault table covers, in its column order.
    pub const ALL: [Fault; 7] = [
        Fault::Status(403),
        Fault::Status(404),
        Fault::Status(409),
        Fault::Throttled,
        Fault::Status(500),
        Fault::Hang,
        Fault::Drop,
    ];

    /// The short name used in the fault table.
    pub fn label(self) -> String {
        match self {
            Fault::Status(code) | Fault::Refusal(code, ..) => code.to_string(),
            Fault::Throttled => "429+Retry-After".into(),
            Fault::Hang => "timeout".into(),
            Fault::Drop => "dropped".into(),
        }
    }

    pub(super) async fn answer(self) -> axum::response::Response {
        use axum::response::IntoResponse;
        let status = |code: u16, reason: &str| {
            let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": format!("{reason}: injected by the test"), "reason": reason, "code": code});
            let code = axum::http::StatusCode::from_u16(code).unwrap();
            (code, axum::Json(body)).into_response()
        };
        match self {
            Fault::Refusal(code, reason, message) => {
                let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": message, "reason": reason, "code": code});
                let code = axum::http::StatusCode::from_u16(code).unwrap();
                (code, axum::Json(body)).into_response()
            }
            Fault::Status(403) => status(403, "Forbidden"),
            Fault::Status(404) => status(404, "NotFound"),
            Fault::Status(409) => status(409, "Conflict"),
            Fault::Status(code) => status(code, "InternalError"),
            Fault::Throttled => {
                let mut response = status(429, "TooManyRequests");
                response
                    .headers_mut()
                    .insert("retry-after", axum::http::HeaderValue::from_static("1"));
                response
            }
            Fault::Hang => std::future::pending().await,
            Fault::Drop => {
                let cut = futures::stream::once(async {
                    Err::<axum::body::Bytes, _>(std::io::Error::other("connection dropped"))
                });
                axum::response::Response::builder()
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from_stream(cut))
                    .unwrap()
            }
        }
    }
}

/// A fault waiting for its calls.
#[derive(Debug, Clone)]
struct Injected {
    verb: &'static str,
    resource: String,
    name: Option<String>,
    fault: Fault,
    left: u32,
}

/// The RBAC verb of a request.
pub fn verb(method: &Method, name: Option<&str>, query: &HashMap<String, String>) -> &'static str {
    let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    match (method, name) {
        (&Method::GET, Some(_)) => "get",
        (&Method::GET, None) if watch => "watch",
        (&Method::GET, None) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, _) => "delete",
        _ => "other",
    }
}

impl FakeApi {
    /// Answer the next `times` calls of `verb` (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`) on `resource` (named `name`, if given) with `fault`.
    pub fn inject(
        &self,
        verb: &'static str,
        resource: &str,
        name: Option<&str>,
        fault: Fault,
        times: u32,
    ) {
        self.inner.lock().unwrap().faults.push(Injected {
            verb,
            resource: resource.to_owned(),
            name: name.map(str::to_owned),
            fault,
            left: times,
        });
    }

    /// How many injected faults are still to be served.
    pub fn faults_left(&self) -> u32 {
        self.inner
            .lock()
            .unwrap()
            .faults
            .iter()
            .map(|f| f.left)
            .sum()
    }

    /// When the last injected fault was served: the moment the fault stopped.
    pub fn last_fault_at(&self) -> Option<std::time::Instant> {
        self.inner.lock().unwrap().last_fault
    }

    /// The fault this call gets, if one is injected for it (and counts it as served).
    pub(super) fn take_fault(
        &self,
        method: &Method,
        resource: &str,
        ns: Option<&str>,
        name: Option<&str>,
        query: &HashMap<String, String>,
    ) -> Option<Fault> {
        let verb = verb(method, name, query);
        let mut inner = self.inner.lock().unwrap();
        let injected = inner.faults.iter_mut().find(|f| {
            f.left > 0
                && f.verb == verb
                && f.resource == resource
                && f.name.as_deref().is_none_or(|n| Some(n) == name)
        })?;
        injected.left -= 1;
        let fault = injected.fault;
        inner.last_fault = Some(std::time::Instant::now());
        let key = (
            resource.to_owned(),
            ns.unwrap_or_default().to_owned(),
            name.unwrap_or_default().to_owned(),
        );
        if let (Fault::Status(409), Some(mut raced)) = (fault, inner.objects.get(&key).cloned()) {
            let writes = raced["metadata"]["annotations"]["fake/concurrent-writes"]
                .as_str()
                .unwrap_or("0")
                .parse::<u32>()
                .unwrap()
                + 1;
            raced["metadata"]["annotations"]["fake/concurrent-writes"] = json!(writes.to_string());
            self.commit(&mut inner, key, "MODIFIED", raced);
        }
        Some(fault)
    }
}
