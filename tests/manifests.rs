//! The install manifests agree with the code: the registration points at the Service and the
//! server's port and path, the RBAC grants exactly the API calls the modules declare, the webhook
//! runs after Knative's, and the pod is hardened.
//!
//! The kustomizations are rendered with `kubectl kustomize` (as `make manifests-check` does);
//! the RBAC and memory checks also run on the Helm chart (`support::helm`).
//! Without kubectl the base is rendered here from its `resources:` list (it has no patches), and
//! the overlay test says it was skipped.

// A test crate: its helpers (outside `#[test]` functions) may panic on a broken fixture too.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use clap::Parser;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, PolicyRule, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use ksvc_webhook::certmgr::CertArgs;
use ksvc_webhook::cli::serve::CertMode;
use ksvc_webhook::cluster::rbac::ApiCall;
use ksvc_webhook::keys;
use ksvc_webhook::server::role::Role;
use serde_json::Value;

/// The two parts, by Deployment (and ServiceAccount, Service, PodDisruptionBudget) name.
const ADMISSION: &str = "ksvc-webhook";
const CONTROLLER: &str = "ksvc-webhook-controller";
const PARTS: [(&str, Role); 2] = [(ADMISSION, Role::Admission), (CONTROLLER, Role::Controller)];

/// Resources that must only be granted in the webhook's own namespace (a Role, never a
/// ClusterRole).
const OWN_NAMESPACE_ONLY: &[&str] = &["secrets", "leases"];

/// `serve`'s defaults: it listens on 8443 and answers admission on `/mutate`.
/// At merge, take these from the server's config defaults.
const SERVER_PORT: i32 = 8443;
const SERVER_PATH: &str = "/mutate";

/// Knative's own mutating webhook configuration: ours must be called after it.
const KNATIVE_MUTATING_CONFIG: &str = "webhook.serving.knative.dev";

struct Rendered(Vec<Value>);

impl Rendered {
    fn of(dir: &str) -> Option<Self> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
            .args(["kustomize", dir])
            .current_dir(root)
            .output();
        let yaml = match out {
            Ok(out) => {
                assert!(
                    out.status.success(),
                    "kubectl kustomize {dir}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8(out.stdout).unwrap()
            }
            Err(_) if dir == "manifests" => {
                eprintln!("kubectl not found: rendering the base's resources: list here");
                render_resources(&root.join("manifests/base"))
            }
            Err(_) => return None,
        };
        let docs = ksvc_webhook::manifest_text::parse(yaml.as_bytes())
            .unwrap()
            .items;
        Some(Self(docs))
    }

    fn base() -> Self {
        Self::of("manifests").unwrap()
    }

    /// The Helm chart rendered with `values` (`None` without helm, outside CI).
    fn chart(values: &[&str]) -> Option<Self> {
        let helm = support::helm::helm()?;
        Some(Self(support::helm::template(&helm, values).unwrap()))
    }

    /// What the checks that hold for every install run on: the kustomize base and, where helm
    /// is, the chart with default values (tests/chart.rs diffs the two; these checks also name
    /// what broke).
    fn installs() -> Vec<(&'static str, Self)> {
        let mut out = vec![("manifests/", Self::base())];
        out.extend(Self::chart(&[]).map(|c| ("the chart", c)));
        out
    }

    fn all(&self, kind: &str) -> Vec<&Value> {
        self.0.iter().filter(|d| d["kind"] == kind).collect()
    }

    /// The object of `kind` called `name`.
    fn named<T: serde::de::DeserializeOwned>(&self, kind: &str, name: &str) -> T {
        let found: Vec<_> = self
            .all(kind)
            .into_iter()
            .filter(|d| d["metadata"]["name"] == name)
            .collect();
        assert_eq!(found.len(), 1, "exactly one {kind} {name}");
        serde_json::from_value(found[0].clone()).unwrap()
    }

    fn one<T: serde::de::DeserializeOwned>(&self, kind: &str) -> T {
        let found = self.all(kind);
        assert_eq!(found.len(), 1, "exactly one {kind}");
        serde_json::from_value(found[0].clone()).unwrap()
    }

    /// Every rule bound to the webhook's ServiceAccount, with the binding's namespace (`None`
    /// for a ClusterRole).
    fn rules(&self, sa: &str, ns: &str) -> Vec<(Option<String>, PolicyRule)> {
        let bound = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
            subjects.iter().flatten().any(|s| {
                s.kind == "ServiceAccount" && s.name == sa && s.namespace.as_deref() == Some(ns)
            })
        };
        let mut refs = Vec::new();
        for b in self.all("ClusterRoleBinding") {
            let b: ClusterRoleBinding = serde_json::from_value(b.clone()).unwrap();
            if bound(&b.subjects) {
                refs.push((b.role_ref.kind, b.role_ref.name, None));
            }
        }
        for b in self.all("RoleBinding") {
            let b: RoleBinding = serde_json::from_value(b.clone()).unwrap();
            if bound(&b.subjects) {
                refs.push((b.role_ref.kind, b.role_ref.name, b.metadata.namespace));
            }
        }
        let mut rules = Vec::new();
        for (kind, name, binding_ns) in refs {
            if let Some(builtin) = builtin_rules(&kind, &name) {
                rules.extend(builtin.into_iter().map(|r| (None, r)));
                continue;
            }
            let role = self
                .0
                .iter()
                .find(|d| d["kind"] == kind.as_str() && d["metadata"]["name"] == name.as_str())
                .unwrap_or_else(|| panic!("{kind} {name} is bound but missing"));
            let scope =
                binding_ns.or_else(|| role["metadata"]["namespace"].as_str().map(String::from));
            let scope = if kind == "ClusterRole" { None } else { scope };
            for r in role["rules"].as_array().into_iter().flatten() {
                rules.push((scope.clone(), serde_json::from_value(r.clone()).unwrap()));
            }
        }
        rules
    }
}

/// The rules of a built-in ClusterRole the manifests bind (`ksvc_webhook::cluster::rbac`), one per call.
fn builtin_rules(kind: &str, name: &str) -> Option<Vec<PolicyRule>> {
    let (_, calls) = ksvc_webhook::cluster::rbac::BUILTIN_CLUSTER_ROLES
        .iter()
        .find(|(builtin, _)| kind == "ClusterRole" && *builtin == name)?;
    let rule = |c: &ApiCall| PolicyRule {
        api_groups: Some(vec![c.group.into()]),
        resources: Some(vec![c.resource.into()]),
        verbs: vec![c.verb.into()],
        ..PolicyRule::default()
    };
    Some(calls.iter().map(rule).collect())
}

/// The base without kubectl: its `resources:` files concatenated.
fn render_resources(dir: &Path) -> String {
    let k: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap())
            .unwrap();
    k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| std::fs::read_to_string(dir.join(f.as_str().unwrap())).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

fn cert_defaults() -> CertArgs {
    #[derive(Parser)]
    struct Only {
        #[command(flatten)]
        certs: CertArgs,
    }
    Only::try_parse_from(["serve"]).unwrap().certs
}

/// The labels of the Deployment's pods.
fn pod_labels(d: &Deployment) -> std::collections::BTreeMap<String, String> {
    let metadata = d.spec.template.metadata.as_ref().unwrap();
    metadata.labels.clone().unwrap()
}

fn container(d: &Deployment) -> Container {
    let spec = d.spec.template.spec.as_ref().unwrap();
    assert_eq!(spec.containers.len(), 1);
    spec.containers[0].clone()
}

fn arg<'a>(c: &'a Container, flag: &str) -> Option<&'a str> {
    let prefix = format!("{flag}=");
    c.args
        .iter()
        .flatten()
        .find_map(|a| a.strip_prefix(prefix.as_str()))
}

/// The mount of the directory `--tls-cert` points into, and the pod volume behind it.
fn cert_volume<'a>(
    pod: &'a k8s_openapi::api::core::v1::PodSpec,
    c: &'a Container,
) -> (
    &'a k8s_openapi::api::core::v1::VolumeMount,
    &'a k8s_openapi::api::core::v1::Volume,
) {
    let dir = Path::new(arg(c, "--tls-cert").unwrap()).parent().unwrap();
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|v| Path::new(&v.mount_path) == dir)
        .unwrap();
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .unwrap();
    (mount, volume)
}

fn env<'a>(c: &'a Container, name: &str) -> Option<&'a k8s_openapi::api::core::v1::EnvVar> {
    c.env.iter().flatten().find(|e| e.name == name)
}

#[test]
fn the_webhook_calls_the_service_on_the_servers_port_and_path() {
    let m = Rendered::base();
    let config: MutatingWebhookConfiguration = m.one("MutatingWebhookConfiguration");
    let svc: Service = m.named("Service", ADMISSION);
    let deploy: Deployment = m.named("Deployment", ADMISSION);
    let c = container(&deploy);
    let hooks = config.webhooks.as_ref().unwrap();
    assert_eq!(hooks.len(), 1);
    let target = hooks[0].client_config.service.as_ref().unwrap();
    assert_eq!(Some(target.name.as_str()), svc.metadata.name.as_deref());
    assert_eq!(
        Some(target.namespace.as_str()),
        svc.metadata.namespace.as_deref()
    );
    assert_eq!(target.path.as_deref(), Some(SERVER_PATH));
    let ports = svc.spec.as_ref().unwrap().ports.as_ref().unwrap();
    let port = ports
        .iter()
        .find(|p| Some(p.port) == target.port)
        .expect("the webhook's port on the Service");
    assert_eq!(port.port, 443);
    // The Service forwards to the container port, by name, which is where serve listens.
    let IntOrString::String(target_name) = port.target_port.clone().unwrap() else {
        panic!("targetPort by name")
    };
    let cport = c
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(target_name.as_str()))
        .unwrap();
    assert_eq!(cport.container_port, SERVER_PORT);
    assert_eq!(target_name, "https");
    let listen = arg(&c, "--listen").unwrap();
    assert_eq!(listen.rsplit_once(':').unwrap().1, SERVER_PORT.to_string());
    // The Service selects the pods, and lives where the Deployment runs.
    let labels = pod_labels(&deploy);
    for (k, v) in svc.spec.as_ref().unwrap().selector.as_ref().unwrap() {
        assert_eq!(labels.get(k), Some(v), "Service selector {k}");
    }
    assert_eq!(deploy.metadata.namespace, svc.metadata.namespace);
}

#[test]
fn the_registration_is_safe_and_ordered_after_knative() {
    let m = Rendered::base();
    let config: MutatingWebhookConfiguration = m.one("MutatingWebhookConfiguration");
    let name = config.metadata.name.clone().unwrap();
    // kube-apiserver sorts mutating configurations by name, byte-wise (Go string order).
    assert!(
        name.as_bytes() > KNATIVE_MUTATING_CONFIG.as_bytes(),
        "{name} must sort after {KNATIVE_MUTATING_CONFIG}"
    );
    assert_eq!(
        name,
        cert_defaults().webhook_config_name,
        "certmgr patches this configuration"
    );
    let hook = &config.webhooks.as_ref().unwrap()[0];
    assert_eq!(hook.name, name, "kubectl prints this name in rejections");
    assert_eq!(hook.admission_review_versions, ["v1"]);
    assert_eq!(hook.side_effects, "None");
    assert!(
        matches!(hook.timeout_seconds, Some(1..=30)),
        "explicit timeout within 1..=30 s"
    );
    assert_eq!(hook.reinvocation_policy.as_deref(), Some("IfNeeded"));
    assert_eq!(hook.match_policy.as_deref(), Some("Equivalent"));
    // Ignore until a replica answered; the leader then writes --failure-policy (Fail).
    assert_eq!(hook.failure_policy.as_deref(), Some("Ignore"));
    let deploy: Deployment = m.named("Deployment", ADMISSION);
    let c = container(&deploy);
    let args = serve_args(&c);
    assert_eq!(
        args.certs.failure_policy,
        ksvc_webhook::certmgr::FailurePolicy::Fail
    );
    let self_managed = env(&c, "KSVC_WEBHOOK_SELF_MANAGED_CERTS").and_then(|e| e.value.as_deref());
    assert_eq!(
        self_managed,
        Some("true"),
        "only self-managed certificates switch it"
    );
    assert!(
        hook.client_config.ca_bundle.is_none(),
        "the leader writes caBundle; apply must not own it"
    );
    assert!(hook.client_config.url.is_none());
    let rules = hook.rules.as_ref().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].api_groups.as_deref(),
        Some(&["serving.knative.dev".to_string()][..])
    );
    assert_eq!(
        rules[0].api_versions.as_deref(),
        Some(&["v1".to_string()][..])
    );
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["services".to_string()][..])
    );
    let ops: BTreeSet<_> = rules[0]
        .operations
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    assert_eq!(ops, BTreeSet::from(["CREATE", "UPDATE"]));
}

#[test]
fn the_namespace_selector_excludes_system_namespaces_and_honours_the_opt_out() {
    let m = Rendered::base();
    let config: MutatingWebhookConfiguration = m.one("MutatingWebhookConfiguration");
    let deploy: Deployment = m.named("Deployment", ADMISSION);
    let own = deploy.metadata.namespace.clone().unwrap();
    let selector = config.webhooks.as_ref().unwrap()[0]
        .namespace_selector
        .clone()
        .unwrap();
    assert!(selector.match_labels.is_none());
    let exprs = selector.match_expressions.unwrap();
    let by_key = |key: &str| {
        exprs
            .iter()
            .find(|e| e.key == key)
            .unwrap_or_else(|| panic!("{key}"))
    };
    let names = by_key("kubernetes.io/metadata.name");
    assert_eq!(names.operator, "NotIn");
    let excluded: BTreeSet<_> = names.values.iter().flatten().map(String::as_str).collect();
    for ns in ["kube-system", "knative-serving", own.as_str()] {
        assert!(excluded.contains(ns), "{ns} must be excluded");
    }
    // The drift report calls a KService there `excluded` by the same list.
    let reported = ksvc_webhook::admission::drift::EXCLUDED_NAMESPACES;
    assert_eq!(excluded, reported.into_iter().collect());
    let opt_out = by_key(keys::LABEL_NAMESPACE_INJECT);
    assert_eq!(
        opt_out.operator, "NotIn",
        "NotIn matches namespaces without the label"
    );
    assert_eq!(
        opt_out.values.as_deref(),
        Some(&[keys::NAMESPACE_INJECT_DISABLED.to_string()][..])
    );
    assert_eq!(exprs.len(), 2);
}

#[test]
fn rbac_grants_exactly_the_declared_api_calls() {
    for (install, m) in Rendered::installs() {
        eprintln!("checking {install}");
        rbac_is_exactly_the_declared_calls(&m, CertMode::SelfManaged);
    }
    let cert_manager = [
        Rendered::of("manifests/overlays/cert-manager").map(|m| ("the cert-manager overlay", m)),
        Rendered::chart(&["--set", "certificates.mode=certManager"])
            .map(|m| ("the chart with certManager", m)),
    ];
    for (install, m) in cert_manager.into_iter().flatten() {
        eprintln!("checking {install}");
        rbac_is_exactly_the_declared_calls(&m, CertMode::CertManager);
    }
}

/// Each part's account is granted exactly the calls of its role, with the certificates the
/// admission part's flags and environment select (`mode`).
fn rbac_is_exactly_the_declared_calls(m: &Rendered, mode: CertMode) {
    let mut accounts = BTreeSet::new();
    for (name, role) in PARTS {
        let deploy: Deployment = m.named("Deployment", name);
        let c = container(&deploy);
        assert_eq!(serve_args(&c).role, role, "{name}");
        if role.admits() {
            let flag = |n: &str| env(&c, n).and_then(|e| e.value.clone());
            let cert_manager = flag("KSVC_WEBHOOK_CERT_MANAGER").as_deref() == Some("true");
            assert_eq!(cert_manager, mode == CertMode::CertManager, "{name}");
        }
        let sa = part_is_granted_exactly_its_calls(m, &deploy, role, mode);
        assert!(accounts.insert(sa), "{name}: one ServiceAccount per part");
    }
}

/// Every call a part of `role` makes is granted to its ServiceAccount, and nothing else;
/// returns the account.
fn part_is_granted_exactly_its_calls(
    m: &Rendered,
    deploy: &Deployment,
    role: Role,
    mode: CertMode,
) -> String {
    let ns = deploy.metadata.namespace.clone().unwrap();
    let pod = deploy.spec.template.spec.as_ref().unwrap();
    let sa = pod.service_account_name.clone().unwrap();
    let mut granted = BTreeSet::new();
    for (scope, rule) in m.rules(&sa, &ns) {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                assert_ne!(resource, "*", "no wildcards");
                if OWN_NAMESPACE_ONLY.contains(&resource.as_str()) {
                    assert_eq!(
                        scope.as_deref(),
                        Some(ns.as_str()),
                        "{resource} only in {ns}"
                    );
                }
                for verb in &rule.verbs {
                    assert_ne!(verb, "*", "no wildcards");
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
        // A list or watch is authorized by name only with a `metadata.name` field selector,
        // which only the failurePolicy switch's watch of its own configuration sends.
        let names = rule.resource_names.clone().unwrap_or_default();
        let by_name_selector = rule
            .resources
            .iter()
            .flatten()
            .all(|r| r == "mutatingwebhookconfigurations");
        if !names.is_empty() {
            assert!(
                !rule
                    .verbs
                    .iter()
                    .any(|v| v == "create" || (!by_name_selector && (v == "list" || v == "watch"))),
                "resourceNames cannot restrict create/list/watch: {rule:?}"
            );
        }
    }
    let declared: BTreeSet<_> = ksvc_webhook::cli::serve::api_calls(role, mode)
        .iter()
        .flat_map(|calls| calls.iter())
        .map(|c| {
            (
                c.group.to_string(),
                c.resource.to_string(),
                c.verb.to_string(),
            )
        })
        .collect();
    let missing: Vec<_> = declared.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&declared).collect();
    assert!(
        missing.is_empty(),
        "RBAC lacks calls the code makes: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "RBAC grants calls no module declares: {extra:?}"
    );
    sa
}

#[test]
fn certificate_rbac_is_limited_to_its_own_objects_by_name() {
    let m = Rendered::base();
    let defaults = cert_defaults();
    let rules = m.rules("ksvc-webhook", "ksvc-system");
    for (_, rule) in &rules {
        let resources = rule.resources.clone().unwrap_or_default();
        let names = rule.resource_names.clone().unwrap_or_default();
        let only_create = rule.verbs == ["create"];
        if resources.iter().any(|r| r == "secrets") && !only_create {
            assert_eq!(
                names,
                std::slice::from_ref(&defaults.cert_secret),
                "{rule:?}"
            );
        }
        if resources
            .iter()
            .any(|r| r == "mutatingwebhookconfigurations")
        {
            assert_eq!(
                names,
                std::slice::from_ref(&defaults.webhook_config_name),
                "{rule:?}"
            );
        }
    }
    // The Deployment passes the same names the rules allow.
    let deploy: Deployment = m.named("Deployment", ADMISSION);
    let c = container(&deploy);
    let value = |n: &str| env(&c, n).and_then(|e| e.value.clone());
    assert_eq!(
        value("KSVC_WEBHOOK_CERT_SECRET"),
        Some(defaults.cert_secret)
    );
    assert_eq!(
        value("KSVC_WEBHOOK_WEBHOOK_CONFIG_NAME"),
        Some(defaults.webhook_config_name)
    );
    let svc: Service = m.named("Service", ADMISSION);
    assert_eq!(value("KSVC_WEBHOOK_SERVICE_NAME"), svc.metadata.name);
    let from_field = env(&c, "KSVC_WEBHOOK_POD_NAMESPACE")
        .unwrap()
        .value_from
        .as_ref()
        .unwrap();
    assert_eq!(
        from_field.field_ref.as_ref().unwrap().field_path,
        "metadata.namespace"
    );
}

#[test]
fn the_lease_rbac_reaches_only_the_loops_own_lease() {
    #[derive(Parser)]
    struct Only {
        #[command(flatten)]
        lease: ksvc_webhook::cluster::election::LeaseArgs,
    }
    let default = Only::try_parse_from(["serve"]).unwrap().lease.lease_name;
    let m = Rendered::base();
    let mut leases = BTreeSet::new();
    for (name, _) in PARTS {
        let deploy: Deployment = m.named("Deployment", name);
        let c = container(&deploy);
        let lease = arg(&c, "--lease-name").map_or(default.clone(), String::from);
        let pod = deploy.spec.template.spec.as_ref().unwrap();
        let sa = pod.service_account_name.clone().unwrap();
        part_reaches_only_its_lease(&m, &sa, &lease);
        assert!(
            leases.insert(lease),
            "{name}: the parts never share a Lease"
        );
    }
    // The controller keeps the all-in-one's Lease: through an upgrade from one Deployment to
    // two, the loop's writes still have one leader.
    let controller: Deployment = m.named("Deployment", CONTROLLER);
    assert_eq!(arg(&container(&controller), "--lease-name"), None);
}

fn part_reaches_only_its_lease(m: &Rendered, sa: &str, lease: &str) {
    let lease = lease.to_owned();
    let mut lease_rules = 0;
    for (scope, rule) in m.rules(sa, "ksvc-system") {
        if !rule.resources.iter().flatten().any(|r| r == "leases") {
            continue;
        }
        lease_rules += 1;
        assert_eq!(scope.as_deref(), Some("ksvc-system"), "{rule:?}");
        // Only `create` may go without a name: the API server cannot authorize it by name.
        if rule.verbs != ["create"] {
            assert_eq!(
                rule.resource_names.as_deref(),
                Some(std::slice::from_ref(&lease)),
                "{rule:?}"
            );
        }
    }
    assert_eq!(lease_rules, 2, "get/update by name, and create");
}

#[test]
fn the_optional_network_policy_guards_the_webhook_port_of_its_pods() {
    let Some(m) = Rendered::of("manifests/overlays/network-policy") else {
        eprintln!("kubectl not found: network-policy overlay not rendered (skipped)");
        return;
    };
    let deploy: Deployment = m.named("Deployment", ADMISSION);
    let pod_labels = pod_labels(&deploy);
    let policy: NetworkPolicy = m.one("NetworkPolicy");
    assert_eq!(policy.metadata.namespace, deploy.metadata.namespace);
    let spec = policy.spec.unwrap();
    for (key, value) in spec.pod_selector.clone().unwrap().match_labels.unwrap() {
        assert_eq!(
            pod_labels.get(&key),
            Some(&value),
            "selects the webhook's pods"
        );
    }
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_string()][..])
    );
    let ingress = spec.ingress.unwrap();
    assert_eq!(ingress.len(), 1);
    let ports = ingress[0].ports.clone().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].port, Some(IntOrString::Int(SERVER_PORT)));
    // The overlay patched the control plane's range over the documentation placeholder.
    let from = ingress[0].from.clone().unwrap();
    let cidr = from[0].ip_block.as_ref().unwrap().cidr.clone();
    assert_eq!(cidr, "10.0.0.0/16");
    // The base stays free of it: the policy needs the cluster's own range to be safe.
    assert!(Rendered::base().all("NetworkPolicy").is_empty());
}

#[test]
fn the_monitoring_component_scrapes_the_pods_and_ships_its_dashboard() {
    let Some(m) = Rendered::of("manifests/overlays/monitoring") else {
        eprintln!("kubectl not found: monitoring overlay not rendered (skipped)");
        return;
    };
    let deploy: Deployment = m.named("Deployment", ADMISSION);
    let monitor = m.all("PodMonitor")[0].clone();
    // Both parts' pods: the loop's metrics are the controller's.
    for (name, _) in PARTS {
        let pod_labels = pod_labels(&m.named("Deployment", name));
        for (key, value) in monitor["spec"]["selector"]["matchLabels"]
            .as_object()
            .unwrap()
        {
            assert_eq!(
                pod_labels.get(key).map(String::as_str),
                value.as_str(),
                "{name}: {key}"
            );
        }
    }
    let port = &monitor["spec"]["podMetricsEndpoints"][0]["port"];
    let c = container(&deploy);
    assert!(
        c.ports
            .iter()
            .flatten()
            .any(|p| p.name.as_deref() == port.as_str())
    );
    assert_eq!(m.all("PrometheusRule").len(), 1);
    let dashboard = m
        .all("ConfigMap")
        .into_iter()
        .map(|v| serde_json::from_value::<ConfigMap>(v.clone()).unwrap())
        .find(|c| c.metadata.name.as_deref() == Some("ksvc-webhook-dashboard"))
        .unwrap();
    let labels = dashboard.metadata.labels.unwrap();
    assert_eq!(labels["grafana_dashboard"], "1");
    let json: Value = serde_json::from_str(&dashboard.data.unwrap()["ksvc-webhook.json"]).unwrap();
    assert_eq!(json["uid"], "ksvc-webhook");
    // The base install stays free of the Prometheus Operator's CRDs.
    let base = Rendered::base();
    assert!(
        base.0
            .iter()
            .all(|d| d["apiVersion"] != "monitoring.coreos.com/v1")
    );
}

#[test]
fn the_pod_is_hardened_and_drains_before_it_is_killed() {
    let m = Rendered::base();
    let deploy: Deployment = m.named("Deployment", ADMISSION);
    let spec = &deploy.spec;
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.as_ref().unwrap();
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(
        psc.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    let anti = pod
        .affinity
        .as_ref()
        .unwrap()
        .pod_anti_affinity
        .as_ref()
        .unwrap();
    assert!(
        anti.preferred_during_scheduling_ignored_during_execution
            .is_some()
            || anti
                .required_during_scheduling_ignored_during_execution
                .is_some()
    );

    let c = container(&deploy);
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_string()][..])
    );
    let res = c.resources.as_ref().unwrap();
    for key in ["cpu", "memory"] {
        assert!(
            res.requests.as_ref().unwrap().contains_key(key),
            "request {key}"
        );
        assert!(
            res.limits.as_ref().unwrap().contains_key(key),
            "limit {key}"
        );
    }
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .clone()
            .unwrap()
    };
    assert_eq!(probe_path(&c.readiness_probe), "/readyz");
    assert_eq!(probe_path(&c.liveness_probe), "/healthz");
    // Issue 28: the probes go to the plain listener, never to the admission port an attacker
    // can fill.
    let listen = arg(&c, "--metrics-listen").expect("the probes' own listener");
    let probe_port: i32 = listen.rsplit(':').next().unwrap().parse().unwrap();
    for probe in [&c.readiness_probe, &c.liveness_probe] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.scheme.as_deref(), Some("HTTP"));
        let port = match &get.port {
            IntOrString::Int(n) => *n,
            IntOrString::String(name) => {
                let ports = c.ports.iter().flatten();
                let named = ports
                    .clone()
                    .find(|p| p.name.as_deref() == Some(name.as_str()));
                named.unwrap().container_port
            }
        };
        assert_eq!(port, probe_port);
        assert_ne!(port, SERVER_PORT);
    }
    for name in ["KSVC_WEBHOOK_POD_NAME", "KSVC_WEBHOOK_POD_NAMESPACE"] {
        assert!(
            env(&c, name)
                .unwrap()
                .value_from
                .as_ref()
                .unwrap()
                .field_ref
                .is_some(),
            "{name}"
        );
    }
    // The grace period outlasts the drain period.
    let drain = arg(&c, "--drain-period").unwrap();
    let drain: i64 = drain.strip_suffix('s').unwrap().parse().unwrap();
    assert!(pod.termination_grace_period_seconds.unwrap() > drain + 10);
    // Certificates go to a writable emptyDir where --tls-cert and --tls-key point.
    let cert = arg(&c, "--tls-cert").unwrap();
    let dir = Path::new(cert).parent().unwrap();
    assert_eq!(Path::new(arg(&c, "--tls-key").unwrap()).parent(), Some(dir));
    let (mount, volume) = cert_volume(pod, &c);
    assert!(volume.empty_dir.is_some() && mount.read_only != Some(true));
    // The PDB keeps one replica through drains and selects these pods.
    let pdb: PodDisruptionBudget = m.named("PodDisruptionBudget", ADMISSION);
    let pdb_spec = pdb.spec.unwrap();
    assert_eq!(pdb_spec.min_available, Some(IntOrString::Int(1)));
    let labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    for (k, v) in pdb_spec.selector.unwrap().match_labels.unwrap() {
        assert_eq!(labels.get(&k), Some(&v));
    }
}

#[test]
fn the_sidecar_catalogue_is_mounted_and_parses() {
    let m = Rendered::base();
    let cm: ConfigMap = m.one("ConfigMap");
    let text = cm.data.as_ref().unwrap().get("sidecars.yaml").unwrap();
    let catalogue = ksvc_webhook::admission::sidecars::Catalogue::parse(text).unwrap();
    assert!(catalogue.is_empty(), "the base ships an empty catalogue");
    let deploy: Deployment = m.named("Deployment", ADMISSION);
    let args = container(&deploy).args.unwrap_or_default();
    assert!(
        args.iter()
            .any(|a| a == "--sidecars=/etc/ksvc-webhook/sidecars.yaml"),
        "the server reads the mounted catalogue: {args:?}"
    );
    let pod = deploy.spec.template.spec.unwrap();
    let volume = pod.volumes.iter().flatten().find(|v| {
        v.config_map
            .as_ref()
            .is_some_and(|c| Some(&c.name) == cm.metadata.name.as_ref())
    });
    assert!(volume.is_some(), "the catalogue ConfigMap is mounted");
}

#[test]
fn the_cert_manager_overlay_turns_self_management_off() {
    let Some(m) = Rendered::of("manifests/overlays/cert-manager") else {
        eprintln!("kubectl not found: cert-manager overlay not rendered (skipped)");
        return;
    };
    let deploy: Deployment = m.named("Deployment", ADMISSION);
    let c = container(&deploy);
    assert_eq!(
        env(&c, "KSVC_WEBHOOK_SELF_MANAGED_CERTS")
            .unwrap()
            .value
            .as_deref(),
        Some("false")
    );
    assert_eq!(
        env(&c, "KSVC_WEBHOOK_CERT_MANAGER").and_then(|e| e.value.as_deref()),
        Some("true"),
        "the server knows its certificates are cert-manager's and still switches the policy"
    );
    // Certificates come from the serving Certificate's Secret, mounted where serve reads them.
    let serving = m
        .all("Certificate")
        .into_iter()
        .find(|c| c["spec"]["isCA"] != true)
        .unwrap()
        .clone();
    let secret_name = serving["spec"]["secretName"].as_str().unwrap();
    let pod = deploy.spec.template.spec.clone().unwrap();
    let (_, volume) = cert_volume(&pod, &c);
    assert!(volume.empty_dir.is_none());
    assert_eq!(
        volume.secret.as_ref().unwrap().secret_name.as_deref(),
        Some(secret_name)
    );
    // cainjector fills the bundle from that Certificate.
    let config: MutatingWebhookConfiguration = m.one("MutatingWebhookConfiguration");
    let inject =
        config.metadata.annotations.as_ref().unwrap()["cert-manager.io/inject-ca-from"].clone();
    let ns = serving["metadata"]["namespace"].as_str().unwrap();
    let name = serving["metadata"]["name"].as_str().unwrap();
    assert_eq!(inject, format!("{ns}/{name}"));
    // Registered Ignore, as the base: the admission leader switches it once cainjector published
    // the CA and its own listener answered with it.
    let hook = &config.webhooks.as_ref().unwrap()[0];
    assert_eq!(hook.failure_policy.as_deref(), Some("Ignore"));
    let args = serve_args(&c);
    assert_eq!(
        args.certs.failure_policy,
        ksvc_webhook::certmgr::FailurePolicy::Fail
    );
    // The serving certificate names the Service, as the self-managed one does.
    let svc: Service = m.named("Service", ADMISSION);
    let svc_name = svc.metadata.name.unwrap();
    let dns: Vec<String> = serving["spec"]["dnsNames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let want: Vec<String> = ksvc_webhook::certmgr::pki::service_sans(&svc_name, ns)
        .into_iter()
        .filter(|n| n.contains(svc_name.as_str()))
        .collect();
    assert_eq!(dns, want);
    // Of the certificate RBAC only the switch's is left: no Secret, and its one webhook
    // configuration by name (rbac_grants_exactly_the_declared_api_calls checks the verbs).
    let defaults = cert_defaults();
    for (_, rule) in m.rules("ksvc-webhook", ns) {
        let resources = rule.resources.clone().unwrap_or_default();
        assert!(!resources.iter().any(|r| r == "secrets"), "{rule:?}");
        if resources
            .iter()
            .any(|r| r.ends_with("webhookconfigurations"))
        {
            assert_eq!(resources, ["mutatingwebhookconfigurations"], "{rule:?}");
            assert_eq!(
                rule.resource_names.as_deref(),
                Some(std::slice::from_ref(&defaults.webhook_config_name)),
                "{rule:?}"
            );
        }
    }
}

/// The revision guard: its own registration, on the same Service and port as the
/// mutating webhook, for DELETE of Knative revisions only, never blocking a delete when down.
#[test]
fn the_revision_guard_is_registered_for_revision_deletes_and_fails_open() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let m = Rendered::base();
    let mutating: MutatingWebhookConfiguration = m.one("MutatingWebhookConfiguration");
    let guard: ValidatingWebhookConfiguration = m.one("ValidatingWebhookConfiguration");
    let hooks = guard.webhooks.as_ref().unwrap();
    assert_eq!(hooks.len(), 1);
    let hook = &hooks[0];
    let target = hook.client_config.service.as_ref().unwrap();
    let mutating_target = mutating.webhooks.as_ref().unwrap()[0]
        .client_config
        .service
        .clone()
        .unwrap();
    assert_eq!(target.name, mutating_target.name);
    assert_eq!(target.namespace, mutating_target.namespace);
    assert_eq!(target.port, mutating_target.port);
    assert_eq!(
        target.path.as_deref(),
        Some(ksvc_webhook::admission::guard::PATH)
    );
    assert_eq!(hook.failure_policy.as_deref(), Some("Ignore"));
    assert_eq!(hook.side_effects, "None");
    assert_eq!(hook.admission_review_versions, vec!["v1".to_string()]);
    let rules = hook.rules.as_ref().unwrap();
    assert_eq!(rules.len(), 1);
    let rule = &rules[0];
    assert_eq!(
        rule.api_groups.as_deref(),
        Some(&["serving.knative.dev".to_string()][..])
    );
    assert_eq!(rule.api_versions.as_deref(), Some(&["v1".to_string()][..]));
    assert_eq!(
        rule.resources.as_deref(),
        Some(&["revisions".to_string()][..])
    );
    assert_eq!(
        rule.operations.as_deref(),
        Some(&["DELETE".to_string()][..])
    );
    // The same system namespaces and opt-out as the mutating webhook.
    assert_eq!(
        hook.namespace_selector,
        mutating.webhooks.as_ref().unwrap()[0].namespace_selector
    );
    // With cert-manager, cainjector fills this bundle too.
    let Some(m) = Rendered::of("manifests/overlays/cert-manager") else {
        eprintln!("kubectl not found: cert-manager overlay not rendered (skipped)");
        return;
    };
    let guard: ValidatingWebhookConfiguration = m.one("ValidatingWebhookConfiguration");
    let mutating: MutatingWebhookConfiguration = m.one("MutatingWebhookConfiguration");
    let inject = |a: Option<&std::collections::BTreeMap<String, String>>| {
        a.and_then(|a| a.get("cert-manager.io/inject-ca-from").cloned())
    };
    assert!(inject(guard.metadata.annotations.as_ref()).is_some());
    assert_eq!(
        inject(guard.metadata.annotations.as_ref()),
        inject(mutating.metadata.annotations.as_ref())
    );
}

/// `serve`'s flags as the Deployment passes them.
fn serve_args(c: &Container) -> ksvc_webhook::cli::serve::ServeArgs {
    use ksvc_webhook::cli::{Cli, Command};
    let mut argv = vec!["ksvc-webhook".to_owned(), "serve".to_owned()];
    argv.extend(c.args.iter().flatten().cloned());
    let Command::Serve(args) = Cli::try_parse_from(argv).unwrap().command else {
        unreachable!("parsed serve")
    };
    *args
}

/// Nothing a client sends to the admission port can take the pod to its memory limit
/// (docs/reliability.md, "Memory arithmetic"), a stalled upload is cut no later than
/// kube-apiserver gives up on it, and the bounded shutdown fits in the grace period.
#[test]
fn the_memory_limit_and_the_deadlines_follow_the_arithmetic() {
    for (install, m) in Rendered::installs() {
        eprintln!("checking {install}");
        memory_and_deadlines_follow_the_arithmetic(&m);
    }
}

fn memory_and_deadlines_follow_the_arithmetic(m: &Rendered) {
    for (name, role) in PARTS {
        eprintln!("checking {name}");
        part_follows_the_arithmetic(m, name, role);
    }
}

/// The least number of apps each part's default limit holds through a re-list: the admission
/// part's projection far more than any cluster Knative is run at, the controller's cache at
/// least 3,000 apps (the size Red Hat supports Knative at).
fn least_apps(role: Role) -> u64 {
    match role {
        Role::Admission => 50_000,
        Role::All | Role::Controller => 3_000,
    }
}

fn part_follows_the_arithmetic(m: &Rendered, name: &str, role: Role) {
    use ksvc_webhook::server::memory::Arithmetic;
    let deploy: Deployment = m.named("Deployment", name);
    let c = container(&deploy);
    let args = serve_args(&c);
    let options = ksvc_webhook::cli::serve::options(&args);
    let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
    let limit = ksvc_webhook::flags::parse_bytes(&limits["memory"].0).unwrap() as u64;
    let arithmetic = Arithmetic::of_role(&options, role);
    assert!(
        arithmetic.total() <= limit,
        "the memory limit {limit} is below the arithmetic's {} ({arithmetic:?})",
        arithmetic.total()
    );
    let apps = arithmetic.supported_apps(limit);
    assert!(
        apps >= least_apps(role),
        "the {limit} limit holds {apps} apps at a re-list"
    );
    let perf =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/performance.md"))
            .unwrap();
    let said = format!("{apps} apps");
    assert!(
        perf.contains(&said),
        "docs/performance.md must state the supported number ({said}) for {name}'s default limit"
    );

    let config: MutatingWebhookConfiguration = m.one("MutatingWebhookConfiguration");
    for hook in config.webhooks.unwrap() {
        let timeout = u64::try_from(hook.timeout_seconds.unwrap()).unwrap();
        assert!(
            options.limits.request_timeout.as_secs() <= timeout,
            "{}",
            hook.name
        );
    }

    // After SIGTERM: the drain, then the connections' bound beside the Lease release (one API
    // call, bounded by the API timeout plus a second).
    let release = args.client.api_timeout + std::time::Duration::from_secs(1);
    let shutdown = options.drain_period + options.shutdown_timeout.max(release);
    let pod = deploy.spec.template.spec.unwrap();
    let grace = pod.termination_grace_period_seconds.unwrap();
    assert!(
        shutdown.as_secs() + 5 <= u64::try_from(grace).unwrap(),
        "{shutdown:?} of shutdown does not fit in {grace}s with 5s to spare"
    );
}
