//! `certs`: write a CA and a serving certificate for the webhook Service, print the caBundle.
//!
//! Thin: the certificates come from [`crate::certmgr::pki`]; this only writes files (the key readable by
//! its owner alone) and prints.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use base64::Engine;
use time::{Duration, OffsetDateTime};

use crate::certmgr::pki;
use std::path::PathBuf;

use clap::Args;

/// Generate `ca.crt`, `tls.crt` and `tls.key` into `args.out` and print the base64 caBundle.
pub fn run(args: CertsArgs) -> anyhow::Result<()> {
    let bundle = write(&args, OffsetDateTime::now_utc())?;
    eprintln!(
        "wrote ca.crt, tls.crt and tls.key to {}; the caBundle of the webhook configurations \
         (base64 of ca.crt) follows on stdout",
        args.out.display()
    );
    println!("{bundle}");
    Ok(())
}

/// Write the three files; returns the base64 caBundle.
pub fn write(args: &CertsArgs, now: OffsetDateTime) -> anyhow::Result<String> {
    let days = i64::from(args.days);
    let ca = pki::issue_ca(
        &format!("{}-ca", args.service),
        now,
        Duration::days(days * 10),
    )?;
    let sans = pki::service_sans(&args.service, &args.namespace);
    let leaf = pki::issue_serving(&ca, &sans, now, Duration::days(days))?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    write_file(&args.out.join("ca.crt"), &ca.cert_pem, 0o644)?;
    write_file(&args.out.join("tls.crt"), &leaf.cert_pem, 0o644)?;
    write_file(&args.out.join("tls.key"), &leaf.key_pem, 0o600)?;
    Ok(base64::engine::general_purpose::STANDARD.encode(ca.cert_pem))
}

fn write_file(path: &Path, content: &str, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    // `mode` only applies to new files; an existing key file is tightened too.
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
    file.write_all(content.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

// The flags of `certs`.

/// What `certs --help` shows after the flags.
const HELP: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook certs --service ksvc-webhook --namespace ksvc-system --out certs --days 90";

/// Arguments of `certs`.
#[derive(Debug, Clone, Args)]
#[command(after_help = HELP)]
pub struct CertsArgs {
    /// Name of the webhook's Kubernetes Service (a DNS-1035 label).
    #[arg(
        long,
        env = "KSVC_WEBHOOK_SERVICE_NAME",
        default_value = "ksvc-webhook",
        value_parser = super::parse_service_name
    )]
    pub service: String,
    /// Namespace of the webhook's Kubernetes Service; `--namespace` is an older spelling.
    #[arg(
        long = "service-namespace",
        alias = "namespace",
        env = "KSVC_WEBHOOK_SERVICE_NAMESPACE",
        default_value = "ksvc-system",
        value_parser = crate::flags::parse_dns_label
    )]
    pub namespace: String,
    /// Directory that receives ca.crt, tls.crt and tls.key.
    #[arg(long, env = "KSVC_WEBHOOK_CERTS_OUT", default_value = "certs")]
    pub out: PathBuf,
    /// Validity of the serving certificate in days, 1 to 36500 (the CA gets ten times as long).
    #[arg(long, env = "KSVC_WEBHOOK_CERT_DAYS", default_value_t = 365, value_parser = parse_days)]
    pub days: u32,
}

/// The longest validity: a hundred years (the CA's thousand stay within X.509's year 9999).
const MAX_DAYS: u32 = 36_500;

/// Days of validity: at least one (a certificate valid for 0 days is expired when made).
fn parse_days(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(0) => Err(format!(
            "0 days would make a certificate that is expired when it is created; give 1 to {MAX_DAYS}"
        )),
        Ok(days) if days <= MAX_DAYS => Ok(days),
        _ => Err(format!(
            "`{text}` is not a number of days from 1 to {MAX_DAYS}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_a_secret_shaped_directory_and_returns_the_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let args = CertsArgs {
            service: "hook".into(),
            namespace: "sys".into(),
            out: dir.path().join("certs"),
            days: 30,
        };
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let bundle = write(&args, now).unwrap();
        let ca = std::fs::read_to_string(args.out.join("ca.crt")).unwrap();
        let leaf = std::fs::read_to_string(args.out.join("tls.crt")).unwrap();
        let key = args.out.join("tls.key");
        assert!(
            std::fs::read_to_string(&key)
                .unwrap()
                .contains("PRIVATE KEY")
        );
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(bundle)
            .unwrap();
        assert_eq!(decoded, ca.as_bytes());
        assert_eq!(pki::not_after(&leaf).unwrap(), now + Duration::days(30));
        assert_eq!(pki::not_after(&ca).unwrap(), now + Duration::days(300));
    }
}
