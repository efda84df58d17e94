//! Every label, annotation, env-var name and field manager this project reads or writes.
//!
//! The `flyte.org/` keys follow the Flyte app platform, so KServices made by that platform and by
//! plain `kubectl` interoperate. No other module spells a key as a string literal.

/// Label: the app's project (managed-app identity).
pub const LABEL_PROJECT: &str = "flyte.org/project";
/// Label: the app's domain (managed-app identity).
pub const LABEL_DOMAIN: &str = "flyte.org/domain";
/// Label: the app's name (managed-app identity).
pub const LABEL_APP_NAME: &str = "flyte.org/app-name";
/// Label: `"true"` stops the app, `"false"` or absent runs it.
pub const LABEL_APP_STOPPED: &str = "flyte.org/app-stopped";

/// Label: `"true"` on managed apps; the platform selects its KServices by it.
pub const LABEL_APP_MANAGED: &str = "flyte.org/app-managed";
/// The annotation of the same key that older releases wrote instead of [`LABEL_APP_MANAGED`];
/// admission removes it, the watch loop still reads it on apps not admitted since.
pub const ANNOTATION_APP_MANAGED: &str = "flyte.org/app-managed";
/// Annotation: `project/domain/name` on managed apps.
pub const ANNOTATION_APP_ID: &str = "flyte.org/app-id";
/// Annotation: 16 hex characters of SHA-256 over the canonical JSON of the user's spec.
pub const ANNOTATION_SPEC_SHA: &str = "flyte.org/spec-sha";
/// Annotation: what the Service had before a stop changed it, so a start restores it exactly.
pub const ANNOTATION_STOP_RESTORE: &str = "flyte.org/stop-restore";

/// Knative's visibility label; `cluster-local` keeps the route off the external gateway.
pub const LABEL_VISIBILITY: &str = "networking.knative.dev/visibility";
/// The value of [`LABEL_VISIBILITY`] that makes a Service cluster-local.
pub const VISIBILITY_CLUSTER_LOCAL: &str = "cluster-local";
/// Template annotation: the lowest number of pods Knative keeps.
pub const ANNOTATION_MIN_SCALE: &str = "autoscaling.knative.dev/min-scale";
/// Template annotation: the number of pods a new revision starts with.
pub const ANNOTATION_INITIAL_SCALE: &str = "autoscaling.knative.dev/initial-scale";
/// Template annotation: the highest number of pods Knative scales to (0 = unlimited).
pub const ANNOTATION_MAX_SCALE: &str = "autoscaling.knative.dev/max-scale";
/// Revision annotation: `"true"` keeps a revision from ever being garbage-collected.
pub const ANNOTATION_NO_GC: &str = "serving.knative.dev/no-gc";
/// Label Knative puts on revisions and pods: the owning Service's name.
pub const LABEL_KNATIVE_SERVICE: &str = "serving.knative.dev/service";
/// Label Knative's route controller puts on revisions: whether a route sends them traffic.
pub const LABEL_ROUTING_STATE: &str = "serving.knative.dev/routingState";
/// The value of [`LABEL_ROUTING_STATE`] on a revision some route sends traffic to.
pub const ROUTING_STATE_ACTIVE: &str = "active";

/// Annotation Knative's webhook sets on every Service write: the username of the last writer.
/// The drift report decides as if that writer wrote the stored object again.
pub const ANNOTATION_LAST_MODIFIER: &str = "serving.knative.dev/lastModifier";

/// Annotation `kubectl apply` leaves: the whole object as last applied.
pub const ANNOTATION_LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The env var apps format with `app_fqdn` to call another app of the same project and domain.
pub const ENV_INTERNAL_APP_ENDPOINT_PATTERN: &str = "INTERNAL_APP_ENDPOINT_PATTERN";

/// The field manager of every write the watch loop makes.
pub const FIELD_MANAGER: &str = "ksvc-webhook";

/// Namespace label: `disabled` keeps the webhook from intercepting KServices in that namespace.
pub const LABEL_NAMESPACE_INJECT: &str = "ksvc-webhook.flyte.org/inject";
/// The value of [`LABEL_NAMESPACE_INJECT`] that opts a namespace out.
pub const NAMESPACE_INJECT_DISABLED: &str = "disabled";
/// Namespace label: `enabled` lets `--readmit=labelled` write drifted KServices there again.
pub const LABEL_NAMESPACE_READMIT: &str = "ksvc-webhook.flyte.org/readmit";
/// The value of [`LABEL_NAMESPACE_READMIT`] that opts a namespace in.
pub const NAMESPACE_READMIT_ENABLED: &str = "enabled";
/// Annotation on the Service: [`READMIT_NEVER`] keeps re-admission from ever writing it.
pub const ANNOTATION_READMIT: &str = "ksvc-webhook.flyte.org/readmit";
/// The value of [`ANNOTATION_READMIT`] that opts a KService out.
pub const READMIT_NEVER: &str = "never";
/// Annotation on the Service: when re-admission last wrote it again (RFC 3339); the write itself.
pub const ANNOTATION_READMITTED: &str = "ksvc-webhook.flyte.org/readmitted";
/// Revision annotation: `"true"` lets the revision guard allow a DELETE it would refuse (an
/// administrator's override, set on the revision before deleting it).
pub const ANNOTATION_ALLOW_DELETE: &str = "ksvc-webhook.flyte.org/allow-delete";
/// Certificate Secret annotation: when the staged next CA entered the CA bundle (RFC 3339).
pub const ANNOTATION_CA_NEXT_SINCE: &str = "ksvc-webhook.flyte.org/ca-next-since";
/// Certificate Secret annotation: when the previous CA stopped signing (RFC 3339); it stays in
/// the CA bundle for the overlap period after that.
pub const ANNOTATION_CA_PREVIOUS_SINCE: &str = "ksvc-webhook.flyte.org/ca-previous-since";
/// Annotation on the Service: the sidecar templates to inject, comma-separated, on top of the
/// catalogue's defaults; [`SIDECAR_INJECT_NONE`] among them opts out of the defaults.
pub const ANNOTATION_SIDECAR_INJECT: &str = "sidecar.flyte.org/inject";
/// The word in [`ANNOTATION_SIDECAR_INJECT`] that opts out of the catalogue's default sidecars.
pub const SIDECAR_INJECT_NONE: &str = "none";
/// Annotation on the Service: what the webhook injected (templates, their hashes, container and
/// volume names), so a later admission replaces or removes exactly that and nothing else.
pub const ANNOTATION_SIDECAR_STATUS: &str = "sidecar.flyte.org/status";

/// Whether `key` is a `metadata.annotations` key of this webhook (`flyte.org/…`,
/// `sidecar.flyte.org/…`, `ksvc-webhook.flyte.org/…`): the only annotation values admission
/// parses.
pub fn is_own_annotation(key: &str) -> bool {
    [
        "flyte.org/",
        "sidecar.flyte.org/",
        "ksvc-webhook.flyte.org/",
    ]
    .iter()
    .any(|prefix| key.starts_with(prefix))
}

/// Annotation cert-manager's cainjector reads on a webhook configuration: the Certificate whose
/// CA it writes into the `caBundle` (`check` takes it for an install with cert-manager).
pub const CERT_MANAGER_INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";
