//! Paged and streamed listings of `GET /apps`: the `limit` and `continue` parameters, the
//! opaque continue token, and the full listing sent in chunks of [`CHUNK`] records.
//!
//! A page is the next `limit` apps after the token's key, in (namespace, name) order, among those
//! the filter covers; the token of the next page names the last key sent and a digest of the
//! filter, so a token passed back with other filters is refused (400) rather than answering a
//! page of another listing. A full listing never builds one big buffer: it takes [`CHUNK`]
//! records from the hub at a time, as the client reads. Never touches the API.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use serde::Deserialize;

use crate::watch::hub::{AppKey, AppRecord, Filter, Hub};

/// The header of a page after which more apps remain: pass its value back as `?continue=`.
pub const CONTINUE_HEADER: &str = "x-ksvc-webhook-continue";
/// The largest `limit`.
pub const MAX_LIMIT: usize = 5000;
/// Records per chunk of a full (unpaged) listing.
pub const CHUNK: usize = 500;
/// Full listings served at once; more are answered 429.
pub const MAX_FULL_LISTINGS: usize = 2;

/// The paging parameters of `GET /apps`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Paging {
    pub limit: Option<String>,
    #[serde(rename = "continue")]
    pub token: Option<String>,
}

/// Where a page starts and how long it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The key after which the page starts; from the first app when `None`.
    pub after: Option<AppKey>,
    pub limit: usize,
}

/// A listing asked for: one page, or everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    Page(Page),
    Full,
}

/// `limit` and `continue` checked against the listing's filter; the error says how to fix it.
pub fn asked(paging: &Paging, filter: &Filter) -> Result<Asked, String> {
    let limit = match paging.limit.as_deref() {
        None if paging.token.is_some() => {
            return Err(
                "`continue` needs `limit`: pass the same `limit` (1 to 5000) with the token".into(),
            );
        }
        None => return Ok(Asked::Full),
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                format!(
                    "limit {:?} is not a whole number from 1 to {MAX_LIMIT}; pass e.g. `limit=500`",
                    cut(text)
                )
            })?,
    };
    let after = paging
        .token
        .as_deref()
        .map(|token| decode(token, filter))
        .transpose()?;
    Ok(Asked::Page(Page { after, limit }))
}

fn cut(text: &str) -> String {
    text.chars().take(32).collect()
}

/// The filter's digest, for tokens (in memory and in a client's hands for one listing only).
fn filter_digest(filter: &Filter) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        &filter.namespace,
        &filter.name,
        &filter.project,
        &filter.domain,
    )
        .hash(&mut h);
    h.finish()
}

/// The token of the page after `last` under `filter`.
pub fn encode(last: &AppKey, filter: &Filter) -> String {
    let text = format!(
        "1\n{:016x}\n{}\n{}",
        filter_digest(filter),
        last.namespace,
        last.name
    );
    URL_SAFE_NO_PAD.encode(text)
}

fn decode(token: &str, filter: &Filter) -> Result<AppKey, String> {
    let bad = || {
        format!(
            "continue token {:?} is not one this server gave; start the listing again without `continue`",
            cut(token)
        )
    };
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let mut parts = text.split('\n');
    let (Some("1"), Some(digest), Some(namespace), Some(name), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(bad());
    };
    if digest != format!("{:016x}", filter_digest(filter)) {
        return Err(
            "the continue token belongs to a listing with other filters; pass the same \
             `namespace`, `name`, `project` and `domain` as the first page, or start again without `continue`"
                .into(),
        );
    }
    Ok(AppKey {
        namespace: namespace.into(),
        name: name.into(),
    })
}

/// One page from the hub, and the token of the next one when more apps remain.
pub fn page(hub: &Hub, filter: &Filter, page: &Page) -> (Vec<AppRecord>, Option<String>) {
    let (records, more) = hub.page(filter, page.after.as_ref(), page.limit);
    let next = more
        .then(|| records.last().map(|r| encode(&r.key(), filter)))
        .flatten();
    (records, next)
}

/// Where a full listing has got to.
struct Chunker {
    /// The key of the last record taken from the hub.
    after: Option<AppKey>,
    started: bool,
    sent_any: bool,
    done: bool,
}

/// The chunks of a full listing as a JSON array, [`CHUNK`] records taken from the hub at a time
/// as the client reads; `keep` drops the records the caller may not see.
pub fn chunks(
    hub: Arc<Hub>,
    filter: Filter,
    keep: impl Fn(&AppRecord) -> bool + Send + 'static,
) -> impl futures::Stream<Item = Bytes> + Send {
    let start = Chunker {
        after: None,
        started: false,
        sent_any: false,
        done: false,
    };
    futures::stream::unfold(start, move |mut at| {
        let chunk = (!at.done).then(|| {
            let mut buf = Vec::new();
            if !at.started {
                buf.push(b'[');
                at.started = true;
            }
            let (records, more) = hub.page(&filter, at.after.as_ref(), CHUNK);
            for record in records.iter().filter(|r| keep(r)) {
                if at.sent_any {
                    buf.push(b',');
                }
                at.sent_any = true;
                // A record is plain data: serialising it cannot fail.
                let _ = serde_json::to_writer(&mut buf, record);
            }
            if let Some(last) = records.last() {
                at.after = Some(last.key());
            }
            if !more {
                buf.push(b']');
                at.done = true;
            }
            (Bytes::from(buf), at)
        });
        futures::future::ready(chunk)
    })
}

#[cfg(test)]
#[path = "pages_tests.rs"]
mod tests;
