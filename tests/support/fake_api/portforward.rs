//! The way `drift` reaches the server's loopback status listener, as kube-apiserver and the
//! kubelet serve it: the webhook's core Service (`GET /api/v1/namespaces/NS/services/NAME`, apart
//! from the KServices the rest of the fake stores as `services`), its pods (stored as `pods`,
//! listed by label), and the `pods/NAME/portforward?ports=P` WebSocket subresource.
//!
//! The port-forward speaks `v4.channel.k8s.io`: every binary message starts with a channel byte,
//! per port a data channel `2i` and an error channel `2i+1`, and the first message on each
//! carries the port, 2 bytes little-endian. The data channel is piped to the address
//! [`FakeApi::forward_port`] gave the port (the real server's loopback listener); when nothing
//! listens there, the error channel says so in the kubelet's words and the stream closes.

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::{Message, handshake::derive_accept_key};

use super::FakeApi;

/// The subprotocol the fake speaks (kube-rs offers v5 first, then v4).
const PROTOCOL: &str = "v4.channel.k8s.io";

/// What a port-forward reaches.
#[derive(Default)]
pub(super) struct Forwarding {
    /// The webhook's core Services, by (namespace, name).
    services: HashMap<(String, String), Value>,
    /// Where each pod port goes (every pod alike).
    ports: HashMap<u16, SocketAddr>,
    /// `create pods/portforward` is denied.
    forbidden: bool,
}

impl FakeApi {
    /// The webhook's Service `namespace/name`, selecting the pods labelled
    /// `app.kubernetes.io/name: NAME` (a core Service, never seen by the KService watches).
    pub fn put_webhook_service(&self, namespace: &str, name: &str) {
        let service = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"app.kubernetes.io/name": name},
                     "ports": [{"name": "https", "port": 443, "targetPort": "https"}]}});
        let key = (namespace.to_owned(), name.to_owned());
        self.inner
            .lock()
            .unwrap()
            .forwarding
            .services
            .insert(key, service);
    }

    /// A pod `pod` of the webhook's Service `service` in `namespace`, Ready or not.
    pub fn put_webhook_pod(&self, namespace: &str, service: &str, pod: &str, ready: bool) {
        let ready = if ready { "True" } else { "False" };
        self.put(
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": namespace,
                             "labels": {"app.kubernetes.io/name": service}},
                "status": {"phase": "Running",
                           "conditions": [{"type": "Ready", "status": ready}]}}),
        );
    }

    /// Port `port` of every pod forwards to `to`, as the pod's loopback would reach its
    /// server's listener there.
    pub fn forward_port(&self, port: u16, to: SocketAddr) {
        self.inner.lock().unwrap().forwarding.ports.insert(port, to);
    }

    /// Deny `create pods/portforward`, as RBAC does for a user without it.
    pub fn forbid_port_forward(&self) {
        self.inner.lock().unwrap().forwarding.forbidden = true;
    }
}

/// The answer to a core-group `GET …/services/NAME`, if that is what `uri` asks.
pub(super) fn core_service(fake: &FakeApi, method: &Method, uri: &Uri) -> Option<Response> {
    let parts: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let ["api", "v1", "namespaces", ns, "services", name] = parts[..] else {
        return None;
    };
    if method != Method::GET {
        return None;
    }
    let key = (ns.to_owned(), name.to_owned());
    let found = fake
        .inner
        .lock()
        .unwrap()
        .forwarding
        .services
        .get(&key)
        .cloned();
    Some(match found {
        Some(service) => axum::Json(service).into_response(),
        None => status(
            404,
            "NotFound",
            name,
            &format!("services \"{name}\" not found"),
        ),
    })
}

fn status(code: u16, reason: &str, name: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "details": {"name": name, "kind": "pods"},
        "code": code});
    (StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response()
}

/// `GET /api/v1/namespaces/NS/pods/NAME/portforward?ports=P`, upgraded to a WebSocket.
pub(super) async fn handle(
    State(fake): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    mut request: Request,
) -> Response {
    let (forbidden, exists) = {
        let inner = fake.inner.lock().unwrap();
        let key = ("pods".to_owned(), ns.clone(), name.clone());
        (inner.forwarding.forbidden, inner.objects.contains_key(&key))
    };
    if forbidden {
        let message = format!(
            "pods \"{name}\" is forbidden: User \"system:anonymous\" cannot create resource \
             \"pods/portforward\" in API group \"\" in the namespace \"{ns}\""
        );
        return status(403, "Forbidden", &name, &message);
    }
    if !exists {
        return status(
            404,
            "NotFound",
            &name,
            &format!("pods \"{name}\" not found"),
        );
    }
    let Some(port) = query.get("ports").and_then(|p| p.parse::<u16>().ok()) else {
        return status(
            400,
            "BadRequest",
            &name,
            "one port in ?ports= is all the fake forwards",
        );
    };
    let headers = request.headers();
    let offered = headers
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|p| p.trim() == PROTOCOL));
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY).filter(|_| offered) else {
        return status(
            400,
            "BadRequest",
            &name,
            "a WebSocket offering v4.channel.k8s.io",
        );
    };
    let accept = derive_accept_key(key.as_bytes());
    let target = fake
        .inner
        .lock()
        .unwrap()
        .forwarding
        .ports
        .get(&port)
        .copied();
    let upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        pipe(ws, &name, port, target).await;
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = response.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept.parse().unwrap());
    headers.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static(PROTOCOL),
    );
    response
}

/// One framed message on `channel`.
fn framed(channel: u8, bytes: &[u8]) -> Message {
    let mut message = Vec::with_capacity(bytes.len() + 1);
    message.push(channel);
    message.extend_from_slice(bytes);
    Message::binary(message)
}

/// Serve one port over `ws`: announce it on both channels, then pipe the data channel to
/// `target`, or say on the error channel that nothing listens.
async fn pipe<S>(ws: WebSocketStream<S>, pod: &str, port: u16, target: Option<SocketAddr>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut sink, mut from_client) = ws.split();
    for channel in [0, 1] {
        if sink
            .send(framed(channel, &port.to_le_bytes()))
            .await
            .is_err()
        {
            return;
        }
    }
    let connected = match target {
        Some(addr) => tokio::net::TcpStream::connect(addr).await,
        None => Err(std::io::ErrorKind::ConnectionRefused.into()),
    };
    let tcp = match connected {
        Ok(tcp) => tcp,
        Err(e) => {
            let reason = format!(
                "error forwarding port {port} to pod {pod}, uid : failed to connect to \
                 localhost:{port} inside namespace: dial tcp4 127.0.0.1:{port}: connect: {e}"
            );
            let _ = sink.send(framed(1, reason.as_bytes())).await;
            let _ = sink.send(Message::Close(None)).await;
            return;
        }
    };
    let (mut read, mut write) = tcp.into_split();
    let up = async {
        while let Some(Ok(message)) = from_client.next().await {
            let written = match message {
                Message::Binary(bytes) if bytes.first() == Some(&0) => {
                    write.write_all(&bytes[1..]).await
                }
                Message::Close(_) => break,
                _ => Ok(()),
            };
            if written.is_err() {
                break;
            }
        }
    };
    let down = async {
        let mut buffer = vec![0; 16 * 1024];
        while let Ok(n @ 1..) = read.read(&mut buffer).await {
            if sink.send(framed(0, &buffer[..n])).await.is_err() {
                return;
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}
