//! Certificates for the admission server: a private CA and the serving certificate it signs.
//!
//! Owns key generation and X.509 encoding (through rcgen). Keys are ECDSA P-256: cheap handshakes
//! and accepted by every kube-apiserver. The caller passes the clock in, so rotation logic can be
//! tested with any "now". Also the one chain verification ([`verify`]), as kube-apiserver makes it
//! of the webhook's serving certificate. Never reads or writes files: the `certs` command and the
//! server do that.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

/// Errors while generating or reading certificates.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("certificate generation failed")]
    Generate(#[from] rcgen::Error),
    #[error("not a PEM certificate")]
    NotPem,
    #[error("cannot parse the X.509 certificate")]
    Parse,
    #[error("the CA bundle holds no usable certificate")]
    Bundle(#[source] rustls::Error),
    #[error("cannot build a verifier from the CA bundle")]
    Verifier(#[source] rustls::client::VerifierBuilderError),
    #[error("`{0}` is not a DNS name")]
    Host(String),
    #[error("the certificate is not trusted")]
    Untrusted(#[source] rustls::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A PEM certificate with its PEM (PKCS#8) private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertKey {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The DNS names kube-apiserver may use to reach `service` in `namespace`, plus the local names
/// (`localhost`, `127.0.0.1`) that `make run` and the integration tests use.
pub fn service_sans(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        "localhost".to_string(),
        "127.0.0.1".to_string(),
    ]
}

/// A self-signed CA valid from `now` (minus a small clock-skew allowance) for `validity`.
pub fn issue_ca(common_name: &str, now: OffsetDateTime, validity: Duration) -> Result<CertKey> {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = name(common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    set_validity(&mut params, now, validity);
    let cert = params.self_signed(&key)?;
    Ok(CertKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A serving certificate for `sans`, signed by `ca`.
pub fn issue_serving(
    ca: &CertKey,
    sans: &[String],
    now: OffsetDateTime,
    validity: Duration,
) -> Result<CertKey> {
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key)?;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::new(sans.to_vec())?;
    params.distinguished_name = name(sans.first().map_or("ksvc-webhook", String::as_str));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    set_validity(&mut params, now, validity);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(CertKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The `notAfter` time of the first certificate in `pem`.
pub fn not_after(pem: &str) -> Result<OffsetDateTime> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|_| Error::NotPem)?;
    let cert = block.parse_x509().map_err(|_| Error::Parse)?;
    Ok(cert.validity().not_after.to_datetime())
}

/// Whether a client trusting the PEM `bundle` accepts the first certificate of `cert_pem` for
/// `host` at `now`: a real rustls/webpki chain verification, the one kube-apiserver makes.
pub fn verify(bundle: &[u8], cert_pem: &str, host: &str, now: OffsetDateTime) -> Result<()> {
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    for ca in rustls_pemfile::certs(&mut &bundle[..]).flatten() {
        roots.add(ca).map_err(Error::Bundle)?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
            .build()
            .map_err(Error::Verifier)?;
    let leaf = rustls_pemfile::certs(&mut cert_pem.as_bytes())
        .next()
        .ok_or(Error::NotPem)?
        .map_err(|_| Error::NotPem)?;
    let name = ServerName::try_from(host.to_owned()).map_err(|_| Error::Host(host.to_owned()))?;
    let secs = u64::try_from(now.unix_timestamp()).unwrap_or_default();
    let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs));
    verifier
        .verify_server_cert(&leaf, &[], &name, &[], at)
        .map(|_| ())
        .map_err(Error::Untrusted)
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

fn set_validity(params: &mut CertificateParams, now: OffsetDateTime, validity: Duration) {
    // Allow for clocks that run a little behind ours.
    params.not_before = now - Duration::minutes(5);
    params.not_after = now + validity;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_certificate_is_signed_and_dated() {
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let ca = issue_ca("ksvc-webhook-ca", now, Duration::days(365)).unwrap();
        let sans = service_sans("ksvc-webhook", "ksvc-system");
        let leaf = issue_serving(&ca, &sans, now, Duration::days(90)).unwrap();
        assert_eq!(not_after(&leaf.cert_pem).unwrap(), now + Duration::days(90));
        assert_eq!(not_after(&ca.cert_pem).unwrap(), now + Duration::days(365));
        assert!(leaf.key_pem.contains("PRIVATE KEY"));
        assert_eq!(sans[2], "ksvc-webhook.ksvc-system.svc");
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert!(matches!(not_after("hello"), Err(Error::NotPem)));
    }

    #[test]
    fn a_chain_is_verified_for_its_name_within_its_dates_and_its_ca() {
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let ca = issue_ca("ksvc-webhook-ca", now, Duration::days(365)).unwrap();
        let sans = service_sans("ksvc-webhook", "ksvc-system");
        let leaf = issue_serving(&ca, &sans, now, Duration::days(90)).unwrap();
        let bundle = ca.cert_pem.as_bytes();
        let host = "ksvc-webhook.ksvc-system.svc";
        assert!(verify(bundle, &leaf.cert_pem, host, now).is_ok());
        let other_host = verify(bundle, &leaf.cert_pem, "other.ksvc-system.svc", now);
        assert!(matches!(other_host, Err(Error::Untrusted(_))));
        let expired = verify(bundle, &leaf.cert_pem, host, now + Duration::days(91));
        assert!(matches!(expired, Err(Error::Untrusted(_))));
        let stranger = issue_ca("someone-else", now, Duration::days(365)).unwrap();
        let other_ca = verify(stranger.cert_pem.as_bytes(), &leaf.cert_pem, host, now);
        assert!(matches!(other_ca, Err(Error::Untrusted(_))));
        assert!(matches!(
            verify(bundle, "hello", host, now),
            Err(Error::NotPem)
        ));
    }
}
