//! `serve --otlp-endpoint`: the OpenTelemetry pipeline that exports the review spans
//! ([`crate::server::trace`]) to an OTLP/HTTP collector, and its end at shutdown.
//!
//! Which spans are exported: those of reviews whose `traceparent` kube-apiserver sampled (its
//! decision is kept, so a busy cluster exports what its tracing samples, not every review); with
//! `--otlp-untraced-reviews` also those of reviews without a `traceparent`, each a new trace.
//!
//! The spans go through `tracing`: an OpenTelemetry layer that sees only the review spans' target
//! hands each ended span to the SDK's batch span processor, which queues it without blocking (at
//! most [`QUEUE_SPANS`]; beyond that new spans are dropped and counted in one warning) and
//! exports batches from its own thread, each POST within [`EXPORT_TIMEOUT`], retries included.
//! The POST itself runs on the server's runtime through hyper's client (HTTP, or HTTPS through
//! rustls verified against the system's CAs): a
//! collector that is slow or gone costs a waiting task and a blocked exporter thread, never a
//! request. Never decides what a span holds, and never exports logs or metrics.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::future::BoxFuture;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

use crate::server::trace::SPAN_TARGET;

/// Ended spans waiting for export; a span ended while the queue is full is dropped.
pub const QUEUE_SPANS: usize = 2048;
/// Spans per export request.
pub const BATCH_SPANS: usize = 512;
/// How often the queue is exported (sooner when a batch is full).
pub const EXPORT_EVERY: Duration = Duration::from_secs(5);
/// One export request, its retries included.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// At shutdown: how long the last spans may take to leave before the process exits anyway.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// The value of `--otlp-endpoint`: an `http://` or `https://` base URL with a host, without a
/// trailing `/`.
pub fn parse_endpoint(text: &str) -> Result<String, String> {
    let base = text.trim_end_matches('/');
    let uri: axum::http::Uri = base
        .parse()
        .map_err(|e| format!("not a URL ({e}); expected e.g. http://otel-collector:4318"))?;
    if uri.path().ends_with("/v1/traces") {
        return Err(
            "give the collector's base URL: /v1/traces is added, e.g. http://otel-collector:4318"
                .to_owned(),
        );
    }
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) if uri.query().is_none() => Ok(base.to_owned()),
        _ => Err(
            "expected an http:// or https:// URL with a host and no query, e.g. \
             http://otel-collector.observability:4318"
                .to_owned(),
        ),
    }
}

/// Which reviews' spans a provider exports: always those whose `traceparent` is sampled, never
/// those whose `traceparent` is not; `untraced` those without one (each a new trace).
pub fn sampler(untraced: bool) -> Sampler {
    let roots = match untraced {
        true => Sampler::AlwaysOn,
        false => Sampler::AlwaysOff,
    };
    Sampler::ParentBased(Box::new(roots))
}

/// The tracer provider exporting to `endpoint` (a base URL: spans go to `/v1/traces` under it),
/// with the HTTP exchanges on `runtime`, the spans [`sampler`] keeps. Its resource is
/// `service.name=ksvc-webhook`, `service.version`, and what `OTEL_RESOURCE_ATTRIBUTES` adds.
pub fn provider(
    endpoint: &str,
    untraced: bool,
    runtime: tokio::runtime::Handle,
) -> anyhow::Result<SdkTracerProvider> {
    let https = endpoint.starts_with("https://");
    let client = OnRuntime {
        client: HyperClient::new(connector(https)?, EXPORT_TIMEOUT, None),
        runtime,
    };
    let exporter = SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(format!("{endpoint}/v1/traces"))
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .context("cannot set up the OTLP span exporter")?;
    let batches = BatchConfigBuilder::default()
        .with_max_queue_size(QUEUE_SPANS)
        .with_max_export_batch_size(BATCH_SPANS)
        .with_scheduled_delay(EXPORT_EVERY)
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batches)
        .build();
    let resource = Resource::builder()
        .with_service_name("ksvc-webhook")
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_sampler(sampler(untraced))
        .with_span_processor(processor)
        .with_resource(resource)
        .build())
}

/// HTTP, and HTTPS verified against the system's CA certificates (`SSL_CERT_FILE` or
/// `SSL_CERT_DIR` name others), read only for an `https` collector.
fn connector(https: bool) -> anyhow::Result<HttpsConnector<HttpConnector>> {
    let mut roots = rustls::RootCertStore::empty();
    if https {
        let found = rustls_native_certs::load_native_certs();
        for error in &found.errors {
            tracing::warn!(%error, "a system CA certificate could not be read");
        }
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            anyhow::bail!(
                "no CA certificates to verify the https collector with: mount them, or name a \
                 PEM bundle with SSL_CERT_FILE"
            );
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS for the collector")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build())
}

/// The layer that turns the review spans, and only them, into OpenTelemetry spans of
/// `provider`: without source locations, thread names or busy/idle times.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl Layer<S>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("ksvc-webhook"))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(Targets::new().with_target(SPAN_TARGET, tracing::Level::INFO))
}

/// Export what is queued and stop the exporter, waiting at most [`SHUTDOWN_DEADLINE`]. Runs on
/// the runtime (the last POST needs it) from a blocking thread (the SDK's wait blocks).
pub async fn shutdown(provider: SdkTracerProvider) {
    let ended =
        tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(SHUTDOWN_DEADLINE))
            .await;
    match ended {
        Ok(Ok(())) => tracing::debug!("review spans exported"),
        Ok(Err(err)) => tracing::warn!(error = %err, "review spans not all exported at exit"),
        Err(err) => tracing::warn!(error = %err, "review spans not all exported at exit"),
    }
}

/// hyper's client, driven on the server's runtime: the SDK exports from its own thread, which
/// has no runtime, and waits there for the answer.
#[derive(Debug)]
struct OnRuntime {
    client: HyperClient<HttpsConnector<HttpConnector>>,
    runtime: tokio::runtime::Handle,
}

impl HttpClient for OnRuntime {
    fn send_bytes<'a, 'f>(
        &'a self,
        request: Request<Bytes>,
    ) -> BoxFuture<'f, Result<Response<Bytes>, HttpError>>
    where
        'a: 'f,
        Self: 'f,
    {
        let client = self.client.clone();
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await });
        Box::pin(async move { sent.await? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_http_or_https_base_urls() {
        let ok = [
            (
                "http://otel-collector.observability:4318",
                "http://otel-collector.observability:4318",
            ),
            ("http://127.0.0.1:4318/", "http://127.0.0.1:4318"),
            ("http://collector/otlp", "http://collector/otlp"),
            ("https://otlp.example.com/", "https://otlp.example.com"),
        ];
        for (text, want) in ok {
            assert_eq!(parse_endpoint(text).as_deref(), Ok(want), "{text}");
        }
        for bad in [
            "collector:4318",
            "/v1/traces",
            "http://",
            "http://c:4318/?x=1",
            "http://c:4318/v1/traces",
            "ftp://c:4318",
            "",
        ] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }
}
