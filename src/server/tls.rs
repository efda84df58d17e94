//! TLS for the admission listener: load a PEM pair, serve it through a swappable rustls resolver,
//! and reload it when the files change (through `reload.rs`'s loop, which re-reads both files
//! every `reload_interval` and compares their content with what was last seen). The two files are
//! read as one pair: one swapped between the reads is read again whole. A changed pair that does
//! not load is logged and counted once, and the pair already serving stays. Never blocks a
//! handshake on file I/O.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::metrics::Metrics;
use super::reload::{LastSeen, Reload};
use crate::report::error_chain;

/// Errors while loading a certificate pair or building the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} changed on every read of its pair")]
    Unsettled { path: PathBuf },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no PEM private key")]
    NoKey { path: PathBuf },
    #[error("{path} is not valid PEM")]
    Pem {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the key does not fit the certificate or is unsupported")]
    Key(#[source] rustls::Error),
    #[error("cannot read the certificate's expiry")]
    Expiry(#[source] crate::certmgr::pki::Error),
    #[error("invalid TLS settings")]
    Config(#[source] rustls::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where the serving certificate and its key are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPaths {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertPaths {
    /// The `tls.crt` / `tls.key` pair of a mounted `kubernetes.io/tls` Secret directory.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }
}

/// The raw bytes of a pair as last read, to notice a change without parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Raw {
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// A parsed pair ready to serve, with its expiry (unix seconds) for the metric.
#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    not_after: i64,
}

/// The rustls resolver: hands every handshake the pair currently loaded.
#[derive(Debug)]
pub struct Resolver {
    current: ArcSwap<CertifiedKey>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The loaded certificates and the means to reload them.
#[derive(Debug, Clone)]
pub struct Certificates {
    paths: CertPaths,
    provider: Arc<CryptoProvider>,
    resolver: Arc<Resolver>,
    metrics: Metrics,
}

impl Certificates {
    /// Load the pair at `paths` once; fails if it does not load (the server cannot start).
    pub async fn load(paths: CertPaths, metrics: Metrics) -> Result<(Self, Reloader)> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let raw = read_raw(&paths).await?;
        let loaded = parse(&raw, &paths, &provider)?;
        metrics.cert_loaded(loaded.not_after);
        let resolver = Arc::new(Resolver {
            current: ArcSwap::new(loaded.key),
        });
        let certs = Self {
            paths,
            provider,
            resolver,
            metrics,
        };
        let reloader = Reloader {
            certs: certs.clone(),
            last_seen: LastSeen::new(raw),
        };
        Ok((certs, reloader))
    }

    /// A rustls server configuration: TLS 1.3 and 1.2, ALPN `http/1.1` (and `h2` if `http2`).
    pub fn server_config(&self, http2: bool) -> Result<Arc<ServerConfig>> {
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(Error::Config)?
            .with_no_client_auth()
            .with_cert_resolver(self.resolver.clone());
        // No session resumption: client-go (kube-apiserver's webhook client) sets no session
        // cache, so tickets and a session cache would be per-handshake work and memory for
        // nothing (with oha, new-connection throughput measured the same either way).
        config.send_tls13_tickets = 0;
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.alpn_protocols = match http2 {
            true => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            false => vec![b"http/1.1".to_vec()],
        };
        Ok(Arc::new(config))
    }
}

/// Re-reads the certificate files and swaps in a changed, valid pair.
#[derive(Debug)]
pub struct Reloader {
    certs: Certificates,
    last_seen: LastSeen<Raw>,
}

impl Reloader {
    /// Check the files once. `Ok(true)`: a new pair is now serving; `Ok(false)`: nothing changed;
    /// `Err`: the files changed but do not load (counted; the old pair keeps serving).
    pub async fn check(&mut self) -> Result<bool> {
        let certs = &self.certs;
        let raw = match read_raw(&certs.paths).await {
            Ok(raw) => raw,
            Err(err) => {
                certs.metrics.cert_reload_failed();
                return Err(err);
            }
        };
        let Some(raw) = self.last_seen.changed(raw) else {
            return Ok(false);
        };
        match parse(raw, &certs.paths, &certs.provider) {
            Ok(loaded) => {
                certs.resolver.current.store(loaded.key);
                certs.metrics.cert_loaded(loaded.not_after);
                certs.metrics.cert_reloaded();
                Ok(true)
            }
            Err(err) => {
                certs.metrics.cert_reload_failed();
                Err(err)
            }
        }
    }
}

impl Reload for Reloader {
    async fn reload(&mut self) {
        match self.check().await {
            Ok(true) => {
                tracing::info!(cert = %self.certs.paths.cert.display(), "serving certificate reloaded")
            }
            Ok(false) => {}
            Err(err) => tracing::warn!(
                error = %error_chain(&err),
                "new serving certificate rejected; the previous one keeps serving"
            ),
        }
    }
}

/// Reads of a pair that changed while it was read, before [`read_pair`] gives up on it.
const PAIR_READS: usize = 3;

async fn read_raw(paths: &CertPaths) -> Result<Raw> {
    let read = |path: PathBuf| async move {
        tokio::fs::read(&path)
            .await
            .map_err(|source| Error::Read { path, source })
    };
    read_pair(paths, read).await
}

/// Both files as one pair. Kubernetes swaps a Secret's files together, but the swap can fall
/// between the two reads: a torn pair (the old certificate, the new key) would be rejected, and
/// the whole one that follows counted as a second change. So the certificate is read again after
/// the key, and a pair it changed under is read again.
async fn read_pair<F, R>(paths: &CertPaths, mut read: F) -> Result<Raw>
where
    F: FnMut(PathBuf) -> R,
    R: std::future::Future<Output = Result<Vec<u8>>>,
{
    let mut cert = read(paths.cert.clone()).await?;
    for _ in 0..PAIR_READS {
        let key = read(paths.key.clone()).await?;
        let again = read(paths.cert.clone()).await?;
        if again == cert {
            return Ok(Raw { cert, key });
        }
        tracing::info!(
            cert = %paths.cert.display(),
            "the certificate changed while its key was read; reading the pair again"
        );
        cert = again;
    }
    Err(Error::Unsettled {
        path: paths.cert.clone(),
    })
}

fn parse(raw: &Raw, paths: &CertPaths, provider: &CryptoProvider) -> Result<Loaded> {
    let pem_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Pem { path, source }
    };
    let chain: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut raw.cert.as_slice())
        .collect::<Result<_, _>>()
        .map_err(pem_error(&paths.cert))?;
    if chain.is_empty() {
        return Err(Error::NoCertificate {
            path: paths.cert.clone(),
        });
    }
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut raw.key.as_slice())
        .map_err(pem_error(&paths.key))?
        .ok_or_else(|| Error::NoKey {
            path: paths.key.clone(),
        })?;
    let key = CertifiedKey::from_der(chain, key, provider).map_err(Error::Key)?;
    let not_after = crate::certmgr::pki::not_after(&String::from_utf8_lossy(&raw.cert))
        .map_err(Error::Expiry)?
        .unix_timestamp();
    Ok(Loaded {
        key: Arc::new(key),
        not_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::{Duration as Days, OffsetDateTime};

    fn pair() -> crate::certmgr::pki::CertKey {
        let now = OffsetDateTime::now_utc();
        let ca = crate::certmgr::pki::issue_ca("test-ca", now, Days::days(2)).unwrap();
        let sans = crate::certmgr::pki::service_sans("svc", "ns");
        crate::certmgr::pki::issue_serving(&ca, &sans, now, Days::days(1)).unwrap()
    }

    fn paths() -> CertPaths {
        CertPaths::in_dir(Path::new("/x"))
    }

    fn raw(cert: &str, key: &str) -> Raw {
        Raw {
            cert: cert.as_bytes().to_vec(),
            key: key.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_generated_pair_parses() {
        let provider = rustls::crypto::ring::default_provider();
        let p = pair();
        let loaded = parse(&raw(&p.cert_pem, &p.key_pem), &paths(), &provider).unwrap();
        assert!(loaded.not_after > 0);
    }

    /// A reader answering `reads` in turn, as files swapped between two reads would.
    fn files(reads: &[&str]) -> impl FnMut(PathBuf) -> std::future::Ready<Result<Vec<u8>>> {
        let mut reads: std::collections::VecDeque<Vec<u8>> =
            reads.iter().map(|r| r.as_bytes().to_vec()).collect();
        move |_| std::future::ready(Ok(reads.pop_front().unwrap()))
    }

    #[tokio::test]
    async fn a_pair_swapped_between_its_reads_is_read_again_whole() {
        let whole = read_pair(&paths(), files(&["c0", "k0", "c0"])).await;
        assert_eq!(whole.unwrap(), raw("c0", "k0"));
        // Swapped after the certificate was read: the key read is the new one.
        let swapped = read_pair(&paths(), files(&["c0", "k1", "c1", "k1", "c1"])).await;
        assert_eq!(swapped.unwrap(), raw("c1", "k1"));
        let reads = ["c0", "k1", "c1", "k2", "c2", "k3", "c3"];
        let err = read_pair(&paths(), files(&reads)).await.unwrap_err();
        assert!(matches!(err, Error::Unsettled { .. }), "{err}");
    }

    #[test]
    fn broken_pairs_are_rejected() {
        let provider = rustls::crypto::ring::default_provider();
        let (a, b) = (pair(), pair());
        let cases = [
            ("", a.key_pem.as_str(), "no PEM certificate"),
            (a.cert_pem.as_str(), "", "no PEM private key"),
            (a.cert_pem.as_str(), b.key_pem.as_str(), "does not fit"),
        ];
        for (cert, key, want) in cases {
            let err = parse(&raw(cert, key), &paths(), &provider).unwrap_err();
            assert!(err.to_string().contains(want), "{err} !~ {want}");
        }
    }
}
