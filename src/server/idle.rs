//! Idle tracking of one HTTP/2 connection, which has no header-read timeout of its own: how many
//! of its requests are open (a request stays open until its answer's body is dropped, so a
//! streaming `/apps/watch` counts) and a future that resolves once none has been for a while.
//! The accept loop then closes the connection (GOAWAY). Owns no sockets.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::Response;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use tokio::sync::watch;
use tower::ServiceExt as _;

/// The requests of one connection: open now, and begun since it opened (a request that
/// begins and ends between two looks is activity too).
#[derive(Debug, Clone, Copy, Default)]
struct Count {
    open: usize,
    begun: u64,
}

/// The open requests of one connection.
#[derive(Debug)]
pub struct Activity {
    count: watch::Sender<Count>,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            count: watch::channel(Count::default()).0,
        })
    }

    fn begin(self: &Arc<Self>) -> Open {
        self.count.send_modify(|c| {
            c.open += 1;
            c.begun += 1;
        });
        Open(self.clone())
    }

    /// Resolves once no request has been open for `limit` (from the start, if none ever was).
    pub async fn idle_for(&self, limit: Duration) {
        let mut rx = self.count.subscribe();
        loop {
            // The sender lives in `self`: these waits end only by their condition.
            let quiet = rx.wait_for(|c| c.open == 0).await;
            let seen = quiet.map(|c| c.begun).unwrap_or_default();
            let active = rx.wait_for(|c| c.open > 0 || c.begun != seen);
            if tokio::time::timeout(limit, active).await.is_err() {
                return;
            }
        }
    }
}

/// One open request; dropped with its answer's body.
#[derive(Debug)]
struct Open(Arc<Activity>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0
            .count
            .send_modify(|c| c.open = c.open.saturating_sub(1));
    }
}

/// `router` as a service that counts its open requests in `activity`.
pub fn track(
    router: Router,
    activity: Arc<Activity>,
) -> impl tower::Service<
    Request<Incoming>,
    Response = Response,
    Error = Infallible,
    Future = impl Future<Output = Result<Response, Infallible>> + Send,
> + Clone {
    tower::service_fn(move |request: Request<Incoming>| {
        let open = activity.begin();
        let call = router.clone().oneshot(request);
        async move {
            let response = call.await?;
            Ok(response.map(|body| Body::new(Tracked { body, _open: open })))
        }
    })
}

/// An answer's body that keeps its request counted as open until it is dropped.
struct Tracked {
    body: Body,
    _open: Open,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_only_after_the_last_answer_is_dropped() {
        let activity = Activity::new();
        let limit = Duration::from_secs(5);
        // Nothing ever opened: idle after the limit.
        let started = tokio::time::Instant::now();
        activity.idle_for(limit).await;
        assert_eq!(started.elapsed(), limit);

        let open = activity.begin();
        let waiter = tokio::spawn({
            let activity = activity.clone();
            async move { activity.idle_for(limit).await }
        });
        tokio::time::sleep(limit * 3).await;
        assert!(!waiter.is_finished(), "idle while a request is open");
        drop(open);
        // A request that begins and ends at once restarts the wait too.
        tokio::time::sleep(limit / 2).await;
        drop(activity.begin());
        let last = tokio::time::Instant::now();
        waiter.await.unwrap();
        assert_eq!(last.elapsed(), limit);
    }
}
