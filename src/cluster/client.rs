//! The one way to reach the cluster: [`ClientArgs`] (flattened into every subcommand that talks
//! to a cluster: `serve`, `app`, `check`, `drift`) and the builders of a kube [`Client`] from them,
//! each failing with the typed, kubectl-worded [`Error`].
//!
//! The kubeconfig is looked up as kubectl looks it up: `--kubeconfig`, then `$KUBECONFIG`, then
//! `~/.kube/config`, and only without any of them the in-cluster service account. [`client`] is
//! the command line's (bounded connects; a missing kubeconfig named as such); [`connect`] is the
//! server's long-lived one (bounded connects and reads, checked with one version probe). Builds
//! clients, never makes a call of its own beyond that probe.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::call::{self, Backoff};
use super::errors::{Error, Origin};
use crate::flags;

/// How to reach the cluster, as kube users name it.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Kubeconfig file; default: `$KUBECONFIG`, then `~/.kube/config`, then the in-cluster
    /// service account.
    #[arg(long, env = "KSVC_WEBHOOK_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use; default: its current context.
    #[arg(long, env = "KSVC_WEBHOOK_CONTEXT")]
    pub context: Option<String>,
    /// Timeout of connecting to the API server and, for the server's loops, of every call.
    #[arg(long, env = "KSVC_WEBHOOK_API_TIMEOUT", default_value = "10s",
          allow_hyphen_values = true, value_parser = flags::parse_nonzero_duration)]
    pub api_timeout: Duration,
}

impl Default for ClientArgs {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            context: None,
            api_timeout: Duration::from_secs(10),
        }
    }
}

/// The client configuration `args` name, and the server's `HOST:PORT` for messages. With
/// `impersonate`, the client acts as that user in those groups (kubectl's `--as`, `--as-group`).
pub async fn config(
    args: &ClientArgs,
    impersonate: Option<(&str, &[String])>,
) -> Result<(kube::Config, String), Error> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let (read, path, origin) = match &args.kubeconfig {
        Some(path) => (Kubeconfig::read_from(path), path.clone(), Origin::Flag),
        None => match std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
            Some(paths) => (Kubeconfig::read(), PathBuf::from(paths), Origin::Env),
            None => (Kubeconfig::read(), default_kubeconfig(), Origin::Default),
        },
    };
    let worded = |e| Error::from_kubeconfig(e, &path, origin);
    let mut config = match read.map_err(worded) {
        Ok(kubeconfig) => kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(worded)?,
        Err(missing @ Error::NoKubeconfig { .. })
            if origin == Origin::Default && args.context.is_none() =>
        {
            kube::Config::incluster().map_err(|_| missing)?
        }
        Err(e) => return Err(e),
    };
    if let Some((user, groups)) = impersonate {
        config.auth_info.impersonate = Some(user.to_owned());
        config.auth_info.impersonate_groups = Some(groups.to_vec());
    }
    config.connect_timeout = Some(args.api_timeout);
    let url = &config.cluster_url;
    let port = url.port_u16().unwrap_or(match url.scheme_str() {
        Some("http") => 80,
        _ => 443,
    });
    let server = format!("{}:{port}", url.host().unwrap_or("localhost"));
    Ok((config, server))
}

/// A client from `config`, for the server at `server`.
pub fn build(config: kube::Config, server: &str) -> Result<Client, Error> {
    Client::try_from(config).map_err(|e| Error::from_kube(&e, server))
}

/// The command line's client for the cluster `args` name, and the server's `HOST:PORT`.
pub async fn client(
    args: &ClientArgs,
    impersonate: Option<(&str, &[String])>,
) -> Result<(Client, String), Error> {
    let (config, server) = config(args, impersonate).await?;
    Ok((build(config, &server)?, server))
}

/// [`client`] for reading the server through the API server's service proxy: without kube's
/// retries of 429 and 503 (up to 15, minutes apart), so that one answer of the API server or of
/// the status API (no endpoints, not synced yet) is seen as it is.
pub async fn proxy_client(args: &ClientArgs) -> Result<(Client, String), Error> {
    let (mut config, server) = config(args, None).await?;
    config.default_retry = false;
    Ok((build(config, &server)?, server))
}

/// The server's long-lived client: every connect bounded by the API timeout and every read by
/// `read_timeout` (a watch is ended by the API server before that fires); when `probe`, checked
/// with one version call so that an unreachable cluster fails here.
pub async fn connect(
    args: &ClientArgs,
    read_timeout: Duration,
    probe: bool,
) -> Result<Client, Error> {
    let (mut config, server) = config(args, None).await?;
    config.read_timeout = Some(read_timeout);
    config.reset_reader_on_write = true;
    let client = build(config, &server)?;
    if probe {
        call::timed(
            "probe the API server",
            args.api_timeout,
            client.apiserver_version(),
        )
        .await
        .map_err(|e| Error::from_call(e, &server))?;
    }
    Ok(client)
}

/// [`connect`] until it succeeds, with backoff (1 s doubling to 60 s). Every failed attempt
/// logs one line saying when the next is: a warning the first time, then at info, naming `who`
/// waits; `failed` counts each one.
pub async fn connect_with_backoff(
    args: &ClientArgs,
    read_timeout: Duration,
    who: &str,
    failed: impl Fn(),
) -> Client {
    let backoff = Backoff {
        min: Duration::from_secs(1),
        max: Duration::from_secs(60),
        factor: 2,
        attempts: 0,
    };
    let mut attempt = 0u32;
    loop {
        match connect(args, read_timeout, true).await {
            Ok(client) => {
                tracing::info!(attempt, who, "connected to the API server");
                return client;
            }
            Err(error) => {
                failed();
                let retry_in = backoff.delay(attempt);
                if attempt == 0 {
                    tracing::warn!(error = %error, ?retry_in, who, "no cluster reachable; retrying, admission is unaffected");
                } else {
                    tracing::info!(error = %error, attempt, ?retry_in, who, "still no cluster; waiting for the API server");
                }
                tokio::time::sleep(retry_in).await;
                attempt = attempt.saturating_add(1);
            }
        }
    }
}

/// `~/.kube/config`, as kube-rs looks it up.
fn default_kubeconfig() -> PathBuf {
    std::env::home_dir()
        .unwrap_or_default()
        .join(".kube")
        .join("config")
}
