//! The attacks as clients, and the well-formed client that measures what kube-apiserver would
//! see meanwhile.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::channel::Sender;
use http_body_util::{BodyExt, Channel};
use hyper::StatusCode;
use tokio::net::TcpStream;

use super::served::Served;
use support::harness::{self, Conn, SERVER_NAME, review};

/// How a stalled upload ended: the server's status (`None`: the connection was dropped) and
/// when.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    pub status: Option<StatusCode>,
    pub after: Duration,
}

/// A `/mutate` request declaring a `size`-byte body, and the sender that feeds that body.
pub fn declared(size: usize) -> (Sender<Bytes, Infallible>, hyper::Request<harness::Body>) {
    let (tx, body) = Channel::<Bytes, Infallible>::new(2);
    let request = hyper::Request::post("/mutate?timeout=10s")
        .header("host", SERVER_NAME)
        .header("content-type", "application/json")
        .header("content-length", size)
        .body(body.boxed())
        .unwrap();
    (tx, request)
}

/// Over `conn`, the headers of a `/mutate` request declaring `size` bytes, then nothing; the
/// answer's status once the server gives one.
pub async fn headers_only(conn: &mut Conn, size: usize) -> Option<StatusCode> {
    let (tx, request) = declared(size);
    let answer = conn.send(request).await;
    drop(tx);
    answer.ok().map(|(status, _)| status)
}

/// Over `conn`, send the headers of a `size`-byte `/mutate` body, then all but its last byte,
/// then nothing; return once the server answers or drops the connection.
pub async fn stalled(conn: Conn, size: usize) -> Ended {
    dripping(conn, size, None).await
}

/// Bytes a dripping upload holds back, to send one at a time.
const DRIPPED: usize = 64;

/// Over `conn`, send the headers of a `size`-byte `/mutate` body and all but its last bytes;
/// then, with `drip`, one byte every `drip` (never the last): a body that keeps arriving, so
/// that it is never the one cut for another, until its pace or its deadline ends it; without,
/// nothing more. Return once the server answers or drops the connection.
pub async fn dripping(mut conn: Conn, size: usize, drip: Option<Duration>) -> Ended {
    let started = Instant::now();
    let (mut tx, request) = declared(size);
    let feeder = tokio::spawn(async move {
        let chunk = Bytes::from(vec![b' '; 64 * 1024]);
        let held_back = if drip.is_some() { DRIPPED } else { 1 };
        let mut left = size - held_back;
        while left > 0 {
            let n = left.min(chunk.len());
            if tx.send_data(chunk.slice(..n)).await.is_err() {
                return;
            }
            left -= n;
        }
        if let Some(every) = drip {
            for _ in 1..DRIPPED {
                tokio::time::sleep(every).await;
                if tx.send_data(chunk.slice(..1)).await.is_err() {
                    return;
                }
            }
        }
        // Hold the body open: the last byte never comes.
        std::future::pending::<()>().await;
        drop(tx);
    });
    let answer = conn.send(request).await;
    feeder.abort();
    Ended {
        status: answer.ok().map(|(status, _)| status),
        after: started.elapsed(),
    }
}

impl Ended {
    /// The status code, or `dropped`.
    pub fn outcome(&self) -> String {
        self.status
            .map_or("dropped".to_owned(), |s| s.as_u16().to_string())
    }
}

/// `GET path` with `token` as its bearer token (the status API's callers).
pub fn get(path: &str, token: &str) -> hyper::Request<harness::Body> {
    hyper::Request::get(path)
        .header("host", SERVER_NAME)
        .header("authorization", format!("Bearer {token}"))
        .body(harness::full(Vec::new()))
        .unwrap()
}

/// How often each answer came back.
pub fn tally(ended: &[Ended]) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for e in ended {
        *counts.entry(e.outcome()).or_default() += 1;
    }
    counts
}

/// One well-formed review over `conn`: its latency if it was answered 200 (then checked as
/// kube-apiserver would check it), `None` if it failed.
pub async fn one_review(conn: &mut Conn, uid: &str) -> Option<Duration> {
    let sent = review(uid, 2_000);
    let started = Instant::now();
    let (status, body) = conn.review(sent.clone()).await.ok()?;
    let took = started.elapsed();
    if status != StatusCode::OK {
        return None;
    }
    harness::assert_answer(uid, &sent, status, &body);
    Some(took)
}

/// How the well-formed reviews fared: answered 200 within [`ANSWER_WITHIN`], of all sent; the
/// others not answered in time, or answered otherwise (no connection, another status).
#[derive(Debug, Default, Clone, Copy)]
pub struct Answered {
    pub ok: usize,
    pub total: usize,
    pub slowest: Duration,
    pub late: usize,
    pub failed: usize,
}

/// The bar: kube-apiserver's review answered within 2 s, its connection included.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(2);

impl Answered {
    pub fn share(&self) -> f64 {
        self.ok as f64 / self.total.max(1) as f64
    }

    /// At least 99 % answered, and at least some sent.
    pub fn assert_kept(&self, what: &str) {
        assert!(self.total >= 10, "{what}: only {} reviews sent", self.total);
        assert!(self.share() >= 0.99, "{what}: {self:?}");
    }
}

/// Until `end`, kube-apiserver in a quiet cluster: a 2 KB review every 50 ms, each on a fresh
/// connection from 127.0.0.1.
pub async fn fresh_reviews(served: &Served, end: Instant) -> Answered {
    fresh_reviews_at_least(served, end, 0).await
}

/// The same until `end` and until `at_least` reviews have been sent: on a slow machine a fixed
/// time sends fewer, and below 100 the 99 % bar would allow no failure at all.
pub async fn fresh_reviews_at_least(served: &Served, end: Instant, at_least: usize) -> Answered {
    let mut answered = Answered::default();
    while Instant::now() < end || answered.total < at_least {
        answered.total += 1;
        let uid = format!("kube-{}", answered.total);
        let started = Instant::now();
        let review = async {
            let mut conn = served.connect(None, &[b"http/1.1"]).await.ok()?;
            one_review(&mut conn, &uid).await
        };
        match tokio::time::timeout(ANSWER_WITHIN, review).await {
            Ok(Some(_)) => {
                answered.ok += 1;
                answered.slowest = answered.slowest.max(started.elapsed());
            }
            Ok(None) => answered.failed += 1,
            Err(_) => answered.late += 1,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    answered
}

/// Until `end`, the kubelet: `GET /healthz` on the probe listener every 250 ms, on a fresh
/// connection each (as the kubelet probes), answered 200 within [`ANSWER_WITHIN`].
pub async fn probes(served: &Served, end: Instant) -> Answered {
    let mut answered = Answered::default();
    while Instant::now() < end {
        answered.total += 1;
        let started = Instant::now();
        let probe = tokio::time::timeout(ANSWER_WITHIN, served.probe("/healthz")).await;
        if let Ok(Some(answer)) = probe
            && answer.starts_with("HTTP/1.1 200")
        {
            answered.ok += 1;
            answered.slowest = answered.slowest.max(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    answered
}

/// The attacker addresses: other pods, as the server sees them.
pub fn attacker(i: usize) -> IpAddr {
    IpAddr::from([127, 0, 0, 2 + u8::try_from(i % 4).unwrap()])
}

/// A TCP connection from `from`.
pub async fn tcp_from(from: IpAddr, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(addr).await
}

/// A TLS connection from `from`, without HTTP on it: the attacker writes what it likes.
pub async fn tls_from(
    served: &Served,
    from: IpAddr,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let config = harness::client_config(&served.pki.ca.cert_pem, &[b"http/1.1"]);
    let tcp = tcp_from(from, served.addr).await?;
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).unwrap();
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
}
