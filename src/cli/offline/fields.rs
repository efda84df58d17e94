//! PURE: the fields of a KService that Kubernetes and Knative do not know, as kubectl's strict
//! field validation names them (`unknown field "metadata.lables"`): in `metadata`, `spec`, the
//! template and its `metadata` and `spec`, where a typo silently changes what admission does (a
//! misspelt `labels` turns a managed app into a plain one). Deeper levels (a container's fields)
//! are Knative's to check. Warns only: never changes the object.

use serde_json::Value;

/// The fields of an ObjectMeta.
const OBJECT_META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

const SERVICE: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];
const SERVICE_SPEC: &[&str] = &["template", "traffic"];
const TEMPLATE: &[&str] = &["metadata", "spec"];

/// The fields of a Revision's spec in Knative Serving's Service CRD (`spec.template.spec`).
const REVISION_SPEC: &[&str] = &[
    "affinity",
    "automountServiceAccountToken",
    "containerConcurrency",
    "containers",
    "dnsConfig",
    "dnsPolicy",
    "enableServiceLinks",
    "hostAliases",
    "hostIPC",
    "hostNetwork",
    "hostPID",
    "idleTimeoutSeconds",
    "imagePullSecrets",
    "initContainers",
    "nodeSelector",
    "priorityClassName",
    "responseStartTimeoutSeconds",
    "runtimeClassName",
    "schedulerName",
    "securityContext",
    "serviceAccountName",
    "shareProcessNamespace",
    "timeoutSeconds",
    "tolerations",
    "topologySpreadConstraints",
    "volumes",
];

/// The unknown fields of a KService, as dotted paths, in document order by level.
pub fn unknown_fields(service: &Value) -> Vec<String> {
    let levels: [(&str, &[&str]); 6] = [
        ("", SERVICE),
        ("metadata", OBJECT_META),
        ("spec", SERVICE_SPEC),
        ("spec.template", TEMPLATE),
        ("spec.template.metadata", OBJECT_META),
        ("spec.template.spec", REVISION_SPEC),
    ];
    let mut unknown = Vec::new();
    for (path, known) in levels {
        let pointer = match path {
            "" => String::new(),
            path => format!("/{}", path.replace('.', "/")),
        };
        let Some(Value::Object(map)) = service.pointer(&pointer) else {
            continue;
        };
        for key in map.keys().filter(|k| !known.contains(&k.as_str())) {
            unknown.push(match path {
                "" => key.clone(),
                path => format!("{path}.{key}"),
            });
        }
    }
    unknown
}

/// What a document that is not a `serving.knative.dev/v1` Service is, for a person.
pub fn what_it_is(doc: &Value) -> String {
    let text = |key: &str| doc.get(key).and_then(Value::as_str).unwrap_or("");
    match (text("apiVersion"), text("kind")) {
        ("", "") => "a document without apiVersion and kind".to_owned(),
        (_, "AdmissionReview") => {
            "an AdmissionReview (give it to `ksvc-webhook review`)".to_owned()
        }
        (api, "") => format!("apiVersion {api} without a kind"),
        ("", kind) => format!("kind {kind} without an apiVersion"),
        (api, kind) => format!("kind {kind} ({api})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn misspelt_fields_are_named_where_they_are() {
        let service = json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": {"name": "a", "lables": {"flyte.org/project": "p"}},
            "spec": {"template": {
                "metadata": {"anotations": {}},
                "spec": {"containers": [{"image": "x", "imagee": "y"}], "containerz": []}
            }, "trafic": []}
        });
        assert_eq!(
            unknown_fields(&service),
            [
                "metadata.lables",
                "spec.trafic",
                "spec.template.metadata.anotations",
                "spec.template.spec.containerz"
            ]
        );
        let clean = json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": {"name": "a", "labels": {}}, "spec": {"template": {"spec": {"containers": []}}}});
        assert!(unknown_fields(&clean).is_empty());
    }

    #[test]
    fn other_documents_are_described() {
        assert_eq!(
            what_it_is(&json!({"apiVersion": "serving.knative.dev/v1", "kind": "Servce"})),
            "kind Servce (serving.knative.dev/v1)"
        );
        assert!(what_it_is(&json!({"kind": "AdmissionReview"})).starts_with("an AdmissionReview"));
    }
}
