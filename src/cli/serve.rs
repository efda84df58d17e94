//! `serve`: build the runtime, wire SIGTERM/SIGINT to a graceful shutdown, run the server.
//!
//! Thin: translates [`ServeArgs`] into [`server::Options`], owns process-level concerns (worker
//! threads, log format) and wires the parts `--role` asks for: the sidecar catalogue reload, the
//! watch loop (routes, metrics, leadership; never readiness) or, for the admission role alone,
//! the revision guard's Service projection, and the self-managed certificates, which are in
//! place before the server loads them. Everything else lives in the modules it wires.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::admission::Policy;
use std::net::SocketAddr;
use std::num::NonZeroUsize;

use clap::Args;

use super::policy::PolicyArgs;
use crate::apps::{self, args::StatusApiArgs};
use crate::certmgr::CertArgs;
use crate::cluster::election::{self, Election, LeaseArgs};
use crate::cluster::rbac::ApiCall;
use crate::cluster::{self, client::ClientArgs};
use crate::flags::{parse_bytes, parse_duration, parse_listen_addr};
use crate::server::catalogue::CatalogueReloader;
use crate::server::reload::Reload as _;
use crate::server::role::Role;
use crate::server::{self, Server, tls::CertPaths};
use crate::telemetry::logs::LogFormat;
use crate::watch::args::WatchArgs;
use crate::{certmgr, watch};

/// Run the admission server until SIGTERM or SIGINT.
pub fn run(mut args: ServeArgs) -> anyhow::Result<()> {
    let runtime = runtime(args.workers)?;
    let spans = args
        .otlp_endpoint
        .as_deref()
        .map(|endpoint| {
            let untraced = args.otlp_untraced_reviews;
            crate::telemetry::otlp::provider(endpoint, untraced, runtime.handle().clone())
        })
        .transpose()?;
    // Dropped last: the remaining log lines are written after the server has stopped.
    let _logs = crate::telemetry::logs::init(args.log_format, spans.as_ref());
    // A kubeconfig named but missing is a mistake to say now, not a cluster to retry forever.
    if let Some(path) = args.client.kubeconfig.as_ref().filter(|p| !p.exists()) {
        return Err(crate::cluster::errors::Error::NoKubeconfig {
            path: path.display().to_string(),
            origin: crate::cluster::errors::Origin::Flag,
        }
        .into());
    }
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    if args.certs.cert_manager && args.certs.self_managed_certs == Some(true) {
        anyhow::bail!(
            "--cert-manager serves cert-manager's files: it cannot go with --self-managed-certs=true"
        );
    }
    let mode = CertMode::of(&args, in_cluster);
    if mode == CertMode::SelfManaged && !args.role.admits() {
        anyhow::bail!(
            "--role controller serves the certificate the admission part manages: mount its \
             Secret and pass --tls-dir (or --self-managed-certs=false with --tls-cert/--tls-key)"
        );
    }
    args.certs.self_managed_certs = Some(mode == CertMode::SelfManaged);
    if let Some(dir) = mode.dir_outside_cluster(&args, in_cluster, std::process::id()) {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        tracing::info!(
            dir = %dir.display(),
            "self-managed certificates outside a cluster: written here, not in ./certs"
        );
        args.tls_dir = Some(dir);
    }
    apps::announce(&args.status_api, mode.describe());
    if let Some(endpoint) = &args.otlp_endpoint {
        tracing::info!(
            endpoint = ?endpoint,
            queue_spans = crate::telemetry::otlp::QUEUE_SPANS,
            "exporting one span per admission review over OTLP/HTTP"
        );
    }
    let policy = args
        .policy
        .startup_policy()
        .context("invalid admission policy flags")?;
    let served = runtime.block_on(async {
        let served = serve(args, mode, policy, spans.is_some()).await;
        if let Some(provider) = spans {
            crate::telemetry::otlp::shutdown(provider).await;
        }
        served
    });
    // Before the log writer: what the runtime's tasks say as they end is still written.
    drop(runtime);
    served
}

/// The async runtime: `workers` threads, by default one per CPU this process may use. One
/// worker runs the current-thread scheduler, which does the same work without cross-thread
/// wake-ups and work-stealing queues.
fn runtime(workers: Option<NonZeroUsize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let workers = match workers {
        Some(n) => n.get(),
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut builder = match workers {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(n);
            builder
        }
    };
    builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The memory limit of this process's cgroup (v2 `memory.max`; `max` when there is none).
async fn cgroup_memory_max() -> Option<u64> {
    let text = tokio::fs::read_to_string("/sys/fs/cgroup/memory.max").await;
    text.ok()?.trim().parse().ok()
}

/// The server options the flags describe.
pub fn options(args: &ServeArgs) -> server::Options {
    let certs = match &args.tls_dir {
        Some(dir) => CertPaths::in_dir(dir),
        None => CertPaths {
            cert: args
                .tls_cert
                .clone()
                .unwrap_or_else(|| PathBuf::from("certs/tls.crt")),
            key: args
                .tls_key
                .clone()
                .unwrap_or_else(|| PathBuf::from("certs/tls.key")),
        },
    };
    server::Options {
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        certs,
        cert_reload_interval: args.cert_reload_interval,
        http2: args.http2,
        header_read_timeout: args.header_read_timeout,
        drain_period: args.drain_period,
        shutdown_timeout: args.shutdown_timeout,
        limits: server::Limits {
            request_timeout: args.request_timeout,
            body_budget: args.body_budget,
            small_body_reserve: args.small_body_reserve,
            max_connections: args.max_connections,
            max_connections_per_ip: args.max_connections_per_ip,
        },
    }
}

async fn serve(
    args: ServeArgs,
    mode: CertMode,
    policy: Policy,
    review_spans: bool,
) -> anyhow::Result<()> {
    let options = options(&args);
    let mut server = Server::new(options.clone(), policy);
    if review_spans {
        server.review_spans();
    }
    let reload_catalogue = args.policy.sidecars.clone().map(|path| {
        let reloader = CatalogueReloader::new(path, server.policy(), server.registry_mut());
        tokio::spawn(reloader.run(options.cert_reload_interval))
    });
    // The watch loop never holds admission up: it connects (and retries) in the background, and
    // its sync gates `/apps` and its own metric, never `/readyz`. With `failurePolicy: Fail` a
    // loop that cannot list would otherwise refuse every KService write in the cluster.
    // One election for the replica, whichever parts follow it (the loop's writes, the
    // certificates' rotation and publication); it connects in the background too.
    // The admission role runs no loop: the guard reads a projection of each Service instead.
    let runs_loop = args.role.runs_loop() && !args.watch.no_watch;
    let mut election = Election::new(&args.lease.in_namespace(&args.certs.namespace));
    let mut loop_args = args.watch.clone();
    loop_args.no_watch = !runs_loop;
    let mut watch = watch::spawn(&loop_args, &args.client, &election, server.policy());
    // The admission part elects a leader for its certificates and the failurePolicy switch.
    let keeps_policy = args.role.admits() && mode.switches_policy();
    if runs_loop || keeps_policy {
        election.start(&args.client, watch.metrics.error_counter("lease"));
    }
    let projection = (args.role == Role::Admission && !args.watch.no_watch)
        .then(|| watch::projection::spawn(&args.client, args.watch.watch_namespace.clone()));
    if let Some(projection) = &projection {
        server.revision_owners(projection.revision_owners());
    }
    if !args.role.admits() {
        server.without_admission();
    }
    let status_metrics = apps::metrics::StatusMetrics::default();
    if runs_loop {
        let routes = apps::router(&watch, &status_metrics, &args.client, &args.status_api);
        server.merge_routes(routes);
        if let Some(addr) = args.status_api.local_status_listen.0 {
            let routes = apps::local_router(&watch, &status_metrics, &args.status_api);
            server.local_routes(addr, routes);
        }
        server.revision_owners(watch.revision_owners());
        watch.register_metrics(server.registry_mut());
        status_metrics.register(server.registry_mut());
    }
    if args.status_api.metrics_auth {
        let guard = apps::auth::metrics_guard(&args.client, &args.status_api, &status_metrics);
        server.guard_metrics(guard);
    }
    let cabundle_metrics = certmgr::metrics::Metrics::register(server.registry_mut());
    let (answered, answered_rx) = tokio::sync::watch::channel(false);
    let certificates =
        manage_certificates(&args, &options, election.leader(), cabundle_metrics).await?;
    let bound = server.bind().await?;
    // The leader switches the webhook to --failure-policy once this listener answered through
    // TLS with the CA it serves, and keeps it there.
    let ca_file = cert_dir(&options).join(certmgr::FILE_CA_CRT);
    let probe = keeps_policy.then(|| {
        let probe = certmgr::probe::Probe {
            addr: bound.local_addr()?,
            ca_file: ca_file.clone(),
            server_name: format!("{}.{}.svc", args.certs.service_name, args.certs.namespace),
        };
        anyhow::Ok(tokio::spawn(probe.until_answered(answered)))
    });
    let probe = probe.transpose()?;
    let keeper = keeps_policy.then(|| {
        let keeper = certmgr::keeper::Keeper {
            config: args.certs.webhook_config_name.clone(),
            want: args.certs.failure_policy,
            ca_file,
            period: args.certs.cert_sync_interval,
        };
        let answered = answered_rx.clone();
        tokio::spawn(keeper.run(args.client.clone(), election.leader(), answered))
    });
    let memory = server::memory::Arithmetic::of_role(&options, args.role);
    tracing::info!(
        listen = %bound.local_addr()?,
        metrics = ?bound.metrics_addr().transpose()?,
        local_status = ?bound.local_routes_addr().transpose()?,
        memory_bound_mib = memory.total() >> 20,
        "serving admission reviews"
    );
    if let Some(max) = cgroup_memory_max().await
        && memory.total() > max
    {
        tracing::warn!(
            memory_bound_mib = memory.total() >> 20,
            memory_max_mib = max >> 20,
            "the memory these flags allow is above the container's memory limit: lower \
             --body-budget or --max-connections, or raise the limit (docs/reliability.md)"
        );
    }
    let shutdown = bound.shutdown_handle();
    let mut stopping = shutdown.stopping();
    tokio::spawn(async move {
        match server::shutdown::signal().await {
            Ok(server::shutdown::Signal::Terminate) => shutdown.trigger(),
            Ok(server::shutdown::Signal::Interrupt) => shutdown.interrupt(),
            Err(err) => tracing::error!(error = %err, "cannot listen for signals"),
        }
    });
    // Once the drain is over the loop stops and the election releases the Lease (each bounded
    // by the API timeout) while the connections finish, so the other replica leads at once.
    let release = async {
        stopping.wait().await;
        let projection = async {
            if let Some(projection) = projection {
                projection.shutdown().await;
            }
        };
        tokio::join!(watch.shutdown(), election.shutdown(), projection);
    };
    tokio::join!(bound.run(), release);
    for task in [certificates, reload_catalogue, probe, keeper]
        .into_iter()
        .flatten()
    {
        task.abort();
    }
    Ok(())
}

/// With `--self-managed-certs`, find or create the certificates in the cluster and write them
/// where the server reads them, before it loads them. The elected leader rotates and publishes
/// the CA bundle.
async fn manage_certificates(
    args: &ServeArgs,
    options: &server::Options,
    leader: tokio::sync::watch::Receiver<bool>,
    metrics: certmgr::metrics::Metrics,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    if args.certs.self_managed_certs != Some(true) {
        return Ok(None);
    }
    let timeout = args.client.api_timeout.max(Duration::from_secs(1));
    let client = cluster::client::connect(&args.client, timeout, true)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "self-managed certificates need the cluster (pass --self-managed-certs=false to \
                 serve the files in --tls-dir/--tls-cert instead): {e}"
            )
        })?;
    let task = certmgr::start(client, &args.certs, leader, cert_dir(options), metrics)
        .await
        .context("cannot set up the self-managed certificates")?;
    Ok(task)
}

/// Every API call a `serve` process of `role` makes with certificates of `mode`: its
/// ServiceAccount's RBAC grants exactly these (tests/manifests.rs, per part and per install).
/// The certificate manager's and the failurePolicy switch's calls count where the role answers
/// admission (the controller serves the Secret the admission part writes or cert-manager
/// issues); the Lease where a part elects a leader.
pub fn api_calls(role: Role, mode: CertMode) -> Vec<&'static [ApiCall]> {
    let keeps_policy = role.admits() && mode.switches_policy();
    let mut calls = Vec::new();
    if role.runs_loop() || keeps_policy {
        calls.push(election::API_CALLS);
    }
    if keeps_policy {
        calls.push(certmgr::POLICY_CALLS);
    }
    if role.admits() && mode == CertMode::SelfManaged {
        calls.push(certmgr::API_CALLS);
    }
    match role {
        Role::Admission => calls.push(watch::projection::API_CALLS),
        Role::All | Role::Controller => {
            calls.extend([watch::API_CALLS, apps::auth::api::API_CALLS]);
        }
    }
    calls
}

/// The directory of the serving certificate, where self-managed certificates are written.
fn cert_dir(options: &server::Options) -> PathBuf {
    let cert = options.certs.cert.parent();
    cert.map_or_else(|| PathBuf::from("."), PathBuf::from)
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertMode {
    /// Created, rotated and published in-process (`src/certmgr`).
    SelfManaged,
    /// cert-manager's Secret, mounted (`--cert-manager`): served as files, with the
    /// failurePolicy switch once cainjector published its `ca.crt`.
    CertManager,
    /// Files something else writes (`ksvc-webhook certs`, `make run`); nothing in the cluster
    /// is written.
    Files,
}

impl CertMode {
    /// `--self-managed-certs` when given; otherwise self-managed only inside a cluster and only
    /// when no certificate files were named.
    pub fn of(args: &ServeArgs, in_cluster: bool) -> Self {
        let files_named =
            args.tls_cert.is_some() || args.tls_key.is_some() || args.tls_dir.is_some();
        match args.certs.self_managed_certs {
            _ if args.certs.cert_manager => CertMode::CertManager,
            Some(true) => CertMode::SelfManaged,
            Some(false) => CertMode::Files,
            None if in_cluster && !files_named => CertMode::SelfManaged,
            None => CertMode::Files,
        }
    }

    /// Where self-managed certificates go when the process runs outside a cluster and names no
    /// certificate files: a directory of its own under the system's temporary directory, so
    /// they never replace the pair `ksvc-webhook certs` wrote into `./certs` (nor show up in a
    /// git checkout). `None` in a cluster, for files, or when files are named.
    pub fn dir_outside_cluster(
        self,
        args: &ServeArgs,
        in_cluster: bool,
        pid: u32,
    ) -> Option<PathBuf> {
        let files_named =
            args.tls_cert.is_some() || args.tls_key.is_some() || args.tls_dir.is_some();
        (self == CertMode::SelfManaged && !in_cluster && !files_named).then(|| {
            std::env::temp_dir()
                .join("ksvc-webhook")
                .join(format!("certs-{pid}"))
        })
    }

    /// The first log line's words for the mode.
    pub fn describe(self) -> &'static str {
        match self {
            CertMode::SelfManaged => "self-managed in the cluster",
            CertMode::CertManager => "cert-manager's, served from files",
            CertMode::Files => "served from files",
        }
    }

    /// Whether the admission leader switches the webhook's failurePolicy from the install's
    /// `Ignore` to `--failure-policy` (and keeps it there) with these certificates.
    pub fn switches_policy(self) -> bool {
        match self {
            CertMode::SelfManaged | CertMode::CertManager => true,
            CertMode::Files => false,
        }
    }
}

// The flags of `serve`.

/// What `serve --help` shows after the flags.
const HELP: &str = "\
Environment:
  RUST_LOG     log filter, e.g. info (the default) or ksvc_webhook=debug
  KUBECONFIG   kubeconfig files (':'-separated) outside a cluster, when --kubeconfig is not given
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook serve --listen 127.0.0.1:8443 --tls-dir certs --status-auth=false";

/// Arguments of `serve`.
#[derive(Debug, Clone, Args)]
#[command(after_help = HELP)]
pub struct ServeArgs {
    /// The parts this process runs: `all` (admission and the watch loop), `admission` (the
    /// webhook, with a small projection of each Service for the revision guard) or `controller`
    /// (the watch loop and the status API); docs/install.md says when to split.
    #[arg(long, env = "KSVC_WEBHOOK_ROLE", value_enum, default_value_t = Role::All)]
    pub role: Role,
    /// Address of the HTTPS admission listener (`HOST:PORT`, or `:PORT` for every interface).
    #[arg(long, env = "KSVC_WEBHOOK_LISTEN", default_value = "0.0.0.0:8443", value_parser = parse_listen_addr)]
    pub listen: SocketAddr,
    /// PEM certificate chain of the serving certificate (default: `certs/tls.crt`). Given
    /// outside a cluster, it is served as it is (no self-managed certificates).
    #[arg(long, env = "KSVC_WEBHOOK_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM (PKCS#8, SEC1 or PKCS#1) private key of the serving certificate (default:
    /// `certs/tls.key`).
    #[arg(long, env = "KSVC_WEBHOOK_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Directory holding `tls.crt` and `tls.key` (a mounted `kubernetes.io/tls` Secret);
    /// overrides `--tls-cert` and `--tls-key`.
    #[arg(long, env = "KSVC_WEBHOOK_TLS_DIR")]
    pub tls_dir: Option<PathBuf>,
    /// How often the certificate files are re-read; a changed valid pair replaces the old one.
    #[arg(long, env = "KSVC_WEBHOOK_CERT_RELOAD_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub cert_reload_interval: Duration,
    /// Offer HTTP/2 through ALPN (off: kube-apiserver talks HTTP/1.1 to webhooks).
    #[arg(long, env = "KSVC_WEBHOOK_HTTP2")]
    pub http2: bool,
    /// Plain-HTTP address serving only /healthz, /readyz and /metrics, with its own cap of 32
    /// connections: point the probes here (off when unset; `HOST:PORT`, or `:PORT` for every
    /// interface).
    #[arg(long, env = "KSVC_WEBHOOK_METRICS_LISTEN", value_parser = parse_listen_addr)]
    pub metrics_listen: Option<SocketAddr>,
    /// A client that has not finished its TLS handshake and first request's headers by then is
    /// cut off (later, a connection may stay idle 120 s between requests).
    #[arg(long, env = "KSVC_WEBHOOK_HEADER_READ_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// After SIGTERM: how long to keep answering (readiness already failing) before draining.
    #[arg(long, env = "KSVC_WEBHOOK_DRAIN_PERIOD", default_value = "5s", value_parser = parse_duration)]
    pub drain_period: Duration,
    /// After the drain period: how long requests in flight may take to finish; the connections
    /// still open then are dropped.
    #[arg(long, env = "KSVC_WEBHOOK_SHUTDOWN_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
    /// An admission request whose body has not arrived by then is answered 408 (keep it at or
    /// below the webhook's `timeoutSeconds`).
    #[arg(long, env = "KSVC_WEBHOOK_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Bytes of admission request bodies held at once, all requests together (e.g. 64Mi);
    /// beyond it new requests get 503 with Retry-After.
    #[arg(long, env = "KSVC_WEBHOOK_BODY_BUDGET", default_value = "64Mi", value_parser = parse_bytes)]
    pub body_budget: usize,
    /// The part of --body-budget only bodies of at most 256 KiB may use, so large uploads never
    /// starve the small reviews kube-apiserver sends.
    #[arg(long, env = "KSVC_WEBHOOK_SMALL_BODY_RESERVE", default_value = "16Mi", value_parser = parse_bytes)]
    pub small_body_reserve: usize,
    /// Open connections per listener; beyond it a connection waiting on its client makes room,
    /// or the newcomer is closed at once when all are busy.
    #[arg(long, env = "KSVC_WEBHOOK_MAX_CONNECTIONS", default_value_t = 256)]
    pub max_connections: usize,
    /// Open connections per listener from one peer address; beyond it the address's own
    /// longest-waiting connection makes room, or the newcomer is closed at once.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_MAX_CONNECTIONS_PER_IP",
        default_value_t = 64
    )]
    pub max_connections_per_ip: usize,
    /// Tokio worker threads (default: the CPUs this process may run on; 1 runs the
    /// current-thread scheduler).
    #[arg(long, env = "KSVC_WEBHOOK_WORKERS")]
    pub workers: Option<NonZeroUsize>,
    /// Log line format.
    #[arg(long, env = "KSVC_WEBHOOK_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
    /// OTLP/HTTP collector base URL, e.g. http://otel-collector.observability:4318 (spans go
    /// to /v1/traces under it; https is verified against the system's CAs or SSL_CERT_FILE). Exports one span per review on /mutate and
    /// /validate-revision-delete, a child of kube-apiserver's span when it sends a
    /// `traceparent` (off when unset).
    #[arg(long, env = "KSVC_WEBHOOK_OTLP_ENDPOINT", value_name = "URL", value_parser = crate::telemetry::otlp::parse_endpoint)]
    pub otlp_endpoint: Option<String>,
    /// With --otlp-endpoint, also export the spans of reviews that carry no `traceparent`, each a
    /// new trace (by default only reviews whose `traceparent` kube-apiserver sampled are
    /// exported).
    #[arg(long, env = "KSVC_WEBHOOK_OTLP_UNTRACED_REVIEWS")]
    pub otlp_untraced_reviews: bool,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub watch: WatchArgs,
    #[command(flatten)]
    pub certs: CertArgs,
    #[command(flatten)]
    pub status_api: StatusApiArgs,
}
