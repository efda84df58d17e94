//! The fake's HTTP side: path parsing and the list / watch / get / create / replace / JSON or merge patch /
//! delete handlers, speaking Kubernetes JSON.

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::{Change, FakeApi, Fault, Request, admit};

pub(super) struct Path {
    resource: String,
    /// The API group (`""` for the core group under `/api`).
    group: String,
    namespace: Option<String>,
    name: Option<String>,
    /// `?dryRun=All`: a create or replace runs admission and its checks, and stores nothing.
    dry_run: bool,
}

fn parse(uri: &Uri) -> Option<Path> {
    let parts: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let (group, rest) = match *parts.first()? {
        "api" => (String::new(), parts.get(2..)?),
        "apis" => (parts.get(1)?.to_string(), parts.get(3..)?),
        _ => return None,
    };
    let dry_run = uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "dryRun=All"));
    let (namespace, rest) = match rest {
        // A Namespace itself: `namespaces/NAME`.
        ["namespaces", _] => (None, rest),
        ["namespaces", ns, rest @ ..] => (Some(ns.to_string()), rest),
        rest => (None, rest),
    };
    match rest {
        [resource] => Some(Path {
            resource: resource.to_string(),
            group,
            namespace,
            name: None,
            dry_run,
        }),
        [resource, name] => Some(Path {
            resource: resource.to_string(),
            group,
            namespace,
            name: Some(name.to_string()),
            dry_run,
        }),
        _ => None,
    }
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": reason, "code": code});
    (StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response()
}

impl Path {
    /// How kube-apiserver names the resource in its messages: `services.serving.knative.dev`,
    /// `secrets` for the core group.
    fn qualified(&self) -> String {
        match self.group.as_str() {
            "" => self.resource.clone(),
            group => format!("{}.{group}", self.resource),
        }
    }

    /// A `Status` about the object `name`, with the `details` kube-apiserver gives (the name,
    /// the group unless core, and `kind`, which is the resource here).
    fn status(&self, code: u16, reason: &str, name: &str, message: &str) -> Response {
        self.status_of_kind(code, reason, name, &self.resource, message)
    }

    fn status_of_kind(
        &self,
        code: u16,
        reason: &str,
        name: &str,
        kind: &str,
        message: &str,
    ) -> Response {
        let mut details = json!({"name": name, "kind": kind});
        if !self.group.is_empty() {
            details["group"] = json!(self.group);
        }
        let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": message, "reason": reason, "details": details, "code": code});
        (StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response()
    }

    fn not_found(&self, name: &str) -> Response {
        let message = format!("{} \"{name}\" not found", self.qualified());
        self.status(404, "NotFound", name, &message)
    }
}

fn matches(obj: &Value, q: &HashMap<String, String>) -> bool {
    let labels_ok = q.get("labelSelector").is_none_or(|sel| {
        sel.split(',').filter(|s| !s.is_empty()).all(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            obj["metadata"]["labels"][k].as_str() == Some(v)
        })
    });
    let fields_ok = q.get("fieldSelector").is_none_or(|sel| {
        sel.split(',')
            .filter(|s| !s.is_empty())
            .all(|kv| match kv.split_once('=') {
                Some(("metadata.name", v)) => obj["metadata"]["name"].as_str() == Some(v),
                Some(("metadata.namespace", v)) => obj["metadata"]["namespace"].as_str() == Some(v),
                _ => true,
            })
    });
    labels_ok && fields_ok
}

pub(super) async fn handle(
    State(fake): State<FakeApi>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if uri.path() == "/version" {
        if fake.is_unreachable() {
            return Fault::Drop.answer().await;
        }
        return axum::Json(json!({"major": "1", "minor": "35", "gitVersion": "v1.35.0-fake"}))
            .into_response();
    }
    // The API server's service proxy to the webhook's own routes (`check` and `drift` ask
    // `/apps`).
    if let Some((service, rest)) = proxied(&uri) {
        if fake.is_unreachable() {
            return Fault::Drop.answer().await;
        }
        return proxy(&fake, &service, &rest, method, headers, body).await;
    }
    if let Some(answer) = super::portforward::core_service(&fake, &method, &uri) {
        return answer;
    }
    let Some(path) = parse(&uri) else {
        return status(404, "NotFound", "no such path");
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    // Subscribed before the request is visible to the test, so a disconnect the test makes after
    // seeing this request always ends this watch.
    let cut = fake.cut.subscribe();
    fake.inner.lock().unwrap().requests.push(Request {
        method: method.clone(),
        resource: path.resource.clone(),
        name: path.name.clone(),
        query: query.clone(),
        body: body.clone(),
        at: std::time::Instant::now(),
    });
    if fake.is_unreachable() {
        return Fault::Drop.answer().await;
    }
    let (ns, name) = (path.namespace.as_deref(), path.name.as_deref());
    if let Some(hook) = fake.take_hook(&method, &path.resource, name, &query) {
        hook(&fake);
    }
    if let Some(fault) = fake.take_fault(&method, &path.resource, ns, name, &query) {
        return fault.answer().await;
    }
    let object = (
        path.resource.clone(),
        path.namespace.clone().unwrap_or_default(),
        path.name.clone().unwrap_or_default(),
    );
    if let Some(delay) = fake.write_delay(&method, object) {
        tokio::time::sleep(delay).await;
    }
    {
        let mut inner = fake.inner.lock().unwrap();
        if let Some(n) = inner
            .failures
            .get_mut(&(method.clone(), path.resource.clone()))
            .filter(|n| **n > 0)
        {
            *n -= 1;
            return status(
                500,
                "InternalError",
                "Internal error occurred: injected by the test",
            );
        }
    }
    if let Some(review) = super::authn::answer(&fake, &method, &path.resource, &headers, &body) {
        return review;
    }
    if let Some(admitted) = admitted(&fake, &method, &path, &headers, &body) {
        return admitted;
    }
    match (method, path.name.clone()) {
        (Method::GET, None) if query.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            watch_stream(&fake, &path, &query, cut)
        }
        (Method::GET, None) => list(&fake, &path, &query),
        (Method::GET, Some(name)) => match fake.get(
            &path.resource,
            path.namespace.as_deref().unwrap_or(""),
            &name,
        ) {
            Some(obj) => axum::Json(obj).into_response(),
            None => path.not_found(&name),
        },
        (Method::POST, None) => create(&fake, &path, body),
        (Method::PUT, Some(name)) => replace(&fake, &path, &name, body),
        (Method::PATCH, Some(name)) => patch(&fake, &path, &name, &headers, body),
        (Method::DELETE, Some(name)) => delete(&fake, &path, &name, &body),
        _ => status(405, "MethodNotAllowed", "not implemented by the fake"),
    }
}

/// The Service name and the rest of the path (with the query) of a service proxy request:
/// `/api/v1/namespaces/NS/services/[SCHEME:]NAME[:PORT]/proxy/REST`.
fn proxied(uri: &Uri) -> Option<(String, String)> {
    let (before, after) = uri.path().split_once("/proxy")?;
    let target = before.rsplit('/').next()?;
    let name = match target.split(':').collect::<Vec<_>>()[..] {
        [name] | [name, _] => name,
        [_, name, _] => name,
        _ => return None,
    };
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    Some((name.to_owned(), format!("{after}{query}")))
}

/// The service proxy: what is behind it answers, or kube-apiserver's `Status` says why nothing
/// can.
async fn proxy(
    fake: &FakeApi,
    service: &str,
    rest: &str,
    method: Method,
    mut headers: HeaderMap,
    body: Bytes,
) -> Response {
    let behind = fake.inner.lock().unwrap().proxy.clone();
    match behind {
        super::Proxy::NoService => status(
            404,
            "NotFound",
            &format!("services \"{service}\" not found"),
        ),
        super::Proxy::NoEndpoints => status(
            503,
            "ServiceUnavailable",
            &format!("no endpoints available for service \"{service}\""),
        ),
        super::Proxy::To(router) => {
            use tower::ServiceExt;
            headers.remove(axum::http::header::AUTHORIZATION);
            let mut request = axum::http::Request::builder()
                .method(method)
                .uri(if rest.is_empty() { "/" } else { rest })
                .body(Body::from(body))
                .unwrap();
            *request.headers_mut() = headers;
            router.oneshot(request).await.into_response()
        }
    }
}

/// The stored objects of `path`'s resource (in its namespace, if it names one) that `q` selects.
fn selected<'a>(
    inner: &'a super::Inner,
    path: &'a Path,
    q: &'a HashMap<String, String>,
) -> impl Iterator<Item = &'a Value> {
    inner
        .objects
        .iter()
        .filter(|(k, v)| {
            k.0 == path.resource
                && path.namespace.as_ref().is_none_or(|ns| &k.1 == ns)
                && matches(v, q)
        })
        .map(|(_, v)| v)
}

fn list(fake: &FakeApi, path: &Path, q: &HashMap<String, String>) -> Response {
    if let Some(generated) = fake.generated(&path.resource) {
        return generated_page(fake, &generated, q);
    }
    let inner = fake.inner.lock().unwrap();
    let items: Vec<Value> = selected(&inner, path, q).cloned().collect();
    let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok());
    let (items, next) = match limit.filter(|_| inner.paging) {
        Some(limit) => {
            // The token is the offset of the next page.
            let from: usize = q.get("continue").map_or(0, |c| c.parse().unwrap());
            let to = (from + limit).min(items.len());
            let next = (to < items.len()).then(|| to.to_string());
            (items[from..to].to_vec(), next)
        }
        None => (items, None),
    };
    let mut metadata = json!({"resourceVersion": inner.rv.to_string()});
    if let Some(next) = next {
        metadata["continue"] = json!(next);
    }
    axum::Json(json!({"apiVersion": "v1", "kind": "List", "metadata": metadata, "items": items}))
        .into_response()
}

/// One page of generated objects: from the `continue` index, `limit` of them (all without).
fn generated_page(
    fake: &FakeApi,
    generated: &super::Generated,
    q: &HashMap<String, String>,
) -> Response {
    let rv = fake.inner.lock().unwrap().rv;
    let from: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit = q
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l: &usize| *l > 0);
    let to = limit.map_or(generated.count, |l| (from + l).min(generated.count));
    let mut body = String::with_capacity((to - from) * 8192 + 128);
    body.push_str(r#"{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":""#);
    body.push_str(&rv.to_string());
    if to < generated.count {
        body.push_str(r#"","continue":""#);
        body.push_str(&to.to_string());
    }
    body.push_str(r#""},"items":["#);
    for i in from..to {
        if i > from {
            body.push(',');
        }
        body.push_str(&(generated.make)(i));
    }
    body.push_str("]}");
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap()
}

fn watch_stream(
    fake: &FakeApi,
    path: &Path,
    q: &HashMap<String, String>,
    cut: watch::Receiver<u64>,
) -> Response {
    let since: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let inner = fake.inner.lock().unwrap();
    if inner.watches_blocked {
        return status(503, "ServiceUnavailable", "the API server is restarting");
    }
    let streaming = q.get("sendInitialEvents").is_some_and(|s| s == "true");
    if streaming && inner.streaming_refused {
        // What kube-apiserver answers with the WatchList feature turned off.
        return status(
            422,
            "Invalid",
            "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: \
             sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
        );
    }
    if since != 0 && since < inner.compacted && !streaming {
        let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": format!("too old resource version: {since} ({})", inner.compacted),
            "reason": "Expired", "code": 410}});
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(format!("{gone}\n")))
            .unwrap();
    }
    let initial = streaming.then(|| initial_events(&inner, path, q));
    let (resource, ns, q) = (path.resource.clone(), path.namespace.clone(), q.clone());
    let wanted = move |c: &Change| {
        c.resource == resource
            && ns.as_ref().is_none_or(|n| &c.namespace == n)
            && matches(&c.object, &q)
    };
    // A streaming list starts with every object as it is now, then the watch from now on.
    let since = if streaming { inner.rv } else { since };
    let replay: Vec<Change> = inner
        .history
        .iter()
        .filter(|c| c.rv > since && wanted(c))
        .cloned()
        .collect();
    let live = fake.changes.subscribe();
    drop(inner);
    let line =
        |c: &Change| Bytes::from(format!("{}\n", json!({"type": c.kind, "object": c.object})));
    let replayed = futures::stream::iter(
        replay
            .iter()
            .map(line)
            .map(Ok::<_, std::io::Error>)
            .collect::<Vec<_>>(),
    );
    use futures::StreamExt;
    let replayed = futures::stream::iter(initial).flatten().chain(replayed);
    let live = futures::stream::unfold(
        (live, cut, wanted),
        move |(mut live, mut cut, wanted)| async move {
            loop {
                tokio::select! {
                    // A cut wins over pending events: they must come from the next watch.
                    biased;
                    _ = cut.changed() => return None,
                    got = live.recv() => match got {
                        Ok(c) if wanted(&c) => return Some((Ok(line(&c)), (live, cut, wanted))),
                        Ok(_) => continue,
                        Err(_) => return None,
                    },
                }
            }
        },
    );
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(replayed.chain(live)))
        .unwrap()
}

type Lines = futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>;

/// The start of a streaming list (`sendInitialEvents=true`): an `ADDED` line per object as it is
/// now (generated objects made as the stream is read), then the bookmark that ends them, with
/// the resourceVersion the watch goes on from.
fn initial_events(inner: &super::Inner, path: &Path, q: &HashMap<String, String>) -> Lines {
    use futures::StreamExt;
    let added = |object: &str| Bytes::from(format!("{{\"type\":\"ADDED\",\"object\":{object}}}\n"));
    let objects: Lines = match inner.generated.get(&path.resource).cloned() {
        Some(generated) => futures::stream::iter(0..generated.count)
            .map(move |i| Ok(added(&(generated.make)(i))))
            .boxed(),
        None => {
            let lines: Vec<_> = selected(inner, path, q)
                .map(|v| Ok(added(&v.to_string())))
                .collect();
            futures::stream::iter(lines).boxed()
        }
    };
    let end = json!({"type": "BOOKMARK", "object": {"apiVersion": "v1", "kind": "Status", "metadata": {
        "resourceVersion": inner.rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}}});
    objects
        .chain(futures::stream::once(async move {
            Ok(Bytes::from(format!("{end}\n")))
        }))
        .boxed()
}

fn create(fake: &FakeApi, path: &Path, mut obj: Value) -> Response {
    let mut inner = fake.inner.lock().unwrap();
    let ns = path.namespace.clone().unwrap_or_default();
    let name = match obj["metadata"]["name"].as_str() {
        Some(n) => n.to_owned(),
        None => format!(
            "{}{}",
            obj["metadata"]["generateName"].as_str().unwrap_or("obj-"),
            inner.rv + 1
        ),
    };
    let key = (path.resource.clone(), ns.clone(), name.clone());
    if inner.objects.contains_key(&key) {
        let message = format!("{} \"{name}\" already exists", path.qualified());
        return path.status(409, "AlreadyExists", &name, &message);
    }
    inner.uid += 1;
    obj["metadata"]["name"] = json!(name);
    obj["metadata"]["namespace"] = json!(ns);
    obj["metadata"]["uid"] = json!(format!("uid-{}", inner.uid));
    obj["metadata"]["generation"] = json!(1);
    if path.dry_run {
        // Admitted and checked, and not stored.
        return (StatusCode::CREATED, axum::Json(obj)).into_response();
    }
    let stored = fake.commit(&mut inner, key, "ADDED", obj);
    (StatusCode::CREATED, axum::Json(stored)).into_response()
}

/// The key and stored object of `name` under `path`, or the API server's 404.
fn stored(
    objects: &std::collections::BTreeMap<super::Key, Value>,
    path: &Path,
    name: &str,
) -> Result<(super::Key, Value), Box<Response>> {
    let key = (
        path.resource.clone(),
        path.namespace.clone().unwrap_or_default(),
        name.to_owned(),
    );
    match objects.get(&key) {
        Some(found) => Ok((key, found.clone())),
        None => Err(Box::new(path.not_found(name))),
    }
}

fn replace(fake: &FakeApi, path: &Path, name: &str, mut obj: Value) -> Response {
    let mut inner = fake.inner.lock().unwrap();
    let (key, stored) = match stored(&inner.objects, path, name) {
        Ok(found) => found,
        Err(not_found) => return *not_found,
    };
    let conflict = format!(
        "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
        path.qualified()
    );
    // A dry run stores nothing: the staged concurrent writers wait for a real write.
    let race = match inner
        .conflicts
        .get_mut(&path.resource)
        .filter(|_| !path.dry_run)
    {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    };
    if race {
        let raced = super::concurrent_write(stored.clone());
        fake.commit(&mut inner, key, "MODIFIED", raced);
        return path.status(409, "Conflict", name, &conflict);
    }
    if obj["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"] {
        return path.status(409, "Conflict", name, &conflict);
    }
    let generation = stored["metadata"]["generation"].as_i64().unwrap_or(1);
    let bump = i64::from(obj.get("spec") != stored.get("spec"));
    obj["metadata"]["generation"] = json!(generation + bump);
    obj["metadata"]["uid"] = stored["metadata"]["uid"].clone();
    if let Some(status) = stored.get("status") {
        // The status subresource: a PUT of the main resource does not change it.
        obj["status"] = status.clone();
    }
    if path.dry_run {
        return axum::Json(obj).into_response();
    }
    let stored = fake.commit(&mut inner, key, "MODIFIED", obj);
    axum::Json(stored).into_response()
}

fn delete(fake: &FakeApi, path: &Path, name: &str, options: &Value) -> Response {
    let mut inner = fake.inner.lock().unwrap();
    let (key, stored) = match stored(&inner.objects, path, name) {
        Ok(found) => found,
        Err(not_found) => return *not_found,
    };
    // kube-apiserver names the object by its kind here (`Revision.serving.knative.dev`), and
    // checks the uid before the resourceVersion.
    let pre = &options["preconditions"];
    let kind = stored["kind"].as_str().unwrap_or(&path.resource).to_owned();
    let on = match path.group.as_str() {
        "" => kind.clone(),
        group => format!("{kind}.{group}"),
    };
    for (field, label, then) in [
        ("uid", "UID", "deleted and then recreated"),
        ("resourceVersion", "ResourceVersion", "modified"),
    ] {
        let have = stored["metadata"][field].as_str().unwrap_or_default();
        if let Some(want) = pre[field].as_str().filter(|want| *want != have) {
            let message = format!(
                "Operation cannot be fulfilled on {on} \"{name}\": the {label} in the precondition \
                 ({want}) does not match the {label} in record ({have}). The object might have been {then}"
            );
            return path.status_of_kind(409, "Conflict", name, &kind, &message);
        }
    }
    let gone = fake.commit(&mut inner, key, "DELETED", stored);
    axum::Json(gone).into_response()
}

/// A JSON Patch (RFC 6902), or a merge patch (RFC 7386) by its content type; a patch that does
/// not apply is the API server's 422.
fn patch(fake: &FakeApi, path: &Path, name: &str, headers: &HeaderMap, patch: Value) -> Response {
    let mut inner = fake.inner.lock().unwrap();
    let (key, mut object) = match stored(&inner.objects, path, name) {
        Ok(found) => found,
        Err(not_found) => return *not_found,
    };
    let merge = headers
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/merge-patch+json"));
    let applied = if merge {
        json_patch::merge(&mut object, &patch);
        Ok(())
    } else {
        serde_json::from_value::<json_patch::Patch>(patch)
            .map_err(|e| e.to_string())
            .and_then(|p| json_patch::patch(&mut object, &p).map_err(|e| e.to_string()))
    };
    // kube-apiserver does not say why a JSON Patch failed (a `test` that failed, a path that is
    // not there): 422 with the generic message and empty details.
    if applied.is_err() {
        let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the server rejected our request due to an error in our request",
            "reason": "Invalid", "details": {}, "code": 422});
        return (StatusCode::UNPROCESSABLE_ENTITY, axum::Json(body)).into_response();
    }
    let stored = fake.commit(&mut inner, key, "MODIFIED", object);
    axum::Json(stored).into_response()
}

/// Admission in the write path: KService writes (merge patches included) and Revision
/// deletes, when the test turned it on; `None` lets the request through to the plain handlers.
fn admitted(
    fake: &FakeApi,
    method: &Method,
    path: &Path,
    headers: &HeaderMap,
    body: &Value,
) -> Option<Response> {
    let user = admit::user(headers);
    let ns = path.namespace.clone().unwrap_or_default();
    let name = path.name.as_deref();
    let write = |op: &str, obj: Value, old: Option<Value>| {
        admit::service_write(fake, op, &ns, obj, old, &user)
    };
    match (method, path.resource.as_str(), name) {
        (&Method::POST, "services", None) => Some(match write("CREATE", body.clone(), None) {
            Ok(obj) => create(fake, path, obj),
            Err(refused) => *refused,
        }),
        (&Method::PUT, "services", Some(name)) => {
            let old = fake.get("services", &ns, name);
            Some(match write("UPDATE", body.clone(), old) {
                Ok(obj) => replace(fake, path, name, obj),
                Err(refused) => *refused,
            })
        }
        (&Method::PATCH, "services", Some(name)) => {
            let Some(old) = fake.get("services", &ns, name) else {
                return Some(path.not_found(name));
            };
            let mut patched = old.clone();
            json_patch::merge(&mut patched, body);
            Some(match write("UPDATE", patched, Some(old)) {
                Ok(obj) => replace(fake, path, name, obj),
                Err(refused) => *refused,
            })
        }
        (&Method::DELETE, "revisions", Some(name)) => {
            admit::revision_delete(fake, &ns, name, &user)
        }
        _ => None,
    }
}
