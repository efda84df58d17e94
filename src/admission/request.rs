//! PURE: the request side of a review — an `admission.k8s.io/v1` AdmissionReview's bytes
//! decoded into a [`Request`], with the fields the decision reads.
//!
//! The body is read by the skimming parser with the table in [`super::skim`] (what admission may
//! read), or by `serde_json` when that parser refuses it. Never decides or answers.

use serde_json::Value;

use super::skim;
use super::writers::UserInfo;
use crate::json::Node;
use crate::json::parse::{self, Skim};

/// The API version of every review this webhook reads and writes.
pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// The request part of an AdmissionReview: the fields the decision reads. Decoded from a review,
/// the objects borrow from its bytes and are skimmed as the [`skim`] table says.
#[derive(Debug, Clone, Default)]
pub struct Request<'a> {
    pub uid: String,
    pub kind: Option<GroupVersionKind>,
    pub sub_resource: Option<String>,
    pub operation: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub object: Option<Node<'a>>,
    /// The stored object, on UPDATE (and DELETE). Decoded from a review, its labels, the
    /// webhook's own annotations and its spec are parsed as `object`'s are: the rules read the
    /// labels, a stop the running state, an unchanged spec keeps its SHA.
    pub old_object: Option<Node<'a>>,
    pub dry_run: Option<bool>,
    /// Who sent the request (`request.userInfo`; empty when absent).
    pub user_info: UserInfo,
}

impl Request<'static> {
    /// A request to admit `object`, a Knative Service, by `operation` (`CREATE`, `UPDATE`) in
    /// `namespace`, as kube-apiserver would send it: what the offline CLI and the tests decide on.
    /// The objects are read from their JSON text by the server's parser and [`skim`] table, so
    /// a rule decides here on exactly what it would see in a review.
    pub fn kservice(
        uid: &str,
        operation: &str,
        namespace: &str,
        object: Value,
        old_object: Option<Value>,
    ) -> Self {
        Self {
            uid: uid.to_string(),
            kind: Some(GroupVersionKind {
                group: "serving.knative.dev".into(),
                version: "v1".into(),
                kind: "Service".into(),
            }),
            operation: operation.to_string(),
            namespace: Some(namespace.to_string()),
            object: Some(skimmed(object, &skim::OBJECT, "request.object")),
            old_object: old_object
                .filter(|o| !o.is_null())
                .map(|o| skimmed(o, &skim::OLD_OBJECT, "request.oldObject")),
            ..Self::default()
        }
    }
}

impl Request<'_> {
    /// The same request owning its objects' strings and text.
    pub fn into_owned(self) -> Request<'static> {
        Request {
            object: self.object.map(Node::into_owned),
            old_object: self.old_object.map(Node::into_owned),
            uid: self.uid,
            kind: self.kind,
            sub_resource: self.sub_resource,
            operation: self.operation,
            namespace: self.namespace,
            name: self.name,
            dry_run: self.dry_run,
            user_info: self.user_info,
        }
    }
}

/// `value` as the review parser reads it at `at` with `skim`, owning its text; what that parser
/// refuses is read by `serde_json`, as [`decode`] does.
fn skimmed(value: Value, skim: &Skim, at: &str) -> Node<'static> {
    let text = value.to_string();
    match parse::parse(&text, skim, at) {
        Ok(node) => node.into_owned(),
        Err(parse::Refused) => Node::from_json(value),
    }
}

/// `request.kind` of a review.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupVersionKind {
    pub group: String,
    pub version: String,
    pub kind: String,
}

/// A body that is not an AdmissionReview: the server answers 400.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("body is not an admission.k8s.io/v1 AdmissionReview: {0}")]
    Decode(String),
}

/// Which JSON reader decodes a review body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// The skimming parser with the [`skim`] table, and `serde_json` for what it refuses: the
    /// server's.
    Skim,
    /// `serde_json` alone, into a full tree: the reference the fuzz target and the properties
    /// hold the server's reader to.
    SerdeJson,
}

/// The longest `request.uid` accepted (Kubernetes uids are 36 bytes).
pub const MAX_UID: usize = 128;

/// Decode an AdmissionReview and check it is one this webhook answers.
pub fn decode(body: &[u8]) -> Result<Request<'_>, ReviewError> {
    decode_with(body, Reader::Skim)
}

/// The most JSON values (keys counted) a review body may hold. Either reader builds a node for
/// each value it reads in full, about 40 times the bytes of `[0,0,…]`: the cap keeps one
/// decision's tree near 24 MiB whatever the body holds. A KService review holds a few thousand
/// values; the 200 KB review of the load benchmark, 13,500: the cap is ten times that. Only
/// bodies over twice this many bytes can hold more, so smaller ones are never counted.
pub const MAX_VALUES: usize = 128 * 1024;

/// [`decode`] with the reader given.
pub fn decode_with(body: &[u8], reader: Reader) -> Result<Request<'_>, ReviewError> {
    if body.len() > 2 * MAX_VALUES {
        let values = values(body);
        if values > MAX_VALUES {
            return Err(ReviewError::Decode(format!(
                "the review holds {values} JSON values, more than the {MAX_VALUES} this webhook \
                 reads; kube-apiserver's reviews of a KService hold a few thousand"
            )));
        }
    }
    // The fast parser refuses what it does not take; serde_json then reads it or says why not.
    let fast = match reader {
        Reader::Skim => parse::parse_bytes(body, &skim::REVIEW).ok(),
        Reader::SerdeJson => None,
    };
    let mut review = match fast {
        Some(review) => review,
        None => {
            serde_json::from_slice::<Node>(body).map_err(|e| ReviewError::Decode(e.to_string()))?
        }
    };
    let api_version = review.get("apiVersion").and_then(Node::as_str);
    let kind = review.get("kind").and_then(Node::as_str);
    if api_version != Some(REVIEW_API_VERSION) || kind != Some("AdmissionReview") {
        return Err(ReviewError::Decode(format!(
            "apiVersion {:?} and kind {:?} (want {REVIEW_API_VERSION:?} and \"AdmissionReview\")",
            api_version.unwrap_or_default(),
            kind.unwrap_or_default()
        )));
    }
    let Some(mut request) = review.get_mut("request").map(std::mem::take) else {
        return Err(ReviewError::Decode("request is missing".into()));
    };
    // A string field of the map at `path`: absent, or a string.
    let text = |node: &Node, path: &str, key: &str| -> Result<Option<String>, ReviewError> {
        match node.get(key) {
            None | Some(Node::Null) => Ok(None),
            Some(value) => value
                .as_str()
                .map(|s| Some(s.to_string()))
                .ok_or_else(|| ReviewError::Decode(format!("{path}.{key} is not a string"))),
        }
    };
    let kind = match request.get("kind") {
        None | Some(Node::Null) => None,
        Some(gvk) if gvk.is_object() => Some(GroupVersionKind {
            group: text(gvk, "request.kind", "group")?.unwrap_or_default(),
            version: text(gvk, "request.kind", "version")?.unwrap_or_default(),
            kind: text(gvk, "request.kind", "kind")?.unwrap_or_default(),
        }),
        Some(_) => return Err(ReviewError::Decode("request.kind is not an object".into())),
    };
    let dry_run = match request.get("dryRun") {
        None | Some(Node::Null) => None,
        Some(Node::Bool(b)) => Some(*b),
        Some(_) => {
            return Err(ReviewError::Decode(
                "request.dryRun is not a boolean".into(),
            ));
        }
    };
    let uid = text(&request, "request", "uid")?.unwrap_or_default();
    if uid.is_empty() {
        return Err(ReviewError::Decode("request.uid is missing".into()));
    }
    // Echoed in the answer and logged: kube-apiserver's uids are 36 bytes.
    if uid.len() > MAX_UID {
        return Err(ReviewError::Decode(format!(
            "request.uid is {} bytes, more than {MAX_UID}; kube-apiserver sends 36",
            uid.len()
        )));
    }
    let mut object_at = |key: &str| {
        request
            .get_mut(key)
            .map(std::mem::take)
            .filter(|o| !o.is_null())
    };
    let (object, old_object) = (object_at("object"), object_at("oldObject"));
    for (at, node) in [
        ("request.object", &object),
        ("request.oldObject", &old_object),
    ] {
        if let Some(node) = node {
            within_counts(node, at)?;
        }
    }
    let user_info = user_info(request.get("userInfo"))?;
    Ok(Request {
        uid,
        kind,
        sub_resource: text(&request, "request", "subResource")?,
        operation: text(&request, "request", "operation")?.unwrap_or_default(),
        namespace: text(&request, "request", "namespace")?,
        name: text(&request, "request", "name")?,
        object,
        old_object,
        dry_run,
        user_info,
    })
}

/// About how many values and keys `body` holds: the commas, colons and opening brackets outside
/// strings. Every value but the first follows one of them.
fn values(body: &[u8]) -> usize {
    let (mut count, mut in_string, mut escaped) = (0, false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' | b':' | b'[' | b'{' => count += 1,
            _ => {}
        }
    }
    count
}

/// The most containers a review's pod template may list. Knative runs one serving container and
/// a few sidecars; beyond this the lists are not an app but a load on every rule that walks them.
pub const MAX_CONTAINERS: usize = 64;
/// The most volumes a pod template may list (several per container at most).
pub const MAX_VOLUMES: usize = 256;
/// The most env entries one container may list: three times the 2,700 the 200 KB reviews of the
/// benchmarks carry, far more than any app sets.
pub const MAX_ENV: usize = 8192;

/// Refuse an object whose lists run far past what Knative and kube-apiserver ever send, before
/// any rule walks them; the error names the field, its count and the limit.
fn within_counts(object: &Node, at: &str) -> Result<(), ReviewError> {
    let pod = ["spec", "template", "spec"]
        .iter()
        .try_fold(object, |node, key| node.get(key));
    let Some(pod) = pod.filter(|pod| pod.is_object()) else {
        return Ok(());
    };
    let list = |node: &Node, key: &str| node.get(key).and_then(Node::as_array).map(Vec::len);
    let over = |path: String, count: usize, limit: usize| {
        ReviewError::Decode(format!(
            "{path} has {count} entries, more than the {limit} this webhook accepts"
        ))
    };
    let base = format!("{at}.spec.template.spec");
    let containers = list(pod, "containers").unwrap_or(0);
    if containers > MAX_CONTAINERS {
        return Err(over(
            format!("{base}.containers"),
            containers,
            MAX_CONTAINERS,
        ));
    }
    let volumes = list(pod, "volumes").unwrap_or(0);
    if volumes > MAX_VOLUMES {
        return Err(over(format!("{base}.volumes"), volumes, MAX_VOLUMES));
    }
    let each = pod.get("containers").and_then(Node::as_array);
    for (i, container) in each.into_iter().flatten().enumerate() {
        let env = match container.is_object() {
            true => list(container, "env").unwrap_or(0),
            false => 0,
        };
        if env > MAX_ENV {
            return Err(over(format!("{base}.containers[{i}].env"), env, MAX_ENV));
        }
    }
    Ok(())
}

/// `request.userInfo`: small, so read with serde from the text the parser left raw. A value
/// that does not fit is described as `serde_json` describes it as a tree, with no line and
/// column (they would count from the start of `userInfo`, not of the body), so both readers
/// refuse it in the same words.
fn user_info(node: Option<&Node>) -> Result<UserInfo, ReviewError> {
    let read = match node {
        None | Some(Node::Null) => return Ok(UserInfo::default()),
        Some(Node::Raw { text, .. }) => serde_json::from_str(text)
            .or_else(|_| serde_json::from_value(serde_json::from_str::<Value>(text)?)),
        Some(node) => serde_json::from_value(node.to_json()),
    };
    read.map_err(|e| ReviewError::Decode(format!("request.userInfo: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_counted_outside_strings() {
        assert_eq!(values(br#"{"a":[1,2,{"b":"x,:[{\"]"}]}"#), 7);
        assert_eq!(values(b"[]"), 1);
    }

    #[test]
    fn a_body_of_more_values_than_any_review_holds_is_refused_before_it_is_read() {
        let zeros = vec!["0"; MAX_VALUES].join(",");
        let pod = format!(r#"{{"containers":[{{"image":"i","ports":[{zeros}]}}]}}"#);
        let body = format!(
            r#"{{"apiVersion":"{REVIEW_API_VERSION}","kind":"AdmissionReview","request":{{"uid":"u","object":{{"spec":{{"template":{{"spec":{pod}}}}}}}}}}}"#
        );
        for reader in [Reader::Skim, Reader::SerdeJson] {
            let err = decode_with(body.as_bytes(), reader)
                .unwrap_err()
                .to_string();
            assert!(err.contains("more than the 131072"), "{err}");
        }
        // A body as large, of long strings, is read.
        let long = "x".repeat(body.len());
        let body = format!(
            r#"{{"apiVersion":"{REVIEW_API_VERSION}","kind":"AdmissionReview","request":{{"uid":"u","name":"{long}"}}}}"#
        );
        assert!(decode(body.as_bytes()).is_ok());
    }

    fn review_with(pod: Value) -> Vec<u8> {
        let object =
            serde_json::json!({"metadata": {"name": "a"}, "spec": {"template": {"spec": pod}}});
        let review = serde_json::json!({"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "UPDATE", "object": object.clone(),
                        "oldObject": object}});
        serde_json::to_vec(&review).unwrap()
    }

    #[test]
    fn lists_far_past_knatives_are_refused_naming_the_field_count_and_limit() {
        let container = |env: usize| serde_json::json!({"image": "i", "env": vec![serde_json::json!({"name": "A"}); env]});
        let at = "request.object.spec.template.spec";
        let cases = [
            (
                serde_json::json!({"containers": vec![container(0); MAX_CONTAINERS]}),
                None,
            ),
            (
                serde_json::json!({"containers": vec![1; MAX_CONTAINERS + 1]}),
                Some(format!("{at}.containers has 65 entries, more than the 64")),
            ),
            (
                serde_json::json!({"volumes": vec![serde_json::json!({}); MAX_VOLUMES]}),
                None,
            ),
            (
                serde_json::json!({"volumes": vec![serde_json::json!({}); MAX_VOLUMES + 1]}),
                Some(format!("{at}.volumes has 257 entries, more than the 256")),
            ),
            (
                serde_json::json!({"containers": [container(MAX_ENV)]}),
                None,
            ),
            (
                serde_json::json!({"containers": [container(1), container(MAX_ENV + 1)]}),
                Some(format!(
                    "{at}.containers[1].env has 8193 entries, more than the 8192"
                )),
            ),
        ];
        for (pod, want) in cases {
            let body = review_with(pod);
            for reader in [Reader::Skim, Reader::SerdeJson] {
                let decoded = decode_with(&body, reader);
                match &want {
                    None => assert!(decoded.is_ok(), "{reader:?}: {:?}", decoded.err()),
                    Some(want) => {
                        let err = decoded.unwrap_err().to_string();
                        assert!(err.contains(want.as_str()), "{reader:?}: {err}");
                    }
                }
            }
        }
    }
}
