use futures::StreamExt;

use super::*;
use crate::watch::status::{AppStatus, Phase};

fn paging(limit: Option<&str>, token: Option<&str>) -> Paging {
    Paging {
        limit: limit.map(str::to_owned),
        token: token.map(str::to_owned),
    }
}

fn key(ns: &str, name: &str) -> AppKey {
    AppKey {
        namespace: ns.into(),
        name: name.into(),
    }
}

#[test]
fn limits_and_tokens_are_checked_and_say_how_to_fix_them() {
    let all = Filter::default();
    let in_team = Filter {
        namespace: Some("team".into()),
        ..Filter::default()
    };
    let token = encode(&key("team", "a"), &all);
    #[rustfmt::skip]
    let cases: [(Paging, &Filter, Result<Asked, &str>); 9] = [
        (paging(None, None), &all, Ok(Asked::Full)),
        (paging(Some("500"), None), &all, Ok(Asked::Page(Page { after: None, limit: 500 }))),
        (paging(Some("1"), Some(&token)), &all, Ok(Asked::Page(Page { after: Some(key("team", "a")), limit: 1 }))),
        (paging(Some("0"), None), &all, Err("limit \"0\" is not a whole number from 1 to 5000; pass e.g. `limit=500`")),
        (paging(Some("5001"), None), &all, Err("limit \"5001\" is not a whole number from 1 to 5000")),
        (paging(Some("ten"), None), &all, Err("limit \"ten\"")),
        (paging(None, Some(&token)), &all, Err("`continue` needs `limit`")),
        (paging(Some("5"), Some("bm90IG91cnM")), &all, Err("is not one this server gave; start the listing again without `continue`")),
        (paging(Some("5"), Some(&token)), &in_team, Err("belongs to a listing with other filters")),
    ];
    for (i, (paging, filter, want)) in cases.into_iter().enumerate() {
        match (asked(&paging, filter), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "case {i}"),
            (Err(got), Err(want)) => assert!(got.contains(want), "case {i}: {got}"),
            (got, want) => panic!("case {i}: {got:?}, want {want:?}"),
        }
    }
}

fn hub_of(n: usize) -> Arc<Hub> {
    let hub = Hub::new();
    for i in 0..n {
        hub.upsert(AppRecord {
            namespace: format!("ns-{}", i % 3).into(),
            name: format!("app-{i:04}").into(),
            project: None,
            domain: None,
            app_name: None,
            status: AppStatus {
                phase: Phase::Active,
                message: String::new(),
                last_transition_time: String::new(),
                replicas: None,
                url: None,
                substate: None,
            },
            drift: Default::default(),
        });
    }
    hub
}

#[tokio::test]
async fn a_full_listing_is_the_same_array_in_chunks() {
    for n in [0, 1, CHUNK, 2 * CHUNK + 7] {
        let hub = hub_of(n);
        let chunks: Vec<Bytes> = chunks(hub.clone(), Filter::default(), |_| true)
            .collect()
            .await;
        assert_eq!(chunks.len(), n.div_ceil(CHUNK).max(1), "{n} apps");
        let body: Vec<u8> = chunks.concat();
        let got: Vec<AppRecord> = serde_json::from_slice(&body).unwrap();
        assert_eq!(got, hub.list(&Filter::default()), "{n} apps");
    }
    // Records the caller may not see are left out, commas and all.
    let hub = hub_of(2 * CHUNK + 7);
    let body: Vec<u8> = chunks(hub.clone(), Filter::default(), |r| &*r.namespace == "ns-1")
        .collect::<Vec<_>>()
        .await
        .concat();
    let got: Vec<AppRecord> = serde_json::from_slice(&body).unwrap();
    let want: Vec<AppRecord> = hub
        .list(&Filter::default())
        .into_iter()
        .filter(|r| &*r.namespace == "ns-1")
        .collect();
    assert_eq!(got, want);
}
