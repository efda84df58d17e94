//! This replica's own TLS probe: `GET /readyz` on its admission listener, verified against the
//! CA bundle it serves (`ca.crt` in the certificate directory) under the Service's name, as
//! kube-apiserver will verify it. Its first success tells the leader it may switch the webhook's
//! failurePolicy to the configured one ([`super::policy`]).
//!
//! Owns one loopback TLS client and the `answered` flag; never gates readiness, never talks to
//! the API server.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tracing::info;

/// One probe's bound: connect, handshake, request and answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The first pause after a failed probe; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// Where and how to probe.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The listener's address (an unspecified address is probed on loopback).
    pub addr: SocketAddr,
    /// The CA bundle file kube-apiserver's trust comes from.
    pub ca_file: PathBuf,
    /// The name kube-apiserver verifies: `SERVICE.NAMESPACE.svc`.
    pub server_name: String,
}

impl Probe {
    /// Probe until the listener answers `/readyz` with 200, then set `answered` and return.
    /// Each failure is logged with what it waits for.
    pub async fn until_answered(self, answered: watch::Sender<bool>) {
        let mut pause = FIRST_PAUSE;
        loop {
            match tokio::time::timeout(PROBE_TIMEOUT, self.once()).await {
                Ok(Ok(())) => {
                    info!(addr = %self.addr, "own listener answered through TLS with the published CA");
                    answered.send_replace(true);
                    return;
                }
                Ok(Err(why)) => {
                    info!(addr = %self.addr, problem = %why, retry_in = ?pause, "waiting for the own listener to answer /readyz before enforcing the failure policy");
                }
                Err(_) => {
                    info!(addr = %self.addr, retry_in = ?pause, "own /readyz probe timed out; waiting before enforcing the failure policy");
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// One `GET /readyz`; `Ok` on a 200.
    async fn once(&self) -> Result<(), String> {
        let pem = tokio::fs::read(&self.ca_file)
            .await
            .map_err(|e| format!("cannot read {}: {e}", self.ca_file.display()))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| format!("{}: {e}", self.ca_file.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", self.ca_file.display()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from(self.server_name.clone()).map_err(|e| e.to_string())?;
        let tcp = tokio::net::TcpStream::connect(loopback(self.addr))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let request = format!(
            "GET /readyz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.server_name
        );
        tls.write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        // The status line is all that matters; 64 bytes hold it.
        let mut head = [0u8; 64];
        let n = tls.read(&mut head).await.map_err(|e| e.to_string())?;
        let line = String::from_utf8_lossy(&head[..n]);
        match line.split_whitespace().nth(1) {
            Some("200") => Ok(()),
            Some(code) => Err(format!("/readyz answered {code}")),
            None => Err("no HTTP status line".into()),
        }
    }
}

/// The address to dial: an unspecified listen address is reached on loopback.
fn loopback(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, addr.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, addr.port()).into(),
        _ => addr,
    }
}
