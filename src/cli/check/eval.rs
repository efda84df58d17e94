//! PURE: what `ksvc-webhook check` concludes from what it read, one outcome per check, each
//! with what to do when it fails. Time comes in as an argument; nothing here calls the cluster.
//!
//! The trust check is the one kube-apiserver makes: a real webpki chain verification of the
//! serving certificate in the Secret against each webhook's `caBundle`, for the name the API
//! server dials (`SERVICE.NAMESPACE.svc`), at `now`.

use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use crate::admission::sidecars::Catalogue;
use crate::certmgr::pki;

/// What a read found.
#[derive(Debug, Clone, PartialEq)]
pub enum Fetched<T> {
    Found(T),
    Missing,
    /// The read failed; the message as kubectl words it.
    Failed(String),
}

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// A short stable id (`knative-crd`, `mutating-webhook`, …).
    pub check: &'static str,
    pub ok: bool,
    pub message: String,
    /// The items the message counts (the missing permissions), one a line.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// What to do about a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Outcome {
    pub(super) fn pass(check: &'static str, message: String) -> Self {
        Self {
            check,
            ok: true,
            message,
            details: Vec::new(),
            hint: None,
        }
    }

    pub(super) fn fail(check: &'static str, message: String, hint: impl Into<String>) -> Self {
        Self {
            check,
            ok: false,
            message,
            details: Vec::new(),
            hint: Some(hint.into()),
        }
    }
}

/// Where the install lives, for messages and the trust check.
#[derive(Debug, Clone)]
pub struct Install<'a> {
    pub namespace: &'a str,
    pub service: &'a str,
    pub secret: &'a str,
}

/// Knative's Service CRD is established and serves `v1`.
pub fn knative_crd(crd: &Fetched<Value>) -> Outcome {
    const CHECK: &str = "knative-crd";
    const NAME: &str = "services.serving.knative.dev";
    let crd = match crd {
        Fetched::Found(crd) => crd,
        Fetched::Missing => {
            return Outcome::fail(
                CHECK,
                format!("the CRD {NAME} is not installed"),
                "install Knative Serving",
            );
        }
        Fetched::Failed(why) => {
            return Outcome::fail(
                CHECK,
                format!("cannot read the CRD {NAME}: {why}"),
                HINT_READ,
            );
        }
    };
    let established = conditions(crd).any(|c| c["type"] == "Established" && c["status"] == "True");
    let serves_v1 = crd["spec"]["versions"]
        .as_array()
        .is_some_and(|v| v.iter().any(|v| v["name"] == "v1" && v["served"] == true));
    match (established, serves_v1) {
        (true, true) => Outcome::pass(CHECK, format!("Knative Services are served ({NAME} v1)")),
        _ => Outcome::fail(
            CHECK,
            format!("the CRD {NAME} is not established or does not serve v1"),
            "check Knative Serving's installation: kubectl get crd services.serving.knative.dev -o yaml",
        ),
    }
}

pub(super) const HINT_READ: &str =
    "run check with credentials that may read it (--context, --kubeconfig)";

fn conditions(obj: &Value) -> impl Iterator<Item = &Value> {
    obj["status"]["conditions"].as_array().into_iter().flatten()
}

/// A webhook configuration exists and every webhook's `caBundle` trusts the serving certificate.
pub fn webhook_config(
    check: &'static str,
    kind: &str,
    name: &str,
    config: &Fetched<Value>,
    secret: &Fetched<Value>,
    install: &Install,
    now: OffsetDateTime,
) -> Outcome {
    let config = match config {
        Fetched::Found(config) => config,
        Fetched::Missing => {
            return Outcome::fail(
                check,
                format!("{kind} {name} does not exist"),
                "install the manifests: kubectl apply -k manifests/",
            );
        }
        Fetched::Failed(why) => {
            return Outcome::fail(
                check,
                format!("cannot read {kind} {name}: {why}"),
                HINT_READ,
            );
        }
    };
    let Some(cert) = secret_cert(secret) else {
        return Outcome::fail(
            check,
            format!(
                "{kind} {name} exists; its caBundle cannot be verified: Secret {}/{} holds no \
                 serving certificate",
                install.namespace, install.secret
            ),
            "see the certificate check below",
        );
    };
    let host = format!("{}.{}.svc", install.service, install.namespace);
    let hooks = config["webhooks"].as_array().map_or(&[][..], Vec::as_slice);
    let untrusting: Vec<String> = hooks
        .iter()
        .filter(|hook| {
            let bundle = hook["clientConfig"]["caBundle"]
                .as_str()
                .unwrap_or_default();
            let bundle = base64::engine::general_purpose::STANDARD
                .decode(bundle)
                .unwrap_or_default();
            pki::verify(&bundle, &cert, &host, now).is_err()
        })
        .map(|hook| hook["name"].as_str().unwrap_or("?").to_owned())
        .collect();
    match (hooks.is_empty(), untrusting.as_slice()) {
        (true, _) => Outcome::fail(
            check,
            format!("{kind} {name} has no webhooks"),
            "install the manifests: kubectl apply -k manifests/",
        ),
        (false, []) => Outcome::pass(
            check,
            format!("{kind} {name} exists and its caBundle trusts the serving certificate"),
        ),
        (false, stale) => Outcome::fail(
            check,
            format!(
                "{kind} {name}: the caBundle of {} does not trust the serving certificate in \
                 Secret {}/{} (stale caBundle)",
                stale.join(", "),
                install.namespace,
                install.secret
            ),
            format!(
                "the leader republishes the bundle within --cert-sync-interval; if it stays \
                 stale, see the server's logs (kubectl -n {} logs deploy/{})",
                install.namespace, install.service
            ),
        ),
    }
}

/// The PEM serving certificate of a Secret read as JSON (`data` in base64).
fn secret_cert(secret: &Fetched<Value>) -> Option<String> {
    let Fetched::Found(secret) = secret else {
        return None;
    };
    let encoded = secret["data"]["tls.crt"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// The serving certificate exists and has not expired.
pub fn certificate(secret: &Fetched<Value>, install: &Install, now: OffsetDateTime) -> Outcome {
    const CHECK: &str = "certificate";
    let at = format!("Secret {}/{}", install.namespace, install.secret);
    if let Fetched::Failed(why) = secret {
        return Outcome::fail(CHECK, format!("cannot read {at}: {why}"), HINT_READ);
    }
    let Some(cert) = secret_cert(secret) else {
        return Outcome::fail(
            CHECK,
            format!("{at} holds no serving certificate (tls.crt)"),
            "the server creates it at start (self-managed certificates), or cert-manager does",
        );
    };
    let Ok(expiry) = pki::not_after(&cert) else {
        return Outcome::fail(
            CHECK,
            format!("{at}: tls.crt is not a certificate"),
            "delete the Secret; the server makes a new one",
        );
    };
    let left = expiry - now;
    let date = expiry.date();
    match left.is_negative() {
        true => Outcome::fail(
            CHECK,
            format!("the serving certificate in {at} expired on {date}"),
            format!(
                "restart the server (kubectl -n {} rollout restart deploy/{}) to rotate it, or \
                 renew it in cert-manager",
                install.namespace, install.service
            ),
        ),
        false => Outcome::pass(
            CHECK,
            format!(
                "the serving certificate in {at} is valid until {date} ({} days)",
                left.whole_days()
            ),
        ),
    }
}

/// The Service has at least one ready endpoint, from its EndpointSlices.
pub fn endpoints(slices: &Fetched<Vec<Value>>, install: &Install) -> Outcome {
    const CHECK: &str = "endpoints";
    let service = format!("Service {}/{}", install.namespace, install.service);
    let slices = match slices {
        Fetched::Found(slices) => slices.as_slice(),
        Fetched::Missing => &[],
        Fetched::Failed(why) => {
            return Outcome::fail(
                CHECK,
                format!("cannot read the endpoints of {service}: {why}"),
                HINT_READ,
            );
        }
    };
    let ready = slices
        .iter()
        .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
        .filter(|e| e["conditions"]["ready"] != false)
        .count();
    match ready {
        0 => Outcome::fail(
            CHECK,
            format!("{service} has no ready endpoints"),
            format!(
                "see why the pods are not ready: kubectl -n {} get pods -l \
                 app.kubernetes.io/name={}",
                install.namespace, install.service
            ),
        ),
        n => Outcome::pass(
            CHECK,
            format!("{service} has {n} ready endpoint{}", plural(n)),
        ),
    }
}

pub(super) fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The sidecar catalogue in its ConfigMap loads.
pub fn catalogue(config_map: &Fetched<Value>, namespace: &str, name: &str) -> Outcome {
    const CHECK: &str = "sidecar-catalogue";
    let at = format!("ConfigMap {namespace}/{name}");
    let text = match config_map {
        Fetched::Found(cm) => cm["data"]["sidecars.yaml"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        Fetched::Missing => {
            return Outcome::fail(
                CHECK,
                format!("{at} does not exist"),
                "install the manifests: kubectl apply -k manifests/",
            );
        }
        Fetched::Failed(why) => {
            return Outcome::fail(CHECK, format!("cannot read {at}: {why}"), HINT_READ);
        }
    };
    match Catalogue::parse(&text) {
        Ok(catalogue) => {
            let n = catalogue.names().count();
            Outcome::pass(
                CHECK,
                format!(
                    "the sidecar catalogue in {at} loads ({n} template{})",
                    plural(n)
                ),
            )
        }
        Err(e) => Outcome::fail(
            CHECK,
            format!(
                "the sidecar catalogue in {at} does not load: {}",
                crate::report::error_chain(&e)
            ),
            "fix the catalogue; check it offline: ksvc-webhook mutate --sidecars FILE -f app.yaml",
        ),
    }
}

/// The namespaces that opted out of the webhook (informational).
pub fn opted_out(namespaces: &Fetched<Vec<String>>) -> Outcome {
    const CHECK: &str = "opted-out-namespaces";
    match namespaces {
        Fetched::Found(names) if !names.is_empty() => Outcome::pass(
            CHECK,
            format!("namespaces opted out of the webhook: {}", names.join(", ")),
        ),
        Fetched::Found(_) | Fetched::Missing => {
            Outcome::pass(CHECK, "no namespace opted out of the webhook".to_owned())
        }
        Fetched::Failed(why) => {
            Outcome::fail(CHECK, format!("cannot list namespaces: {why}"), HINT_READ)
        }
    }
}

/// One API call the server makes, allowed or not for its service account.
#[derive(Debug, Clone, PartialEq)]
pub struct Access {
    /// `verb resource.group` (with the name, where the grant names one).
    pub call: String,
    pub allowed: Fetched<bool>,
}

/// A part's service account may make every API call the part makes: the check `id`, with
/// `part` as the message names it.
pub fn rbac(id: &'static str, user: &str, part: &str, access: &[Access]) -> Outcome {
    let denied: Vec<&str> = access
        .iter()
        .filter(|a| a.allowed != Fetched::Found(true))
        .map(|a| a.call.as_str())
        .collect();
    let failed = access.iter().find_map(|a| match &a.allowed {
        Fetched::Failed(why) => Some(why.as_str()),
        _ => None,
    });
    match (denied.as_slice(), failed) {
        ([], _) => Outcome::pass(
            id,
            format!(
                "{user} may make all {} API calls {part} makes",
                access.len()
            ),
        ),
        (_, Some(why)) => Outcome::fail(
            id,
            format!("cannot review the access of {user}: {why}"),
            HINT_READ,
        ),
        (denied, None) => Outcome {
            details: denied.iter().map(|c| (*c).to_owned()).collect(),
            ..Outcome::fail(
                id,
                format!(
                    "{user} may not make {} of the {} API calls {part} makes:",
                    denied.len(),
                    access.len()
                ),
                "apply the RBAC of manifests/ (kubectl apply -k manifests/)",
            )
        },
    }
}

#[cfg(test)]
#[path = "eval_tests.rs"]
mod tests;
