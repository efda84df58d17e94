//! The watch cache's view of the Service owning a revision, for the revision guard
//! ([`crate::admission::guard`]): gone, being deleted, or present — whether its app is stopped and
//! which `status.traffic` entries name the revision.
//!
//! Reads the loop's Service store only; never calls the API. Says [`Owner::Unknown`] until the
//! cache has synced (a Service missing from a half-listed cache is not gone) and for namespaces the
//! loop does not watch.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use super::hub::AppKey;
use super::store::Store;
use super::view::KService;
use crate::admission::guard::{Lookup, Owner, OwnerView, Route};

/// The loop's Service store, set once the loop has made it.
pub type ServiceStore = Arc<OnceLock<Store<KService>>>;

/// What a cached Service (`None`: not in the synced cache) says of its revision `revision`.
pub fn owner(ksvc: Option<&KService>, revision: &str) -> Owner {
    let Some(ksvc) = ksvc else {
        return Owner::Gone;
    };
    if ksvc.deleting {
        return Owner::Deleting;
    }
    let routes = ksvc
        .status
        .traffic
        .iter()
        .filter(|t| *t.revision_name == *revision)
        .map(|t| Route {
            tag: Some(t.tag.to_string()).filter(|tag| !tag.is_empty()),
            percent: t.percent,
        })
        .collect();
    Owner::Present {
        stopped: ksvc.is_stopped(),
        routes,
    }
}

/// The view the revision guard reads: `services` once `synced`, for `namespace` (all when
/// `None`), the namespace the loop watches.
pub fn view(
    services: ServiceStore,
    synced: Arc<AtomicBool>,
    namespace: Option<String>,
) -> OwnerView {
    OwnerView::new(move |lookup: &Lookup| {
        let watched = namespace.as_deref().is_none_or(|ns| ns == lookup.namespace);
        match services.get() {
            Some(store) if watched && synced.load(Ordering::Acquire) => {
                let key = AppKey {
                    namespace: lookup.namespace.into(),
                    name: lookup.service.into(),
                };
                owner(store.get(&key).as_deref(), lookup.revision)
            }
            _ => Owner::Unknown,
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::watch::cache::Cache;

    fn ksvc(name: &str, extra: serde_json::Value) -> KService {
        let mut obj = json!({"metadata": {"name": name, "namespace": "apps"},
            "status": {"traffic": [
                {"revisionName": format!("{name}-00002"), "percent": 100},
                {"revisionName": format!("{name}-00001"), "percent": 0, "tag": "canary"}]}});
        json_patch::merge(&mut obj, &extra);
        serde_json::from_value(obj).unwrap()
    }

    #[test]
    fn the_view_says_what_the_synced_cache_holds() {
        let cache = Cache::from_objects(
            vec![
                ksvc("live", json!({})),
                ksvc(
                    "quiet",
                    json!({"metadata": {"labels": {"flyte.org/app-stopped": "true"}}}),
                ),
                ksvc(
                    "leaving",
                    json!({"metadata": {"deletionTimestamp": "2026-11-30T00:00:00Z"}}),
                ),
            ],
            Vec::new(),
        );
        let store = ServiceStore::default();
        let synced = Arc::new(AtomicBool::new(false));
        let view = view(store.clone(), synced.clone(), Some("apps".into()));
        let ask = |ns: &str, service: &str, revision: &str| {
            view.owner(&Lookup {
                namespace: ns,
                service,
                revision,
            })
        };
        assert_eq!(
            ask("apps", "live", "live-00002"),
            Owner::Unknown,
            "no store yet"
        );
        store.set(cache.services.clone()).unwrap();
        assert_eq!(
            ask("apps", "live", "live-00002"),
            Owner::Unknown,
            "not synced"
        );
        synced.store(true, Ordering::Release);
        let route = |tag: Option<&str>, percent| Route {
            tag: tag.map(str::to_string),
            percent: Some(percent),
        };
        #[rustfmt::skip]
        let cases = [
            ("apps", "live", "live-00002", Owner::Present { stopped: false, routes: vec![route(None, 100)] }),
            ("apps", "live", "live-00001", Owner::Present { stopped: false, routes: vec![route(Some("canary"), 0)] }),
            ("apps", "live", "live-00000", Owner::Present { stopped: false, routes: vec![] }),
            ("apps", "quiet", "quiet-00002", Owner::Present { stopped: true, routes: vec![route(None, 100)] }),
            ("apps", "leaving", "leaving-00002", Owner::Deleting),
            ("apps", "gone", "gone-00001", Owner::Gone),
            ("other", "live", "live-00002", Owner::Unknown),
        ];
        for (ns, service, revision, want) in cases {
            assert_eq!(
                ask(ns, service, revision),
                want,
                "{ns}/{service} {revision}"
            );
        }
    }
}
