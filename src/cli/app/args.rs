//! The flags of `ksvc-webhook app …`, as kubectl users expect them: `-n`, `-A`, `-l`, `-o`,
//! `-w`, `--context`, `--wait --timeout`, `--dry-run=server`.

use crate::cluster::client::ClientArgs;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use crate::cli::output::{self, Output};
use crate::flags;
use crate::watch::status::Phase;

/// The deadline of each API call of the `app` commands and `check`.
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// A subcommand's help after its flags: the environment every `app` command reads, then its
/// examples (a literal that starts with a line break).
macro_rules! app_help {
    ($examples:literal) => {
        concat!(
            "Environment:
  KUBECONFIG   kubeconfig files (':'-separated) when --kubeconfig is not given
  NO_COLOR     any value: no colour in help and errors

Examples:",
            $examples
        )
    };
}

/// What `app --help` shows after the flags.
const APP_HELP: &str = app_help!(
    "
  ksvc-webhook app list -A
  ksvc-webhook app stop myapp-proj-dev -n flyte --wait"
);

/// What `app stop --help` shows after the flags.
const APP_STOP_HELP: &str = app_help!(
    "
  ksvc-webhook app stop myapp-proj-dev -n flyte --wait --timeout 2m
  ksvc-webhook app stop myapp-proj-dev -n flyte --dry-run=server"
);

/// What `app start --help` shows after the flags.
const APP_START_HELP: &str = app_help!(
    "
  ksvc-webhook app start myapp-proj-dev -n flyte --wait"
);

/// What `app status --help` shows after the flags.
const APP_STATUS_HELP: &str = app_help!(
    "
  ksvc-webhook app status myapp-proj-dev -n flyte -w
  ksvc-webhook app status myapp-proj-dev -n flyte --until ACTIVE --timeout 1m30s
  ksvc-webhook app status myapp-proj-dev -n flyte -o jsonpath='{.status.phase}'"
);

/// What `app list --help` shows after the flags.
const APP_LIST_HELP: &str = app_help!("
  ksvc-webhook app list -n flyte -l flyte.org/project=proj
  ksvc-webhook app list -A -o wide --context staging
  ksvc-webhook app list -o jsonpath='{range .items[*]}{.name}{\"\\t\"}{.status.phase}{\"\\n\"}{end}'");

/// What `app update --help` shows after the flags.
const APP_UPDATE_HELP: &str = app_help!(
    "
  ksvc-webhook app update myapp-proj-dev -n flyte --image registry.example/app:2 --wait
  ksvc-webhook app update myapp-proj-dev -n flyte --min-scale 1 --dry-run=server"
);

/// Arguments of `app`.
#[derive(Debug, Args)]
#[command(after_help = APP_HELP)]
pub struct AppArgs {
    #[command(subcommand)]
    pub action: AppAction,
}

/// What `app` does.
#[derive(Debug, Subcommand)]
pub enum AppAction {
    /// Stop the app: set the label `flyte.org/app-stopped=true` (scale to zero, cluster-local).
    #[command(after_help = APP_STOP_HELP)]
    Stop(AppWriteArgs),
    /// Start the app: remove the label `flyte.org/app-stopped`.
    #[command(after_help = APP_START_HELP)]
    Start(AppWriteArgs),
    /// Print the app's status (phase, message, replicas, URL); `-w` follows it.
    #[command(after_help = APP_STATUS_HELP)]
    Status(AppStatusArgs),
    /// List the apps of a namespace (`-A`: of every namespace) with their status.
    #[command(after_help = APP_LIST_HELP)]
    List(AppListArgs),
    /// Change only the given fields, in a retry-on-conflict read-modify-write.
    #[command(after_help = APP_UPDATE_HELP)]
    Update(AppUpdateArgs),
}

impl AppAction {
    /// The cluster flags and the namespace flag (`None` also for `-A`).
    pub fn scope(&self) -> (&ClientArgs, Option<&str>) {
        let target = match self {
            AppAction::Stop(w) | AppAction::Start(w) => &w.target,
            AppAction::Status(s) => &s.target,
            AppAction::Update(u) => &u.target,
            AppAction::List(l) => return (&l.cluster, l.namespace.as_deref()),
        };
        (&target.cluster, target.namespace.as_deref())
    }
}

/// Which app, in which cluster.
#[derive(Debug, Clone, Args)]
pub struct AppTarget {
    /// The KService name.
    #[arg(value_parser = crate::cli::parse_service_name)]
    pub name: String,
    /// The KService namespace; default: the kubeconfig context's namespace.
    #[arg(short = 'n', long, env = "KSVC_WEBHOOK_APP_NAMESPACE", value_parser = flags::parse_dns_label)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub cluster: ClientArgs,
}

/// How a write is sent and whether the command waits for its outcome.
#[derive(Debug, Clone, Args)]
pub struct WaitArgs {
    /// Wait until the app reaches the phase the change leads to (STOPPED after `stop`, ACTIVE
    /// after `start` and `update`), printing each phase on the way.
    #[arg(long, env = "KSVC_WEBHOOK_APP_WAIT", conflicts_with = "dry_run")]
    pub wait: bool,
    /// How long `--wait` (or `status --until`) waits before it fails.
    #[arg(long, env = "KSVC_WEBHOOK_APP_TIMEOUT", default_value = "5m",
          allow_hyphen_values = true, value_parser = flags::parse_nonzero_duration)]
    pub timeout: Duration,
    /// `server`: send the write as a dry run (admission and validation run, nothing is
    /// stored); `none`: write.
    #[arg(long, env = "KSVC_WEBHOOK_APP_DRY_RUN", value_enum, default_value_t = DryRun::None)]
    pub dry_run: DryRun,
}

impl Default for WaitArgs {
    fn default() -> Self {
        Self {
            wait: false,
            timeout: Duration::from_secs(300),
            dry_run: DryRun::None,
        }
    }
}

/// `--dry-run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DryRun {
    /// Write.
    None,
    /// Let the API server run admission and validation, and store nothing.
    Server,
}

/// Arguments of `app stop` and `app start`.
#[derive(Debug, Clone, Args)]
pub struct AppWriteArgs {
    #[command(flatten)]
    pub target: AppTarget,
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// The output format flag.
#[derive(Debug, Clone, Default, Args)]
pub struct OutputArgs {
    /// Output format: `table` (the message under an app that is not ACTIVE), `wide`, `name`,
    /// `json` or `yaml` (the `/apps` record, snake_case, without drift), or `jsonpath=TEMPLATE` (kubectl's
    /// syntax: `{.a.b}`, `{.items[*].x}`, `{range …}{end}`).
    #[arg(short = 'o', long, env = "KSVC_WEBHOOK_APP_OUTPUT", default_value = "table",
          value_parser = output::Forms { document: false }, hide_possible_values = true)]
    pub output: Output,
}

/// Arguments of `app status`.
#[derive(Debug, Clone, Args)]
pub struct AppStatusArgs {
    #[command(flatten)]
    pub target: AppTarget,
    /// Keep printing the status whenever it changes; ends when the app is deleted.
    #[arg(short = 'w', long, env = "KSVC_WEBHOOK_APP_WATCH")]
    pub watch: bool,
    /// Follow the status until the app reaches this phase (ACTIVE, STOPPED, FAILED, …), then
    /// end; fail after `--timeout`.
    #[arg(long, env = "KSVC_WEBHOOK_APP_UNTIL", value_parser = parse_phase)]
    pub until: Option<Phase>,
    /// How long `--until` waits before it fails.
    #[arg(long, env = "KSVC_WEBHOOK_APP_TIMEOUT", default_value = "5m",
          allow_hyphen_values = true, value_parser = flags::parse_nonzero_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Arguments of `app list`.
#[derive(Debug, Clone, Args)]
pub struct AppListArgs {
    /// The namespace to list; default: the kubeconfig context's namespace.
    #[arg(short = 'n', long, env = "KSVC_WEBHOOK_APP_NAMESPACE", value_parser = flags::parse_dns_label)]
    pub namespace: Option<String>,
    /// List the apps of every namespace.
    #[arg(
        short = 'A',
        long,
        env = "KSVC_WEBHOOK_APP_ALL_NAMESPACES",
        conflicts_with = "namespace"
    )]
    pub all_namespaces: bool,
    /// Only KServices with these labels (a Kubernetes label selector, e.g. `flyte.org/project=p`).
    #[arg(short = 'l', long, env = "KSVC_WEBHOOK_APP_SELECTOR")]
    pub selector: Option<String>,
    /// After the listing, print each app whose status changes, and each app deleted.
    #[arg(short = 'w', long, env = "KSVC_WEBHOOK_APP_WATCH")]
    pub watch: bool,
    /// Read the KServices and Revisions in pages of this many (as kubectl's `--chunk-size`).
    #[arg(long, env = "KSVC_WEBHOOK_APP_CHUNK_SIZE", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub chunk_size: u32,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub cluster: ClientArgs,
}

/// Arguments of `app update`; an absent flag leaves its field unchanged.
#[derive(Debug, Clone, Args)]
pub struct AppUpdateArgs {
    #[command(flatten)]
    pub target: AppTarget,
    /// New image of the serving container.
    #[arg(long, env = "KSVC_WEBHOOK_APP_IMAGE")]
    pub image: Option<String>,
    /// New `autoscaling.knative.dev/min-scale`: 0 to 2147483647.
    #[arg(long, env = "KSVC_WEBHOOK_APP_MIN_SCALE", value_parser = parse_scale,
          allow_negative_numbers = true)]
    pub min_scale: Option<u32>,
    /// New `autoscaling.knative.dev/max-scale`: 0 (unlimited) to 2147483647.
    #[arg(long, env = "KSVC_WEBHOOK_APP_MAX_SCALE", value_parser = parse_scale,
          allow_negative_numbers = true)]
    pub max_scale: Option<u32>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// A scale bound as Knative takes it: an int32 of 0 or more.
fn parse_scale(text: &str) -> Result<u32, String> {
    let limit = i32::MAX.unsigned_abs();
    match text.trim().parse::<i64>() {
        Ok(n) if (0..=i64::from(limit)).contains(&n) => u32::try_from(n).map_err(|e| e.to_string()),
        Ok(_) => Err(format!(
            "{text} is out of range: Knative takes a scale from 0 to {limit} (an int32)"
        )),
        Err(_) => Err(format!("`{text}` is not a whole number from 0 to {limit}")),
    }
}

/// A phase, in any case.
fn parse_phase(text: &str) -> Result<Phase, String> {
    Phase::ALL
        .into_iter()
        .find(|p| p.as_str().eq_ignore_ascii_case(text.trim()))
        .ok_or_else(|| {
            let all: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
            format!("unknown phase `{text}`; use one of {}", all.join(", "))
        })
}
