//! `ksvc-webhook check --pre`: may the install go ahead? Run before installing, as `linkerd check
//! --pre` is: the API server's version, Knative's CRD, the installing user's right to create
//! every kind the install holds (SelfSubjectAccessReviews, as that user), the namespace free or
//! ours, cert-manager's CRDs when its certificates are chosen, and no webhook configuration of
//! ours there already.
//!
//! The conclusions are pure functions of what was read (tested below); the reads are thin and
//! use the user's credentials.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::Value;

use super::eval::{self, Fetched, HINT_READ, Outcome};
use super::{CheckArgs, TIMEOUT, get};
use crate::cluster::{call, errors};

/// The oldest Kubernetes minor supported: the oldest whose API the types we build with
/// (k8s-openapi 0.29, `earliest` = 1.33) describe.
pub const MIN_MINOR: u32 = 33;

/// A kind the install creates: `(kind, API group, resource, namespaced)`.
pub type Kind = (&'static str, &'static str, &'static str, bool);

/// The kinds of `manifests/base` (a test keeps the two equal).
pub const BASE_KINDS: &[Kind] = &[
    ("Namespace", "", "namespaces", false),
    ("ServiceAccount", "", "serviceaccounts", true),
    ("ConfigMap", "", "configmaps", true),
    ("Service", "", "services", true),
    ("Deployment", "apps", "deployments", true),
    (
        "PodDisruptionBudget",
        "policy",
        "poddisruptionbudgets",
        true,
    ),
    ("Role", "rbac.authorization.k8s.io", "roles", true),
    (
        "RoleBinding",
        "rbac.authorization.k8s.io",
        "rolebindings",
        true,
    ),
    (
        "ClusterRole",
        "rbac.authorization.k8s.io",
        "clusterroles",
        false,
    ),
    (
        "ClusterRoleBinding",
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        false,
    ),
    (
        "MutatingWebhookConfiguration",
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        false,
    ),
    (
        "ValidatingWebhookConfiguration",
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        false,
    ),
];

/// What the cert-manager overlay adds.
pub const CERT_MANAGER_KINDS: &[Kind] = &[
    ("Certificate", "cert-manager.io", "certificates", true),
    ("Issuer", "cert-manager.io", "issuers", true),
];

/// Every pre-install check, in order.
pub async fn checks(client: &Client, server: &str, args: &CheckArgs) -> Vec<Outcome> {
    let ns = args.namespace.as_str();
    let version = call::timed("get version", TIMEOUT, client.apiserver_version())
        .await
        .map(|v| (v.major, v.minor, v.git_version))
        .map_err(|e| errors::Error::from_call(e, server).to_string());
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let knative = get(crds.clone(), "services.serving.knative.dev", server).await;
    let namespace = get(Api::<Namespace>::all(client.clone()), ns, server).await;
    let mutating = get(
        Api::<MutatingWebhookConfiguration>::all(client.clone()),
        &args.webhook_config_name,
        server,
    )
    .await;
    let validating = get(
        Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        &args.guard_config_name,
        server,
    )
    .await;
    let mut kinds: Vec<Kind> = BASE_KINDS.to_vec();
    if args.cert_manager {
        kinds.extend_from_slice(CERT_MANAGER_KINDS);
    }
    let mut denied = Vec::new();
    for kind in &kinds {
        match may_create(client, server, kind, ns).await {
            Ok(true) => {}
            Ok(false) => denied.push(shown(kind, ns)),
            Err(why) => denied.push(format!("{} (cannot ask: {why})", shown(kind, ns))),
        }
    }
    let mut outcomes = vec![
        api_version(&version),
        eval::knative_crd(&knative),
        permissions(&denied, kinds.len()),
        namespace_free(&namespace, ns),
    ];
    if args.cert_manager {
        for name in ["certificates.cert-manager.io", "issuers.cert-manager.io"] {
            let crd = get(crds.clone(), name, server).await;
            outcomes.push(cert_manager_crd(&crd, name));
        }
    }
    outcomes.push(no_configuration_yet(&[
        (
            "MutatingWebhookConfiguration",
            &args.webhook_config_name,
            &mutating,
        ),
        (
            "ValidatingWebhookConfiguration",
            &args.guard_config_name,
            &validating,
        ),
    ]));
    outcomes
}

/// Whether the user may create `kind` (in `ns`, when namespaced).
async fn may_create(client: &Client, server: &str, kind: &Kind, ns: &str) -> Result<bool, String> {
    let (_, group, resource, namespaced) = *kind;
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                verb: Some("create".to_owned()),
                namespace: namespaced.then(|| ns.to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    call::timed(
        "review access",
        TIMEOUT,
        api.create(&PostParams::default(), &review),
    )
    .await
    .map(|r| r.status.is_some_and(|s| s.allowed))
    .map_err(|e| errors::Error::from_call(e, server).to_string())
}

fn shown(kind: &Kind, ns: &str) -> String {
    match kind.3 {
        true => format!("create {} in {ns}", kind.0),
        false => format!("create {}", kind.0),
    }
}

/// The API server's version, as `/version` gives it: `(major, minor, gitVersion)`.
pub type Version = Result<(String, String, String), String>;

/// The API server is 1.`MIN_MINOR` or newer.
pub fn api_version(version: &Version) -> Outcome {
    const CHECK: &str = "api-version";
    let (major, minor, git) = match version {
        Ok(v) => v,
        Err(why) => {
            return Outcome::fail(
                CHECK,
                format!("cannot read the API server's version: {why}"),
                HINT_READ,
            );
        }
    };
    // Managed clusters write minors such as "33+".
    let minor_number: Option<u32> = minor.trim_end_matches('+').parse().ok();
    match (major.as_str(), minor_number) {
        ("1", Some(n)) if n >= MIN_MINOR => Outcome::pass(
            CHECK,
            format!("the API server runs Kubernetes {git}, 1.{MIN_MINOR} or newer"),
        ),
        _ => Outcome::fail(
            CHECK,
            format!("the API server runs Kubernetes {git}; the oldest supported is 1.{MIN_MINOR}"),
            format!("upgrade the cluster to Kubernetes 1.{MIN_MINOR} or newer"),
        ),
    }
}

/// The user may create every kind the install holds.
pub fn permissions(denied: &[String], kinds: usize) -> Outcome {
    const CHECK: &str = "install-permissions";
    match denied.len() {
        0 => Outcome::pass(
            CHECK,
            format!("you may create all {kinds} kinds the install holds"),
        ),
        n => Outcome {
            details: denied.to_vec(),
            ..Outcome::fail(
                CHECK,
                format!("you may not create {n} of the {kinds} kinds the install holds:"),
                "install as a cluster admin, or have one grant these (kubectl auth can-i create KIND)",
            )
        },
    }
}

/// The namespace does not exist yet, or is labelled as the webhook's.
pub fn namespace_free(namespace: &Fetched<Value>, name: &str) -> Outcome {
    const CHECK: &str = "namespace";
    const LABEL: &str = "app.kubernetes.io/part-of";
    match namespace {
        Fetched::Missing => Outcome::pass(
            CHECK,
            format!("namespace {name} is free: the install creates it"),
        ),
        Fetched::Found(ns) if ns["metadata"]["labels"][LABEL] == "ksvc-webhook" => Outcome::pass(
            CHECK,
            format!("namespace {name} exists and is the webhook's ({LABEL}=ksvc-webhook)"),
        ),
        Fetched::Found(_) => Outcome::fail(
            CHECK,
            format!(
                "namespace {name} exists and is not the webhook's (no label {LABEL}=ksvc-webhook)"
            ),
            format!(
                "install into a namespace of its own (kustomize: namespace: …), or label {name} \
                 if it is meant for the webhook: kubectl label namespace {name} {LABEL}=ksvc-webhook"
            ),
        ),
        Fetched::Failed(why) => Outcome::fail(
            CHECK,
            format!("cannot read namespace {name}: {why}"),
            HINT_READ,
        ),
    }
}

/// One of cert-manager's CRDs is established.
pub fn cert_manager_crd(crd: &Fetched<Value>, name: &str) -> Outcome {
    const CHECK: &str = "cert-manager-crd";
    let established = |crd: &Value| {
        crd["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
    };
    match crd {
        Fetched::Found(crd) if established(crd) => {
            Outcome::pass(CHECK, format!("cert-manager's CRD {name} is established"))
        }
        Fetched::Found(_) | Fetched::Missing => Outcome::fail(
            CHECK,
            format!("cert-manager's CRD {name} is not installed (certificates: certManager)"),
            "install cert-manager first (https://cert-manager.io/docs/installation/), or let the \
             server manage its certificates (the default)",
        ),
        Fetched::Failed(why) => Outcome::fail(
            CHECK,
            format!("cannot read the CRD {name}: {why}"),
            HINT_READ,
        ),
    }
}

/// No webhook configuration of ours is there yet: `(kind, name, what was read)`.
pub fn no_configuration_yet(configs: &[(&str, &str, &Fetched<Value>)]) -> Outcome {
    const CHECK: &str = "no-previous-install";
    let mut there = Vec::new();
    for (kind, name, read) in configs {
        match read {
            Fetched::Found(_) => there.push(format!("{kind} {name}")),
            Fetched::Missing => {}
            Fetched::Failed(why) => {
                return Outcome::fail(
                    CHECK,
                    format!("cannot read {kind} {name}: {why}"),
                    HINT_READ,
                );
            }
        }
    }
    match there.as_slice() {
        [] => Outcome::pass(
            CHECK,
            "no webhook configuration of ksvc-webhook is there yet".to_owned(),
        ),
        found => Outcome {
            details: found.to_vec(),
            ..Outcome::fail(
                CHECK,
                "ksvc-webhook's webhook configurations are there already (an install exists):"
                    .to_owned(),
                "check that install with `ksvc-webhook check`; to install afresh, uninstall it \
                 first (kubectl delete -k manifests/)",
            )
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The kinds of the YAML files in `dir` of the repository.
    fn kinds_in(dir: &str) -> std::collections::BTreeSet<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut kinds = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap() == "kustomization.yaml" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines() {
                if let Some(kind) = line.strip_prefix("kind: ") {
                    kinds.insert(kind.trim().to_owned());
                }
            }
        }
        kinds
    }

    /// `check --pre` asks for every kind of the manifests, and no other.
    #[test]
    fn the_kinds_are_those_of_the_manifests() {
        let base: std::collections::BTreeSet<String> =
            BASE_KINDS.iter().map(|k| k.0.to_owned()).collect();
        assert_eq!(base, kinds_in("manifests/base"));
        let mut with_certs = base.clone();
        with_certs.extend(CERT_MANAGER_KINDS.iter().map(|k| k.0.to_owned()));
        assert!(kinds_in("manifests/overlays/cert-manager").is_subset(&with_certs));
    }

    #[test]
    fn the_version_must_be_recent_enough() {
        let version = |minor: &str| Ok(("1".to_owned(), minor.to_owned(), format!("v1.{minor}")));
        assert!(api_version(&version("33")).ok);
        assert!(api_version(&version("35+")).ok);
        let old = api_version(&version("29"));
        assert!(
            !old.ok && old.message.contains("the oldest supported is 1.33"),
            "{old:?}"
        );
        assert!(!api_version(&Err("refused".to_owned())).ok);
    }

    #[test]
    fn the_namespace_is_free_or_ours() {
        assert!(namespace_free(&Fetched::Missing, "ksvc-system").ok);
        let ours = json!({"metadata": {"labels": {"app.kubernetes.io/part-of": "ksvc-webhook"}}});
        assert!(namespace_free(&Fetched::Found(ours), "ksvc-system").ok);
        let theirs = namespace_free(&Fetched::Found(json!({"metadata": {}})), "ksvc-system");
        assert!(!theirs.ok && theirs.hint.is_some(), "{theirs:?}");
    }

    #[test]
    fn a_previous_install_and_missing_rights_are_listed() {
        let found = Fetched::Found(json!({}));
        let there = no_configuration_yet(&[
            ("MutatingWebhookConfiguration", "m", &found),
            ("ValidatingWebhookConfiguration", "v", &Fetched::Missing),
        ]);
        assert_eq!(
            (there.ok, there.details.as_slice()),
            (false, &["MutatingWebhookConfiguration m".to_owned()][..])
        );
        let denied = permissions(&["create Namespace".to_owned()], 12);
        assert_eq!(
            denied.message,
            "you may not create 1 of the 12 kinds the install holds:"
        );
        assert!(permissions(&[], 12).ok);
    }
}
