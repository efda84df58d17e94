//! `ksvc-webhook check`: is the install healthy? In the spirit of `linkerd check`: a ✓ or ×
//! line per check (`-o json` for programs), exit 1 when one fails, `--wait` to retry until all
//! pass; one line when the API server cannot be reached at all. `--pre` checks before an install
//! instead ([`pre`]).
//!
//! Thin: reads the install with the user's credentials (not in any `API_CALLS`: CRDs, webhook
//! configurations, the Secret, EndpointSlices, the catalogue ConfigMap and namespaces get/list,
//! SelfSubjectAccessReviews as the server's service account, impersonated, `services/proxy` get
//! and two KService creates as server dry runs); what the reads mean is
//! [`eval`]'s, what the server's own answers mean [`probe`]'s.

mod eval;
pub mod pre;
mod probe;
mod proxy;

use std::io::Write;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;
use time::OffsetDateTime;

use crate::cli::app::TIMEOUT;
use crate::cli::output::{self, Output};
use crate::cli::serve::{CertMode, api_calls};
use crate::cluster::call;
use crate::cluster::client::{self, ClientArgs};
use crate::cluster::errors;
use crate::cluster::rbac::ApiCall;
use crate::server::role::Role;
use crate::watch::writes::knative;
use crate::{flags, keys};
use eval::{Access, Fetched, Install, Outcome};
use probe::DryRun;
use proxy::Unanswered;

/// Run `check`; fails (exit 1) when a check fails.
pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let (client, server) = client::proxy_client(&args.cluster).await?;
        // One client per reviewed user, each impersonating it.
        let mut reviewed = Vec::new();
        for (user, role) in args.reviewed() {
            let groups = service_account_groups(&user);
            let (as_user, _) =
                client::client(&args.cluster, Some((&user, groups.as_slice()))).await?;
            reviewed.push(Reviewed {
                user,
                role,
                client: as_user,
            });
        }
        let deadline = tokio::time::Instant::now() + args.timeout;
        let outcomes = loop {
            // An API server that cannot be reached is one line, not a × for every read.
            let outcomes = match reach(&client, &server).await {
                Some(unreachable) => vec![unreachable],
                None if args.pre => pre::checks(&client, &server, &args).await,
                None => checks(&client, &reviewed, &server, &args).await,
            };
            let done = outcomes.iter().all(|o| o.ok);
            if done || !args.wait || tokio::time::Instant::now() >= deadline {
                break outcomes;
            }
            let failing: Vec<&str> = outcomes.iter().filter(|o| !o.ok).map(|o| o.check).collect();
            eprintln!("waiting for: {}", failing.join(", "));
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        print(&outcomes, &args.output, &mut std::io::stdout())?;
        let failed = outcomes.iter().filter(|o| !o.ok).count();
        if failed > 0 {
            bail!("{failed} of {} checks failed", outcomes.len());
        }
        Ok(())
    })
}

/// A user whose access the RBAC check reviews: a part's service account, with a client that
/// impersonates it.
struct Reviewed {
    user: String,
    role: Role,
    client: Client,
}

/// Every check, in order.
async fn checks(
    client: &Client,
    reviewed: &[Reviewed],
    server: &str,
    args: &CheckArgs,
) -> Vec<Outcome> {
    let ns = args.namespace.as_str();
    let install = Install {
        namespace: ns,
        service: &args.service,
        secret: &args.cert_secret,
    };
    let now = OffsetDateTime::now_utc();
    let crd = get::<CustomResourceDefinition>(
        Api::all(client.clone()),
        "services.serving.knative.dev",
        server,
    )
    .await;
    let mutating = get::<MutatingWebhookConfiguration>(
        Api::all(client.clone()),
        &args.webhook_config_name,
        server,
    )
    .await;
    let validating = get::<ValidatingWebhookConfiguration>(
        Api::all(client.clone()),
        &args.guard_config_name,
        server,
    )
    .await;
    let secret = get::<Secret>(
        Api::namespaced(client.clone(), ns),
        &args.cert_secret,
        server,
    )
    .await;
    let selector = format!("kubernetes.io/service-name={}", args.service);
    let slices =
        list::<EndpointSlice>(Api::namespaced(client.clone(), ns), &selector, server).await;
    let sidecars = get::<ConfigMap>(
        Api::namespaced(client.clone(), ns),
        &args.sidecars_configmap,
        server,
    )
    .await;
    let opt_out = format!(
        "{}={}",
        keys::LABEL_NAMESPACE_INJECT,
        keys::NAMESPACE_INJECT_DISABLED
    );
    let namespaces = match list::<Namespace>(Api::all(client.clone()), &opt_out, server).await {
        Fetched::Found(items) => Fetched::Found(
            items
                .iter()
                .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
                .collect(),
        ),
        Fetched::Missing => Fetched::Missing,
        Fetched::Failed(why) => Fetched::Failed(why),
    };
    let mode = cert_mode(&mutating);
    let mut rbac = Vec::new();
    for part in reviewed {
        let access = access(&part.client, part.role, mode, server, args).await;
        let (id, name) = part_names(part.role);
        rbac.push(eval::rbac(id, &part.user, name, &access));
    }
    let status_service = Install {
        service: &args.controller_service,
        ..install
    };
    let status_api = status_api(client, &status_service, server).await;
    let probe_ns = args.probe_namespace.as_str();
    let valid = dry_run(client, probe::probe(probe_ns), server).await;
    let invalid = dry_run(client, probe::invalid_probe(probe_ns), server).await;
    let mut outcomes = vec![
        eval::knative_crd(&crd),
        eval::webhook_config(
            "mutating-webhook",
            "MutatingWebhookConfiguration",
            &args.webhook_config_name,
            &mutating,
            &secret,
            &install,
            now,
        ),
        eval::webhook_config(
            "revision-guard",
            "ValidatingWebhookConfiguration",
            &args.guard_config_name,
            &validating,
            &secret,
            &install,
            now,
        ),
        eval::certificate(&secret, &install, now),
        eval::endpoints(&slices, &install),
    ];
    outcomes.extend(rbac);
    outcomes.extend([
        eval::catalogue(&sidecars, ns, &args.sidecars_configmap),
        eval::opted_out(&namespaces),
        probe::status_api(&status_api, &status_service),
        probe::admission(&valid, &invalid, &install, probe_ns),
    ]);
    outcomes
}

/// The certificates the install runs with, as its webhook configuration says: cainjector's
/// annotation means cert-manager (the overlay, the chart's `certificates.mode: certManager`),
/// whose admission part makes only the failurePolicy switch's calls.
fn cert_mode(mutating: &Fetched<Value>) -> CertMode {
    match mutating {
        Fetched::Found(config)
            if config["metadata"]["annotations"][keys::CERT_MANAGER_INJECT_CA_FROM].is_string() =>
        {
            CertMode::CertManager
        }
        _ => CertMode::SelfManaged,
    }
}

/// The RBAC check's id for a part, and how its message names the part.
fn part_names(role: Role) -> (&'static str, &'static str) {
    match role {
        Role::All => ("rbac", "the server"),
        Role::Admission => ("rbac-admission", "the admission part"),
        Role::Controller => ("rbac-controller", "the controller part"),
    }
}

/// `None` when the API server answers `/version`; else the one outcome that says it cannot be
/// reached.
async fn reach(client: &Client, server: &str) -> Option<Outcome> {
    let version = call::timed("probe the API server", TIMEOUT, client.apiserver_version()).await;
    let worded = match version {
        Ok(_) => return None,
        Err(e) => errors::Error::from_call(e, server),
    };
    match worded {
        errors::Error::Refused { .. } | errors::Error::Unreachable { .. } => Some(Outcome::fail(
            "api-server",
            format!("cannot reach the API server {server}: {worded}"),
            "check the kubeconfig's context (--context, --kubeconfig) and that the cluster runs: \
             kubectl cluster-info",
        )),
        // It answers, if not to /version: the checks say more.
        _ => None,
    }
}

/// A KService create sent as a server dry run (`dryRun=All`): admission runs, nothing is stored.
async fn dry_run(client: &Client, object: Value, server: &str) -> DryRun {
    let ns = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &knative("Service", "services"));
    let object: DynamicObject = match serde_json::from_value(object) {
        Ok(object) => object,
        Err(e) => return DryRun::Failed(e.to_string()),
    };
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let created = call::timed("dry-run a KService", TIMEOUT, api.create(&params, &object)).await;
    match created {
        Ok(object) => DryRun::Admitted(serde_json::to_value(object).unwrap_or_default()),
        Err(call::Error::Api {
            source: kube::Error::Api(status),
            ..
        }) => DryRun::Refused {
            code: status.code,
            message: status.message,
        },
        Err(e) => DryRun::Failed(errors::Error::from_call(e, server).to_string()),
    }
}

/// `GET /apps?limit=1` on the server through the API server's service proxy: its status, its
/// `WWW-Authenticate` and its body (the caller's credentials reach the API server, which passes
/// none on, so the status API's 401 is the expected answer where it asks for a token).
async fn status_api(client: &Client, install: &Install<'_>, server: &str) -> probe::Proxied {
    let path = format!(
        "{}/apps?limit=1",
        proxy::proxy_path(install.namespace, install.service)
    );
    let (parts, bytes) = match proxy::get(client, path, TIMEOUT).await {
        Ok(answer) => answer,
        Err(Unanswered::Call(err)) => {
            return Err(errors::Error::from_kube(&err, server).to_string());
        }
        Err(other) => return Err(other.to_string()),
    };
    let challenge = parts
        .headers
        .get(axum::http::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok(probe::ProxyAnswer {
        code: parts.status.as_u16(),
        challenge,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    })
}

/// One object as JSON, or why not.
async fn get<K>(api: Api<K>, name: &str, server: &str) -> Fetched<Value>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match call::timed(&format!("get {name}"), TIMEOUT, api.get_opt(name)).await {
        Ok(Some(obj)) => Fetched::Found(serde_json::to_value(obj).unwrap_or_default()),
        Ok(None) => Fetched::Missing,
        Err(e) => Fetched::Failed(errors::Error::from_call(e, server).to_string()),
    }
}

/// The objects with these labels, as JSON, or why not.
async fn list<K>(api: Api<K>, labels: &str, server: &str) -> Fetched<Vec<Value>>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let params = ListParams::default().labels(labels);
    match call::timed(&format!("list {labels}"), TIMEOUT, api.list(&params)).await {
        Ok(list) => Fetched::Found(
            list.items
                .iter()
                .map(|o| serde_json::to_value(o).unwrap_or_default())
                .collect(),
        ),
        Err(e) => Fetched::Failed(errors::Error::from_call(e, server).to_string()),
    }
}

/// Whether the reviewed user may make each call its part makes, by SelfSubjectAccessReviews
/// sent as that user (impersonated by `as_user`).
async fn access(
    as_user: &Client,
    role: Role,
    mode: CertMode,
    server: &str,
    args: &CheckArgs,
) -> Vec<Access> {
    let api: Api<SelfSubjectAccessReview> = Api::all(as_user.clone());
    let mut out = Vec::new();
    for call in api_calls(role, mode).into_iter().flatten() {
        let (namespace, name) = args.scope_of(call, role);
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(call.group.to_owned()),
                    resource: Some(call.resource.to_owned()),
                    verb: Some(call.verb.to_owned()),
                    namespace: namespace.map(str::to_owned),
                    name: name.map(str::to_owned),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let shown = match (call.group, name) {
            ("", None) => format!("{} {}", call.verb, call.resource),
            ("", Some(name)) => format!("{} {}/{name}", call.verb, call.resource),
            (group, None) => format!("{} {}.{group}", call.verb, call.resource),
            (group, Some(name)) => format!("{} {}.{group}/{name}", call.verb, call.resource),
        };
        let reviewed = call::timed(
            "review access",
            TIMEOUT,
            api.create(&PostParams::default(), &review),
        )
        .await;
        let allowed = match reviewed {
            Ok(r) => Fetched::Found(r.status.is_some_and(|s| s.allowed)),
            Err(e) => Fetched::Failed(errors::Error::from_call(e, server).to_string()),
        };
        out.push(Access {
            call: shown,
            allowed,
        });
    }
    out
}

/// The groups Kubernetes gives a service account, when `user` is one.
fn service_account_groups(user: &str) -> Vec<String> {
    match user
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
    {
        Some((ns, _)) => vec![
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".to_owned(),
        ],
        None => vec!["system:authenticated".to_owned()],
    }
}

/// Print the outcomes: ✓/× lines with the hint under a failure, or JSON.
fn print(outcomes: &[Outcome], output: &Output, out: &mut dyn Write) -> anyhow::Result<()> {
    match output.structured() {
        true => {
            let ok = outcomes.iter().all(|o| o.ok);
            let value = serde_json::json!({"ok": ok, "checks": outcomes});
            output::structured(&value, output, out)?;
        }
        false => {
            for o in outcomes {
                writeln!(out, "{} {}", if o.ok { "✓" } else { "×" }, o.message)?;
                for detail in &o.details {
                    writeln!(out, "    - {detail}")?;
                }
                if let Some(hint) = &o.hint {
                    writeln!(out, "    {hint}")?;
                }
            }
        }
    }
    Ok(out.flush()?)
}

// The flags of `check`.

/// What `check --help` shows after the flags.
const HELP: &str = "\
Environment:
  KUBECONFIG   kubeconfig files (':'-separated) when --kubeconfig is not given
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook check
  ksvc-webhook check --wait --timeout 2m -o json
  ksvc-webhook check --pre                  # before installing";

/// Arguments of `check`.
#[derive(Debug, Clone, Args)]
#[command(after_help = HELP)]
pub struct CheckArgs {
    /// The namespace the webhook is installed in (its Service, Secret and catalogue).
    #[arg(long = "webhook-namespace", env = "KSVC_WEBHOOK_CHECK_NAMESPACE",
          default_value = "ksvc-system", value_parser = flags::parse_dns_label)]
    pub namespace: String,
    /// The webhook's Service.
    #[arg(long, env = "KSVC_WEBHOOK_CHECK_SERVICE", default_value = "ksvc-webhook",
          value_parser = crate::cli::parse_service_name)]
    pub service: String,
    /// The Secret that holds the serving certificate.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_CHECK_CERT_SECRET",
        default_value = "ksvc-webhook-certs"
    )]
    pub cert_secret: String,
    /// The MutatingWebhookConfiguration that admits KServices.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_CHECK_WEBHOOK_CONFIG",
        default_value = "zz-ksvc-webhook.flyte.org"
    )]
    pub webhook_config_name: String,
    /// The ValidatingWebhookConfiguration of the revision guard.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_CHECK_GUARD_CONFIG",
        default_value = "ksvc-webhook-revision-guard.flyte.org"
    )]
    pub guard_config_name: String,
    /// The ConfigMap of the sidecar catalogue (key `sidecars.yaml`).
    #[arg(
        long,
        env = "KSVC_WEBHOOK_CHECK_SIDECARS_CONFIGMAP",
        default_value = "ksvc-webhook-sidecars"
    )]
    pub sidecars_configmap: String,
    /// The Lease of the controller part's leader election (the watch loop's writes).
    #[arg(
        long,
        env = "KSVC_WEBHOOK_CHECK_LEASE",
        default_value = "ksvc-webhook-watch"
    )]
    pub lease_name: String,
    /// The Lease of the admission part's leader election (certificate rotation).
    #[arg(
        long,
        env = "KSVC_WEBHOOK_CHECK_ADMISSION_LEASE",
        default_value = "ksvc-webhook-admission"
    )]
    pub admission_lease_name: String,
    /// The admission part's service account, whose access to the admission part's calls the
    /// RBAC check reviews.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_CHECK_SERVICE_ACCOUNT",
        default_value = "ksvc-webhook"
    )]
    pub service_account: String,
    /// The controller part's service account, whose access to the controller part's calls the
    /// RBAC check reviews.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_CHECK_CONTROLLER_SERVICE_ACCOUNT",
        default_value = "ksvc-webhook-controller"
    )]
    pub controller_service_account: String,
    /// The controller part's Service, behind which the status API answers.
    #[arg(long, env = "KSVC_WEBHOOK_CHECK_CONTROLLER_SERVICE",
          default_value = "ksvc-webhook-controller", value_parser = crate::cli::parse_service_name)]
    pub controller_service: String,
    /// Review the access of this one user to every call of both parts instead of the two
    /// service accounts' (impersonated, as kubectl's `--as`; for an install that runs
    /// `serve --role all` under one account).
    #[arg(long = "as", env = "KSVC_WEBHOOK_CHECK_AS", value_name = "USER")]
    pub as_user: Option<String>,
    /// The namespace the admission check sends its server dry runs of a KService to (nothing is
    /// stored); it must be one the webhook serves.
    #[arg(long, env = "KSVC_WEBHOOK_CHECK_PROBE_NAMESPACE", default_value = "default",
          value_parser = flags::parse_dns_label)]
    pub probe_namespace: String,
    /// Output format: `table` (a ✓ or × line per check, what to do under a ×), `json` or
    /// `yaml` (`{ok, checks: [{check, ok, message, details, hint}]}`), or `jsonpath=TEMPLATE`.
    #[arg(short = 'o', long, env = "KSVC_WEBHOOK_CHECK_OUTPUT", default_value = "table",
          value_parser = output::Forms { document: true }, hide_possible_values = true)]
    pub output: Output,
    /// Check before installing instead: the API server's version, Knative's CRD, your right to
    /// create every kind the install holds, the namespace free or the webhook's, and no webhook
    /// configuration of a previous install.
    #[arg(long, env = "KSVC_WEBHOOK_CHECK_PRE")]
    pub pre: bool,
    /// With `--pre`: the install will take its certificates from cert-manager (the
    /// cert-manager overlay), so cert-manager's CRDs must be there and you must create its kinds.
    #[arg(long, env = "KSVC_WEBHOOK_CHECK_CERT_MANAGER", requires = "pre")]
    pub cert_manager: bool,
    /// Repeat the checks every 2s until all pass or `--timeout` ends.
    #[arg(long, env = "KSVC_WEBHOOK_CHECK_WAIT")]
    pub wait: bool,
    /// How long `--wait` repeats the checks.
    #[arg(long, env = "KSVC_WEBHOOK_CHECK_TIMEOUT", default_value = "5m",
          allow_hyphen_values = true, value_parser = flags::parse_nonzero_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub cluster: ClientArgs,
}

impl CheckArgs {
    /// The users the RBAC check reviews, with the part whose calls each must be allowed: each
    /// part's service account, or with `--as` one user for every call (an all-in-one install).
    fn reviewed(&self) -> Vec<(String, Role)> {
        let account = |name: &str| format!("system:serviceaccount:{}:{name}", self.namespace);
        match &self.as_user {
            Some(user) => vec![(user.clone(), Role::All)],
            None => vec![
                (account(&self.service_account), Role::Admission),
                (account(&self.controller_service_account), Role::Controller),
            ],
        }
    }

    /// The namespace and name a call of the server is made in and on, as its grants name them.
    fn scope_of(&self, call: &ApiCall, role: Role) -> (Option<&str>, Option<&str>) {
        // The server lists and watches its webhook configuration with a name field selector,
        // which the API server authorizes as a request on that name.
        let named = match call.resource {
            "mutatingwebhookconfigurations" => call.verb != "create",
            _ => matches!(call.verb, "get" | "update" | "patch"),
        };
        let ns = Some(self.namespace.as_str());
        match call.resource {
            "secrets" => (ns, named.then_some(self.cert_secret.as_str())),
            "leases" => {
                let lease = match role {
                    Role::Admission => &self.admission_lease_name,
                    Role::All | Role::Controller => &self.lease_name,
                };
                (ns, named.then_some(lease.as_str()))
            }
            "mutatingwebhookconfigurations" => {
                (None, named.then_some(self.webhook_config_name.as_str()))
            }
            "validatingwebhookconfigurations" => {
                (None, named.then_some(self.guard_config_name.as_str()))
            }
            // Cluster-wide: the loop watches every namespace; reviews are cluster-scoped.
            _ => (None, None),
        }
    }
}
