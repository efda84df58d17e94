//! PURE: the certificate material held in the shared Secret, and its conversion to and from the
//! Kubernetes `Secret` object.
//!
//! Owns the Secret's key names and the CA bundle. Parses PEM and X.509 (pure functions of bytes);
//! never talks to the API server, reads files or reads the clock.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::certmgr::pki::CertKey;
use crate::keys;

/// Secret key: the serving certificate (PEM).
pub const KEY_TLS_CRT: &str = "tls.crt";
/// Secret key: the serving certificate's private key (PEM, PKCS#8).
pub const KEY_TLS_KEY: &str = "tls.key";
/// Secret key: the CA that signs the serving certificate (PEM).
pub const KEY_CA_CRT: &str = "ca.crt";
/// Secret key: that CA's private key.
pub const KEY_CA_KEY: &str = "ca.key";
/// Secret key: a new CA already in the bundle but not yet signing (during a CA rotation).
pub const KEY_CA_NEXT_CRT: &str = "ca-next.crt";
/// Secret key: the next CA's private key.
pub const KEY_CA_NEXT_KEY: &str = "ca-next.key";
/// Secret key: the CA that signed before the last rotation, kept in the bundle for a while.
pub const KEY_CA_PREVIOUS_CRT: &str = "ca-previous.crt";
/// The Secret type: `kubectl` and cert tooling recognise `tls.crt` / `tls.key`.
pub const SECRET_TYPE_TLS: &str = "kubernetes.io/tls";

/// Why a Secret's content cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Invalid {
    #[error("key {0} is missing")]
    Missing(&'static str),
    #[error("key {0} is not UTF-8 text")]
    NotText(&'static str),
    #[error("annotation {0} is not an RFC 3339 time")]
    BadTime(&'static str),
}

/// A CA in the bundle, with the time it reached its current role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dated<T> {
    pub value: T,
    pub since: OffsetDateTime,
}

/// Everything the Secret holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretData {
    /// The CA that signs [`Self::serving`].
    pub ca: CertKey,
    /// The serving certificate and key the server presents.
    pub serving: CertKey,
    /// A new CA published in the bundle, waiting to take over (CA rotation, phase 1).
    pub next_ca: Option<Dated<CertKey>>,
    /// The CA replaced at the last rotation, kept in the bundle until every replica serves a
    /// certificate of the new one (CA rotation, phase 2). Only its certificate is kept.
    pub previous_ca: Option<Dated<String>>,
}

impl SecretData {
    /// Read the material from a Secret.
    pub fn from_secret(secret: &Secret) -> Result<Self, Invalid> {
        let empty = BTreeMap::new();
        let data = secret.data.as_ref().unwrap_or(&empty);
        let notes = secret.metadata.annotations.as_ref();
        let text = |key: &'static str| -> Result<Option<String>, Invalid> {
            data.get(key)
                .map(|b| String::from_utf8(b.0.clone()).map_err(|_| Invalid::NotText(key)))
                .transpose()
        };
        let required = |key: &'static str| text(key)?.ok_or(Invalid::Missing(key));
        let since = |key: &'static str| -> Result<OffsetDateTime, Invalid> {
            let value = notes
                .and_then(|n| n.get(key))
                .ok_or(Invalid::Missing(key))?;
            OffsetDateTime::parse(value, &Rfc3339).map_err(|_| Invalid::BadTime(key))
        };
        let next_ca = match (text(KEY_CA_NEXT_CRT)?, text(KEY_CA_NEXT_KEY)?) {
            (Some(cert_pem), Some(key_pem)) => Some(Dated {
                value: CertKey { cert_pem, key_pem },
                since: since(keys::ANNOTATION_CA_NEXT_SINCE)?,
            }),
            _ => None,
        };
        let previous_ca = match text(KEY_CA_PREVIOUS_CRT)? {
            Some(cert_pem) => Some(Dated {
                value: cert_pem,
                since: since(keys::ANNOTATION_CA_PREVIOUS_SINCE)?,
            }),
            None => None,
        };
        Ok(Self {
            ca: CertKey {
                cert_pem: required(KEY_CA_CRT)?,
                key_pem: required(KEY_CA_KEY)?,
            },
            serving: CertKey {
                cert_pem: required(KEY_TLS_CRT)?,
                key_pem: required(KEY_TLS_KEY)?,
            },
            next_ca,
            previous_ca,
        })
    }

    /// The Secret holding this material. `base` (the object read from the API server) keeps its
    /// metadata, resourceVersion included, so a replace is conditional on it.
    pub fn to_secret(&self, name: &str, namespace: &str, base: Option<&Secret>) -> Secret {
        let mut metadata = base
            .map(|s| s.metadata.clone())
            .unwrap_or_else(|| ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            });
        let notes = metadata.annotations.get_or_insert_with(BTreeMap::new);
        notes.remove(keys::ANNOTATION_CA_NEXT_SINCE);
        notes.remove(keys::ANNOTATION_CA_PREVIOUS_SINCE);
        let mut data = BTreeMap::new();
        let mut put = |key: &str, value: &str| {
            data.insert(key.to_string(), ByteString(value.as_bytes().to_vec()));
        };
        put(KEY_CA_CRT, &self.ca.cert_pem);
        put(KEY_CA_KEY, &self.ca.key_pem);
        put(KEY_TLS_CRT, &self.serving.cert_pem);
        put(KEY_TLS_KEY, &self.serving.key_pem);
        if let Some(next) = &self.next_ca {
            put(KEY_CA_NEXT_CRT, &next.value.cert_pem);
            put(KEY_CA_NEXT_KEY, &next.value.key_pem);
            notes.insert(
                keys::ANNOTATION_CA_NEXT_SINCE.to_string(),
                rfc3339(next.since),
            );
        }
        if let Some(previous) = &self.previous_ca {
            put(KEY_CA_PREVIOUS_CRT, &previous.value);
            notes.insert(
                keys::ANNOTATION_CA_PREVIOUS_SINCE.to_string(),
                rfc3339(previous.since),
            );
        }
        if notes.is_empty() {
            metadata.annotations = None;
        }
        Secret {
            metadata,
            data: Some(data),
            type_: Some(SECRET_TYPE_TLS.to_string()),
            ..Secret::default()
        }
    }

    /// The PEM CA bundle for `caBundle`: the signing CA, then the staged next CA, then the
    /// previous CA, each present only while it has that role. Deterministic for equal material.
    pub fn bundle(&self) -> Vec<u8> {
        let mut out = String::new();
        let mut push = |pem: &str| {
            out.push_str(pem.trim_end());
            out.push('\n');
        };
        push(&self.ca.cert_pem);
        if let Some(next) = &self.next_ca {
            push(&next.value.cert_pem);
        }
        if let Some(previous) = &self.previous_ca {
            push(&previous.value);
        }
        out.into_bytes()
    }
}

/// Whether a PEM `bundle` contains the certificate `cert_pem`.
pub fn bundle_contains(bundle: &[u8], cert_pem: &str) -> bool {
    let needle = cert_pem.trim().as_bytes();
    !needle.is_empty() && bundle.windows(needle.len()).any(|w| w == needle)
}

/// The subject alternative names (DNS names and IP addresses, as text) of the first
/// certificate in `pem`, sorted; `None` if it is not a readable certificate.
pub fn subject_alt_names(pem: &str) -> Option<Vec<String>> {
    use x509_parser::extensions::GeneralName;
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = block.parse_x509().ok()?;
    let mut names = Vec::new();
    if let Ok(Some(ext)) = cert.subject_alternative_name() {
        for name in &ext.value.general_names {
            match name {
                GeneralName::DNSName(dns) => names.push((*dns).to_string()),
                GeneralName::IPAddress(ip) => names.push(ip_text(ip)),
                _ => {}
            }
        }
    }
    names.sort();
    Some(names)
}

/// A webhook configuration whose webhooks carry a `caBundle`: the mutating one that admits
/// KServices and the validating one of the revision guard.
pub trait WebhookConfig {
    /// Each webhook's `caBundle`, in order (`None` where unset).
    fn bundles(&self) -> Vec<Option<&[u8]>>;
    /// The resourceVersion that was read.
    fn resource_version(&self) -> Option<&str>;
}

// The two kinds share the shape (`webhooks[].clientConfig.caBundle`) but no type.
macro_rules! webhook_config {
    ($($kind:ty),*) => {$(
        impl WebhookConfig for $kind {
            fn bundles(&self) -> Vec<Option<&[u8]>> {
                let hooks = self.webhooks.iter().flatten();
                hooks
                    .map(|h| h.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()))
                    .collect()
            }
            fn resource_version(&self) -> Option<&str> {
                self.metadata.resource_version.as_deref()
            }
        }
    )*};
}

webhook_config!(MutatingWebhookConfiguration, ValidatingWebhookConfiguration);

/// A JSON Patch that sets `bundle` as the `caBundle` of every webhook in `config` whose bundle
/// differs, guarded by a `test` of the resourceVersion that was read (kube-apiserver answers a
/// failed test with 422, and the caller re-reads). `None` when every webhook is up to date.
pub fn bundle_patch(config: &impl WebhookConfig, bundle: &[u8]) -> Option<serde_json::Value> {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bundle);
    let mut ops: Vec<serde_json::Value> = config
        .bundles()
        .into_iter()
        .enumerate()
        .filter(|(_, current)| *current != Some(bundle))
        .map(|(i, _)| {
            serde_json::json!({
                "op": "add",
                "path": format!("/webhooks/{i}/clientConfig/caBundle"),
                "value": encoded,
            })
        })
        .collect();
    if ops.is_empty() {
        return None;
    }
    let version = config.resource_version().unwrap_or_default().to_owned();
    ops.insert(
        0,
        serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": version}),
    );
    Some(serde_json::Value::Array(ops))
}

/// The `caBundle` of every webhook in `config` (empty where none is set).
pub fn published_bundles(config: &impl WebhookConfig) -> Vec<Vec<u8>> {
    let bundles = config.bundles().into_iter();
    bundles.map(|b| b.unwrap_or_default().to_vec()).collect()
}

fn ip_text(bytes: &[u8]) -> String {
    match <[u8; 4]>::try_from(bytes) {
        Ok(v4) => std::net::Ipv4Addr::from(v4).to_string(),
        Err(_) => match <[u8; 16]>::try_from(bytes) {
            Ok(v6) => std::net::Ipv6Addr::from(v6).to_string(),
            Err(_) => hex::encode(bytes),
        },
    }
}

fn rfc3339(t: OffsetDateTime) -> String {
    // Formatting a UTC time as RFC 3339 cannot fail for years 0..=9999.
    t.format(&Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
