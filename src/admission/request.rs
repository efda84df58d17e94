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

/// [`decode`] with the reader given.
pub fn decode_with(body: &[u8], reader: Reader) -> Result<Request<'_>, ReviewError> {
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
