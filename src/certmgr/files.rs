//! Writes the certificate files the TLS server reads, atomically as a set.
//!
//! Same layout as a Kubernetes Secret volume (what the server's reloader already handles): the
//! files live in a hidden directory `..<content hash>`, a symlink `..data` points at it, and each
//! visible name (`tls.crt`, …) is a symlink through `..data`. A new set is written into a new
//! directory and `..data` is swapped with one `rename`, so a reader never sees a new certificate
//! with an old key. Blocking file I/O: call it from `spawn_blocking`. Never talks to the API.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use sha2::{Digest, Sha256};

const DATA: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

/// One file of the set: its name, its content and its Unix mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub name: &'static str,
    pub content: Vec<u8>,
    pub mode: u32,
}

/// Make `dir` hold exactly `files` (through `..data`). Returns whether anything changed.
pub fn write_set(dir: &Path, files: &[File]) -> io::Result<bool> {
    fs::create_dir_all(dir)?;
    let version = version_name(files);
    let current = fs::read_link(dir.join(DATA)).ok();
    let up_to_date = current.as_deref() == Some(Path::new(&version))
        && files
            .iter()
            .all(|f| fs::read(dir.join(&version).join(f.name)).is_ok_and(|c| c == f.content));
    if !up_to_date {
        let staged = dir.join(&version);
        if staged.exists() {
            fs::remove_dir_all(&staged)?;
        }
        fs::create_dir(&staged)?;
        for f in files {
            write_file(&staged.join(f.name), &f.content, f.mode)?;
        }
        replace_symlink(dir, DATA_TMP, Path::new(&version), DATA)?;
    }
    let mut links_changed = false;
    for f in files {
        let target = Path::new(DATA).join(f.name);
        if fs::read_link(dir.join(f.name)).ok().as_deref() != Some(target.as_path()) {
            replace_symlink(dir, &format!("..{}_tmp", f.name), &target, f.name)?;
            links_changed = true;
        }
    }
    remove_stale_versions(dir, &version)?;
    Ok(!up_to_date || links_changed)
}

/// `..` + 16 hex digits of SHA-256 over the set: equal sets share one directory name.
fn version_name(files: &[File]) -> String {
    let mut hash = Sha256::new();
    for f in files {
        hash.update(f.name.as_bytes());
        hash.update([0]);
        hash.update((f.content.len() as u64).to_be_bytes());
        hash.update(&f.content);
        hash.update(f.mode.to_be_bytes());
    }
    format!("..{}", &hex::encode(hash.finalize())[..16])
}

fn write_file(path: &Path, content: &[u8], mode: u32) -> io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    file.write_all(content)?;
    file.sync_all()
}

/// Point `dir/name` at `target` atomically: a temporary symlink renamed over the old entry.
fn replace_symlink(dir: &Path, tmp: &str, target: &Path, name: &str) -> io::Result<()> {
    let tmp = dir.join(tmp);
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    symlink(target, &tmp)?;
    fs::rename(&tmp, dir.join(name))
}

fn remove_stale_versions(dir: &Path, keep: &str) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let is_version = name.starts_with("..") && !name.ends_with("_tmp") && name != DATA;
        if is_version && name != keep && entry.file_type()?.is_dir() {
            fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(cert: &str, key: &str) -> Vec<File> {
        vec![
            File {
                name: "tls.crt",
                content: cert.as_bytes().to_vec(),
                mode: 0o644,
            },
            File {
                name: "tls.key",
                content: key.as_bytes().to_vec(),
                mode: 0o600,
            },
        ]
    }

    #[test]
    fn writes_swaps_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("certs");
        assert!(write_set(&d, &set("c1", "k1")).unwrap());
        assert_eq!(fs::read_to_string(d.join("tls.crt")).unwrap(), "c1");
        assert_eq!(fs::read_to_string(d.join("tls.key")).unwrap(), "k1");
        let mode = fs::metadata(d.join("tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Same content: nothing to do.
        assert!(!write_set(&d, &set("c1", "k1")).unwrap());
        // New pair: both names switch together through ..data.
        let first = fs::read_link(d.join(DATA)).unwrap();
        assert!(write_set(&d, &set("c2", "k2")).unwrap());
        assert_eq!(fs::read_to_string(d.join("tls.crt")).unwrap(), "c2");
        assert_eq!(fs::read_to_string(d.join("tls.key")).unwrap(), "k2");
        assert!(fs::read_link(d.join("tls.crt")).unwrap().starts_with(DATA));
        assert!(!d.join(first).exists(), "the old version is removed");
        let versions = fs::read_dir(&d).unwrap().count();
        assert_eq!(versions, 4, "..data, one version dir, two links");
    }

    #[test]
    fn replaces_plain_files_left_by_someone_else() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("tls.crt"), "stale").unwrap();
        assert!(write_set(dir.path(), &set("c", "k")).unwrap());
        assert_eq!(fs::read_to_string(dir.path().join("tls.crt")).unwrap(), "c");
    }
}
