//! PURE: read-only views of a Knative Service held as raw JSON, and the paths of its fields.
//!
//! The object stays a JSON tree ([`Node`]) so fields unknown to any Rust type survive every edit;
//! these helpers only read. Paths are token lists (JSON Pointer segments, unescaped).

use crate::json::{Map, Node};

use crate::keys;

/// `metadata.labels`.
pub const LABELS: &[&str] = &["metadata", "labels"];
/// `metadata.annotations`.
pub const ANNOTATIONS: &[&str] = &["metadata", "annotations"];
/// `spec.template.metadata.annotations`.
pub const TEMPLATE_ANNOTATIONS: &[&str] = &["spec", "template", "metadata", "annotations"];
/// `spec.template.spec.containers`.
pub const CONTAINERS: &[&str] = &["spec", "template", "spec", "containers"];
/// `spec.template.spec.volumes`.
pub const VOLUMES: &[&str] = &["spec", "template", "spec", "volumes"];

/// The value at `path`, walking maps by key and arrays by index (a read into a value the
/// review parser skimmed panics in a debug build: see `admission::skim`).
pub fn get<'d, 'a>(doc: &'d Node<'a>, path: &[&str]) -> Option<&'d Node<'a>> {
    path.iter().try_fold(doc, |node, token| node.child(token))
}

/// The string at `path`, if it is one.
pub fn get_str<'d>(doc: &'d Node, path: &[&str]) -> Option<&'d str> {
    get(doc, path).and_then(Node::as_str)
}

/// The map at `path` joined with `key`, e.g. a label's value.
pub fn entry<'d>(doc: &'d Node, map_path: &[&str], key: &str) -> Option<&'d str> {
    get(doc, map_path)
        .and_then(Node::as_object)
        .and_then(|m| m.get(key))
        .and_then(Node::as_str)
}

/// `metadata.name`, empty when unset.
pub fn name<'d>(doc: &'d Node) -> &'d str {
    get_str(doc, &["metadata", "name"]).unwrap_or_default()
}

/// `metadata.generateName`, empty when unset.
pub fn generate_name<'d>(doc: &'d Node) -> &'d str {
    get_str(doc, &["metadata", "generateName"]).unwrap_or_default()
}

/// `metadata.namespace`, empty when unset.
pub fn namespace<'d>(doc: &'d Node) -> &'d str {
    get_str(doc, &["metadata", "namespace"]).unwrap_or_default()
}

/// A managed app's identity: the values of the three identity labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub project: String,
    pub domain: String,
    pub name: String,
}

impl Identity {
    /// `project/domain/name`, the `flyte.org/app-id` annotation value.
    pub fn app_id(&self) -> String {
        format!("{}/{}/{}", self.project, self.domain, self.name)
    }
}

/// The identity labels in a fixed order, with their values where present.
pub fn identity_labels<'d>(doc: &'d Node) -> [(&'static str, Option<&'d str>); 3] {
    [
        keys::LABEL_PROJECT,
        keys::LABEL_DOMAIN,
        keys::LABEL_APP_NAME,
    ]
    .map(|key| (key, entry(doc, LABELS, key)))
}

/// The identity, when all three identity labels are present.
pub fn identity(doc: &Node) -> Option<Identity> {
    match identity_labels(doc) {
        [(_, Some(project)), (_, Some(domain)), (_, Some(name))] => Some(Identity {
            project: project.to_string(),
            domain: domain.to_string(),
            name: name.to_string(),
        }),
        _ => None,
    }
}

/// Whether the stop label asks for the app to be stopped.
pub fn stopped(doc: &Node) -> bool {
    is_stopped(|key| entry(doc, LABELS, key))
}

/// The one definition of a stopped app, given its labels (a lookup): the stop label says
/// `"true"`. Admission and the watch loop both ask this.
pub fn is_stopped<'d>(label: impl Fn(&str) -> Option<&'d str>) -> bool {
    label(keys::LABEL_APP_STOPPED) == Some("true")
}

/// The one definition of a managed app, given its labels and annotations (lookups): the
/// `flyte.org/app-managed` label decides when present (the platform's selector). Without it — an
/// app not admitted since the label replaced the annotation, or made behind the webhook's back —
/// the old annotation, the app-name label or the stop label mark it.
pub fn is_managed<'d>(
    label: impl Fn(&str) -> Option<&'d str>,
    annotation: impl Fn(&str) -> Option<&'d str>,
) -> bool {
    match label(keys::LABEL_APP_MANAGED) {
        Some(value) => value == "true",
        None => {
            annotation(keys::ANNOTATION_APP_MANAGED) == Some("true")
                || label(keys::LABEL_APP_NAME).is_some()
                || label(keys::LABEL_APP_STOPPED).is_some()
        }
    }
}

/// [`is_managed`] of a raw object.
pub fn managed(doc: &Node) -> bool {
    is_managed(
        |key| entry(doc, LABELS, key),
        |key| entry(doc, ANNOTATIONS, key),
    )
}

/// The containers of the revision template (empty when absent or malformed).
pub fn containers<'d, 'a>(doc: &'d Node<'a>) -> &'d [Node<'a>] {
    get(doc, CONTAINERS)
        .and_then(Node::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The index of the serving container: the one that declares a port, else the first.
pub fn serving_container(containers: &[Node]) -> Option<usize> {
    let declares_port = |c: &Node| {
        c.get("ports")
            .and_then(Node::as_array)
            .is_some_and(|p| !p.is_empty())
    };
    containers
        .iter()
        .position(declares_port)
        .or((!containers.is_empty()).then_some(0))
}

/// A container's `name`, empty when unset.
pub fn container_name<'d>(container: &'d Node) -> &'d str {
    container
        .get("name")
        .and_then(Node::as_str)
        .unwrap_or_default()
}

/// Where the item named `name` stands in the list at `path` (containers or volumes); an item
/// without a name is named `""`, as Knative's unnamed user container is.
pub fn position(doc: &Node, path: &[&str], name: &str) -> Option<usize> {
    get(doc, path)
        .and_then(Node::as_array)?
        .iter()
        .position(|item| container_name(item) == name)
}

/// The map at `path`, when it is one.
pub fn map<'d, 'a>(doc: &'d Node<'a>, path: &[&str]) -> Option<&'d Map<'a>> {
    get(doc, path).and_then(Node::as_object)
}
