//! Test harness: a server on 127.0.0.1:0 with generated certificates in a Secret-mount-like
//! directory, and a client that connects the way kube-apiserver does (verifying the CA, server
//! name `ksvc-webhook.ksvc-system.svc`, HTTP/1.1 unless asked for h2).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::StatusCode;
use hyper_util::rt::{TokioExecutor, TokioIo};
use ksvc_webhook::admission::Policy;
use ksvc_webhook::certmgr::pki::{self, CertKey};
use ksvc_webhook::server::tls::CertPaths;
use ksvc_webhook::server::{Limits, Options, Server, Shutdown};
use rustls::pki_types::{CertificateDer, ServerName};
use time::OffsetDateTime;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

pub const SERVER_NAME: &str = "ksvc-webhook.ksvc-system.svc";

pub type Body = BoxBody<Bytes, Infallible>;

/// A CA and a serving certificate signed by it.
pub struct Pki {
    pub ca: CertKey,
    pub leaf: CertKey,
}

impl Pki {
    pub fn new() -> Self {
        let now = OffsetDateTime::now_utc();
        let ca = pki::issue_ca("test-ca", now, time::Duration::days(2)).unwrap();
        Self::signed_by(ca)
    }

    /// Another serving certificate from the same CA (a rotation).
    pub fn rotate(&self) -> Self {
        Self::signed_by(self.ca.clone())
    }

    fn signed_by(ca: CertKey) -> Self {
        let now = OffsetDateTime::now_utc();
        let sans = pki::service_sans("ksvc-webhook", "ksvc-system");
        let leaf = pki::issue_serving(&ca, &sans, now, time::Duration::days(1)).unwrap();
        Self { ca, leaf }
    }

    pub fn leaf_der(&self) -> Vec<u8> {
        der(&self.leaf.cert_pem)
    }
}

fn der(pem: &str) -> Vec<u8> {
    let cert = rustls_pemfile::certs(&mut pem.as_bytes()).next().unwrap();
    cert.unwrap().to_vec()
}

/// A directory laid out like a mounted Secret: `..<version>/tls.*`, `..data -> ..<version>`,
/// `tls.crt -> ..data/tls.crt`, `tls.key -> ..data/tls.key`.
pub struct SecretDir {
    pub dir: tempfile::TempDir,
    version: u32,
}

impl SecretDir {
    pub fn new(cert_pem: &str, key_pem: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut secret = Self { dir, version: 0 };
        secret.swap(cert_pem, key_pem);
        for name in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{name}"), secret.path().join(name)).unwrap();
        }
        secret
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// What the kubelet does: write a new version dir, atomically repoint `..data`, drop the old.
    pub fn swap(&mut self, cert_pem: &str, key_pem: &str) {
        let old = self.version_dir(self.version);
        self.version += 1;
        let new = self.version_dir(self.version);
        std::fs::create_dir(&new).unwrap();
        std::fs::write(new.join("tls.crt"), cert_pem).unwrap();
        std::fs::write(new.join("tls.key"), key_pem).unwrap();
        let tmp = self.path().join("..data_tmp");
        std::os::unix::fs::symlink(new.file_name().unwrap(), &tmp).unwrap();
        std::fs::rename(&tmp, self.path().join("..data")).unwrap();
        if self.version > 1 {
            std::fs::remove_dir_all(old).unwrap();
        }
    }

    fn version_dir(&self, version: u32) -> PathBuf {
        self.path()
            .join(format!("..2026_11_30_00_00_{version:02}.000"))
    }
}

/// A running server and what a test needs to talk to it.
pub struct Running {
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub pki: Pki,
    pub secret: SecretDir,
    pub shutdown: Shutdown,
    pub task: JoinHandle<()>,
}

/// Test defaults: quick reloads and drain, HTTP/1.1 only, no plain listener, `serve`'s limits.
pub fn options(certs: &Path) -> Options {
    Options {
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: None,
        certs: CertPaths::in_dir(certs),
        cert_reload_interval: Duration::from_millis(50),
        http2: false,
        header_read_timeout: Duration::from_secs(5),
        drain_period: Duration::from_millis(100),
        shutdown_timeout: Duration::from_secs(10),
        limits: Limits {
            request_timeout: Duration::from_secs(10),
            body_budget: 64 << 20,
            small_body_reserve: 16 << 20,
            max_connections: 256,
            max_connections_per_ip: 64,
        },
    }
}

/// Start a server; `tweak` adjusts the options, `wire` the extension points.
pub async fn start(tweak: impl FnOnce(&mut Options), wire: impl FnOnce(&mut Server)) -> Running {
    let pki = Pki::new();
    let secret = SecretDir::new(&pki.leaf.cert_pem, &pki.leaf.key_pem);
    let mut opts = options(secret.path());
    tweak(&mut opts);
    let mut server = Server::new(opts, Policy::default());
    wire(&mut server);
    let bound = server.bind().await.unwrap();
    let addr = bound.local_addr().unwrap();
    let metrics_addr = bound.metrics_addr().map(Result::unwrap);
    let shutdown = bound.shutdown_handle();
    let task = tokio::spawn(bound.run());
    Running {
        addr,
        metrics_addr,
        pki,
        secret,
        shutdown,
        task,
    }
}

pub fn client_config(ca_pem: &str, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(der(ca_pem))).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// One client connection: HTTP/1.1 or HTTP/2 as ALPN decided.
pub struct Conn {
    pub h2: bool,
    pub peer_cert: Vec<u8>,
    sender: Sender,
}

enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Body>),
    H2(hyper::client::conn::http2::SendRequest<Body>),
}

impl Conn {
    /// Another handle on this HTTP/2 connection, to send a concurrent stream.
    pub fn stream(&self) -> Self {
        let Sender::H2(sender) = &self.sender else {
            panic!("only an HTTP/2 connection carries concurrent streams")
        };
        Self {
            h2: true,
            peer_cert: self.peer_cert.clone(),
            sender: Sender::H2(sender.clone()),
        }
    }
}

/// A verified TLS connection to `addr` offering `alpn`.
pub async fn connect(addr: SocketAddr, ca_pem: &str, alpn: &[&[u8]]) -> std::io::Result<Conn> {
    connect_from(None, addr, ca_pem, alpn).await
}

/// [`connect`] from the local address `from` (any of 127.0.0.0/8 reaches a server on
/// 127.0.0.1: another peer as the server sees it).
pub async fn connect_from(
    from: Option<std::net::IpAddr>,
    addr: SocketAddr,
    ca_pem: &str,
    alpn: &[&[u8]],
) -> std::io::Result<Conn> {
    let connector = tokio_rustls::TlsConnector::from(client_config(ca_pem, alpn));
    let tcp = match from {
        None => TcpStream::connect(addr).await?,
        Some(ip) => {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(ip, 0))?;
            socket.connect(addr).await?
        }
    };
    let name = ServerName::try_from(SERVER_NAME).unwrap();
    let tls = connector.connect(name, tcp).await?;
    let (_, session) = tls.get_ref();
    let h2 = session.alpn_protocol() == Some(b"h2");
    let peer_cert = session.peer_certificates().unwrap()[0].to_vec();
    let io = TokioIo::new(tls);
    let sender = match h2 {
        true => {
            let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(conn);
            Sender::H2(sender)
        }
        false => {
            let (sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            Sender::H1(sender)
        }
    };
    Ok(Conn {
        h2,
        peer_cert,
        sender,
    })
}

/// An HTTP/1.1 connection to the running server.
pub async fn h1(server: &Running) -> Conn {
    connect(server.addr, &server.pki.ca.cert_pem, &[b"http/1.1"])
        .await
        .unwrap()
}

impl Conn {
    /// Whether a request can be sent now: false once the server closed the connection (its
    /// last answer said `Connection: close`, or it went away), as a pooling client sees it
    /// before it picks the connection.
    pub async fn ready(&mut self) -> bool {
        match &mut self.sender {
            Sender::H1(s) => s.ready().await.is_ok(),
            Sender::H2(s) => s.ready().await.is_ok(),
        }
    }

    /// Send a request; the error is the client's view of a failure (closed connection, …).
    pub async fn send(
        &mut self,
        request: hyper::Request<Body>,
    ) -> hyper::Result<(StatusCode, Bytes)> {
        let (status, _, body) = self.exchange(request).await?;
        Ok((status, body))
    }

    /// [`Conn::send`], with the answer's headers.
    pub async fn exchange(
        &mut self,
        request: hyper::Request<Body>,
    ) -> hyper::Result<(StatusCode, hyper::HeaderMap, Bytes)> {
        let response = match &mut self.sender {
            Sender::H1(s) => {
                s.ready().await?;
                s.send_request(request).await?
            }
            Sender::H2(s) => {
                s.ready().await?;
                s.send_request(request).await?
            }
        };
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok((parts.status, parts.headers, body))
    }

    pub async fn get(&mut self, path: &str) -> (StatusCode, String) {
        let request = hyper::Request::get(path)
            .header("host", SERVER_NAME)
            .body(full(Vec::new()))
            .unwrap();
        let (status, body) = self.send(request).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    /// POST `body` to `/mutate` as kube-apiserver does.
    pub async fn review(&mut self, body: Vec<u8>) -> hyper::Result<(StatusCode, Bytes)> {
        self.send(mutate_request("application/json", full(body)))
            .await
    }
}

pub fn full(body: Vec<u8>) -> Body {
    Full::new(Bytes::from(body)).boxed()
}

pub fn mutate_request(content_type: &str, body: Body) -> hyper::Request<Body> {
    hyper::Request::post("/mutate?timeout=10s")
        .header("host", SERVER_NAME)
        .header("content-type", content_type)
        .body(body)
        .unwrap()
}

/// A minimal v1 AdmissionReview creating a Knative Service; `padding` bytes of annotation make
/// it as large as a test needs.
pub fn review(uid: &str, padding: usize) -> Vec<u8> {
    let ksvc = serde_json::json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {
            "name": "myapp",
            "namespace": "default",
            "annotations": {"example.com/padding": "x".repeat(padding)}
        },
        "spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "ghcr.io/example/app:1.0", "ports": [{"containerPort": 8080}]}
        ]}}}
    });
    let gvk =
        serde_json::json!({"group": "serving.knative.dev", "version": "v1", "kind": "Service"});
    let gvr = serde_json::json!({"group": "serving.knative.dev", "version": "v1", "resource": "services"});
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": "myapp",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
            "object": ksvc,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    }))
    .unwrap()
}

/// Check a 200 answer the way kube-apiserver would: a v1 AdmissionReview with our uid, and a
/// JSONPatch (if any) that applies to the object that was sent.
pub fn assert_answer(uid: &str, sent: &[u8], status: StatusCode, body: &[u8]) {
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(body));
    let answer: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    let response = &answer["response"];
    assert_eq!(response["uid"], uid);
    assert!(response["allowed"].is_boolean());
    if let Some(patch) = response["patch"].as_str() {
        use base64::Engine;
        assert_eq!(response["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let sent: serde_json::Value = serde_json::from_slice(sent).unwrap();
        let mut object = sent["request"]["object"].clone();
        json_patch::patch(&mut object, &patch).unwrap();
    }
}

/// The value of the metric line starting with `prefix`, from `/metrics` over TLS.
pub async fn metric(server: &Running, prefix: &str) -> Option<f64> {
    let (_, text) = h1(server).await.get("/metrics").await;
    text.lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

/// Kills a spawned server if the test fails before it exits on its own.
pub struct KillOnDrop(pub Option<std::process::Child>);

impl KillOnDrop {
    pub fn get(&mut self) -> &mut std::process::Child {
        self.0.as_mut().unwrap()
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Whether kube-apiserver, trusting the PEM `bundle`, accepts the first certificate of
/// `cert_pem` for the webhook Service's name at `at` (a real rustls/webpki chain verification);
/// `None` when `cert_pem` holds no certificate.
pub fn trusted(bundle: &[u8], cert_pem: &str, at: OffsetDateTime) -> Option<bool> {
    match pki::verify(bundle, cert_pem, SERVER_NAME, at) {
        Err(pki::Error::NotPem) => None,
        verified => Some(verified.is_ok()),
    }
}
