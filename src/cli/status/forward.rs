//! The way to a pod's status listener, as `kubectl port-forward svc/NAME` goes: the Service's
//! selector, a Ready pod it selects, and a port-forward to the listener's port on the pod's
//! loopback ([`LOCAL_STATUS_PORT`]), with the user's credentials (get on the Service, list pods,
//! create pods/portforward in the webhook's namespace). Which pod is [`ready_pod`]'s, a pure
//! choice; the rest is calls and the wording of their failures.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Client;
use kube::api::{Api, ListParams};

use super::{Error, Reader, StatusApiArgs};
use crate::apps::args::LOCAL_STATUS_PORT;
use crate::cluster::call;
use crate::cluster::client::{self, ClientArgs};
use crate::cluster::errors;
use crate::watch::hub::AppRecord;

/// How long each call to the API server may take (reading the Service, listing the pods, opening
/// the port-forward).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long to wait, once the stream has failed, for the reason the kubelet sends after it.
const REASON_WAIT: Duration = Duration::from_secs(2);

/// Every app of `/apps`, read through a port-forward to a Ready pod of the status API's Service.
pub(super) async fn apps(
    args: &StatusApiArgs,
    cluster: &ClientArgs,
    namespace: Option<&str>,
) -> Result<Vec<AppRecord>, Error> {
    let ns = args.webhook_namespace.as_str();
    let at = format!("{ns}/{}", args.webhook_service);
    let api_error = |source| Error::ApiServer {
        at: at.clone(),
        source,
    };
    let (client, server) = client::client(cluster, None).await.map_err(&api_error)?;
    let pod = find_pod(&client, args, &at).await.map_err(|e| match e {
        Found::Call(e) => api_error(errors::Error::from_call(e, &server)),
        Found::Worded(e) => e,
    })?;
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let forward = tokio::time::timeout(CALL_TIMEOUT, pods.portforward(&pod, &[LOCAL_STATUS_PORT]));
    let opened = match forward.await {
        Ok(opened) => opened,
        Err(_) => {
            let why = format!("no answer within {}s", CALL_TIMEOUT.as_secs());
            return Err(port_forward(ns, &pod, errors::Error::Other(why)));
        }
    };
    let mut forwarder = match opened {
        Ok(forwarder) => forwarder,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            return Err(Error::Forbidden {
                namespace: ns.to_owned(),
                pod,
                message: status.message.clone(),
            });
        }
        Err(e) => {
            return Err(port_forward(
                ns,
                &pod,
                errors::Error::from_kube(&e, &server),
            ));
        }
    };
    let (Some(stream), Some(reason)) = (
        forwarder.take_stream(LOCAL_STATUS_PORT),
        forwarder.take_error(LOCAL_STATUS_PORT),
    ) else {
        let why = errors::Error::Other("the port-forward opened no stream".to_owned());
        return Err(port_forward(ns, &pod, why));
    };
    let listener = format!("on port {LOCAL_STATUS_PORT} of pod {ns}/{pod}");
    let host = format!("127.0.0.1:{LOCAL_STATUS_PORT}");
    let read = async {
        let mut reader = Reader::open(stream, &host, listener).await?;
        reader.all(args, namespace).await
    };
    // Fused: it may end (without a reason) in the race below and is not awaited again then.
    let reason = futures::FutureExt::fuse(reason);
    tokio::pin!(reason);
    let closed = |why: String| Error::Closed {
        namespace: ns.to_owned(),
        pod: pod.clone(),
        port: LOCAL_STATUS_PORT,
        why,
    };
    // The kubelet says on the port's error channel why it cannot forward (nothing listens),
    // then closes the stream. The reason can be lost on the way (the forwarder ends when it
    // cannot send the request on a closed WebSocket), so a stream closed before any answer is
    // that too: no server accepted at the port.
    let read = tokio::select! {
        read = read => read,
        Some(why) = &mut reason => return Err(closed(why)),
    };
    match read {
        Ok(records) => {
            forwarder.abort();
            Ok(records)
        }
        Err(Error::Dropped { why: dropped, .. }) => {
            let why = match futures::future::FusedFuture::is_terminated(&reason) {
                true => None,
                false => tokio::time::timeout(REASON_WAIT, reason)
                    .await
                    .ok()
                    .flatten(),
            };
            Err(closed(why.unwrap_or(dropped)))
        }
        Err(other) => Err(other),
    }
}

fn port_forward(namespace: &str, pod: &str, source: errors::Error) -> Error {
    Error::PortForward {
        namespace: namespace.to_owned(),
        pod: pod.to_owned(),
        source,
    }
}

/// Why no pod was found.
enum Found {
    /// A call failed or took too long.
    Call(call::Error),
    /// The cluster answered, and there is no pod to use.
    Worded(Error),
}

/// The name of a Ready pod the status API's Service selects.
async fn find_pod(client: &Client, args: &StatusApiArgs, at: &str) -> Result<String, Found> {
    let ns = args.webhook_namespace.as_str();
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let get = services.get(&args.webhook_service);
    let service = call::timed("get the Service", CALL_TIMEOUT, get)
        .await
        .map_err(Found::Call)?;
    let selector = service
        .spec
        .and_then(|spec| spec.selector)
        .filter(|s| !s.is_empty())
        .map(|s| label_selector(&s))
        .ok_or_else(|| Found::Worded(Error::NoSelector { at: at.to_owned() }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let params = ListParams::default().labels(&selector);
    let listed = call::timed("list the pods", CALL_TIMEOUT, pods.list(&params))
        .await
        .map_err(Found::Call)?;
    ready_pod(&listed.items).ok_or_else(|| {
        Found::Worded(Error::NoReadyPod {
            at: at.to_owned(),
            namespace: ns.to_owned(),
            selector,
        })
    })
}

/// A Service's selector as a label selector: `k=v` pairs, comma-separated, in key order.
fn label_selector(selector: &BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(",")
}

/// The first pod by name that is Ready and not being deleted, as a Service's endpoints would
/// send traffic to it.
fn ready_pod(pods: &[Pod]) -> Option<String> {
    let ready = |pod: &&Pod| {
        pod.metadata.deletion_timestamp.is_none()
            && pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    let mut names: Vec<&String> = pods
        .iter()
        .filter(ready)
        .filter_map(|p| p.metadata.name.as_ref())
        .collect();
    names.sort();
    names.first().map(|name| (*name).clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, ready: &str, deleting: bool) -> Pod {
        let mut pod = json!({"metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}});
        if deleting {
            pod["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
        }
        serde_json::from_value(pod).unwrap()
    }

    /// Only a Ready pod that is not going away is chosen, the first by name, so two runs read
    /// the same replica.
    #[test]
    fn the_first_ready_pod_by_name_is_chosen() {
        let cases: [(Vec<Pod>, Option<&str>); 5] = [
            (vec![], None),
            (vec![pod("a", "False", false)], None),
            (vec![pod("a", "True", true)], None),
            (
                vec![
                    pod("c", "True", false),
                    pod("b", "True", false),
                    pod("a", "False", false),
                ],
                Some("b"),
            ),
            (
                vec![pod("a", "True", true), pod("z", "True", false)],
                Some("z"),
            ),
        ];
        for (pods, want) in cases {
            assert_eq!(ready_pod(&pods).as_deref(), want, "{pods:?}");
        }
        let no_status: Pod = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
        assert_eq!(ready_pod(&[no_status]), None);
    }

    #[test]
    fn a_selector_is_comma_separated_pairs_in_key_order() {
        let selector = BTreeMap::from([
            ("b".to_owned(), "2".to_owned()),
            ("app.kubernetes.io/name".to_owned(), "x".to_owned()),
        ]);
        assert_eq!(label_selector(&selector), "app.kubernetes.io/name=x,b=2");
    }
}
