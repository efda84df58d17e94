//! How the loop's watchers list: as a streaming list (WatchList: one watch request with
//! `sendInitialEvents=true`, answered from the API server's watch cache) when the server takes
//! it, and as paged lists (`limit=250`, read from etcd) when it answers the streaming list with a
//! 400 or 422: a server with the WatchList feature turned off (or too old for it). The fallback happens once
//! per watcher, is said at INFO, and holds for the rest of the process. A watcher can be asked to
//! list again from the start ([`Listing::relist_on`]): the drift report does, for the Services'
//! texts it does not keep. Never decides what is cached ([`super::store`] does).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use kube::api::Api;
use kube::runtime::watcher::{self, Event, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedReceiver;

/// Objects a list is answered with per page, when lists are paged.
pub const PAGE_SIZE: u32 = 250;

type Events<K> = Pin<Box<dyn Stream<Item = Result<Event<K>, watcher::Error>> + Send>>;

/// A watcher that lists by streaming and falls back to paged lists once (see the module).
pub struct Listing<K> {
    api: Api<K>,
    config: watcher::Config,
    events: Events<K>,
    streaming: bool,
    what: &'static str,
    /// Asks for a list again, from the start ([`Listing::relist_on`]).
    relist: Option<UnboundedReceiver<()>>,
}

/// Whether an error of a streaming list says the server does not take one: 400 Bad Request or
/// 422 Invalid (kube-apiserver with the WatchList feature off answers 422), to the request or as
/// an error event. Not the 4xx any watch or list may get (401, 403, 404, 409, 410, 429): a paged
/// list would get those too, and they are retried with backoff as before.
pub fn refuses_streaming(error: &watcher::Error) -> bool {
    let code = match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code,
        watcher::Error::WatchError(status) => status.code,
        _ => return false,
    };
    matches!(code, 400 | 422)
}

impl<K> Listing<K>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    /// Watch `api` with `config`, listing by streaming first; `what` names the resource in
    /// the fallback's log line.
    pub fn new(api: Api<K>, config: watcher::Config, what: &'static str) -> Self {
        let mut listing = Self {
            api,
            config,
            streaming: true,
            what,
            relist: None,
            events: Box::pin(futures::stream::empty()),
        };
        listing.events = listing.start();
        listing
    }

    /// List again from the start whenever `asks` receives: the watch under way is dropped and
    /// a new one lists (by streaming or in pages, as this one does now). Asks that come while a
    /// list is under way start it again once.
    pub fn relist_on(mut self, asks: UnboundedReceiver<()>) -> Self {
        self.relist = Some(asks);
        self
    }

    fn start(&self) -> Events<K> {
        match self.streaming {
            true => Box::pin(watcher(
                self.api.clone(),
                self.config.clone().streaming_lists(),
            )),
            false => Box::pin(watcher(
                self.api.clone(),
                self.config.clone().page_size(PAGE_SIZE),
            )),
        }
    }
}

impl<K> Stream for Listing<K>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    type Item = Result<Event<K>, watcher::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let mut asked = false;
        if let Some(asks) = this.relist.as_mut() {
            while let Poll::Ready(Some(())) = asks.poll_recv(cx) {
                asked = true;
            }
        }
        if asked {
            tracing::info!(
                resource = this.what,
                "listing again from the start, as asked"
            );
            this.events = this.start();
        }
        match this.events.as_mut().poll_next(cx) {
            Poll::Ready(Some(Err(error))) if this.streaming && refuses_streaming(&error) => {
                tracing::info!(
                    resource = this.what,
                    error = %crate::report::error_chain(&error),
                    page_size = PAGE_SIZE,
                    "the API server refused a streaming list; listing in pages from now on"
                );
                this.streaming = false;
                this.events = this.start();
                // Ask the new watcher at once: it starts its first page.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn started(code: u16) -> watcher::Error {
        watcher::Error::WatchStartFailed(kube::Error::Api(Box::new(
            Status::failure("x", "y").with_code(code),
        )))
    }

    #[test]
    fn only_a_refusal_of_the_request_itself_falls_back() {
        for (code, falls_back) in [
            (400, true),
            (422, true),
            (404, false),
            (409, false),
            (401, false),
            (403, false),
            (410, false),
            (429, false),
            (500, false),
            (503, false),
        ] {
            assert_eq!(refuses_streaming(&started(code)), falls_back, "{code}");
        }
        let gone =
            watcher::Error::WatchError(Box::new(Status::failure("x", "Expired").with_code(410)));
        assert!(!refuses_streaming(&gone));
        let invalid =
            watcher::Error::WatchError(Box::new(Status::failure("x", "Invalid").with_code(422)));
        assert!(refuses_streaming(&invalid));
        assert!(!refuses_streaming(&watcher::Error::NoResourceVersion));
    }
}
