//! The attacks as clients, and the well-formed client that measures what kube-apiserver would
//! see meanwhile.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Channel};
use hyper::StatusCode;

use support::harness::{self, Conn, SERVER_NAME, review};

/// How a stalled upload ended: the server's status (`None`: the connection was dropped) and
/// when.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    pub status: Option<StatusCode>,
    pub after: Duration,
}

/// Over `conn`, send the headers of a `size`-byte `/mutate` body, then all but its last byte,
/// then nothing; return once the server answers or drops the connection.
pub async fn stalled(mut conn: Conn, size: usize) -> Ended {
    let started = Instant::now();
    let (mut tx, body) = Channel::<Bytes, Infallible>::new(2);
    let request = hyper::Request::post("/mutate?timeout=10s")
        .header("host", SERVER_NAME)
        .header("content-type", "application/json")
        .header("content-length", size)
        .body(body.boxed())
        .unwrap();
    let feeder = tokio::spawn(async move {
        let chunk = Bytes::from(vec![b' '; 64 * 1024]);
        let mut left = size - 1;
        while left > 0 {
            let n = left.min(chunk.len());
            if tx.send_data(chunk.slice(..n)).await.is_err() {
                break;
            }
            left -= n;
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
